"""A child process's own peak memory: the memory experiments' one way of taking it.

    from measured import run_measured     # (with scripts/ on sys.path)
    run = run_measured([sys.executable, 'experiments/benchmarks/peak_memory.py', ...])
    run.peak_gib, run.seconds, run.rc
"""
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


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


def run_measured(command: Sequence[str], *, env: dict[str, str] | None = None, cwd=None,
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
