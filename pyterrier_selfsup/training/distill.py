"""Distillation of a teacher stronger than the student, with no labels.

The teacher is a PyTerrier retriever, or a function of the student's retriever that returns one
(rebuilt every round, so that the improved student re-enters its own teacher). Its top ``depth``
candidates for a query, through softmax(score / ``teacher_temperature``), are the distribution
the student learns (:mod:`~pyterrier_selfsup.training.losses`); the passage side is a strategy
of :mod:`~pyterrier_selfsup.training.passages`.

    bm25 = BM25.from_collection(adi, num_results=100)
    trainer = Distillation(DualEncoder.from_pretrained(MINILM), adi,
                           teacher=lambda student: Fusion({'bm25': bm25, 'student': student}),
                           queries='sentences', rounds=2, output_dir='runs/distill')
    trainer.fit(corpus_sentences(adi, 500))  # qrels are never read
    pt.Experiment([bm25, trainer], ...)  # after fit it retrieves with the student alone
"""
import logging
import time
from collections.abc import Callable

import numpy as np
import pandas as pd
import pyterrier as pt
import torch

from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.data.queries.source import Query, query_sources, training_queries
from pyterrier_selfsup.models.dual_encoder import DualEncoder
from pyterrier_selfsup.training.dual_encoder_trainer import DualEncoderTrainer
from pyterrier_selfsup.training.losses import (
    candidate_table,
    distillation_loss,
    top1_agreement,
    top_overlap,
    triple,
)
from pyterrier_selfsup.training.passages import passage_side
from pyterrier_selfsup.training.settings import DistillationSettings

logger = logging.getLogger(__name__)

Teacher = pt.Transformer | Callable[[pt.Transformer], pt.Transformer]
Ranked = dict[str, tuple[list[str], np.ndarray]]  # qid -> the teacher's top (docnos, scores)


class Distillation(DualEncoderTrainer):
    """Trains ``encoder`` in place towards ``teacher``'s distribution over its candidates.

    Args:
        encoder: the student, a dual encoder.
        collection: the corpus, or its name.
        teacher: a retriever (a query frame in, a scored result frame out), or a function of
            the student's current retriever that returns one.
        settings: :class:`~pyterrier_selfsup.training.settings.DistillationSettings` (None: the
            defaults). Each round is an epoch of the loop.
        run, **changes: as for :class:`~pyterrier_selfsup.training.Trainer`.
    """
    Settings = DistillationSettings
    description = 'distillation'
    marker = 'round'
    data_parallel = True

    def __init__(self, encoder: DualEncoder, collection: str | Collection, teacher: Teacher,
                 settings: DistillationSettings | None = None,
                 run: RunContext | None = None, **changes):
        super().__init__(encoder, collection, settings, run, **changes)
        self.teacher = teacher
        self.passages = passage_side(self.settings)

    def fit(self, tr_topics: pd.DataFrame, *args, **kwargs) -> 'Distillation':
        """As :meth:`Trainer.fit`; the frame says what its queries are: without ``source_docno``
        a query log, with the defaults that follow one (:meth:`DistillationSettings.given`)."""
        named = (int(tr_topics['source_docno'].notna().sum())
                 if 'source_docno' in tr_topics.columns else 0)
        given = self.settings.given(len(tr_topics), named)
        if given != self.settings:
            logger.info('the training queries name no source passage: a query log (passages=%s, '
                        'rounds=%d)', given.passages, given.rounds)
            self.settings, self.passages = given, passage_side(given)
        return super().fit(tr_topics, *args, **kwargs)

    def gradient_checkpointing_by_default(self) -> bool:
        """On only where the passage tower trains (a query step gains little from it)."""
        return self.passages.moves

    def title(self) -> str:
        return f'distillation on {self.collection.corpus_id} ({self.settings.loss})'

    def on_fit_start(self):
        self.passages.start(self)

    def on_optimizer_step(self):
        self.passages.after_optimizer_step(self.world_size)

    @property
    def fixed_teacher(self) -> bool:
        """Whether the teacher is one pipeline for every round (not a function of the student)."""
        return isinstance(self.teacher, pt.Transformer)

    def rank(self, teacher: pt.Transformer, queries: list[Query], *,
             depth: int | None = None) -> Ranked:
        """The teacher's top ``depth`` for each query (:meth:`ranked`); by default the setting, one
        more with ``negatives``, or a mining teacher's every label."""
        default = max(self.settings.depth + (self.settings.negatives is not None),
                      teacher.rerank_depth + 1 if getattr(teacher, 'mines_only', False) else 0)
        return self.ranked(teacher, queries, depth or default, desc='teacher rankings')

    def round_teacher(self, student: pt.Transformer | None = None) -> pt.Transformer:
        """The teacher of a round: the fixed one, or the teacher of ``student`` (default: the
        student as it is now)."""
        if self.fixed_teacher:
            return self.teacher
        return self.teacher(student if student is not None else self.student(fresh=False))

    def student(self, fresh: bool | None = None) -> pt.Transformer:
        """The student's retriever as it is now (``fresh``: over a newly encoded index; by default
        where the passage tower trains)."""
        student = self.retriever(fresh=self.passages.moves if fresh is None else fresh)
        self.train_mode(True)
        return student

    def examples(self, topics: pd.DataFrame) -> list[Query]:
        """The training queries (with a warning where cut queries could retrieve their own
        passage)."""
        query_sources(topics, self.collection, excluded=self.settings.excludes_sources)
        queries = training_queries(topics)
        if not self.settings.excludes_sources:
            queries = [Query(q.qid, q.query, frozenset(), q.answer, q.source) for q in queries]
        return queries

    def on_epoch_start(self, examples: list[Query], epoch: int, resumed: bool):
        if resumed and self.state.get('targets round') == epoch:
            return  # the round's targets came back with the checkpoint
        started = time.time()
        if self.state.get('targets') is not None and self.fixed_teacher:
            return  # a teacher that does not read the student ranks as it did in round 0
        else:  # (a query passed over twice is ranked once)
            teacher = self.round_teacher(
                None if self.fixed_teacher else
                self.student(fresh=self.passages.moves and epoch > 0))
            targets = self.rank(teacher, list({q.qid: q for q in examples}.values()))
            if self.settings.negatives is not None:  # (a triple's positive: else the top one)
                logger.info('%d of the queries\' own passages are not among the teacher\'s '
                            'candidates', sum(q.source not in targets.get(q.qid, ([],))[0]
                                              for q in examples if q.source))
        record = {'step': self.state.get('step', 0), 'round': epoch,
                  'teacher seconds': time.time() - started}
        if self.state.get('targets') is not None:
            record['teacher overlap'] = top_overlap(
                {q: d for q, (d, _) in targets.items()},
                {q: d for q, (d, _) in self.state['targets'].items()})
        self.log.append(record)
        self.state.update({'targets': targets, 'targets round': epoch})

    # -- the loss ---------------------------------------------------------------------

    def loss(self, batch: list[Query], rng: np.random.Generator) -> torch.Tensor | None:
        s, targets = self.settings, self.state['targets']
        batch = [q for q in batch if len(targets.get(q.qid, ([],))[0]) > 0]
        if not batch:
            return None
        rankings = [targets[q.qid] for q in batch]
        if s.negatives is not None:  # (GPL's triples: each query's positive and its negatives)
            rankings = [triple(ranked, q.source, s.negatives, rng)
                        for q, ranked in zip(batch, rankings)]
        table = candidate_table(rankings,
                                [q.excluded for q in batch], s.teacher_temperature,
                                own_only=s.loss == 'margin_mse' or not s.in_batch)
        if int((~table.shut).sum(1).max()) < 2:  # one candidate a query and no other in the batch
            return None
        # under data parallelism this process computes its share of the rows, divided by the
        # global batch's count, so that the processes' gradients sum to the whole batch's
        counted = len(batch) if s.loss == 'kl' else int((table.own.sum(1) >= 2).sum())
        local = list(self.local_rows(len(batch)))
        if not local:  # (fewer queries with targets than processes)
            return self.passages.no_rows_loss(self, table.docnos)
        passages, pull = self.passages.vectors(self, table.docnos)
        queries = self.encoder.encode([batch[i].query for i in local], 'query')
        student = queries @ passages.T / self.encoder.temperature
        rows = table.rows(local, student.device)
        loss = distillation_loss(student, rows.teacher, rows.own, rows.shut, s.loss, counted)
        self.record('top-1 agreement', top1_agreement(student, rows.teacher, rows.own), len(local))
        return self.passages.with_pull(self, loss, pull)

    def save_extra(self, path):
        """Saves the passage side's state beside the model."""
        super().save_extra(path)
        self.passages.save(path)

    def load_extra(self, path):
        self.passages.load(path, self.encoder)
