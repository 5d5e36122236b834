"""ReAtt's cross-document adjustment (Jiang et al., 2022, §3), trained without labels.

For each training query q, K *close* documents: BM25's top K in the first iteration, the
current model's own exact top K in every later one (§3.1). The close documents of the other
queries in the batch are q's *random* documents. Over all of them,

    P_retrieval(q) = softmax_d r(q, d)
    P_target(q)    = the generator's judgement of q's close documents, 0 for the random ones
    loss           = α · KL(P_target ‖ P_retrieval)   (+ the generation loss of a
                     single model that reads as well as retrieves)

P_target is softmax_d(log p_gen(q | d) / T) over q's close documents (a frozen generator's
scores cached on disk); a single-model ReAtt T5 is its own teacher, through its reader's
attention to each close document. A query cut from the corpus never has its own passage
among its close documents.
"""
import logging
import time
from dataclasses import replace

import numpy as np
import pandas as pd
import pyterrier as pt
import torch

from pyterrier_selfsup._cache import temporary_build
from pyterrier_selfsup._distributed import all_or_none
from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.data.queries.cut import MASK
from pyterrier_selfsup.data.queries.source import Query, training_queries
from pyterrier_selfsup.models.generator import Generator
from pyterrier_selfsup.models.reatt import ReAtt
from pyterrier_selfsup.models.score_cache import score_cache_dir
from pyterrier_selfsup.retrieval.base import top_k_excluding
from pyterrier_selfsup.retrieval.bm25 import BM25
from pyterrier_selfsup.retrieval.token_index import ReAttIndex, reatt_index, token_index_size
from pyterrier_selfsup.training.loop import Trainer
from pyterrier_selfsup.training.losses import listwise_kl
from pyterrier_selfsup.training.settings import CrossDocumentAdjustmentSettings

logger = logging.getLogger(__name__)


def mask_token(reatt: ReAtt) -> str:
    """What a masked training query hides its span with: the student's own mask token where
    its tokenizer has one, else T5's first sentinel."""
    return getattr(reatt.tokenizer, 'mask_token', None) or MASK


# -- where P_target comes from ------------------------------------------------------------

class _Target:
    """P_target over a batch's documents (and a loss of its own per query, for a reader that
    trains). :meth:`prepare` runs once per iteration, when the close documents change."""

    def prepare(self, trainer: 'CrossDocumentAdjustment', examples: list[Query]):
        pass

    def __call__(self, trainer: 'CrossDocumentAdjustment', batch: list[Query],
                 docnos: list[str]) -> tuple[torch.Tensor | None, torch.Tensor]:
        raise NotImplementedError


def _place(batch: list[Query], docnos: list[str], close: dict[str, list[str]],
           values) -> torch.Tensor:
    """(b, len(docnos)): each query's values on its close documents' columns, 0 elsewhere."""
    column = {d: j for j, d in enumerate(docnos)}
    target = torch.zeros((len(batch), len(docnos)), dtype=torch.float32)
    for i, q in enumerate(batch):
        if close.get(q.qid):
            target[i, [column[d] for d in close[q.qid]]] = values(q)
    return target


class LikelihoodTarget(_Target):
    """softmax over q's close documents of log p_gen(q | d) / T, through the generator's
    on-disk score cache."""

    def __init__(self, generator: Generator, temperature: float, cache_dir=None,
                 corpus=''):
        self.temperature = temperature
        self.scorer = generator.scorer(normalise='sum',
                                       cache=score_cache_dir(corpus, generator, cache_dir))

    def prepare(self, trainer, examples):
        # every pair of the iteration in one pass into the cache (split between the processes)
        self.scorer.fill(trainer.pairs(examples))

    def __call__(self, trainer, batch, docnos):
        scored = self.scorer(trainer.pairs(batch)).set_index(['qid', 'docno'])['score']
        return None, _place(batch, docnos, trainer.close, lambda q: torch.softmax(
            torch.tensor([float(scored[(q.qid, d)]) for d in trainer.close[q.qid]])
            / self.temperature, dim=0))


class ReaderTarget(_Target):
    """A single-model ReAtt T5 teaches itself: the generation loss of each query's answer from
    its close documents read together trains the reader, and its attention to each document
    (detached) is P_target."""

    def __init__(self, reader):
        self.reader = reader

    def __call__(self, trainer, batch, docnos):
        shares, nll = {}, []
        by_size: dict[int, list[Query]] = {}
        for q in batch:  # rows read together need the same number of documents
            by_size.setdefault(len(trainer.close[q.qid]), []).append(q)
        for group in by_size.values():
            logp, attention = self.reader.read([q.query for q in group],
                                               [trainer.collection.texts(trainer.close[q.qid])
                                                for q in group],
                                               [q.answer or '' for q in group])
            nll.append(-logp)
            shares.update({q.qid: values for q, values in zip(group, attention.cpu())})
        nll = torch.cat(nll)
        trainer.record('generation nll', float(nll.detach().mean()), len(nll))
        # nll's rows, back in batch order
        order = [q.qid for group in by_size.values() for q in group]
        return nll[[order.index(q.qid) for q in batch]], _place(batch, docnos, trainer.close,
                                                                lambda q: shares[q.qid])


class CrossDocumentAdjustment(Trainer):
    """Trains a ReAtt retriever by cross-document adjustment: a
    :class:`~pyterrier_selfsup.models.reatt.ReAtt` taught by a separate frozen ``generator``, or,
    with ``generator=None``, a single-model :class:`~pyterrier_selfsup.models.reatt_t5.ReAttT5`
    that teaches itself (its queries need an ``answer``: ``queries=masked``).

    Args:
        model: the ReAtt retriever to train, or a single-model ReAttT5.
        generator: the teacher of a separate retriever (frozen); None for a single model.
        collection: the corpus, or its name.
        settings: :class:`~pyterrier_selfsup.training.settings.CrossDocumentAdjustmentSettings`
            (None: the defaults).
        run, **changes: as for :class:`~pyterrier_selfsup.training.Trainer`.
    """
    Settings = CrossDocumentAdjustmentSettings
    description = 'ReAtt adjustment'
    marker = 'retrieval seconds'  # each iteration's re-retrieval of the close documents
    data_parallel = True

    def gradient_checkpointing_by_default(self) -> bool:
        """Off: a step's gradient passes only the layers below the retrieval head, where
        checkpointing saves little memory."""
        return False

    def __init__(self, model, generator: Generator | None, collection: str | Collection,
                 settings: CrossDocumentAdjustmentSettings | None = None,
                 run: RunContext | None = None, **changes):
        super().__init__(model, collection, settings, run, **changes)
        self.close: dict[str, list[str]] = {}  # qid -> its close documents this iteration
        reads = callable(getattr(model, 'read', None))
        if reads != (generator is None):
            raise ValueError('a single model that reads (ReAttT5) teaches itself: generator=None; '
                             'a separate ReAtt retriever needs a generator to teach it')
        if reads:  # its retriever is a ReAtt over its own encoder
            self.reatt: ReAtt = model.retriever
            self.teacher: _Target = ReaderTarget(model)
            self.needs_answers = True
            return
        if generator.trainable:
            raise NotImplementedError('a trainable separate generator is not supported: use a '
                                      'single-model ReAttT5, whose reader trains')
        self.reatt = model
        self.teacher = LikelihoodTarget(generator, self.settings.teacher_temperature,
                                        self.cache_dir, self.collection)
        self.needs_answers = False

    def retriever(self, fresh: bool = False) -> pt.Transformer:
        if fresh:
            return self._fresh_index().exhaustive(self.reatt, verbose=self.shows)
        return reatt_index(self.collection, self.reatt, cache_dir=self.cache_dir).exhaustive(
            self.reatt, verbose=self.shows)

    def examples(self, topics: pd.DataFrame) -> list[Query]:
        if self.needs_answers and 'answer' not in topics.columns:
            raise ValueError('a single-model ReAtt reads to generate an answer: its topics need an '
                             'answer column (queries=masked)')
        return training_queries(topics)

    # -- close documents, once per iteration ------------------------------------------

    def on_epoch_start(self, examples: list[Query], epoch: int, resumed: bool):
        t0 = time.time()
        # BM25's, which reads a masked query without its mask
        if epoch == 0:
            mask = mask_token(self.reatt)
            bm25 = BM25.from_collection(self.collection, cache_dir=self.cache_dir,
                                        verbose=self.shows)
            retriever, queries = bm25, [replace(q, query=q.query.replace(mask, ' '))
                                        for q in examples]
            source = 'bm25'
        else:  # the model as it is now: its own exact top k over a fresh token index
            retriever, queries = self.retriever(fresh=True), examples
            source = 'model'
        self.close = self.gather(top_k_excluding(retriever, self.local_batch(queries),
                                                 self.settings.k))
        self.teacher.prepare(self, examples)
        self.train_mode(True)
        self.log.append({'step': self.state.get('step', 0), 'close documents': source,
                         'retrieval seconds': time.time() - t0})

    def _fresh_index(self) -> ReAttIndex:
        """The corpus' token index under the model as it is now (keys only), in a temporary
        directory that lives as long as the index; under torch.distributed, encoded in shards."""
        needed = ((token_index_size(self.collection, self.reatt, ivf=False) or 0)
                  * min(self.world_size, 2))
        with temporary_build('selfsup-token-index-',
                             f'the refreshed token index of {self.collection.name}',
                             needed) as (directory, tmp):
            if self.world_size == 1:
                index = ReAttIndex.build(f'{directory}/index', self.reatt,
                                         self.collection.corpus_iter(), ivf=False,
                                         verbose=self.shows)
            else:
                index = ReAttIndex.build_sharded(f'{directory}/index', self.reatt,
                                                 self.collection.corpus_iter(),
                                                 rank=self.process_rank, world_size=self.world_size)
                # read into memory on every rank, before rank 0 may remove the files
                all_or_none(lambda: index.keys32)
        index._tmp = tmp  # removed with the index
        return index

    def pairs(self, batch: list[Query]) -> pd.DataFrame:
        """(qid, query, docno, text) of every query's close documents."""
        rows = [(q.qid, q.query, d) for q in batch for d in self.close.get(q.qid, [])]
        frame = pd.DataFrame(rows, columns=['qid', 'query', 'docno'])
        return frame.assign(
            text=self.collection.texts(frame['docno'].tolist()) if len(frame) else [])

    # -- the loss ---------------------------------------------------------------------

    def target_distribution(self, batch: list[Query], docnos: list[str]) -> torch.Tensor:
        """P_target, (b, len(docnos)): each query's close documents by the teacher, 0 elsewhere."""
        return self.teacher(self, batch, docnos)[1]

    def loss(self, batch: list[Query], rng: np.random.Generator) -> torch.Tensor:
        batch = [q for q in batch if self.close.get(q.qid)]
        mine = self.local_batch(batch)
        if not mine:
            return torch.zeros((), requires_grad=True)
        docnos = list(dict.fromkeys(d for q in batch for d in self.close[q.qid]))
        q_vectors, q_mask = self.reatt.encode([q.query for q in mine], 'query')
        k_vectors, k_mask = self.reatt.encode(self.collection.texts(docnos), 'passage')
        logits = self.reatt.model.scores(q_vectors, q_mask, k_vectors, k_mask)  # (b, documents)
        own_loss, target = self.teacher(self, mine, docnos)
        target = target.to(logits.device)
        rows = self.settings.alpha * listwise_kl(logits, target, per_row=True)
        if own_loss is not None:
            rows = own_loss + rows
        loss = rows.sum() / len(batch)  # this process's share of the batch's mean
        with torch.no_grad():
            p = torch.softmax(logits, dim=-1)
            self.record('close mass', float((p * (target > 0)).sum(-1).mean()), len(mine))
            self.record('head weight max', float(self.reatt.model.head_weights.max()))
        return loss
