"""The training loop every trainer in this package shares.

A :class:`Trainer` owns what depends neither on the method nor on the model: AdamW with
linear warm-up and decay, gradient accumulation, checkpoints with exact resume (model,
optimiser, scheduler, RNG), the training log (JSON lines) and its curve (PNG).

The model is any :class:`~pyterrier_selfsup.models.trainable.TrainableModel` (a dual encoder,
a ReAtt retriever, a single-model ReAtt T5): the loop reaches it only through its
parameters, train mode, ``save_pretrained`` and ``load_weights``. A method (a subclass)
says what an example is (:meth:`Trainer.examples`), what a batch's loss is
(:meth:`Trainer.loss`), how the model retrieves (:meth:`Trainer.retriever`), and what to
do at the start of an epoch or after a step (hard negatives, index refreshes).

Why not Hugging Face's ``Trainer`` (as Tevatron does): the methods here change the data
between steps (a refreshed index re-retrieves every query's candidates, an iteration
re-retrieves its close documents) and resume exactly from those points; the loop that
allows it is the 100 lines of :meth:`Trainer.fit`.

Data parallelism (under ``torch.distributed``, e.g. ``torchrun``): every process walks
the same global batches; a method that supports it (``data_parallel = True``) computes
the loss rows :meth:`Trainer.local_rows` gives it, scaled so that the processes'
gradients *sum* to one process's gradient of the whole batch; the loop sums them
(all-reduce) before each optimiser step (a process with no row of a batch contributes
nothing to it), averages what the methods :meth:`Trainer.record`, and only rank 0 writes
checkpoints and logs.
Global batch, learning-rate schedule and result do not depend on the number of processes
beyond floating-point noise, except through dropout, whose masks differ with the split.
"""
import json
import logging
import math
import os
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import torch
from ir_measures import nDCG
from transformers import get_linear_schedule_with_warmup

from pyterrier_selfsup._cache import disk_faults, file_sizes, size_damage, written_whole
from pyterrier_selfsup._distributed import distributed
from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.models.trainable import TrainableModel
from pyterrier_selfsup.models.dual_encoder import DualEncoder
from pyterrier_selfsup.retrieval.base import ranked_excluding
from pyterrier_selfsup.retrieval.dense import DenseRetriever, dense_retriever
from pyterrier_selfsup.progress import peak_resident_gib, progress, resident_gib
from pyterrier_selfsup.training.settings import MethodSettings, TrainingSettings

logger = logging.getLogger(__name__)

STATE_FILE = 'trainer_state.pt'
RANKING_CHUNK = 1024  # queries a retriever ranks a call in Trainer.ranked


def checkpoints(output_dir: Union[str, Path]) -> List[Path]:
    """The whole step checkpoints a :class:`Trainer` wrote under ``output_dir``, oldest first
    (the last one is what ``fit(resume_from=...)`` continues from)."""
    found = [p for p in Path(output_dir).glob('checkpoint-*')
             if p.name.split('-', 1)[1].isdigit() and (p / STATE_FILE).is_file()]
    return sorted(found, key=checkpoint_step)


def checkpoint_step(path: Union[str, Path]) -> int:
    """The step a checkpoint was written after (``checkpoint-625``: 625)."""
    return int(Path(path).name.split('-', 1)[1])


def resume_point(output_dir: Union[str, Path]) -> Optional[Path]:
    """The checkpoint :func:`fit_resumably` goes on from: the last whole one whose files are not
    damaged (None: it starts over)."""
    return next((c for c in reversed(checkpoints(output_dir))
                 if checkpoint_damage(c) is None), None)


CHECKPOINT_MANIFEST = 'checkpoint.json'  # every file's size, written last


def checkpoint_damage(path: Path) -> Optional[str]:
    """A checkpoint's files against the sizes recorded when it was written, or None
    (checkpoints written before sizes were recorded are taken as whole)."""
    try:
        sizes = json.loads((path / CHECKPOINT_MANIFEST).read_text())['files']
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f'{CHECKPOINT_MANIFEST} cannot be read ({error})'
    return size_damage(path, sizes)


def fit_resumably(trainer: 'Trainer', topics: pd.DataFrame) -> 'Trainer':
    """``trainer.fit(topics)``, continuing from the last checkpoint in ``trainer.output_dir``
    if an interrupted run left one there; then :func:`keep_final_only`. (Exact where the
    trainer's checkpoints are: see its ``resume_from``.)"""
    done = checkpoints(trainer.output_dir)
    while done and (problem := checkpoint_damage(done[-1])) is not None:
        # a damaged checkpoint (a file truncated or lost since) is set aside, and training
        # resumes from the one before, or from the start: either way to the same weights
        aside = done[-1].with_name(done[-1].name + '.damaged')
        logger.warning('checkpoint %s is damaged (%s); %s; resuming from %s', done[-1], problem,
                       f'setting it aside as {aside}', done[-2] if len(done) > 1 else 'the start')
        if trainer.process_rank == 0:
            shutil.rmtree(aside, ignore_errors=True)
            os.replace(done[-1], aside)
        done = done[:-1]
    if done:
        logger.info('resuming from %s', done[-1])
    trainer.fit(topics, resume_from=done[-1] if done else None)
    if trainer.process_rank == 0:  # (under torch.distributed, rank 0 alone writes)
        keep_final_only(trainer.output_dir)
    return trainer


def keep_final_only(output_dir: Union[str, Path]):
    """Removes what only a resumed run needs once training is over: the step checkpoints
    and the final model's optimiser state (twice the model's size; the log is kept in
    ``training_log.jsonl``). For the cached pipelines, whose models are finished products."""
    for checkpoint in checkpoints(output_dir):
        shutil.rmtree(checkpoint)
    (Path(output_dir) / 'final' / STATE_FILE).unlink(missing_ok=True)


@dataclass
class _Run:
    """What one call of :meth:`Trainer.fit` carries from step to step."""
    examples: list
    params: List[torch.nn.Parameter]
    optimizer: torch.optim.Optimizer
    scheduler: object
    total_steps: int
    progress: object
    resumed: bool = False
    window: List[float] = field(default_factory=list)  # the losses of the step's batches so far
    micro: int = 0  # batches accumulated towards the step
    skipped: int = 0  # batches of the step the method could not learn from


class Trainer(pt.Estimator):
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
    # whether the method's loss computes only this process's rows (local_rows) under
    # torch.distributed; the others refuse to run on several processes
    data_parallel = False
    process_rank, world_size = 0, 1  # this process's place under torch.distributed (set by fit)

    def __init__(self, model: TrainableModel, collection: Union[str, Collection],
                 settings: Optional[MethodSettings] = None,
                 run: Optional[RunContext] = None, **changes):
        self.model = model
        self.collection = Collection.of(collection)
        in_run = {name: value for name, value in changes.items() if name in RunContext.names()}
        settings = self.Settings() if settings is None else settings
        if not isinstance(settings, self.Settings):
            raise TypeError(f'{type(self).__name__} takes {self.Settings.__name__}, not '
                            f'{type(settings).__name__}')
        self.settings = settings.replace(**{k: v for k, v in changes.items() if k not in in_run})
        self.run = (run or RunContext()).replace(**in_run)
        self.log: List[Dict] = []
        self.state: Dict = {}
        self._stop_reason: Optional[str] = None
        self._metrics: Dict[str, List[Tuple[float, float]]] = {}  # name -> (value · weight, weight)

    @property
    def output_dir(self) -> Optional[Path]:
        return self.run.output_dir

    @property
    def cache_dir(self):
        return self.run.cache_dir

    @property
    def seed(self) -> int:
        return self.settings.seed

    @property
    def batch_size(self) -> int:
        return self.settings.batch_size

    @property
    def uses_gradient_checkpointing(self) -> bool:
        """Whether this run recomputes activations in the backward pass (the setting
        ``gradient_checkpointing``, or the method's default)."""
        chosen = self.settings.gradient_checkpointing
        return self.gradient_checkpointing_by_default() if chosen is None else chosen

    def gradient_checkpointing_by_default(self) -> bool:
        """Gradient checkpointing's default: on (a method whose steps encode little with
        gradients says otherwise)."""
        return True

    @property
    def shows(self) -> bool:
        """Whether this process shows the progress of what the method builds (one process speaks
        for the group)."""
        return self.run.verbose and self.process_rank == 0

    def record(self, name: str, value: float, weight: float = 1.0):
        """A quantity a loss wants logged besides itself, averaged over the step's batches
        (and processes) with ``weight``: a mean over a batch's rows weighs as many rows."""
        self._metrics.setdefault(name, []).append((float(value) * weight, float(weight)))

    # -- what a method defines --------------------------------------------------------

    def examples(self, topics: pd.DataFrame) -> list:
        raise NotImplementedError

    def loss(self, batch: list, rng: np.random.Generator) -> Optional[torch.Tensor]:
        """The batch's loss, or None for a batch the method cannot learn from (no negative
        in it): the loop then takes no step on it and counts it as ``skipped batches``."""
        raise NotImplementedError

    def retriever(self, fresh: bool = False) -> pt.Transformer:
        """Retrieval over the collection with the model as it is now; ``fresh``: over an
        index that is built for this call only (validation during training)."""
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

    def gather(self, part: Dict) -> Dict:
        """Every process's ``part`` merged (in rank order) on every process; ``part`` itself in
        one process. For work a method splits over the processes (the teacher's rankings)."""
        if self.world_size == 1:
            return part
        import torch.distributed as dist
        parts = [None] * self.world_size
        dist.all_gather_object(parts, part)
        return {k: v for p in parts for k, v in p.items()}

    def ranked(self, retriever: pt.Transformer, queries: list, depth: int, *,
               desc: str = 'rankings') -> Dict[str, Tuple[List[str], np.ndarray]]:
        """``retriever``'s top ``depth`` (docnos, scores) for each query, less its excluded
        passages, ranked :data:`RANKING_CHUNK` queries a call (bounded memory on any query set);
        on several processes each ranks its share and every process gets them all."""
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
        """After the last step, before the final checkpoint (a method that keeps an earlier
        round's weights puts them back here)."""

    def on_optimizer_step(self):
        """Right after each optimiser step, gradients still in place: for what the method
        updates outside the optimiser (learned passage offsets)."""

    def on_step_end(self, examples: list):
        """After each optimiser step (``self.state['step']`` is the step just taken)."""

    def stop(self, reason: str):
        """Ends training after the current step (or before the epoch's first batch, when
        called from :meth:`on_epoch_start`) by a rule of the method's own; logged."""
        self._stop_reason = reason
        self.log.append({'step': self.state.get('step', 0), 'stopped': reason})
        logger.info('training stops: %s', reason)

    def on_fit_start(self):
        """Before the optimiser is made (a method that freezes part of the model does it here)."""

    def save_extra(self, path: Path):
        """Whatever else a checkpoint needs besides the model (a trainable generator)."""

    def load_extra(self, path: Path):
        pass

    def train_mode(self, on: bool):
        self.model.train_mode(on)

    # -- the PyTerrier face -----------------------------------------------------------

    def transform(self, topics: pd.DataFrame) -> pd.DataFrame:
        """Retrieval over the collection with the model as it is now."""
        return self.retriever()(topics)

    # -- the loop ---------------------------------------------------------------------

    def fit(self, tr_topics: pd.DataFrame, tr_qrels=None, va_topics=None, va_qrels=None, *,
            resume_from: Optional[Union[str, Path]] = None) -> 'Trainer':
        """Trains on the query texts of ``tr_topics`` (qrels are never read). With
        ``va_topics`` and ``va_qrels``, nDCG@10 on them is logged after each epoch.
        ``resume_from``: a checkpoint directory of an earlier run with the same settings."""
        run = self._start(tr_topics, resume_from)
        try:
            for epoch in range(self.state['epoch'], self.settings.epochs):
                if not self._epoch(run, epoch):
                    break
                self.state.update(epoch=epoch + 1, batch=0)
                if va_topics is not None and va_qrels is not None:
                    self.log.append({'step': self.state['step'], 'epoch': epoch,
                                     'validation nDCG@10': self._validate(va_topics, va_qrels)})
                if self.state['step'] >= run.total_steps:
                    break
        except BaseException:
            # (interrupted: the progress ends, and the model is left as a model, not in training)
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
            self.state = self._restore(Path(resume_from), optimizer, scheduler)
        self.train_mode(True)
        steps = progress(total=total_steps, initial=self.state['step'], desc=self.description,
                         unit='step', enabled=self.shows)
        self._stop_reason = None
        return _Run(examples, params, optimizer, scheduler, total_steps, steps,
                    resumed=resume_from is not None)

    def _epoch(self, run: '_Run', epoch: int) -> bool:
        """The rest of ``epoch``'s batches; whether training goes on after it (no stop, no
        last step taken)."""
        batches = self.batches(len(run.examples), epoch)
        # a run resumed at an epoch's end has none of it left
        if self.state['batch'] < len(batches):
            self.on_epoch_start(run.examples, epoch, run.resumed)
        run.resumed = False
        if self._stop_reason is not None:
            return False
        for b in range(self.state['batch'], len(batches)):
            self._accumulate(run, [run.examples[i] for i in batches[b]], epoch, b)
            if run.micro < self.settings.accumulation and b < len(batches) - 1:
                continue
            if self._step(run, epoch, b, epoch_end=b == len(batches) - 1):
                break
        return self._stop_reason is None

    def _accumulate(self, run: '_Run', batch: list, epoch: int, b: int):
        """One batch's gradients, added to the step's (or none: a batch the method skips)."""
        if self.world_size > 1 and not self.local_rows(len(batch)):
            loss = None  # (more processes than the batch has rows: none is this one's)
        else:
            loss = self.loss(batch, np.random.default_rng([self.seed, epoch, b]))
        if loss is not None:
            (loss / self.settings.accumulation).backward()
            run.window.append(loss.item())
        else:
            run.skipped += 1
        run.micro += 1

    def _step(self, run: '_Run', epoch: int, b: int, epoch_end: bool) -> bool:
        """The optimiser step of the batches accumulated, its log record, the method's hook and
        a checkpoint when one is due; whether the epoch ends here (the last step, or a stop)."""
        run.micro = 0
        if self.world_size > 1:  # the ranks' gradients and loss shares sum to the batch's
            step_loss = self._all_reduce(run.params, run.window)
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
        # (the postfix first: a line the update says carries this step's loss and memory, not
        # the last's)
        run.progress.set_postfix(
            loss=f'{np.mean([r["loss"] for r in self.log[-20:] if "loss" in r]):.4f}',
            **({'memory': f'{resident:.2f} GiB'} if resident is not None else {}))
        run.progress.update(1)
        run.window = []
        if self.state['step'] < run.total_steps:
            self.on_step_end(run.examples)
        every = self.settings.checkpoint_interval
        # (at an epoch's end unless all of its last step's batches were skipped: then no
        # checkpoint marks the epoch's end, and a resumed run repeats the epoch's tail)
        if epoch_end if every == 'epoch' else every and self.state['step'] % every == 0:
            self._checkpoint(run.optimizer, run.scheduler)
        return self.state['step'] >= run.total_steps or self._stop_reason is not None

    def _end(self, run: '_Run'):
        """The method's last word, then the final checkpoint and the training log."""
        run.progress.close()
        self.model.gradient_checkpointing(False)
        self.on_fit_end()
        self.train_mode(False)
        if self.output_dir is not None:
            self._checkpoint(run.optimizer, run.scheduler, final=True)
            if self.process_rank == 0:
                self._write_log()

    def batches(self, n: int, epoch: int) -> List[np.ndarray]:
        """The epoch's batches of example indices: a seeded permutation cut every
        ``batch_size``; a last batch of a single example joins the one before it (one
        query alone has no in-batch negative to learn from)."""
        order = np.random.default_rng([self.seed, epoch]).permutation(n)
        batches = [order[i:i + self.batch_size] for i in range(0, n, self.batch_size)]
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

    def _all_reduce(self, params: List[torch.nn.Parameter], window: List[float]) -> Optional[float]:
        """The step's loss over all processes (the mean over its batches of their summed
        shares; None when every batch was skipped, decided alike on every process), after
        summing the parameters' gradients over the processes and averaging the recorded
        metrics. Deliberately plain (one all-reduce a tensor, no buckets, no overlap with
        backward, as DDP does): the loop's contract is the sum; speed at many GPUs is for later."""
        import torch.distributed as dist
        device = params[0].device  # (nccl reduces on the GPU)
        total = torch.tensor([sum(window)], dtype=torch.float64, device=device)
        batches = torch.tensor([len(window)], dtype=torch.float64, device=device)
        dist.all_reduce(total)
        # (a process without rows in a batch has no share of it)
        dist.all_reduce(batches, op=dist.ReduceOp.MAX)
        if not batches.item():
            return None
        # a parameter no process's share reached keeps no gradient (AdamW then leaves it alone,
        # weight decay included, as one process would); one that some share reached gets the sum
        reached = torch.tensor([p.grad is not None for p in params],
                               dtype=torch.int32, device=device)
        dist.all_reduce(reached, op=dist.ReduceOp.MAX)
        for p, any_grad in zip(params, reached.tolist()):
            if any_grad:
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                dist.all_reduce(p.grad)
        metrics = [None] * self.world_size
        dist.all_gather_object(metrics, self._metrics)
        self._metrics = {k: [v for m in metrics for v in m.get(k, [])] for k in dict.fromkeys(
            k for m in metrics for k in m)}
        return float(total.item() / batches.item())

    def _checkpoint(self, optimizer, scheduler, final: bool = False):
        if self.output_dir is None:
            return
        if self.world_size > 1:  # rank 0 writes; the others wait until the checkpoint is whole
            import torch.distributed as dist
            if self.process_rank == 0:
                self._write_checkpoint(optimizer, scheduler, final)
            dist.barrier()
            return
        self._write_checkpoint(optimizer, scheduler, final)

    def _write_checkpoint(self, optimizer, scheduler, final: bool = False):
        path = self.output_dir / ('final' if final else f'checkpoint-{self.state["step"]}')

        def fate() -> str:  # (asked only when the write failed)
            earlier = [p for p in checkpoints(self.output_dir) if p != path]
            return ('it was removed; the next run '
                    f'{f"resumes from {earlier[-1]}" if earlier else "starts over"}')

        # never half a checkpoint to resume from: a failed write removes it
        with disk_faults(f'the checkpoint at step {self.state["step"]}', path, fate=fate,
                         undo=lambda: shutil.rmtree(path, ignore_errors=True)):
            self.model.save_pretrained(path)
            self.save_extra(path)
            # written last and renamed into place: a checkpoint with a state file is whole
            torch.save({'state': self.state, 'optimizer': optimizer.state_dict(),
                        'scheduler': scheduler.state_dict(), 'log': self.log,
                        'torch_rng': torch.get_rng_state(), 'python_rng': random.getstate(),
                        # (dropout on a GPU draws from the CUDA generators: without them, a resumed
                        # run there drew other masks than one never stopped)
                        **({'cuda_rng': torch.cuda.get_rng_state_all()}
                           if torch.cuda.is_initialized() else {})},
                       path / (STATE_FILE + '.tmp'))
            os.replace(path / (STATE_FILE + '.tmp'), path / STATE_FILE)
            with written_whole(path / CHECKPOINT_MANIFEST, 'a checkpoint') as partial:
                partial.write_text(json.dumps({'files': file_sizes(path, CHECKPOINT_MANIFEST)}))
        logger.info('checkpoint %s', path)
        if not final and self.run.keep_checkpoints is not None:
            written = checkpoints(self.output_dir)
            for old in written[:max(0, len(written) - self.run.keep_checkpoints)]:
                shutil.rmtree(old)

    def _restore(self, path: Path, optimizer, scheduler) -> Dict:
        saved = torch.load(path / STATE_FILE, map_location='cpu', weights_only=False)
        self.model.load_weights(path)
        self.load_extra(path)
        optimizer.load_state_dict(saved['optimizer'])
        scheduler.load_state_dict(saved['scheduler'])
        torch.set_rng_state(saved['torch_rng'])
        random.setstate(saved['python_rng'])
        if ('cuda_rng' in saved and torch.cuda.is_available() and
                torch.cuda.device_count() == len(saved['cuda_rng'])):
            torch.cuda.set_rng_state_all(saved['cuda_rng'])
        self.log = list(saved['log'])
        return dict(saved['state'])

    def _write_log(self):
        self.output_dir.mkdir(parents=True, exist_ok=True)
        with written_whole(self.output_dir / 'training_log.jsonl', 'the training log') as partial:
            partial.write_text(''.join(json.dumps(r) + '\n' for r in self.log))
        if self.run.draw_curve is not None:
            with written_whole(self.output_dir / 'training_curve.png',
                               'the training curve') as partial:
                self.run.draw_curve(self.log, partial, title=self.title(), key=self.curve,
                                    ylabel=self.curve_label, marker=self.marker)

    def title(self) -> str:
        return f'{self.description} on {self.collection.corpus_id}'


class DualEncoderTrainer(Trainer):
    """A trainer of a :class:`~pyterrier_selfsup.models.dual_encoder.DualEncoder` that retrieves
    from a dense index of its collection: distant supervision, RUMBArt and ACROBArT,
    distillation."""

    @property
    def encoder(self) -> DualEncoder:
        return self.model

    def retriever(self, fresh: bool = False) -> DenseRetriever:
        return dense_retriever(self.collection, self.encoder, fresh=fresh, cache_dir=self.cache_dir,
                               verbose=self.shows)
