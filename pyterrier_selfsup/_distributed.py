"""This process's place among several under torch.distributed (torchrun), in one place.

Every layer that behaves differently on several processes asks :func:`distributed`: the
cache (a collective build), the dense index (a sharded refresh), the training loop (its
share of each batch). :func:`join_process_group` is what a launched process calls first.
What several processes build together (a refreshed dense or token index) is split in
chunks (:func:`my_chunks`, :func:`chunk_order`) and meets in one directory
(:func:`shared_temporary_directory`).
"""
import itertools
import os
import pickle
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterable, Iterator, List, Optional, Sequence, Tuple, TypeVar

T = TypeVar('T')


def distributed() -> Tuple[int, int]:
    """(rank, world size) of this process under torch.distributed, (0, 1) outside it."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def join_process_group() -> Optional[int]:
    """Under torchrun (``WORLD_SIZE`` > 1): this process joins the group, nccl with a GPU a
    process where there are GPUs (``LOCAL_RANK``'s), gloo otherwise with the cores split
    between the node's processes; returns its rank. None in a process of its own."""
    if int(os.environ.get('WORLD_SIZE', '1')) <= 1:
        return None
    import torch
    import torch.distributed as dist
    if not dist.is_initialized():
        cuda = torch.cuda.is_available()
        if cuda:
            torch.cuda.set_device(int(os.environ.get('LOCAL_RANK', '0')))
        else:
            local = int(os.environ.get('LOCAL_WORLD_SIZE', os.environ['WORLD_SIZE']))
            torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // local))
        dist.init_process_group('nccl' if cuda else 'gloo')
    return dist.get_rank()


def all_or_none(step: Callable[[], T]) -> T:
    """``step()`` on every process of the group, and its result; if it raised on any
    process, it raises on all: the failing one its own error, the others the first failing
    process's (a disk that filled under one process's shard reaches every process as the
    same error), so that no process is left waiting at a barrier for one that failed. The
    exchange is itself a barrier. Outside torch.distributed: ``step()``."""
    rank, world_size = distributed()
    if world_size == 1:
        return step()
    import torch.distributed as dist
    try:
        result, error = step(), None
    except Exception as failure:
        result, error = None, failure
    errors = [None] * world_size
    dist.all_gather_object(errors, None if error is None else _portable(error, rank))
    if error is not None:
        raise error
    first = next((e for e in errors if e is not None), None)
    if first is not None:
        raise first
    return result


def _portable(error: Exception, rank: int) -> Exception:
    """``error`` as it can cross to the other processes (pickled), or a RuntimeError naming it."""
    try:
        return pickle.loads(pickle.dumps(error))
    except Exception:
        return RuntimeError(f'process {rank} failed: {type(error).__name__}: {error}')


# -- work split in chunks: chunk c of a stream to process c mod N --------------------------

def my_chunks(items: Iterable, chunk: int, rank: int, world_size: int) -> Iterator[list]:
    """The chunks of ``chunk`` items of ``items`` that are process ``rank``'s: chunk c goes to
    process c mod ``world_size`` (no process needs the number of items in advance)."""
    from more_itertools import chunked
    return (part for c, part in enumerate(chunked(items, chunk)) if c % world_size == rank)


def chunk_order(sizes: Sequence[int], chunk: int) -> Iterator[Tuple[int, int, int]]:
    """(process, start, end) of each chunk of the whole stream, in its order, from the number
    of items each of the processes got from :func:`my_chunks`: chunk c is the process's
    (c // N)-th (only the stream's last chunk can be short, so the order is exact)."""
    for c in itertools.count():
        rank, start = c % len(sizes), (c // len(sizes)) * chunk
        if start >= sizes[rank]:
            return
        yield rank, start, min(start + chunk, sizes[rank])


# documents a chunk when several processes share a corpus's encoding (chunk c to process c mod N):
# small enough that a corpus of a few thousand passages splits evenly (scifact's 5,183 in
# chunks of 4,096 left one process a fifth of the work), large enough to sort by length
SHARD_CHUNK = 256


def build_sharded(items: Iterable, shards: List[Path], encode: Callable[[Path, Iterator], None],
                  join: Callable[[List[Path]], None], *, rank: int, world_size: int, chunk: int = SHARD_CHUNK):
    """One build of ``items`` shared by the ``world_size`` processes of a torch.distributed group,
    each calling this with its ``rank``: chunk c of ``chunk`` items is rank c mod ``world_size``'s
    (:func:`my_chunks`); each rank runs ``encode(shards[rank], its items)``, writing its shard
    (on a filesystem every rank sees), then rank 0 runs ``join(shards)``, putting them back in the
    stream's order (:func:`chunk_order`), and removes them. A rank that fails (a full disk) fails
    them all, rather than leaving them at a barrier. The dense index (retrieval/dense.py) and
    ReAtt's token index (retrieval/token_index.py) are both built through it."""
    mine = (item for part in my_chunks(items, chunk, rank, world_size) for item in part)

    def joined():
        if rank == 0:
            try:
                join(shards)
            finally:
                for shard in shards:
                    shutil.rmtree(shard, ignore_errors=True)

    all_or_none(lambda: encode(shards[rank], mine))
    all_or_none(joined)


def shared_temporary_directory(prefix: str) -> Tuple[str, Optional[tempfile.TemporaryDirectory]]:
    """A temporary directory every process of the group writes into: rank 0 makes it (the
    others get its path; one node, or TMPDIR on a filesystem the nodes share). Returns its
    path and, on the process that owns it, the directory (removed with it; None elsewhere)."""
    rank, world_size = distributed()
    tmp = tempfile.TemporaryDirectory(prefix=prefix) if rank == 0 else None
    if world_size == 1:
        return tmp.name, tmp
    import torch.distributed as dist
    shared = [tmp.name if tmp else None]
    dist.broadcast_object_list(shared, src=0)
    return shared[0], tmp
