"""Distantly supervised training of a :class:`DualEncoder` (thesis §4.2.3, §6.1).

Labels are never read: each training query's positive is BM25's top-1 passage (not the
passage the query was cut from). The loss is -log softmax of the positive among the batch's
passages: the other queries' positives and, optionally, one extra hard negative per query
(random, from BM25's ranks 2..n, or the current retriever's top non-positive).

    trainer = DistantSupervision(DualEncoder.from_pretrained(MINILM), 'beir/scifact/test',
                                 output_dir='runs/ds')
    trainer.fit(pt.get_dataset('irds:beir/scifact/train').get_topics())
    pt.Experiment([bm25, trainer], ...)           # after fit it retrieves with the adapted encoder
"""
import logging
from dataclasses import replace
from functools import cached_property

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from pyterrier_selfsup.data.queries.source import Query, training_queries
from pyterrier_selfsup.retrieval.base import top_k_excluding
from pyterrier_selfsup.retrieval.bm25 import BM25
from pyterrier_selfsup.training.dual_encoder_trainer import DualEncoderTrainer
from pyterrier_selfsup.training.settings import DistantSupervisionSettings

logger = logging.getLogger(__name__)

# how deep BM25 ranks each training query: its positive, then the bm25 negatives' pool
BM25_DEPTH = 30


def in_batch_loss(queries: torch.Tensor, passages: torch.Tensor, temperature: float,
                  excluded: torch.Tensor | None = None, *, rows: list[int] | None = None,
                  batch_size: int | None = None) -> torch.Tensor:
    """Mean over queries i of -log softmax_j(q_i . p_j / temperature) at j = i.

    ``passages`` holds the b positives first, then any extra negatives; ``excluded[i, j]``
    removes passage j from query i's softmax. Under data parallelism ``queries`` are the batch's
    ``rows`` only, and the loss is their sum over the whole ``batch_size``.
    (sentence-transformers' ``MultipleNegativesRankingLoss`` with the mask added.)
    """
    rows = list(range(len(queries))) if rows is None else rows
    scores = queries @ passages.T / temperature
    if excluded is not None:
        scores = scores.masked_fill(excluded, float('-inf'))
    targets = torch.tensor(rows, device=scores.device)
    return F.cross_entropy(scores, targets, reduction='sum') / (batch_size or len(rows))


class DistantSupervision(DualEncoderTrainer):
    """Trains ``encoder`` in place on ``collection`` with BM25's top-1 passages as positives.

    Args:
        encoder: the dual encoder to train.
        collection: the corpus, or its name.
        settings: :class:`~pyterrier_selfsup.training.settings.DistantSupervisionSettings`
            (None: the defaults).
        run, **changes: as for :class:`~pyterrier_selfsup.training.Trainer`.

    Example::

        trainer = DistantSupervision(DualEncoder.from_pretrained(MINILM), 'classic/adi',
                                     negatives='bm25')
        trainer.fit(corpus_sentences(Collection('classic/adi'), 200))
    """
    Settings = DistantSupervisionSettings
    description = 'distant supervision'
    data_parallel = True

    def on_epoch_start(self, examples: list[Query], epoch: int, resumed: bool):
        if self.settings.negatives == 'retriever' and not (resumed and self.state.get('hard')):
            self.state['hard'] = self._retriever_negatives(examples)

    def title(self) -> str:
        return (f'distant supervision on {self.collection.corpus_id} '
                f'({self.settings.negatives} negatives)')

    # -- data -------------------------------------------------------------------------

    def examples(self, topics: pd.DataFrame) -> list[Query]:
        """The queries BM25 finds something for; BM25's top-1 is each one's positive, the rest of
        its top :data:`BM25_DEPTH` + 1 the pool of its ``bm25`` negatives."""
        queries = training_queries(topics)
        bm25 = BM25.from_collection(self.collection, num_results=BM25_DEPTH + 1,
                                    cache_dir=self.cache_dir, verbose=self.shows)
        self._ranked = top_k_excluding(bm25, queries, BM25_DEPTH + 1)
        examples = [q for q in queries if self._ranked[q.qid]]
        if len(examples) < len(queries):
            logger.warning('%d of %d training queries have no BM25 result and are skipped',
                           len(queries) - len(examples), len(queries))
        return examples

    def positive(self, query: Query) -> str:
        return self._ranked[query.qid][0]

    def loss(self, batch: list[Query], rng: np.random.Generator) -> torch.Tensor | None:
        positives = [self.positive(q) for q in batch]
        docnos = positives + self._negatives(batch, rng, self.state.get('hard'))
        # a passage that is query i's positive, or was cut from it, is not its negative
        excluded = torch.tensor([[(d == positives[i] or d in q.excluded) and j != i
                                  for j, d in enumerate(docnos)]
                                 for i, q in enumerate(batch)], device=self.encoder.device)
        if int((~excluded).sum(1).max()) < 2:  # no query has a negative: nothing to learn
            return None
        local = list(self.local_rows(len(batch)))
        queries = self.encoder.encode([batch[i].query for i in local], 'query')
        passages = self.encoder.encode(self.collection.texts(docnos), 'passage')
        return in_batch_loss(queries, passages, self.encoder.temperature, excluded[local],
                             rows=local, batch_size=len(batch))

    def _negatives(self, batch: list[Query], rng: np.random.Generator,
                   hard: dict[str, str] | None) -> list[str]:
        if self.settings.negatives == 'none':
            return []
        if self.settings.negatives == 'random':
            docnos = self._all_docnos
            return [docnos[i] for i in rng.integers(len(docnos), size=len(batch))]
        if self.settings.negatives == 'bm25':
            pools = [self._ranked[q.qid][1:] for q in batch]
            return [pool[rng.integers(len(pool))] if pool else self.positive(q)
                    for q, pool in zip(batch, pools)]
        return [hard.get(q.qid, self.positive(q)) for q in batch]  # retriever

    @cached_property
    def _all_docnos(self) -> list[str]:
        return [d['docno'] for d in self.collection.corpus_iter()]

    def _retriever_negatives(self, examples: list[Query]) -> dict[str, str]:
        """Each query's highest-scoring passage under the current encoder that is neither
        its positive nor the passage it was cut from."""
        hard = top_k_excluding(self.retriever(fresh=True), [
            replace(q, excluded=q.excluded | {self.positive(q)}) for q in examples], 1)
        self.train_mode(True)
        return {qid: docnos[0] for qid, docnos in hard.items() if docnos}
