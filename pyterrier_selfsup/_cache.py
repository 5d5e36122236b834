"""Where built artefacts (indexes) live, and how they get there whole or not at all."""
import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Optional, Union

from pyterrier_selfsup._distributed import distributed

logger = logging.getLogger(__name__)

CACHE_ENV = 'SELFSUP_CACHE'
_COMPLETE = '.selfsup-complete'


def cache_root(cache_dir: Optional[Union[str, Path]] = None) -> Path:
    """``cache_dir`` if given, else ``$SELFSUP_CACHE``, else ``~/.cache/pyterrier-selfsup``."""
    if cache_dir is not None:
        return Path(cache_dir)
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path.home() / '.cache' / 'pyterrier-selfsup'


def cache_key(name: str, settings: dict) -> str:
    """A directory name readable by people (``name``) and unique to ``settings``."""
    slug = re.sub(r'[^A-Za-z0-9._-]+', '_', name).strip('_')
    digest = hashlib.sha1(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return f'{slug}-{digest}'


def weights_fingerprint(config: dict, model) -> str:
    """A digest of a model's settings and weights (a torch module, or its state dict):
    equal fingerprints, equal outputs. Keys what is cached from a model's outputs
    (indexes, scores)."""
    import torch
    digest = hashlib.sha1(json.dumps(config, sort_keys=True).encode())
    state = model if isinstance(model, dict) else model.state_dict()
    for name, tensor in sorted(state.items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def is_complete(path: Path) -> bool:
    return (path / _COMPLETE).is_file()


def build_once(path: Union[str, Path], build: Callable[[Path], None], *, resumable: bool = False,
               collective: bool = False) -> Path:
    """Returns ``path``, first running ``build(staging_dir)`` if no complete build is there.

    A build writes into a staging directory that is renamed to ``path`` only after
    ``build`` returns, so a build killed half-way never leaves something that looks
    finished. What such a build left behind (the staging directory, or a ``path``
    without the completion marker) is reported and rebuilt, never used, unless the
    build is ``resumable``: then a staging directory left by an interrupted or failed
    build is kept and handed to ``build`` again, which resumes from what it finds
    there (a training run from its last checkpoint). A file lock makes concurrent
    processes wait for one build instead of racing.

    ``collective``: under ``torch.distributed`` every process of the group calls this and
    runs ``build`` together (a data-parallel training run); rank 0 holds the lock, clears
    leftovers and renames the result, the others follow at barriers.
    """
    path = Path(path)
    if collective and distributed()[1] > 1:
        return _build_once_collectively(path, build, resumable)
    if is_complete(path):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path.with_name(path.name + '.lock')):
        if is_complete(path):  # another process finished it while we waited
            return path
        staging = _clear_leftovers(path, resumable)
        try:
            build(staging)
            (staging / _COMPLETE).touch()
            os.replace(staging, path)
        except BaseException:
            if not resumable:
                shutil.rmtree(staging, ignore_errors=True)
            raise
    return path


def _clear_leftovers(path: Path, resumable: bool) -> Path:
    """The staging directory of ``path``, with what an earlier build left removed (but a
    resumable build's staging directory, which is kept to resume from)."""
    staging = _staging(path)
    if resumable and staging.exists():
        logger.warning('%s is an interrupted build; resuming it', staging)
    for leftover in (path,) if resumable else (path, staging):
        if leftover.exists():
            logger.warning('%s is an incomplete build (interrupted?); removing it and rebuilding', leftover)
            shutil.rmtree(leftover)
    return staging


def _staging(path: Path) -> Path:
    return path.with_name(path.name + '.partial')


def _build_once_collectively(path: Path, build: Callable[[Path], None], resumable: bool) -> Path:
    """:func:`build_once` with every process of the torch.distributed group running ``build``."""
    import torch.distributed as dist
    rank = dist.get_rank()
    lock = None
    if rank == 0:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = locked(path.with_name(path.name + '.lock'))
        lock.__enter__()
    try:
        todo = [not is_complete(path)]
        dist.broadcast_object_list(todo, src=0)
        if todo[0]:
            staging = _clear_leftovers(path, resumable) if rank == 0 else _staging(path)
            dist.barrier()
            build(staging)
            dist.barrier()  # every rank is done with the staging directory
            if rank == 0:
                (staging / _COMPLETE).touch()
                os.replace(staging, path)
            dist.barrier()
    finally:
        if lock is not None:
            lock.__exit__(None, None, None)
    return path


@contextmanager
def locked(lock_path: Path):
    with open(lock_path, 'w') as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
