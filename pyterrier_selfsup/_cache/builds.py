"""Builds that reach the cache whole or not at all: a staging directory renamed into place, a
completion marker recording every file's size, a lock so that one process builds while the
others wait, and, under torch.distributed, one build run by the whole group."""
import fcntl
import json
import logging
import os
import shutil
from collections.abc import Callable
from contextlib import ExitStack, contextmanager
from pathlib import Path

from pyterrier_selfsup._cache.faults import (
    MOVE_HINT,
    TMP_HINT,
    CacheError,
    CacheNotWritable,
    DamagedBuild,
    check_space,
    disk_faults,
    writable,
)
from pyterrier_selfsup._distributed import all_or_none, distributed, shared_temporary_directory

logger = logging.getLogger(__name__)

_COMPLETE = '.selfsup-complete'
ON_DAMAGE = ('rebuild', 'set aside', 'raise')


def is_complete(path: Path) -> bool:
    return (path / _COMPLETE).is_file()


def build_once(path: str | Path, build: Callable[[Path], None], *, what: str | None = None,
               needs: Callable[[], int | None] | None = None,
               check: Callable[[Path], str | None] | None = None, on_damage: str = 'rebuild',
               resumable: bool = False, collective: bool = False) -> Path:
    """Returns ``path``, first running ``build(staging_dir)`` if no complete build is there.

    A build writes into a staging directory renamed to ``path`` only after ``build`` returns, so
    a build killed half-way never looks finished; what it left behind is reported and rebuilt,
    unless the build is ``resumable``: then the staging directory is handed to ``build`` again,
    which resumes from what it finds there. A file lock makes concurrent processes wait for one
    build.

    ``collective``: under ``torch.distributed`` every process of the group runs ``build``
    together; rank 0 holds the lock, clears leftovers and renames the result.

    ``what`` names the build in messages; ``needs()`` estimates the bytes the build writes,
    checked against the free space first; ``check(path)`` is a format's own integrity check (a
    problem's description, or None); ``on_damage``: ``'rebuild'`` (removed, with a warning),
    ``'set aside'`` (kept as ``<path>.damaged``, then rebuilt) or ``'raise'``
    (:class:`DamagedBuild`).
    """
    path = Path(path)
    what = what or path.name
    if on_damage not in ON_DAMAGE:
        raise ValueError(f'on_damage must be one of {ON_DAMAGE}, not {on_damage!r}')
    if collective and distributed()[1] > 1:
        return _build_once_collectively(path, build, what, needs, check, on_damage, resumable)
    if _usable(path, what, check, on_damage):
        return path
    writable(path.parent, what)
    with locked(path.with_name(path.name + '.lock')):
        if _usable(path, what, check, on_damage):  # another process finished it while we waited
            return path
        staging = _clear_leftovers(path, resumable)
        _check_space(path.parent, needs, what)
        _run_build(path, staging, build, what, resumable)
    return path


def _run_build(path: Path, staging: Path, build: Callable[[Path], None], what: str, resumable: bool,
               finish: bool = True, owner: bool = True):
    """``build(staging)``, then (``finish``) the marker and the rename, disk faults raised as
    :class:`CacheError`; the ``owner`` removes the staging directory of a failed build that
    cannot be resumed."""
    def undo():
        if owner and not resumable:
            shutil.rmtree(staging, ignore_errors=True)

    with disk_faults(what, staging, kept=lambda: resumable and staging.exists(), undo=undo):
        build(staging)
        if finish:
            _finish(staging, path)


def _finish(staging: Path, path: Path):
    """The completion marker, recording every file's size, then the rename."""
    (staging / _COMPLETE).write_text(json.dumps({'version': 1,
                                                 'files': file_sizes(staging, _COMPLETE)}))
    os.replace(staging, path)


def damage(path: Path, check: Callable[[Path], str | None] | None = None) -> str | None:
    """What is wrong with the complete build at ``path`` (a file missing or of another size than
    the marker recorded, or ``check``'s finding), or None; files added after the build are not
    checked."""
    try:
        text = (path / _COMPLETE).read_text()
    except UnicodeDecodeError:
        return f'its completion marker {path / _COMPLETE} is garbled'
    except OSError as error:
        return f'its completion marker cannot be read ({error.strerror})'
    if text.strip():
        try:
            sizes = json.loads(text)['files']
        except (ValueError, KeyError, TypeError):
            return f'its completion marker {path / _COMPLETE} is garbled'
        problem = size_damage(path, sizes)
        if problem is not None:
            return problem
    return check(path) if check is not None else None


def file_sizes(path: Path, leave_out: str) -> dict:
    """Every file under ``path`` (but ``leave_out``) and its size: what a marker records."""
    return {str(f.relative_to(path)): f.stat().st_size for f in sorted(path.rglob('*'))
            if f.is_file() and f.name != leave_out}


def size_damage(path: Path, sizes: dict) -> str | None:
    """The first file under ``path`` missing or of another size than ``sizes`` recorded, or None."""
    for name, size in sizes.items():
        try:
            actual = (path / name).stat().st_size
        except FileNotFoundError:
            return f'{name} is missing'
        if actual != size:
            return f'{name} is {actual:,} bytes where {size:,} were written'
    return None


def _usable(path: Path, what: str, check, on_damage: str) -> bool:
    """Whether a complete, undamaged build is at ``path``; a damaged one is handled as
    ``on_damage`` says."""
    if not is_complete(path):
        return False
    problem = damage(path, check)
    if problem is None:
        return True
    if on_damage == 'raise':
        raise DamagedBuild(f'{what} at {path} is damaged: {problem}. Remove it (rm -r {path}) to '
                           'rebuild it, or restore it from a copy')
    logger.warning('%s at %s is damaged (%s); %s and rebuilding', what, path, problem,
                   f'setting it aside as {aside_path(path)}' if on_damage == 'set aside'
                   else 'removing it')
    try:
        if on_damage == 'set aside':
            set_aside(path)
        else:
            shutil.rmtree(path)
    except OSError as error:
        raise CacheNotWritable(
            f'{what} at {path} is damaged ({problem}) and cannot be removed to rebuild it '
            f'({error.strerror}); remove it by hand or {MOVE_HINT}') from error
    return False


def aside_path(path: Path) -> Path:
    return path.with_name(path.name + '.damaged')


def set_aside(path: Path) -> Path:
    """Moves the damaged ``path`` to ``<path>.damaged`` (replacing an earlier one), kept for a
    look."""
    aside = aside_path(path)
    shutil.rmtree(aside, ignore_errors=True)
    os.replace(path, aside)
    return aside


def _check_space(directory: Path, needs, what: str):
    check_space(directory, needs() if needs is not None else None, what)


@contextmanager
def written_whole(path: str | Path, what: str, hint: str = MOVE_HINT):
    """Yields a temporary path beside ``path`` to write, renamed to ``path`` when the block ends,
    so that a failed write leaves the earlier ``path`` as it was. A disk fault becomes a
    :class:`CacheError` naming ``path`` and ``hint``."""
    path = Path(path)
    partial = path.with_name(f'.{path.stem}.partial{path.suffix}')
    with disk_faults(what, path, hint=hint, undo=lambda: partial.unlink(missing_ok=True)):
        yield partial
        os.replace(partial, path)


@contextmanager
def temporary_build(prefix: str, what: str, needed: int | None):
    """Yields (directory, owner) of a new temporary directory (under torch.distributed, rank 0's)
    for a trainer's throw-away index: ``needed`` bytes are checked against its free space, and a
    write that fails for space becomes a :class:`CacheError`, the directory removed."""
    directory, tmp = shared_temporary_directory(prefix)
    with disk_faults(what, Path(directory), fate='the temporary index was removed', hint=TMP_HINT,
                     undo=tmp.cleanup if tmp is not None else None):
        all_or_none(lambda: (check_space(Path(directory), needed, what, TMP_HINT)
                             if distributed()[0] == 0 else None))
        yield directory, tmp


def _clear_leftovers(path: Path, resumable: bool) -> Path:
    """The staging directory of ``path``, with what an earlier build left removed (but a
    resumable build's); an engine's ``*.log`` is kept as ``<path>.failed-build.log``."""
    staging = _staging(path)
    if resumable and staging.exists():
        logger.warning('%s is an interrupted build; resuming it', staging)
    for leftover in (path,) if resumable else (path, staging):
        if leftover.exists():
            logs = sorted(leftover.glob('*.log'))
            kept = path.with_name(path.name + '.failed-build.log')
            if logs:
                os.replace(logs[0], kept)
            logger.warning('%s is an incomplete build (interrupted?); removing it and rebuilding%s',
                           leftover, f' (its log: {kept})' if logs else '')
            shutil.rmtree(leftover)
    return staging


def _staging(path: Path) -> Path:
    return path.with_name(path.name + '.partial')


def _build_once_collectively(path: Path, build: Callable[[Path], None], what: str, needs, check,
                             on_damage: str, resumable: bool) -> Path:
    """:func:`build_once` with every process of the group running ``build``: rank 0 decides,
    and its decision or any rank's failure reaches every rank."""
    import torch.distributed as dist
    rank = dist.get_rank()
    with ExitStack() as held:  # rank 0's lock, released however the build ends
        todo = [None]
        if rank == 0:
            try:
                if _usable(path, what, check, on_damage):
                    todo = ['done']
                else:
                    writable(path.parent, what)
                    held.enter_context(locked(path.with_name(path.name + '.lock')))
                    todo = ['done'] if _usable(path, what, check, on_damage) else ['build']
                    if todo[0] == 'build':
                        _clear_leftovers(path, resumable)
                        _check_space(path.parent, needs, what)
            except CacheError as error:
                todo = [error]
        dist.broadcast_object_list(todo, src=0)
        if isinstance(todo[0], CacheError):
            raise todo[0]
        if todo[0] == 'build':
            def together(staging: Path):
                # (a barrier: every rank is done with the staging directory)
                all_or_none(lambda: build(staging))
                all_or_none(lambda: _finish(staging, path) if rank == 0 else None)

            dist.barrier()
            _run_build(path, _staging(path), together, what, resumable, finish=False,
                       owner=rank == 0)
    return path


@contextmanager
def locked(lock_path: Path):
    with open(lock_path, 'w') as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
