"""Texts into batches a model reads: cleaning, token ids cut into slices tokenized ahead of the
device, batches within a token budget, and padding into tensors.

    ids, mask = pad([[5, 6, 7], [8]], value=0)   # (2, 3) tensors, padded on the right
"""
import math
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch


def to_device(tensor: torch.Tensor, device) -> torch.Tensor:
    """``tensor`` on ``device``; to a GPU from pinned memory without waiting for the copy."""
    device = torch.device(device) if device is not None else torch.device('cpu')
    if device.type == 'cuda' and tensor.device.type == 'cpu':
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def clean_texts(texts: Sequence) -> list[str]:
    """None, NaN and other non-strings become strings (missing ones empty)."""
    return [t if isinstance(t, str)
            else '' if t is None or (isinstance(t, float) and math.isnan(t)) else str(t)
            for t in texts]


def pad(seqs: Sequence[Sequence[int]], value: int, *, left: bool = False, device=None,
        min_width: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Token id lists as one (b, width) int64 tensor and its attention mask, padded on the right
    (or the left) to the longest, or to ``min_width`` where that is longer. Filled in numpy,
    which costs less than a tokenizer's ``pad`` or torch's ``pad_sequence``."""
    lengths = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
    width = max(1, min_width, int(lengths.max(initial=0)))
    ids = np.full((len(seqs), width), value, dtype=np.int64)
    for row, (seq, n) in enumerate(zip(seqs, lengths)):
        if n:
            if left:
                ids[row, width - n:] = seq
            else:
                ids[row, :n] = seq
    columns = np.arange(width)
    mask = columns >= width - lengths[:, None] if left else columns < lengths[:, None]
    ids, mask = torch.from_numpy(ids), torch.from_numpy(mask.astype(np.int64))
    return (ids, mask) if device is None else (to_device(ids, device), to_device(mask, device))


def budget_batches(lengths: np.ndarray, budget: int) -> Iterator[slice]:
    """Cuts ``lengths``, sorted longest first, into consecutive batches whose padded size
    (rows times the batch's first, longest, length) stays within ``budget`` tokens. A text
    longer than the budget makes a batch of its own.

        >>> [(s.start, s.stop) for s in budget_batches(np.array([8, 4, 4, 2, 2, 2]), 8)]
        [(0, 1), (1, 3), (3, 6)]
    """
    start = 0
    while start < len(lengths):
        rows = max(1, budget // max(1, int(lengths[start])))
        yield slice(start, min(start + rows, len(lengths)))
        start += rows


TOKENIZE_SLICE = 1024


def tokenized_in_slices(tokenize: Callable[[list[str]], list[list[int]]], texts: list[str],
                        order: np.ndarray) -> Iterator[tuple[np.ndarray, list[list[int]]]]:
    """``texts`` in ``order``, cut into slices of :data:`TOKENIZE_SLICE`, each with its token
    ids, tokenized on one thread while the caller consumes the slices before them.

    Yields (positions in ``texts``, their token ids), slice by slice, in order."""
    slices = [order[s:s + TOKENIZE_SLICE] for s in range(0, len(order), TOKENIZE_SLICE)]
    if len(slices) <= 1:
        yield from ((idx, tokenize([texts[i] for i in idx])) for idx in slices)
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix='tokenize') as pool:
        done = pool.map(lambda idx: tokenize([texts[i] for i in idx]), slices)
        yield from zip(slices, done)
