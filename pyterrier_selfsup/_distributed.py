"""This process's place among several under torch.distributed (torchrun), in one place.

Every layer that behaves differently on several processes asks :func:`distributed`;
:func:`join_process_group` is what a launched process calls first. What several processes
build together is split in chunks (:func:`my_chunks`, :func:`chunk_order`) and meets in one
directory (:func:`shared_temporary_directory`).
"""
import atexit
import datetime
import itertools
import logging
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Optional, TypeVar

T = TypeVar('T')


def distributed() -> tuple[int, int]:
    """(rank, world size) of this process under torch.distributed, (0, 1) outside it."""
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def join_process_group() -> int | None:
    """Under torchrun (``WORLD_SIZE`` > 1): this process joins the group (nccl with a GPU a
    process, else gloo with the cores split between the node's processes) and returns its rank.
    None in a process of its own."""
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
        watch_the_group(dist.get_rank(), dist.get_world_size())
    return dist.get_rank()


# -- a process lost: the others stop, saying which ------------------------------------------

LOST_AFTER = 60.0  # seconds without a heartbeat from a process on another machine: it is lost
POLL = 0.5  # seconds between two looks at the others
EXIT_LOST = 75  # the exit status of a process that stops because another one was lost
_KEY = 'selfsup/group'


def watch_the_group(rank: int, world_size: int) -> Optional['GroupWatch']:
    """Makes this process stop, within :data:`POLL` seconds (a process on this machine) or
    :data:`LOST_AFTER` (on another), once another process of the group is lost, saying which,
    rather than wait in its next collective for the backend's timeout. On torchrun's SIGTERM,
    the same message, then exit, even from inside a collective.

    Each process writes its machine, pid, start time and a heartbeat into torchrun's agent
    store, and marks its own end there, so that a process that ended on its own is not taken for
    lost. Started only under torchrun (``TORCHELASTIC_USE_AGENT_STORE``)."""
    if os.environ.get('TORCHELASTIC_USE_AGENT_STORE', '').lower() != 'true' or world_size < 2:
        return None
    try:
        watch = GroupWatch(rank, world_size)
        watch.begin()
    except Exception as e:  # (no store to meet in: a process lost is then gloo's or nccl's to say)
        logging.getLogger(__name__).warning(
            'not watching the process group for a lost process: %s', e)
        return None
    return watch


def _this_machine() -> str:
    """What two processes share only on one machine and in one pid namespace: the host name,
    the kernel's boot id and the pid namespace."""
    parts = [socket.gethostname()]
    try:
        parts.append(Path('/proc/sys/kernel/random/boot_id').read_text().strip())
        parts.append(str(os.stat('/proc/self/ns/pid').st_ino))
    except OSError:  # no /proc: the host name alone
        pass
    return '/'.join(parts)


def _started(pid: int) -> str | None:
    """Process ``pid``'s start time (clock ticks since boot), None if it is not running (a
    zombie is not); with the pid, one process even where pids are reused."""
    try:
        with open(f'/proc/{pid}/stat') as stat:
            fields = stat.read().rsplit(')', 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == 'Z' else fields[19]


class GroupWatch(threading.Thread):
    """:func:`watch_the_group`'s watcher: a daemon thread with its own connection to the store."""

    def __init__(self, rank: int, world_size: int):
        super().__init__(name='selfsup-group-watch', daemon=True)
        import torch.distributed as dist
        self.rank, self.world_size = rank, world_size
        self.store = dist.TCPStore(os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT']),
                                   is_master=False, timeout=datetime.timedelta(seconds=30))
        # (a launch's keys are its own, and so are those of each of its restarts)
        self.prefix = (f"{_KEY}/{os.environ.get('TORCHELASTIC_RUN_ID', '')}/"
                       f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}")
        self.machine = _this_machine()
        self.peers: dict = {}  # rank -> (machine, pid, start time)
        self.beats: dict = {}  # rank -> (heartbeat count, when it last changed here)
        self.signals = None
        self.ending = threading.Event()

    def begin(self):
        """From the main thread: the SIGTERM handler, the hooks, this process's entry in the
        store (last: no process is announced that is not watched), then the thread."""
        read, write = os.pipe()
        os.set_blocking(write, False)
        signal.signal(signal.SIGTERM, lambda signum, frame: None)
        # the signal's number written there at once (the watcher acts on it: see run)
        signal.set_wakeup_fd(write)
        self.signals = read
        atexit.register(self._end)
        self._uncaught_before, sys.excepthook = sys.excepthook, self._uncaught
        pid = os.getpid()
        self.store.set(f'{self.prefix}/process/{self.rank}',
                       f'{self.machine} {pid} {_started(pid)}')
        self.start()

    def run(self):
        import select
        beat = f'{self.prefix}/beat/{self.rank}'
        try:
            while not self.ending.is_set():
                ready, _, _ = select.select([self.signals], [], [], POLL)
                if ready and signal.SIGTERM in os.read(self.signals, 64):
                    self._terminated()
                self.store.add(beat, 1)
                lost = self.lost()
                if lost:
                    self._stop(lost, 'stops too')
        except Exception:  # the store gone (the launcher ending): nothing left to watch
            return

    def lost(self) -> list[tuple[int, str]]:
        """The other processes that are gone without marking their end: (rank, how it is known)."""
        out = []
        now = time.monotonic()
        for peer in range(self.world_size):
            if peer == self.rank:
                continue
            if peer not in self.peers:
                key = f'{self.prefix}/process/{peer}'
                if not self.store.check([key]):
                    continue  # (not yet said: it is starting)
                machine, pid, started = self.store.get(key).decode().rsplit(' ', 2)
                self.peers[peer] = (machine, int(pid), started)
            machine, pid, started = self.peers[peer]
            if machine == self.machine:
                gone = _started(pid) != started
                how = f'its process {pid} has ended'
            else:
                count = self.store.add(f'{self.prefix}/beat/{peer}', 0)
                seen, since = self.beats.get(peer, (None, now))
                self.beats[peer] = (count, now if count != seen else since)
                gone = now - self.beats[peer][1] > LOST_AFTER
                how = f'no heartbeat from its machine for {LOST_AFTER:.0f} s'
            # (read after the liveness: a process marks its end before it ends)
            if gone and not self.store.check([f'{self.prefix}/ended/{peer}']):
                out.append((peer, how))
        return out

    def _stop(self, lost: list[tuple[int, str]], what: str):
        names = '; '.join(f'process {r} (rank {r} of {self.world_size}) is lost: {how}'
                          for r, how in lost)
        print(f'selfsup: {names}. Process {self.rank} {what}; run the same command again to resume '
              f'from the last checkpoint.', file=sys.stderr, flush=True)
        self._mark('ended')  # (a stop of this kind is no loss of its own)
        # (not an exception: the main thread may be waiting in a collective that never returns)
        os._exit(EXIT_LOST)

    def _terminated(self):
        try:
            lost = self.lost()
        except Exception:
            lost = []
        if lost:
            self._stop(lost, 'was stopped by its launcher')
        print(f'selfsup: process {self.rank} was stopped (SIGTERM); run the same command again to '
              f'resume from the last checkpoint.', file=sys.stderr, flush=True)
        self._mark('ended')
        os._exit(128 + signal.SIGTERM)

    def _uncaught(self, kind, error, trace):
        """A collective that failed because a process was lost (gloo: "Connection closed by
        peer", an address) says which process, not the address."""
        try:
            lost = self.lost()
        except Exception:
            lost = []
        if lost:
            first = str(error).strip().splitlines()[0] if str(error).strip() else ''
            print(f'selfsup: process {self.rank}: {kind.__name__}: {first}',
                  file=sys.stderr, flush=True)
            self._stop(lost, 'stops too')
        self._uncaught_before(kind, error, trace)

    def _end(self):
        """At a clean exit: the end marked, and the watcher stopped before the interpreter tears
        down its store connection."""
        self._mark('ended')
        self.ending.set()
        if self.is_alive():
            self.join(timeout=4 * POLL)

    def _mark(self, what: str):
        try:
            self.store.set(f'{self.prefix}/{what}/{self.rank}', '1')
        except Exception:
            pass


def all_or_none(step: Callable[[], T]) -> T:
    """``step()`` on every process of the group, and its result; if it raised on any process,
    it raises on all (the others the first failing process's error), so that no process is left
    waiting at a barrier. The exchange is itself a barrier. Alone: ``step()``."""
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


def chunk_order(sizes: Sequence[int], chunk: int) -> Iterator[tuple[int, int, int]]:
    """(process, start, end) of each chunk of the whole stream, in its order, from the number
    of items each process got from :func:`my_chunks`."""
    for c in itertools.count():
        rank, start = c % len(sizes), (c // len(sizes)) * chunk
        if start >= sizes[rank]:
            return
        yield rank, start, min(start + chunk, sizes[rank])


# documents a chunk when several processes share an encoding: small enough to split
# a small corpus evenly, large enough to sort by length
SHARD_CHUNK = 256


def build_sharded(items: Iterable, shards: list[Path], encode: Callable[[Path, Iterator], None],
                  join: Callable[[list[Path]], None], *, rank: int, world_size: int,
                  chunk: int = SHARD_CHUNK):
    """One build of ``items`` shared by the ``world_size`` processes of a group, each calling
    this with its ``rank``: each rank runs ``encode(shards[rank], its items)`` (:func:`my_chunks`)
    into a shard on a filesystem every rank sees, then rank 0 runs ``join(shards)``, putting
    them back in the stream's order (:func:`chunk_order`), and removes them. A rank that fails
    fails them all."""
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


def shared_temporary_directory(prefix: str) -> tuple[str, tempfile.TemporaryDirectory | None]:
    """A temporary directory every process of the group writes into, made by rank 0. Returns
    its path and, on the process that owns it, the directory (None elsewhere)."""
    rank, world_size = distributed()
    tmp = tempfile.TemporaryDirectory(prefix=prefix) if rank == 0 else None
    if world_size == 1:
        return tmp.name, tmp
    import torch.distributed as dist
    shared = [tmp.name if tmp else None]
    dist.broadcast_object_list(shared, src=0)
    return shared[0], tmp


def sum_step(params: list, window: list[float], metrics: dict,
             world_size: int) -> tuple[float | None, dict]:
    """One optimiser step's reduction over the processes: each parameter's gradient summed, and
    the recorded ``metrics`` (name -> (value x weight, weight) pairs) gathered. Returns the step's
    loss (None when every batch was skipped, decided alike on every process) and the metrics.

    Not DDP: the loop's contract is the gradients' sum (each process's loss is its share of the
    whole batch's), a parameter no process reached keeps no gradient, and a method's loss may run
    several backwards a step."""
    import torch
    import torch.distributed as dist
    device = params[0].device  # (nccl reduces on the GPU)
    total = torch.tensor([sum(window)], dtype=torch.float64, device=device)
    batches = torch.tensor([len(window)], dtype=torch.float64, device=device)
    dist.all_reduce(total)
    # (a process without rows in a batch has no share of it)
    dist.all_reduce(batches, op=dist.ReduceOp.MAX)
    if not batches.item():
        return None, metrics
    # a parameter no process's share reached keeps no gradient (AdamW then leaves it alone)
    reached = torch.tensor([p.grad is not None for p in params],
                           dtype=torch.int32, device=device)
    dist.all_reduce(reached, op=dist.ReduceOp.MAX)
    for p, any_grad in zip(params, reached.tolist()):
        if any_grad:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)
    every = [None] * world_size
    dist.all_gather_object(every, metrics)
    gathered = {k: [v for m in every for v in m.get(k, [])] for k in dict.fromkeys(
        k for m in every for k in m)}
    return float(total.item() / batches.item()), gathered
