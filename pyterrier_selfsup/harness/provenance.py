"""What produced a result: machine, package versions, models, code revision and command, for the
header of every results file."""
import datetime
import os
import platform
import shlex
import sys
from importlib import metadata
from pathlib import Path

from pyterrier_selfsup.machine import cpu_model, speed_flags

PACKAGES = ('pyterrier-selfsup', 'torch', 'transformers', 'sentence-transformers', 'pyterrier',
            'python-terrier', 'pyterrier-pisa', 'pyterrier-dr', 'faiss-cpu', 'faiss-gpu-cu12',
            'ir-datasets', 'ir-measures', 'numpy', 'pandas')


def machine() -> str:
    cpu = f'{cpu_model()} ({speed_flags()})'
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
    """Which code this is: ``$SELFSUP_CODE_REVISION`` where it is set (``scripts/bootstrap.sh``
    sets it to the checkout's commit), else the installed package's version. The package never
    asks git."""
    told = os.environ.get('SELFSUP_CODE_REVISION')
    if told:
        return told
    try:
        return f'{metadata.version("pyterrier-selfsup")} (no commit named)'
    except metadata.PackageNotFoundError:
        return 'not installed (no commit named)'


# taken when the harness is first imported: the code this process runs, even if the
# checkout moves on during a long experiment
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


def header(command: str | None = None) -> dict[str, str]:
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
    """How busy the machine is as the run began (timings taken beside another job are slower)."""
    one, five, _ = os.getloadavg()
    return (f'{one:.1f} (1-minute average), {five:.1f} (5-minute), '
            f'on {len(os.sched_getaffinity(0))} cores')
