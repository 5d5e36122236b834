"""A passage side that moves at the cost of a query step: a learned offset per passage vector.

A dual encoder trained with its passage tower frozen (RAG; ``Distillation``'s default) keeps
the start encoder's passage vectors v₀. :class:`PassageOffsets` gives each passage the
trainer touches a free vector δ, and the passage's vector becomes v₀ + δ (normalised again
where the encoder normalises, so that scores stay cosines). No passage encoder runs in the
backward pass: a step costs what a query-tower step costs, plus a gather of the batch's rows.

Offsets are stored beside the model (``passage_offsets.pt``: the docnos and their δ) and
applied when the index is built (:func:`pyterrier_selfsup.retrieval.dense.flex_index`), so
search stays a plain dense search of a FlexIndex. A passage without an offset (never a
candidate in training, or added to the corpus later) keeps the start encoder's vector.

Only the rows that training touched are held: their number is bounded by the training
queries times the candidates a query (not by the corpus), so a corpus of millions costs
what its training queries reach.
"""
import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Optional

import numpy as np
import torch

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
        if len(self.docnos) > len(self._delta):  # capacity doubles: amortised O(1) a new row
            grown = torch.zeros(max(len(self.docnos), 2 * len(self._delta)), self.dim)
            grown[:len(self._delta)] = self._delta
            self._delta = grown
        return torch.tensor(out, dtype=torch.long)

    def grow_like(self, other: torch.Tensor) -> torch.Tensor:
        """``other`` (a per-row state of the same capacity as δ once was) padded with zero
        rows to δ's capacity now (the optimiser's moments follow δ's growth)."""
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
        """Index vectors (``docnos`` in index order) with each passage's offset applied; a
        passage without one keeps its vector as it is."""
        vectors = np.array(vectors, dtype=np.float32, copy=True)
        where = [(i, self.row[d]) for i, d in enumerate(docnos) if d in self.row]
        if where:
            idx, rows = map(list, zip(*where))
            moved = self.adjusted(torch.from_numpy(vectors[idx]), self.delta[rows])
            vectors[idx] = moved.numpy()
        return vectors

    def fingerprint(self) -> str:
        """A digest of the offsets: keys the index they are applied to."""
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
