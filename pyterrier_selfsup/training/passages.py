"""The passage side of a distilled dual encoder: how its passage vectors are made while it trains.

Distillation always trains the query tower; its ``passages`` setting chooses the other side:

- :class:`FrozenPassages` (``frozen``): the start encoder's passage vectors, read from its
  index (RAG).
- :class:`OffsetPassages` (``offsets``): those vectors, each moved by a learned offset δ
  (:mod:`~pyterrier_selfsup.models.offsets`), pulled towards 0 by an L2 term.
- :class:`TrainedPassages` (``trained``): the passage tower trains too, and each round searches
  a fresh index.

Example::

    side = passage_side(DistillationSettings(passages='frozen'))
    side.start(trainer)
    vectors, pull = side.vectors(trainer, ['d1', 'd2'])   # pull: a term to add to the loss
"""
from pathlib import Path

import numpy as np
import torch

from pyterrier_selfsup.models.offsets import OffsetAdam, PassageOffsets
from pyterrier_selfsup.retrieval.dense import flex_index


class PassageSide:
    """A strategy for the passage side; the subclasses say how vectors are made."""
    moves = False  # whether the passage tower trains, so that its index goes stale

    def start(self, trainer):
        """Prepares the encoder before the optimiser is made (freezing what does not train)."""

    def vectors(self, trainer, docnos: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """The vectors of ``docnos`` (with gradients to whatever trains), and a term to add to
        the loss (0 where there is none)."""
        raise NotImplementedError

    def with_pull(self, trainer, loss: torch.Tensor, pull: torch.Tensor) -> torch.Tensor:
        """The loss with this side's term (the second value of :meth:`vectors`) added, if any."""
        return loss

    def no_rows_loss(self, trainer, docnos: list[str]) -> torch.Tensor:
        """The loss of a process that has none of a batch's rows: zero, with this side's share of
        its term."""
        return torch.zeros((), requires_grad=True)

    def after_optimizer_step(self, world_size: int):
        """Updates what trains outside the optimiser."""

    def save(self, path: Path):
        """Writes what a checkpoint needs to resume this side exactly."""

    def load(self, path: Path, encoder):
        """Restores what :meth:`save` wrote (the encoder's own weights are loaded already)."""


class FrozenPassages(PassageSide):
    def __init__(self):
        self.index = None

    def start(self, trainer):
        trainer.encoder.model.freeze_passage_tower()
        self.index = flex_index(trainer.collection, trainer.encoder, cache_dir=trainer.cache_dir,
                                offsets=False, verbose=trainer.shows)

    def start_vectors(self, trainer, docnos: list[str]) -> torch.Tensor:
        index_docnos, vectors, _ = self.index.payload()
        passages = torch.from_numpy(np.asarray(vectors[index_docnos.inv[docnos]], dtype=np.float32))
        return passages.to(trainer.encoder.device)

    def vectors(self, trainer, docnos):
        passages = self.start_vectors(trainer, docnos)
        return passages, torch.zeros((), device=passages.device)


class OffsetPassages(FrozenPassages):
    def __init__(self, weight: float, lr: float):
        super().__init__()
        self.weight, self.lr = weight, lr
        self.adam: OffsetAdam | None = None

    def start(self, trainer):
        super().start(trainer)
        model = trainer.encoder.model
        trainer.encoder.passage_offsets = PassageOffsets(model.out_dim, model.normalize)
        self.adam = OffsetAdam(trainer.encoder.passage_offsets, lr=self.lr, weight=self.weight)

    def vectors(self, trainer, docnos):
        return self.adam.adjusted(docnos, self.start_vectors(trainer, docnos))

    def with_pull(self, trainer, loss, pull):
        trainer.record('offset norm', float(trainer.encoder.passage_offsets.norms().mean()))
        return loss + pull / trainer.world_size  # (the ranks' gradients sum: each adds its share)

    def no_rows_loss(self, trainer, docnos):  # (OffsetAdam sums the offsets' gradients over ranks)
        return torch.zeros((), requires_grad=True) + 0.0 * self.vectors(trainer, docnos)[1]

    def after_optimizer_step(self, world_size: int):
        self.adam.step(world_size)

    def save(self, path: Path):
        if path.name != 'final':
            self.adam.save(path)

    def load(self, path: Path, encoder):
        # (loading the weights put the checkpoint's there)
        self.adam.offsets = encoder.passage_offsets
        if not self.adam.load(path):
            raise ValueError(f'{path} has no state of the passage offsets to resume from')


class TrainedPassages(PassageSide):
    moves = True

    def vectors(self, trainer, docnos):
        return trainer.encoder.encode(trainer.collection.texts(docnos), 'passage'), torch.zeros(())


def passage_side(settings) -> PassageSide:
    """The strategy that ``settings.passages`` names (``frozen``, ``offsets`` or ``trained``)."""
    if settings.passages == 'offsets':
        return OffsetPassages(settings.offset_weight, settings.offset_lr)
    return FrozenPassages() if settings.passages == 'frozen' else TrainedPassages()
