"""What produced a result: machine, package versions, models, code revision, command; and a
command run as a child process with its own peak memory and wall time (:func:`run_measured`)."""
import datetime
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Dict, Optional, Sequence

PACKAGES = ('pyterrier-selfsup', 'torch', 'transformers', 'sentence-transformers', 'pyterrier',
            'python-terrier', 'pyterrier-pisa', 'pyterrier-dr', 'faiss-cpu', 'faiss-gpu-cu12',
            'ir-datasets', 'ir-measures', 'numpy', 'pandas')


# the instruction sets that decide CPU speed here: bf16 is fast with AVX512-BF16/AMX and
# hundreds of times slower than fp32 with AVX2 only, so a timing means little without them
CPU_FLAGS = ('avx2', 'avx512f', 'avx512_bf16', 'amx_bf16', 'amx_tile')


def cpu_flags() -> str:
    """Which of :data:`CPU_FLAGS` the CPU has ('unknown' off Linux)."""
    try:
        with open('/proc/cpuinfo') as fh:
            flags = set(next(line.split(':', 1)[1].split() for line in fh
                             if line.startswith('flags')))
    except (OSError, StopIteration):
        return 'unknown'
    return ' '.join(f for f in CPU_FLAGS if f in flags) or 'none of ' + ' '.join(CPU_FLAGS)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open('/proc/cpuinfo') as fh:
            cpu = next(line.split(':', 1)[1].strip() for line in fh
                       if line.startswith('model name'))
    except (OSError, StopIteration):
        pass
    cpu += f' ({cpu_flags()})'
    cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
    memory = ''
    try:
        memory = f', {os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30:.0f} GiB RAM'
    except (ValueError, OSError, AttributeError):
        pass
    return f'{platform.system()} {platform.machine()}, {cpu}, {cores} cores{memory}, GPU: {gpu()}'


def gpu() -> str:
    import torch
    if not torch.cuda.is_available():
        return 'none'
    return ', '.join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))


def packages() -> str:
    found = []
    for name in PACKAGES:
        try:
            found.append(f'{name} {metadata.version(name)}')
        except metadata.PackageNotFoundError:
            pass
    return f'python {platform.python_version()}; ' + ', '.join(found)


def code_revision() -> str:
    """The git commit of this package's checkout (with ``+uncommitted`` if dirty), if it is one;
    ``$SELFSUP_CODE_REVISION`` where set: a copy that says which commit it is (a lent GPU
    machine's, scripts/gpu/stage.sh, whose ``.git`` may be of an older commit than its tree)."""
    told = os.environ.get('SELFSUP_CODE_REVISION')
    if told:
        return told
    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(['git', 'rev-parse', '--short=12', 'HEAD'], cwd=here,
                                capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no'], cwd=here,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return 'not a git checkout'
    return commit + ('+uncommitted' if dirty else '')




# Taken when the harness is first imported (not by `import pyterrier_selfsup`): the code this
# process runs, even if the checkout moves on while a long experiment is under way.
CODE_AT_IMPORT = code_revision()


def model_revision(name: str) -> str:
    """``name@<hub commit>`` for a Hugging Face hub model in the local cache, else ``name``."""
    if Path(name).exists():
        return str(Path(name).resolve())
    try:
        from huggingface_hub import try_to_load_from_cache
        path = try_to_load_from_cache(name, 'config.json')
    except Exception:  # a malformed repo id, or an old huggingface_hub
        path = None
    if isinstance(path, str) and '/snapshots/' in path:
        return f'{name}@{path.split("/snapshots/")[1].split("/")[0]}'
    return name


def header(command: Optional[str] = None) -> Dict[str, str]:
    return {
        'date': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'),
        'command': command or ' '.join(shlex.quote(a)
                                       for a in [Path(sys.argv[0]).name] + sys.argv[1:]),
        'code': f'pyterrier-selfsup {CODE_AT_IMPORT}',
        'machine': machine(),
        'load': load(),
        'packages': packages(),
    }


def load() -> str:
    """How busy the machine is (a header's: as the run began): timings taken beside another job
    are slower; on 2 cores, one heavy job alone reads about 2."""
    one, five, _ = os.getloadavg()
    return (f'{one:.1f} (1-minute average), {five:.1f} (5-minute), '
            f'on {len(os.sched_getaffinity(0))} cores')


@dataclass(frozen=True)
class Measured:
    """A child process's exit code, its own peak resident memory and its wall time."""
    rc: int
    # wait4's ru_maxrss: the child's own peak, or a descendant's it waited for where larger
    peak_gib: float
    seconds: float


# Run between this process and the measured command (python -S: no site packages, a few MiB):
# Linux counts in a child's ru_maxrss the memory of the process it was started from (at exec, the
# replaced image's high-water mark: under vfork, which Python's subprocess uses, the parent's whole
# peak), so a command started straight from a process holding torch would never measure below it.
_MEASURING = """
import os, signal, subprocess, sys
try:
    proc = subprocess.Popen(sys.argv[2:])
except OSError as error:  # (as a shell says it: the reason, exit 127)
    print(f'cannot run {sys.argv[2:]}: {error}', file=sys.stderr)
    rc, kib = 127, 0
else:
    for sig in (signal.SIGTERM, signal.SIGINT):  # (a stop is the command's, passed on)
        signal.signal(sig, lambda number, frame: proc.send_signal(number))
    _, status, usage = os.wait4(proc.pid, 0)
    rc, kib = os.waitstatus_to_exitcode(status), usage.ru_maxrss  # (KiB on Linux)
with open(sys.argv[1], 'w') as out:
    out.write(f'{rc} {kib}')
"""


def run_measured(command: Sequence[str], *, env: Optional[Dict[str, str]] = None, cwd=None,
                 log=None) -> Measured:
    """``command`` run as a child process (both output streams to the file object ``log``, or
    inherited) and measured: the memory experiments' one way of taking a run's peak resident
    memory, its own (``wait4``'s ``ru_maxrss``, taken by a small process that starts it, so that
    this process's memory is not counted in it) and its wall time. A command that cannot be
    started exits 127 (the reason in ``log``); an interrupt stops the command too."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as work:
        said = Path(work) / 'measured'
        # (-I: nothing in ``cwd`` or the environment shadows the standard modules it imports;
        # -S: no site packages)
        proc = subprocess.Popen([sys.executable, '-I', '-S', '-c', _MEASURING, str(said), *command],
                                env=env, cwd=cwd, stdout=log,
                                stderr=subprocess.STDOUT if log is not None else None)
        try:
            proc.wait()
        except BaseException:
            proc.terminate()  # (passed on to the command)
            proc.wait()
            raise
        seconds = round(time.monotonic() - started, 1)
        if not said.exists():  # (the measuring process itself failed)
            raise RuntimeError(f'could not measure {command}: exit {proc.returncode}')
        rc, kib = said.read_text().split()
    return Measured(int(rc), round(int(kib) / 2 ** 20, 2), seconds)
