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
import json
import logging
import math
import random
import tempfile
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import torch
import torch.nn.functional as F
from transformers import get_linear_schedule_with_warmup

from pyterrier_selfsup._cache import build_once, cache_key, cache_root
from pyterrier_selfsup.bm25 import BM25
from pyterrier_selfsup.collections import Collection
from pyterrier_selfsup.dense import MINILM, DenseRetriever, encode_into, flex_index
from pyterrier_selfsup.dual_encoder import DualEncoder
from pyterrier_selfsup.queries import corpus_sentences, cropped_spans, given_topics

logger = logging.getLogger(__name__)

NEGATIVES = ('none', 'random', 'bm25', 'retriever')
STATE_FILE = 'trainer_state.pt'


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


class DistantSupervision(pt.Estimator):
    """Trains ``encoder`` in place on ``collection`` with BM25's top-1 as positives.

    Args:
        negatives: extra hard negatives, one per query, shared across the batch:
            ``none``, ``random``, ``bm25`` (from ranks 2..``bm25_depth``), ``retriever``.
        batch_size: queries per batch (the in-batch negatives); ``accumulation`` batches
            make one optimiser step.
        lr, warmup: AdamW's peak learning rate, reached linearly over the first
            ``warmup`` fraction of steps, then decayed linearly to zero.
        output_dir: checkpoints (every ``checkpoint_every`` steps and at the end), the
            training log (JSON lines) and the training-curve PNG.
    """

    def __init__(self, encoder: DualEncoder, collection: Union[str, Collection], *, negatives: str = 'none',
                 batch_size: int = 32, epochs: int = 1, max_steps: Optional[int] = None, lr: float = 2e-5,
                 warmup: float = 0.1, weight_decay: float = 0.01, accumulation: int = 1, bm25_depth: int = 30,
                 output_dir: Optional[Union[str, Path]] = None, checkpoint_every: Optional[int] = None,
                 seed: int = 0, cache_dir: Optional[Union[str, Path]] = None, verbose: bool = True):
        if negatives not in NEGATIVES:
            raise ValueError(f'negatives must be one of {NEGATIVES}, not {negatives!r}')
        self.encoder = encoder
        self.collection = Collection(collection) if isinstance(collection, str) else collection
        self.negatives = negatives
        self.batch_size = batch_size
        self.epochs = epochs
        self.max_steps = max_steps
        self.lr = lr
        self.warmup = warmup
        self.weight_decay = weight_decay
        self.accumulation = accumulation
        self.bm25_depth = bm25_depth
        self.output_dir = Path(output_dir) if output_dir is not None else None
        self.checkpoint_every = checkpoint_every
        self.seed = seed
        self.cache_dir = cache_dir
        self.verbose = verbose
        self.log: List[Dict] = []

    # -- the PyTerrier face -----------------------------------------------------------

    def transform(self, topics: pd.DataFrame) -> pd.DataFrame:
        """Dense retrieval over the collection with the encoder as it is now."""
        return self.retriever()(topics)

    def retriever(self) -> DenseRetriever:
        return DenseRetriever(self.encoder, flex_index(self.collection, self.encoder, cache_dir=self.cache_dir))

    def fit(self, tr_topics: pd.DataFrame, tr_qrels=None, va_topics=None, va_qrels=None, *,
            resume_from: Optional[Union[str, Path]] = None) -> 'DistantSupervision':
        """Trains on the query texts of ``tr_topics`` (qrels are never read). With
        ``va_topics`` and ``va_qrels``, nDCG@10 on them is logged after each epoch.
        ``resume_from``: a checkpoint directory of an earlier run with the same settings."""
        examples = self.examples(tr_topics)
        if not examples:
            raise ValueError('no training query has a BM25 result to serve as its positive')
        batches_per_epoch = math.ceil(len(examples) / self.batch_size)
        total_steps = math.ceil(batches_per_epoch * self.epochs / self.accumulation)
        if self.max_steps is not None:
            total_steps = min(total_steps, self.max_steps)
        model = self.encoder.model
        optimizer = torch.optim.AdamW(model.parameters(), lr=self.lr, weight_decay=self.weight_decay)
        scheduler = get_linear_schedule_with_warmup(optimizer, int(self.warmup * total_steps), total_steps)
        state = {'epoch': 0, 'batch': 0, 'step': 0, 'hard': None}
        if resume_from is not None:
            state = self._restore(Path(resume_from), optimizer, scheduler)
        model.train()
        progress = pt.tqdm(total=total_steps, initial=state['step'], desc='distant supervision', unit='step',
                           disable=not self.verbose)
        window: List[float] = []
        micro = 0
        for epoch in range(state['epoch'], self.epochs):
            order = np.random.default_rng([self.seed, epoch]).permutation(len(examples))
            batches = [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]
            if self.negatives == 'retriever' and (state['hard'] is None or state['batch'] == 0):
                state['hard'] = self._retriever_negatives(examples)
            for b in range(state['batch'], len(batches)):
                loss = self._loss([examples[i] for i in batches[b]], np.random.default_rng([self.seed, epoch, b]),
                                  state['hard'])
                (loss / self.accumulation).backward()
                window.append(loss.item())
                micro += 1
                if micro < self.accumulation and b < len(batches) - 1:
                    continue
                micro = 0
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                state.update(step=state['step'] + 1, epoch=epoch, batch=b + 1)
                self.log.append({'step': state['step'], 'epoch': epoch, 'loss': float(np.mean(window)),
                                 'lr': scheduler.get_last_lr()[0], 'time': time.time()})
                progress.update(1)
                progress.set_postfix(loss=f'{np.mean([r["loss"] for r in self.log[-20:] if "loss" in r]):.4f}')
                window = []
                if self.checkpoint_every and state['step'] % self.checkpoint_every == 0:
                    self._checkpoint(state, optimizer, scheduler)
                if state['step'] >= total_steps:
                    break
            state.update(epoch=epoch + 1, batch=0, hard=None)
            if va_topics is not None and va_qrels is not None:
                self.log.append({'step': state['step'], 'epoch': epoch, 'validation nDCG@10': self._validate(va_topics, va_qrels)})
            if state['step'] >= total_steps:
                break
        progress.close()
        model.eval()
        if self.output_dir is not None:
            self._checkpoint(state, optimizer, scheduler, final=True)
            self._write_log()
        return self

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

    def _loss(self, batch: List[Example], rng: np.random.Generator, hard: Optional[Dict[str, str]]) -> torch.Tensor:
        docnos = [e.positive for e in batch] + self._negatives(batch, rng, hard)
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

    def _validate(self, topics, qrels) -> float:
        """nDCG@10 of the encoder as it is now, over an index that is thrown away after."""
        from ir_measures import nDCG
        with tempfile.TemporaryDirectory() as tmp:
            index = encode_into(f'{tmp}/validation.flex', self.collection, self.encoder)
            result = pt.Experiment([DenseRetriever(self.encoder, index)], topics, qrels, [nDCG @ 10])
        self.encoder.model.train()
        return float(result['nDCG@10'][0])

    # -- checkpoints and logs ---------------------------------------------------------

    def _checkpoint(self, state, optimizer, scheduler, final: bool = False):
        if self.output_dir is None:
            return
        path = self.output_dir / ('final' if final else f'checkpoint-{state["step"]}')
        self.encoder.save_pretrained(path)
        torch.save({'state': state, 'optimizer': optimizer.state_dict(), 'scheduler': scheduler.state_dict(),
                    'log': self.log, 'torch_rng': torch.get_rng_state(), 'python_rng': random.getstate()},
                   path / STATE_FILE)
        logger.info('checkpoint %s', path)

    def _restore(self, path: Path, optimizer, scheduler) -> Dict:
        saved = torch.load(path / STATE_FILE, map_location='cpu', weights_only=False)
        weights = DualEncoder.from_pretrained(str(path), device='cpu').model.state_dict()
        self.encoder.model.load_state_dict(weights)
        optimizer.load_state_dict(saved['optimizer'])
        scheduler.load_state_dict(saved['scheduler'])
        torch.set_rng_state(saved['torch_rng'])
        random.setstate(saved['python_rng'])
        self.log = list(saved['log'])
        return dict(saved['state'])

    def _write_log(self):
        self.output_dir.mkdir(parents=True, exist_ok=True)
        with open(self.output_dir / 'training_log.jsonl', 'w') as fh:
            fh.writelines(json.dumps(r) + '\n' for r in self.log)
        plot_training_curve(self.log, self.output_dir / 'training_curve.png',
                            title=f'distant supervision on {self.collection.corpus_id} ({self.negatives} negatives)')


def plot_training_curve(log: List[Dict], path: Path, title: str = ''):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    steps = [r['step'] for r in log if 'loss' in r]
    losses = [r['loss'] for r in log if 'loss' in r]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, losses, alpha=0.35, label='loss per step')
    if len(losses) >= 10:
        w = max(5, len(losses) // 20)
        ax.plot(steps[w - 1:], np.convolve(losses, np.ones(w) / w, mode='valid'), label=f'mean of {w}')
    ax.set_xlabel('optimiser step')
    ax.set_ylabel('in-batch loss')
    validation = [(r['step'], r['validation nDCG@10']) for r in log if 'validation nDCG@10' in r]
    if validation:
        ax2 = ax.twinx()
        ax2.plot(*zip(*validation), 'o-', color='C2', label='validation nDCG@10')
        ax2.set_ylabel('validation nDCG@10')
    ax.set_title(title)
    ax.legend(loc='upper right')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def adapted_model_dir(collection: Collection, settings: Dict, cache_dir=None) -> Path:
    """Where :func:`adapted_retriever` keeps the model trained with ``settings`` (its
    checkpoints, ``training_log.jsonl`` and ``training_curve.png``)."""
    return cache_root(cache_dir) / 'models' / cache_key(f'{collection.corpus_id}.ds', settings)


def adapted_retriever(collection: Union[str, Collection], *, model_name: str = MINILM, queries: str = 'sentences',
                      n_queries: int = 5000, negatives: str = 'none', epochs: int = 1, batch_size: int = 32,
                      lr: float = 2e-5, dim: Optional[int] = None, seed: int = 0,
                      cache_dir: Optional[Union[str, Path]] = None, verbose: bool = False) -> DenseRetriever:
    """``model_name`` trained by :class:`DistantSupervision` on ``collection``, then a dense
    retriever over it. Training queries: ``sentences`` or ``spans`` (``n_queries`` of them,
    from the corpus), or the name of a collection whose topic texts are used (its qrels
    are not). The trained model is cached like an index: built once per settings."""
    collection = Collection(collection) if isinstance(collection, str) else collection
    settings = dict(model_name=model_name, queries=queries, n_queries=n_queries, negatives=negatives,
                    epochs=epochs, batch_size=batch_size, lr=lr, dim=dim, seed=seed)
    path = adapted_model_dir(collection, settings, cache_dir)

    def train(staging: Path):
        if queries == 'sentences':
            topics = corpus_sentences(collection, n_queries, seed=seed)
        elif queries == 'spans':
            topics = cropped_spans(collection, n_queries, seed=seed)
        else:
            topics = Collection(queries).topics()
        torch.manual_seed(seed)
        encoder = DualEncoder.from_pretrained(model_name, dim=dim)
        DistantSupervision(encoder, collection, negatives=negatives, batch_size=batch_size, epochs=epochs, lr=lr,
                           output_dir=staging, seed=seed, cache_dir=cache_dir, verbose=verbose).fit(topics)

    return DenseRetriever.from_dual_encoder(collection, str(build_once(path, train) / 'final'),
                                            cache_dir=cache_dir, verbose=verbose)
