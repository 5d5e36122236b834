"""Training :class:`~pyterrier_selfsup.models.offsets.PassageOffsets`: lazy Adam over the rows a
step touched.

A trainer asks :meth:`OffsetAdam.adjusted` for the moved vectors of a batch's candidates
(the start encoder's vectors in, v₀ + δ out, δ a leaf that collects the batch's gradient),
adds the returned L2 pull to its loss, and calls :meth:`OffsetAdam.step` after each optimiser
step. Only the rows a step touched move and only their moments update (as TensorFlow's
LazyAdam and torch's ``SparseAdam``); written here rather than taken from ``SparseAdam``
because that needs a parameter of fixed size, while the rows here grow with the candidates
that training meets (bounded by queries × candidates, not by the corpus).

Under torch.distributed every process computes the same batch's candidates (its rows of
the loss differ), so each pending gradient has the same shape on every process and is
summed over them before the update, as the loop sums the model's gradients.
"""
from pathlib import Path

import torch

from pyterrier_selfsup.models.offsets import PassageOffsets

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
        """(v₀ + δ for ``docnos``, normalised where the encoder normalises; the L2 pull
        ``weight`` · mean over these rows of ‖δ‖²), both with gradients to δ."""
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
