"""A passage side that moves at the cost of a query step: a learned offset per passage vector.

A dual encoder trained with its passage tower frozen keeps the start encoder's passage vectors
v₀. :class:`PassageOffsets` gives each passage the trainer touches a free vector δ, and its
vector becomes v₀ + δ (normalised again where the encoder normalises). No passage encoder runs
in the backward pass.

Offsets are stored beside the model (``passage_offsets.pt``) and applied when the index is
built (:func:`pyterrier_selfsup.retrieval.dense.flex_index`); a passage without one keeps the
start encoder's vector. Only the rows training touched are held.
"""
import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Optional

import numpy as np
import torch
from pyterrier_dr import FlexIndex

PASSAGE_OFFSETS_FILE = 'passage_offsets.pt'


class PassageOffsets:
    """δ for the passages that have one (rows in the order they were first met)."""

    def __init__(self, dim: int, normalize: bool, docnos: Sequence[str] = (),
                 delta: torch.Tensor | None = None):
        self.dim = dim
        self.normalize = normalize
        self.docnos: list[str] = list(docnos)
        self.row = {d: i for i, d in enumerate(self.docnos)}
        self._delta = (torch.zeros(max(16, len(self.docnos)), dim) if delta is None
                       else delta.float().clone())
        if delta is not None and len(delta) != len(self.docnos):
            raise ValueError(f'{len(self.docnos)} docnos and {len(delta)} offsets')

    def __len__(self) -> int:
        return len(self.docnos)

    @property
    def delta(self) -> torch.Tensor:
        """The offsets, a row per docno of :attr:`docnos` (a view)."""
        return self._delta[:len(self.docnos)]

    def rows(self, docnos: Iterable[str]) -> torch.Tensor:
        """The row of each docno, a zero row given to each one met for the first time."""
        out = []
        for docno in docnos:
            i = self.row.get(docno)
            if i is None:
                i = self.row[docno] = len(self.docnos)
                self.docnos.append(docno)
            out.append(i)
        if len(self.docnos) > len(self._delta):  # capacity doubles
            grown = torch.zeros(max(len(self.docnos), 2 * len(self._delta)), self.dim)
            grown[:len(self._delta)] = self._delta
            self._delta = grown
        return torch.tensor(out, dtype=torch.long)

    def grow_like(self, other: torch.Tensor) -> torch.Tensor:
        """``other`` (a per-row state) padded with zero rows to δ's capacity now (the optimiser's
        moments follow δ's growth)."""
        if len(other) >= len(self._delta):
            return other
        grown = torch.zeros(len(self._delta), *other.shape[1:], dtype=other.dtype)
        grown[:len(other)] = other
        return grown

    def adjusted(self, vectors: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """v₀ + δ, normalised where the encoder normalises."""
        out = vectors + delta.to(vectors.dtype)
        return torch.nn.functional.normalize(out, dim=-1) if self.normalize else out

    def apply(self, docnos: Sequence[str], vectors: np.ndarray) -> np.ndarray:
        """Index vectors (``docnos`` in index order) with each passage's offset applied."""
        vectors = np.array(vectors, dtype=np.float32, copy=True)
        where = [(i, self.row[d]) for i, d in enumerate(docnos) if d in self.row]
        if where:
            idx, rows = map(list, zip(*where))
            moved = self.adjusted(torch.from_numpy(vectors[idx]), self.delta[rows])
            vectors[idx] = moved.numpy()
        return vectors

    def fingerprint(self) -> str:
        """A digest of the offsets: the key of the index they are applied to."""
        digest = hashlib.sha256()
        digest.update(repr((self.dim, self.normalize)).encode())
        digest.update('\n'.join(self.docnos).encode())
        digest.update(self.delta.numpy().astype(np.float32).tobytes())
        return digest.hexdigest()[:16]

    def norms(self) -> torch.Tensor:
        return self.delta.norm(dim=-1)

    def save(self, directory: str | Path) -> Path:
        path = Path(directory) / PASSAGE_OFFSETS_FILE
        torch.save({'dim': self.dim, 'normalize': self.normalize, 'docnos': self.docnos,
                    'delta': self.delta.clone()}, path)
        return path

    @classmethod
    def load(cls, directory: str | Path) -> Optional['PassageOffsets']:
        """The offsets saved in ``directory``, or None if it has none."""
        path = Path(directory) / PASSAGE_OFFSETS_FILE
        if not path.is_file():
            return None
        saved = torch.load(path, map_location='cpu', weights_only=True)
        return cls(saved['dim'], saved['normalize'], saved['docnos'], saved['delta'])

    def __repr__(self):
        return f'PassageOffsets({len(self)} passages, dim={self.dim}, normalize={self.normalize})'


# trained by lazy Adam over the rows a step touched (not torch's SparseAdam: these rows
# grow); under torch.distributed the pending gradients are summed over the processes
OFFSETS_STATE_FILE = 'passage_offsets_state.pt'


class OffsetAdam:
    """Adam (β 0.9, 0.999; no weight decay: ``weight`` pulls δ to 0 through the loss) with a
    constant learning rate ``lr`` over ``offsets``' rows."""

    def __init__(self, offsets: PassageOffsets, *, lr: float = 1e-3, weight: float = 1.0,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        self.offsets = offsets
        self.lr, self.weight, self.betas, self.eps = lr, weight, betas, eps
        self.m = torch.zeros(0, offsets.dim)
        self.v = torch.zeros(0, offsets.dim)
        self.t = 0
        self._pending: list[tuple[torch.Tensor, torch.Tensor]] = []

    def adjusted(self, docnos: list[str],
                 vectors: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(v₀ + δ for ``docnos``; the L2 pull ``weight`` · mean over these rows of ‖δ‖²), both with
        gradients to δ."""
        rows = self.offsets.rows(docnos)
        delta = self.offsets.delta[rows].clone().to(vectors.device).requires_grad_(True)
        self._pending.append((rows, delta))
        return self.offsets.adjusted(vectors, delta), self.weight * delta.pow(2).sum(-1).mean()

    def step(self, world_size: int = 1):
        """Moves the rows that the batches since the last step touched."""
        pending, self._pending = self._pending, []
        pending = [(rows, delta.grad.detach().cpu() if delta.grad is not None
                    else torch.zeros(delta.shape))
                   for rows, delta in pending]
        if world_size > 1:
            import torch.distributed as dist
            for _, grad in pending:
                dist.all_reduce(grad)
        if not pending:
            return
        rows = torch.cat([r for r, _ in pending])
        grads = torch.cat([g for _, g in pending]).float()
        touched, where = rows.unique(return_inverse=True)
        grad = torch.zeros(len(touched), self.offsets.dim).index_add_(0, where, grads)
        self.m, self.v = self.offsets.grow_like(self.m), self.offsets.grow_like(self.v)
        self.t += 1
        b1, b2 = self.betas
        m = self.m[touched].mul_(b1).add_(grad, alpha=1 - b1)
        v = self.v[touched].mul_(b2).addcmul_(grad, grad, value=1 - b2)
        self.m[touched], self.v[touched] = m, v
        update = (m / (1 - b1 ** self.t)) / ((v / (1 - b2 ** self.t)).sqrt() + self.eps)
        self.offsets.delta[touched] -= self.lr * update

    def state_dict(self) -> dict:
        n = len(self.offsets)
        return {'m': self.m[:n].clone(), 'v': self.v[:n].clone(), 't': self.t}

    def load_state_dict(self, state: dict):
        self.m, self.v, self.t = state['m'].clone(), state['v'].clone(), state['t']

    def save(self, directory: str | Path):
        torch.save(self.state_dict(), Path(directory) / OFFSETS_STATE_FILE)

    def load(self, directory: str | Path) -> bool:
        """Restores the moments saved in ``directory`` (False: none there)."""
        path = Path(directory) / OFFSETS_STATE_FILE
        if not path.is_file():
            return False
        self.load_state_dict(torch.load(path, map_location='cpu', weights_only=True))
        return True


def offset_index(path: str | Path, base: FlexIndex, offsets, chunk: int) -> FlexIndex:
    """A new FlexIndex at ``path``: ``base``'s vectors with ``offsets`` applied
    (:meth:`PassageOffsets.apply`), in its order, ``chunk`` vectors at a time."""
    docnos, vectors, _ = base.payload()

    def rows():
        for start in range(0, len(vectors), chunk):
            names = [str(d) for d in
                     docnos.fwd[np.arange(start, min(start + chunk, len(vectors)))]]
            for docno, vector in zip(names,
                                     offsets.apply(names, vectors[start:start + len(names)])):
                yield {'docno': docno, 'doc_vec': vector}

    index = FlexIndex(str(path), verbose=False)
    index.index(rows())
    return index
