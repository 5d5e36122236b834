"""The training loop every trainer in this package shares.

A :class:`Trainer` owns what depends neither on the method nor on the model: AdamW with
linear warm-up and decay, gradient accumulation, checkpoints with exact resume (model,
optimiser, scheduler, RNG), the training log (JSON lines) and its curve (PNG).

The model is any :class:`~pyterrier_selfsup.models.trainable.TrainableModel`, reached only
through its parameters, train mode, ``save_pretrained`` and ``load_weights``. A method (a
subclass) says what an example is (:meth:`Trainer.examples`), what a batch's loss is
(:meth:`Trainer.loss`), how the model retrieves (:meth:`Trainer.retriever`), and what to do
at the start of an epoch or after a step. Not Hugging Face's ``Trainer``: the methods change
the data between steps and resume exactly from those points.

Data parallelism (under ``torch.distributed``): every process walks the same global batches;
a method that supports it (``data_parallel = True``) computes the rows
:meth:`Trainer.local_rows` gives it, scaled so that the processes' gradients *sum* to one
process's gradient of the whole batch; the loop sums them before each optimiser step, and
only rank 0 writes checkpoints and logs. The result does not depend on the number of
processes beyond floating-point noise and dropout.
"""
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyterrier as pt
import torch
from ir_measures import nDCG
from transformers import get_linear_schedule_with_warmup

from pyterrier_selfsup._distributed import distributed, sum_step
from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.models.trainable import TrainableModel
from pyterrier_selfsup.progress import peak_resident_gib, progress, resident_gib
from pyterrier_selfsup.training.checkpoints import restore_checkpoint, write_checkpoint, write_log
from pyterrier_selfsup.training.hooks import TrainerHooks
from pyterrier_selfsup.training.settings import MethodSettings, TrainingSettings

logger = logging.getLogger(__name__)



@dataclass
class _Run:
    """What one call of :meth:`Trainer.fit` carries from step to step."""
    examples: list
    params: list[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    scheduler: object
    total_steps: int
    progress: object
    resumed: bool = False
    window: list[float] = field(default_factory=list)  # the losses of the step's batches so far
    micro: int = 0  # batches accumulated towards the step
    skipped: int = 0  # batches of the step the method could not learn from


class Trainer(TrainerHooks, pt.Estimator):
    """Trains ``model`` in place on ``collection``; after ``fit`` it retrieves with it.

    Args:
        model: the model to train (a :class:`~pyterrier_selfsup.models.trainable.TrainableModel`).
        collection: the corpus, a :class:`~pyterrier_selfsup.data.collections.Collection` or its
            name.
        settings: the method's settings object (:attr:`Settings`; None: its defaults). The loop
            reads ``epochs``, ``batch_size``, ``accumulation``, ``lr``, ``warmup``,
            ``weight_decay``, ``checkpoint_every``, ``gradient_checkpointing`` and ``seed`` from it.
        run: where checkpoints, the log and the caches go, and what is shown
            (:class:`~pyterrier_selfsup.context.RunContext`; None: the defaults, nothing saved).
        **changes: settings or run-context fields to change, by name
            (``Distillation(encoder, collection, teacher, rounds=2, output_dir='runs/d')``).

    A subclass sets :attr:`Settings` to its settings class, and says what an example is
    (:meth:`examples`), what a batch's loss is (:meth:`loss`) and how the model retrieves
    (:meth:`retriever`).
    """
    Settings = TrainingSettings
    description = 'training'
    # what the training curve plots: a key of the log, and its label
    curve, curve_label = 'loss', 'loss'
    # a key of the log whose records are drawn as vertical lines (index refreshes, iterations)
    marker = None
    # whether the method's loss computes only this process's rows (local_rows)
    data_parallel = False
    process_rank, world_size = 0, 1  # this process's place under torch.distributed (set by fit)

    def __init__(self, model: TrainableModel, collection: str | Collection,
                 settings: MethodSettings | None = None,
                 run: RunContext | None = None, **changes):
        self.model = model
        self.collection = Collection.of(collection)
        in_run = {name: value for name, value in changes.items() if name in RunContext.names()}
        settings = self.Settings() if settings is None else settings
        if not isinstance(settings, self.Settings):
            raise TypeError(f'{type(self).__name__} takes {self.Settings.__name__}, not '
                            f'{type(settings).__name__}')
        self.settings = settings.replace(**{k: v for k, v in changes.items() if k not in in_run})
        self.run = (run or RunContext()).replace(**in_run)
        self.log: list[dict] = []
        self.state: dict = {}
        self._metrics: dict[str, list[tuple[float, float]]] = {}  # name -> (value · weight, weight)

    # -- the PyTerrier face -----------------------------------------------------------

    def transform(self, topics: pd.DataFrame) -> pd.DataFrame:
        """Retrieval over the collection with the model as it is now."""
        return self.retriever()(topics)

    # -- the loop ---------------------------------------------------------------------

    def fit(self, tr_topics: pd.DataFrame, tr_qrels=None, va_topics=None, va_qrels=None, *,
            resume_from: str | Path | None = None) -> 'Trainer':
        """Trains on the query texts of ``tr_topics`` (qrels are never read); with ``va_topics``
        and ``va_qrels``, nDCG@10 on them is logged after each epoch. ``resume_from``: a checkpoint
        directory of an earlier run with the same settings."""
        run = self._start(tr_topics, resume_from)
        try:
            for epoch in range(self.state['epoch'], self.settings.epochs):
                self._epoch(run, epoch)
                self.state.update(epoch=epoch + 1, batch=0)
                if va_topics is not None and va_qrels is not None:
                    self.log.append({'step': self.state['step'], 'epoch': epoch,
                                     'validation nDCG@10': self._validate(va_topics, va_qrels)})
                if self.state['step'] >= run.total_steps:
                    break
        except BaseException:
            run.progress.close()
            self.model.gradient_checkpointing(False)
            raise
        self._end(run)
        return self

    def _start(self, tr_topics: pd.DataFrame, resume_from) -> '_Run':
        """The examples, the optimiser and its schedule, and the state: fresh, or a checkpoint's."""
        self.process_rank, self.world_size = distributed()
        self.log = []  # (a resumed run's comes back with its checkpoint)
        if self.world_size > 1 and not self.data_parallel:
            raise NotImplementedError(f'{type(self).__name__} does not train on several processes '
                                      f'yet (world size {self.world_size}); run it in one')
        examples = self.examples(tr_topics)
        if not examples:
            raise ValueError('no training example could be made from these topics')
        s = self.settings
        batches_per_epoch = len(self.batches(len(examples), 0))
        total_steps = math.ceil(batches_per_epoch * s.epochs / s.accumulation)
        self.on_fit_start()
        self.model.gradient_checkpointing(self.uses_gradient_checkpointing)
        params = [p for p in self.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=s.lr, weight_decay=s.weight_decay)
        scheduler = get_linear_schedule_with_warmup(optimizer, int(s.warmup * total_steps),
                                                    total_steps)
        self.state = {'epoch': 0, 'batch': 0, 'step': 0}
        if resume_from is not None:
            self.state = restore_checkpoint(self, Path(resume_from), optimizer, scheduler)
        self.train_mode(True)
        steps = progress(total=total_steps, initial=self.state['step'], desc=self.description,
                         unit='step', enabled=self.shows)
        return _Run(examples, params, optimizer, scheduler, total_steps, steps,
                    resumed=resume_from is not None)

    def _epoch(self, run: '_Run', epoch: int):
        """The rest of ``epoch``'s batches."""
        batches = self.batches(len(run.examples), epoch)
        if self.state['batch'] < len(batches):
            self.on_epoch_start(run.examples, epoch, run.resumed)
        run.resumed = False
        for b in range(self.state['batch'], len(batches)):
            self._accumulate(run, [run.examples[i] for i in batches[b]], epoch, b)
            if run.micro < self.settings.accumulation and b < len(batches) - 1:
                continue
            if self._step(run, epoch, b, epoch_end=b == len(batches) - 1):
                break

    def _accumulate(self, run: '_Run', batch: list, epoch: int, b: int):
        """One batch's gradients, added to the step's (or none: a batch the method skips)."""
        if self.world_size > 1 and not self.local_rows(len(batch)):
            loss = None  # (more processes than the batch has rows: none is this one's)
        else:
            loss = self.loss(batch, np.random.default_rng([self.settings.seed, epoch, b]))
        if loss is not None:
            (loss / self.settings.accumulation).backward()
            run.window.append(loss.item())
        else:
            run.skipped += 1
        run.micro += 1

    def _step(self, run: '_Run', epoch: int, b: int, epoch_end: bool) -> bool:
        """The optimiser step of the batches accumulated, its log record, the method's hook and a
        checkpoint when one is due; whether the epoch ends here."""
        run.micro = 0
        if self.world_size > 1:  # the ranks' gradients and loss shares sum to the batch's
            step_loss, self._metrics = sum_step(run.params, run.window, self._metrics,
                                                self.world_size)
        else:
            step_loss = float(np.mean(run.window)) if run.window else None
        if step_loss is None:  # every batch of this step was skipped: no step
            self.state.update(epoch=epoch, batch=b + 1)
            return False
        run.optimizer.step()
        self.on_optimizer_step()
        run.scheduler.step()
        run.optimizer.zero_grad()
        self.state.update(step=self.state['step'] + 1, epoch=epoch, batch=b + 1)
        resident = resident_gib()
        self.log.append({'step': self.state['step'], 'epoch': epoch, 'loss': step_loss,
                         'lr': run.scheduler.get_last_lr()[0], 'time': time.time(),
                         'resident GiB': resident, 'peak resident GiB': peak_resident_gib(),
                         **{k: sum(v for v, _ in m) / sum(w for _, w in m)
                            for k, m in self._metrics.items()},
                         **({'skipped batches': run.skipped} if run.skipped else {})})
        self._metrics = {}
        run.skipped = 0
        # (the postfix first: the line the update says carries this step's loss)
        run.progress.set_postfix(
            loss=f'{np.mean([r["loss"] for r in self.log[-20:] if "loss" in r]):.4f}',
            **({'memory': f'{resident:.2f} GiB'} if resident is not None else {}))
        run.progress.update(1)
        run.window = []
        if self.state['step'] < run.total_steps:
            self.on_step_end(run.examples)
        every = self.settings.checkpoint_interval
        # (no checkpoint where all of an epoch's last step's batches were skipped)
        if epoch_end if every == 'epoch' else every and self.state['step'] % every == 0:
            self._checkpoint(run.optimizer, run.scheduler)
        return self.state['step'] >= run.total_steps

    def _end(self, run: '_Run'):
        """The method's last word, then the final checkpoint and the training log."""
        run.progress.close()
        self.model.gradient_checkpointing(False)
        self.on_fit_end()
        self.train_mode(False)
        if self.output_dir is not None:
            self._checkpoint(run.optimizer, run.scheduler, final=True)
            if self.process_rank == 0:
                write_log(self)

    def batches(self, n: int, epoch: int) -> list[np.ndarray]:
        """The epoch's batches of example indices: a seeded permutation cut every ``batch_size``;
        a last batch of one example joins the one before it (it has no in-batch negative)."""
        order = np.random.default_rng([self.settings.seed, epoch]).permutation(n)
        size = self.settings.batch_size
        batches = [order[i:i + size] for i in range(0, n, size)]
        if len(batches) > 1 and len(batches[-1]) == 1:
            batches[-2:] = [np.concatenate(batches[-2:])]
        return batches

    def _validate(self, topics, qrels) -> float:
        """nDCG@10 of the model as it is now, over an index built for this call only."""
        retriever = self.retriever(fresh=True)
        result = pt.Experiment([retriever], topics, qrels, [nDCG @ 10])
        # rank 0's temporary index (its files) outlives every process's search
        if self.world_size > 1:
            import torch.distributed as dist
            dist.barrier()
        del retriever
        self.train_mode(True)
        return float(result['nDCG@10'][0])

    # -- checkpoints and logs ---------------------------------------------------------

    def _checkpoint(self, optimizer, scheduler, final: bool = False):
        if self.output_dir is None:
            return
        if self.process_rank == 0:
            write_checkpoint(self, optimizer, scheduler, final)
        if self.world_size > 1:  # (the others wait until the checkpoint is whole)
            import torch.distributed as dist
            dist.barrier()

    def title(self) -> str:
        return f'{self.description} on {self.collection.corpus_id}'
