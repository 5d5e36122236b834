"""Disk faults met as errors a user can act on: what was being written, the path, the cause,
what became of the partial write, and the setting that moves the writes elsewhere.

:func:`disk_faults` is the one translation: a full disk, a quota, a read-only mount or a
missing permission becomes a :class:`CacheError`, any other error stays as it was."""
import errno
import os
import shutil
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from pyterrier_selfsup._cache.paths import CACHE_ENV

MOVE_HINT = f'move the cache with --cache-dir (or cache_dir=) or ${CACHE_ENV}'
# where a trainer's refreshed indexes go (tempfile's directory)
TMP_HINT = 'set $TMPDIR to a directory on a disk with more space'
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_UNWRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)
# how libraries that do not raise OSError say the disk is full (torch.save, faiss, sqlite)
_FULL_WORDS = ('no space left', 'disk is full', 'disk full', 'failed writing', 'write error',
               'quota')


class CacheError(RuntimeError):
    """The cache cannot be written, has too little space, or holds a damaged build; the
    message names the path, the cause and what to do."""


class CacheNotWritable(CacheError):
    pass


class CacheFull(CacheError):
    pass


class CacheWriteFailed(CacheError):
    pass


class DamagedBuild(CacheError):
    pass


def human_bytes(n: float) -> str:
    for unit in ('bytes', 'KiB', 'MiB', 'GiB', 'TiB'):
        if abs(n) < 1024 or unit == 'TiB':
            return f'{n:.0f} {unit}' if unit == 'bytes' else f'{n:.1f} {unit}'
        n /= 1024


def writable(directory: Path, what: str, hint: str = MOVE_HINT, create: bool = True):
    """Raises :class:`CacheNotWritable` unless a file can be created in ``directory`` (created if
    missing; ``create=False``: probed in its nearest existing ancestor). A real write: root
    passes ``os.access`` on a read-only mount."""
    try:
        if create:
            directory.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=directory if create else _existing(directory),
                                     prefix='.selfsup-write-test-')
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        raise CacheNotWritable(f'{what}: the directory {directory} cannot be written '
                               f'({error.strerror}); {hint}') from error


def check_space(directory: Path, needed: int | None, what: str, hint: str = MOVE_HINT):
    """Raises :class:`CacheFull` if ``directory``'s disk has less than ``needed`` bytes free
    (None or 0: nothing to check); ``hint``: the setting that moves the writes elsewhere."""
    if not needed:
        return
    free = shutil.disk_usage(directory).free
    if free < needed:
        raise CacheFull(f'{what} needs about {human_bytes(needed)} under {directory}, which has '
                        f'{human_bytes(free)} free; free some space or {hint}')


def write_fault(error: BaseException, what: str, where: Path, kept: bool = False,
                fate: str | None = None, hint: str = MOVE_HINT) -> CacheError | None:
    """``error`` as a :class:`CacheError` naming ``what``, the file and the cause, if it is a disk
    fault; else None. ``fate``: what became of what was written (by default: removed, or, with
    ``kept``, kept for the next run to resume from); ``hint``: the setting that moves the writes
    elsewhere."""
    if isinstance(error, CacheError):
        return None
    target = getattr(error, 'filename', None) or where
    fate = fate or (f'what was written is kept in {where} and the next run resumes from it' if kept
                    else 'the partial build was removed')
    if isinstance(error, OSError) and error.errno in _UNWRITABLE:
        return CacheNotWritable(f'{what}: cannot write {target} ({error.strerror}); {fate}; {hint}')
    try:
        usage = shutil.disk_usage(_existing(where))
    except OSError:
        usage = None
    full = isinstance(error, OSError) and error.errno in _FULL
    if not full and isinstance(error, Exception):
        # a library's own error: full if it says so, or if the disk is now all but full
        full = any(w in str(error).lower() for w in _FULL_WORDS) or (
            usage is not None and usage.free < min(16 << 20, usage.total // 100))
    if not full:
        return None
    lines = str(error).strip().splitlines()
    cause = (error.strerror if isinstance(error, OSError) and error.strerror
             else (lines[-1] if lines else type(error).__name__))
    free = 'unknown' if usage is None else human_bytes(usage.free)
    return CacheWriteFailed(f'{what}: writing {target} failed, the disk is full ({cause}; {free} '
                            f'free now); {fate}; free some space or {hint}')


@contextmanager
def disk_faults(what: str, where: Path, *, fate: None | str | Callable[[], str] = None,
                kept: bool | Callable[[], bool] = False, hint: str = MOVE_HINT,
                undo: Callable[[], None] | None = None):
    """Runs the block; an error raised in it first runs ``undo`` (removing the partial write),
    then leaves as :func:`write_fault`'s :class:`CacheError` where it is a disk fault, else as it
    was. ``fate`` and ``kept`` may be functions, asked only then (after ``undo``)."""
    try:
        yield
    except BaseException as error:
        if undo is not None:
            undo()
        fault = write_fault(error, what, where, kept=kept() if callable(kept) else kept,
                            fate=fate() if callable(fate) else fate, hint=hint)
        if fault is not None:
            raise fault from error
        raise


def _existing(path: Path) -> Path:
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    return path
