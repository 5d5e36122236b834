"""Helpers shared by the tests."""
import os
from contextlib import contextmanager

from torch.utils._python_dispatch import TorchDispatchMode

QUERIES = ['what is information retrieval', 'automatic indexing of documents']
DOCS = ['retrieval of information from a library of documents', 'indexing',
        'the weather today is fine and dry', 'automatic indexing assigns terms to documents']


def tiny_dual_encoder(path, **settings):
    """The tiny BERT at ``path`` (conftest's ``tiny_dir``) as a DualEncoder, made the same in every
    process (seeded): mean pooling (a random encoder's [CLS] carries almost no content to learn
    from), d=16, 48 tokens, on the CPU in fp32, unless ``settings`` say otherwise. A function, not
    only the ``tiny_encoder`` fixture, so that spawned processes can make it too."""
    import torch

    from pyterrier_selfsup import DualEncoder
    torch.manual_seed(0)
    defaults = dict(dim=16, pooling='mean', device='cpu', precision='fp32', max_length=48)
    return DualEncoder.from_pretrained(str(path), **{**defaults, **settings})


def central_difference(loss, weight, index, eps: float) -> float:
    """(loss(w + eps) - loss(w - eps)) / 2 eps at ``weight[index]``, the weight left as it was."""
    import torch
    with torch.no_grad():
        weight[index] += eps
        up = loss().item()
        weight[index] -= 2 * eps
        down = loss().item()
        weight[index] += eps
    return (up - down) / (2 * eps)


@contextmanager
def stopped_at_step(monkeypatch, trainer_class, step: int):
    """The training run inside stops in its ``step``-th call of ``trainer_class.loss`` (a
    KeyboardInterrupt, expected); the loss is restored afterwards."""
    import pytest
    loss, calls = trainer_class.loss, []

    def interrupted(self, batch, rng):
        calls.append(len(calls) + 1)
        if len(calls) == step:
            raise KeyboardInterrupt
        return loss(self, batch, rng)

    monkeypatch.setattr(trainer_class, 'loss', interrupted)
    try:
        with pytest.raises(KeyboardInterrupt):
            yield
    finally:
        monkeypatch.setattr(trainer_class, 'loss', loss)


def snapshot(path):
    """Every file and directory under ``path`` with its size and modification time."""
    if not os.path.exists(path):
        return None
    return {os.path.join(d, f): (os.stat(os.path.join(d, f)).st_size,
                                 os.stat(os.path.join(d, f)).st_mtime_ns)
            for d, dirs, files in os.walk(path) for f in files + dirs}


def free_port() -> int:
    """A TCP port free on this machine now (for a torchrun store: a fixed one can be taken)."""
    import socket
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


class OperationCount(TorchDispatchMode):
    """Counts the ATen operations dispatched while it is active: a count that does not depend
    on the machine, which an operation budget holds a model's batch to."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))

    @classmethod
    def of(cls, call) -> int:
        """The operations ``call()`` dispatches."""
        counter = cls()
        with counter:
            call()
        return counter.count


def start_ranks(fn, args, nprocs: int = 2):
    """``fn(rank, *args)`` in ``nprocs`` processes forked from this one, as ``mp.spawn`` runs it
    in fresh ones: a forked rank starts with the modules this process has imported, where a
    spawned one imports torch and the package again (seconds a process on a slow CPU). Each
    rank must join its own process group, as a spawned one does."""
    import torch.multiprocessing as mp
    return mp.start_processes(fn, args=args, nprocs=nprocs, start_method='fork')


def ranked_alike(order_scores, other_scores, atol: float) -> bool:
    """Whether ``other_scores`` rank the items as ``order_scores`` do, but for pairs whose
    ``other_scores`` are within ``atol``: two code paths whose scores agree to ``atol / 2`` may
    order such near-ties either way, and a kernel of another CPU may too. Both are one score an
    item (1-d), or one row of scores a query (2-d)."""
    import numpy as np
    first, second = np.atleast_2d(order_scores), np.atleast_2d(other_scores)
    for a, b in zip(first, second):
        by_first = b[np.argsort(-a, kind='stable')]
        # each item's score may exceed those ranked above it by atol at most
        floor = np.minimum.accumulate(by_first)[:-1]
        if (by_first[1:] > floor + atol).any():
            return False
    return True
