"""Distantly supervised training of a :class:`DualEncoder` (thesis §4.2.3, §6.1).

Labels are never read: each training query's positive is BM25's top-1 passage (not the
passage the query was cut from, when it came from the corpus). The loss is -log softmax
of the positive among the batch's passages: the other queries' positives (in-batch
negatives) and, optionally, one extra hard negative per query, shared by the whole
batch as in thesis Table 6.1 (random, from BM25's ranks 2..n, or the current
retriever's top non-positive, recomputed each epoch).

    trainer = DistantSupervision(DualEncoder.from_pretrained(MINILM), 'beir/scifact/test',
                                 output_dir='runs/ds')
    trainer.fit(pt.get_dataset('irds:beir/scifact/train').get_topics())
    pt.Experiment([bm25, trainer], ...)           # after fit it retrieves with the adapted encoder
"""
import logging
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Union

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from pyterrier_selfsup._cache import build_once, cache_key, cache_root
from pyterrier_selfsup.bm25 import BM25
from pyterrier_selfsup.collections import Collection
from pyterrier_selfsup.dense import MINILM, DenseRetriever
from pyterrier_selfsup.dual_encoder import DualEncoder
from pyterrier_selfsup.queries import given_topics, training_topics
from pyterrier_selfsup.training import Trainer, keep_final_only

logger = logging.getLogger(__name__)

NEGATIVES = ('none', 'random', 'bm25', 'retriever')


def in_batch_loss(queries: torch.Tensor, passages: torch.Tensor, temperature: float,
                  excluded: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Mean over queries i of -log softmax_j(q_i . p_j / temperature) at j = i.

    ``passages`` holds the b positives first (row i of ``queries`` belongs with row i),
    then any extra negatives. ``excluded[i, j]`` removes passage j from query i's
    softmax: another copy of its own positive, or the passage it was cut from.
    """
    scores = queries @ passages.T / temperature
    if excluded is not None:
        scores = scores.masked_fill(excluded, float('-inf'))
    return F.cross_entropy(scores, torch.arange(len(queries), device=scores.device))


@dataclass(frozen=True)
class Example:
    qid: str
    query: str
    positive: str
    excluded: FrozenSet[str]  # docnos that may not serve as this query's negatives
    bm25_ranked: tuple  # BM25's ranking below the positive, for bm25 negatives


class DistantSupervision(Trainer):
    """Trains ``encoder`` in place on ``collection`` with BM25's top-1 as positives.

    Args:
        negatives: extra hard negatives, one per query, shared across the batch:
            ``none``, ``random``, ``bm25`` (from ranks 2..``bm25_depth``), ``retriever``.
        The rest as for :class:`~pyterrier_selfsup.training.Trainer`: ``batch_size`` (the
        in-batch negatives), ``accumulation``, ``epochs``, ``lr``, ``warmup``, ``output_dir``...
    """
    description = 'distant supervision'

    def __init__(self, encoder: DualEncoder, collection: Union[str, Collection], *, negatives: str = 'none',
                 bm25_depth: int = 30, **kwargs):
        if negatives not in NEGATIVES:
            raise ValueError(f'negatives must be one of {NEGATIVES}, not {negatives!r}')
        super().__init__(encoder, collection, **kwargs)
        self.negatives = negatives
        self.bm25_depth = bm25_depth

    def on_epoch_start(self, examples: List['Example'], epoch: int, resumed: bool):
        if self.negatives == 'retriever' and not (resumed and self.state.get('hard')):
            self.state['hard'] = self._retriever_negatives(examples)

    def title(self) -> str:
        return f'distant supervision on {self.collection.corpus_id} ({self.negatives} negatives)'

    # -- data -------------------------------------------------------------------------

    def examples(self, topics: pd.DataFrame) -> List[Example]:
        """BM25's top-1 for each query, skipping the passage a query was cut from."""
        queries = given_topics(topics)
        sources = dict(zip(topics['qid'], topics['source_docno'])) if 'source_docno' in topics.columns else {}
        bm25 = BM25.from_collection(self.collection, num_results=self.bm25_depth + 1, cache_dir=self.cache_dir)
        ranked = bm25(queries).sort_values(['qid', 'rank']).groupby('qid', sort=False)['docno'].apply(list)
        examples = []
        for qid, query in zip(queries['qid'], queries['query']):
            source = sources.get(qid)
            docnos = [d for d in ranked.get(qid, []) if d != source]
            if docnos:
                excluded = frozenset([docnos[0]] + ([source] if source is not None else []))
                examples.append(Example(qid, query, docnos[0], excluded, tuple(docnos[1:])))
        if len(examples) < len(queries):
            logger.warning('%d of %d training queries have no BM25 result and are skipped',
                           len(queries) - len(examples), len(queries))
        return examples

    def loss(self, batch: List[Example], rng: np.random.Generator) -> torch.Tensor:
        docnos = [e.positive for e in batch] + self._negatives(batch, rng, self.state.get('hard'))
        excluded = torch.tensor([[d in e.excluded and j != i for j, d in enumerate(docnos)]
                                 for i, e in enumerate(batch)], device=self.encoder.device)
        queries = self.encoder.encode([e.query for e in batch], 'query')
        passages = self.encoder.encode(self.collection.texts(docnos), 'passage')
        return in_batch_loss(queries, passages, self.encoder.temperature, excluded)

    def _negatives(self, batch: List[Example], rng: np.random.Generator, hard: Optional[Dict[str, str]]) -> List[str]:
        if self.negatives == 'none':
            return []
        if self.negatives == 'random':
            docnos = self._all_docnos
            return [docnos[i] for i in rng.integers(len(docnos), size=len(batch))]
        if self.negatives == 'bm25':
            return [e.bm25_ranked[rng.integers(len(e.bm25_ranked))] if e.bm25_ranked else e.positive for e in batch]
        return [hard.get(e.qid, e.positive) for e in batch]  # retriever

    @cached_property
    def _all_docnos(self) -> List[str]:
        return [d['docno'] for d in self.collection.corpus_iter()]

    def _retriever_negatives(self, examples: List[Example]) -> Dict[str, str]:
        """Each query's highest-scoring passage under the current encoder that is not
        excluded for it. Exact search in memory: fine for the collections used here; a
        corpus of millions wants a FAISS index instead."""
        docs = list(self.collection.corpus_iter())
        doc_vecs = self.encoder.encode_docs([d['text'] for d in docs])
        query_vecs = self.encoder.encode_queries([e.query for e in examples])
        k = min(len(docs), 1 + max(len(e.excluded) for e in examples))
        hard = {}
        for start in range(0, len(examples), 1024):
            scores = query_vecs[start:start + 1024] @ doc_vecs.T
            top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
            for row, e in zip(range(len(top)), examples[start:start + 1024]):
                for j in top[row][np.argsort(-scores[row, top[row]])]:
                    if docs[j]['docno'] not in e.excluded:
                        hard[e.qid] = docs[j]['docno']
                        break
        self.encoder.model.train()
        return hard


def adapted_model_dir(collection: Collection, settings: Dict, cache_dir=None) -> Path:
    """Where :func:`adapted_retriever` keeps the model trained with ``settings`` (its
    checkpoints, ``training_log.jsonl`` and ``training_curve.png``)."""
    return cache_root(cache_dir) / 'models' / cache_key(f'{collection.corpus_id}.ds', settings)


# The ds pipeline's settings; RUMBArt/ACROBArT's start=ds trains (or reuses) this model.
DS_DEFAULTS = dict(model_name=MINILM, queries='sentences', n_queries=5000, negatives='none', epochs=1,
                   batch_size=32, lr=2e-5, dim=None, seed=0)


def adapted_retriever(collection: Union[str, Collection], *, model_name: str = MINILM, queries: str = 'sentences',
                      n_queries: int = 5000, negatives: str = 'none', epochs: int = 1, batch_size: int = 32,
                      lr: float = 2e-5, dim: Optional[int] = None, seed: int = 0,
                      cache_dir: Optional[Union[str, Path]] = None, verbose: bool = False) -> DenseRetriever:
    """``model_name`` trained by :class:`DistantSupervision` on ``collection``, then a dense
    retriever over it. Training queries: ``sentences``, ``spans`` or ``generated`` by
    SmolLM2 (``n_queries`` of them, from the corpus), or the name of a collection whose
    topic texts are used (its qrels are not); see :func:`~pyterrier_selfsup.queries.training_topics`.
    The trained model is cached like an index: built once per settings."""
    collection = Collection(collection) if isinstance(collection, str) else collection
    settings = dict(model_name=model_name, queries=queries, n_queries=n_queries, negatives=negatives,
                    epochs=epochs, batch_size=batch_size, lr=lr, dim=dim, seed=seed)
    path = adapted_model_dir(collection, settings, cache_dir)

    def train(staging: Path):
        # generated queries are the same ones RUMBArt trains on (SmolLM2, its default settings)
        topics = training_topics(collection, queries, n_queries, seed=seed, generator='smollm2', cache_dir=cache_dir)
        torch.manual_seed(seed)
        encoder = DualEncoder.from_pretrained(model_name, dim=dim)
        DistantSupervision(encoder, collection, negatives=negatives, batch_size=batch_size, epochs=epochs, lr=lr,
                           output_dir=staging, seed=seed, cache_dir=cache_dir, verbose=verbose).fit(topics)
        keep_final_only(staging)

    return DenseRetriever.from_dual_encoder(collection, str(build_once(path, train) / 'final'),
                                            cache_dir=cache_dir, verbose=verbose)
