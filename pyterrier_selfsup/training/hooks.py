"""What a training method defines, and the hooks the training loop calls it at.

A method subclasses :class:`~pyterrier_selfsup.training.loop.Trainer` and fills in what an
example is (:meth:`TrainerHooks.examples`), what a batch's loss is (:meth:`TrainerHooks.loss`),
how the model retrieves (:meth:`TrainerHooks.retriever`), and what to do at an epoch's start,
after a step or at the end.
"""
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd
import pyterrier as pt
import torch

from pyterrier_selfsup.progress import progress
from pyterrier_selfsup.retrieval.base import ranked_excluding

RANKING_CHUNK = 1024  # queries a retriever ranks a call in TrainerHooks.ranked


class TrainerHooks:
    """The method's side of a :class:`~pyterrier_selfsup.training.loop.Trainer`: its settings'
    readings, the hooks the loop calls, and helpers; the loop sets ``model``, ``collection``,
    ``settings``, ``run``, ``log``, ``state``, ``process_rank`` and ``world_size``."""

    @property
    def output_dir(self) -> Path | None:
        return self.run.output_dir

    @property
    def cache_dir(self):
        return self.run.cache_dir

    @property
    def uses_gradient_checkpointing(self) -> bool:
        """Whether this run recomputes activations in the backward pass."""
        chosen = self.settings.gradient_checkpointing
        return self.gradient_checkpointing_by_default() if chosen is None else chosen

    def gradient_checkpointing_by_default(self) -> bool:
        """Gradient checkpointing's default: on."""
        return True

    @property
    def shows(self) -> bool:
        """Whether this process shows progress (one process speaks for the group)."""
        return self.run.verbose and self.process_rank == 0

    def record(self, name: str, value: float, weight: float = 1.0):
        """A quantity a loss wants logged, averaged over the step's batches and processes with
        ``weight``."""
        self._metrics.setdefault(name, []).append((float(value) * weight, float(weight)))

    # -- what a method defines --------------------------------------------------------

    def examples(self, topics: pd.DataFrame) -> list:
        raise NotImplementedError

    def loss(self, batch: list, rng: np.random.Generator) -> torch.Tensor | None:
        """The batch's loss, or None for a batch the method cannot learn from (counted as
        ``skipped batches``)."""
        raise NotImplementedError

    def retriever(self, fresh: bool = False) -> pt.Transformer:
        """Retrieval with the model as it is now; ``fresh``: over an index built for this call."""
        raise NotImplementedError

    def parameters(self) -> Iterable[torch.nn.Parameter]:
        """What the optimiser trains: the model's trainable parameters, and the method's own."""
        return self.model.trainable_parameters()

    def local_rows(self, n: int) -> range:
        """Which of a global batch's ``n`` examples this process computes the loss of."""
        return range(self.process_rank, n, self.world_size)

    def local_batch(self, batch: list) -> list:
        """This process's examples of ``batch`` (:meth:`local_rows`)."""
        return [batch[i] for i in self.local_rows(len(batch))]

    def gather(self, part: dict) -> dict:
        """Every process's ``part`` merged (in rank order) on every process."""
        if self.world_size == 1:
            return part
        import torch.distributed as dist
        parts = [None] * self.world_size
        dist.all_gather_object(parts, part)
        return {k: v for p in parts for k, v in p.items()}

    def ranked(self, retriever: pt.Transformer, queries: list, depth: int, *,
               desc: str = 'rankings') -> dict[str, tuple[list[str], np.ndarray]]:
        """``retriever``'s top ``depth`` (docnos, scores) for each query, less its excluded
        passages, :data:`RANKING_CHUNK` queries a call (on several processes, each its share)."""
        mine = self.local_batch(queries)
        ranked = {}
        chunks = progress(range(0, len(mine), RANKING_CHUNK), total=len(mine), desc=desc,
                          unit='query', count=lambda start: len(mine[start:start + RANKING_CHUNK]),
                          enabled=self.shows)
        for start in chunks:
            ranked.update(ranked_excluding(retriever, mine[start:start + RANKING_CHUNK], depth))
        self.train_mode(True)
        return self.gather(ranked)

    def on_epoch_start(self, examples: list, epoch: int, resumed: bool):
        """Before the first batch of ``epoch`` (``resumed``: or of what is left of it)."""

    def on_fit_end(self):
        """After the last step, before the final checkpoint."""

    def on_optimizer_step(self):
        """Right after each optimiser step, gradients still in place."""

    def on_step_end(self, examples: list):
        """After each optimiser step (``self.state['step']`` is the step just taken)."""

    def on_fit_start(self):
        """Before the optimiser is made (a method that freezes part of the model does it here)."""

    def save_extra(self, path: Path):
        """Whatever else a checkpoint needs besides the model (a trainable generator)."""

    def load_extra(self, path: Path):
        pass

    def train_mode(self, on: bool):
        self.model.train_mode(on)
