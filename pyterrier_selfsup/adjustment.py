"""ReAtt's cross-document adjustment (Jiang et al., 2022, §3), trained without labels.

For each training query q, K *close* documents: BM25's top K in the first iteration, the
current ReAtt model's own top K (exact search over a freshly encoded token index) in
every later one (§3.1, iterative close-document sub-sampling). The close documents of
the other queries in the batch are q's *random* documents (in-batch). Over all of them,

    P_retrieval(q) = softmax_d r(q, d)
    P_target(q)    = the generator's judgement of q's close documents, 0 for the random ones
    loss           = α · KL(P_target ‖ P_retrieval)   (+ the generation loss, for a
                     trainable generator)

P_target comes from the generator reconstructing q from each close document:
``target='likelihood'`` is softmax_d(log p_gen(q | d) / T) over q's close documents (any
generator; a frozen generator's scores are cached on disk, as RUMBArt's are);
``target='attention'`` is the generator's attention to each close document while it reads
them all together (:func:`attention_target`: the paper's decoder-to-encoder attention for
seq2seq generators, its decoder-only equivalent otherwise), computed once per iteration.

Queries come from any source of :func:`~pyterrier_selfsup.queries.training_topics`; a
query cut from the corpus never has its own passage among its close documents.
"""
import logging
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, List, Optional, Union

import numpy as np
import pandas as pd
import torch
from transformers.modeling_outputs import BaseModelOutput

from pyterrier_selfsup.collections import Collection
from pyterrier_selfsup.generator import Generator, score_cache_dir
from pyterrier_selfsup.queries import MASK, Query, training_queries
from pyterrier_selfsup.reatt import ReAtt
from pyterrier_selfsup.training import Trainer

logger = logging.getLogger(__name__)

TARGETS = ('likelihood', 'attention')
ATTENTION_CHUNK = 4  # queries whose k passages go through the generator at once


def mask_token(reatt: ReAtt) -> str:
    """What a masked training query (``queries=masked``) hides its span with: the
    student's own mask token where its tokenizer has one (BERT's ``[MASK]``, one token),
    T5's first sentinel otherwise (which a BERT tokenizer would cut into seven pieces)."""
    return getattr(reatt.tokenizer, 'mask_token', None) or MASK


def owner_one_hot(owner: torch.Tensor, k: int) -> torch.Tensor:
    """(b, L, k): 1 where a position belongs to passage j (``owner`` (b, L), -1: to none)."""
    return torch.nn.functional.one_hot(owner.clamp(min=0), k).float() * (owner >= 0)[..., None]


def first_position_shares(cross_attention: torch.Tensor, owner: torch.Tensor, k: int) -> torch.Tensor:
    """ReAtt's P_target (§3.2) from a decoder's last-layer cross-attention (b, H, rows, L),
    softmaxed over all encoder positions: the first decoder position's weights summed per
    passage (``owner``) and averaged over heads, (b, k)."""
    weights = cross_attention[:, :, 0, :].float()
    return torch.einsum('bhw,bwk->bhk', weights, owner_one_hot(owner, k)).mean(1)


def attention_target(generator: Generator, targets: List[str], passages: List[List[str]]) -> torch.Tensor:
    """P_target from the generator's attention while it reads all k passages at once to
    reconstruct the target, (b, k); no gradients.

    Seq2seq (ReAtt §3.2, as the paper): the passages encoded one by one and concatenated
    (FiD); the last decoder layer's cross-attention from the first decoder position,
    softmaxed over all tokens of all passages, summed per passage, averaged over heads.
    Decoder-only: the passages one after another in the prompt; the last layer's
    self-attention from the positions that predict the target's tokens, the mass on each
    passage's tokens renormalised over the passages (the prompt's own tokens hold the
    rest), averaged over those positions and the heads."""
    from pyterrier_selfsup.reconstruction import (concatenated_encoding, concatenated_prompts,
                                                  enable_attention_bias)
    from pyterrier_selfsup.generator import _pad
    enable_attention_bias(generator)  # eager attention, which returns its weights (no bias is set)
    b, k = len(passages), len(passages[0])
    t_ids = generator.target_ids(targets)
    with torch.no_grad():
        if generator.is_seq2seq:
            with generator._autocast():
                enc, enc_mask, owner = concatenated_encoding(generator, passages)
                start = torch.full((b, 1), generator.model.config.decoder_start_token_id, device=generator.device)
                out = generator.model(encoder_outputs=BaseModelOutput(last_hidden_state=enc), attention_mask=enc_mask,
                                      decoder_input_ids=start, output_attentions=True, use_cache=False)
            return first_position_shares(out.cross_attentions[-1], owner, k)
        seqs, owner, _ = concatenated_prompts(generator, passages, t_ids)
        ids, mask = _pad(seqs, generator.tokenizer.pad_token_id, left=True, device=generator.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        # the last layer's weights only, caught on their way out (all layers' would be
        # layers x heads x L^2 floats: gigabytes for k long passages)
        last = [m for m in generator.model.modules() if getattr(m, '_selfsup_biased', False)][-1]
        caught = {}
        hook = last.register_forward_hook(lambda module, args, output: caught.__setitem__('weights', output[1]))
        try:
            with generator._autocast():
                generator.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False,
                                logits_to_keep=1)
        finally:
            hook.remove()
        attn = caught['weights'].float()  # (b, H, L, L)
        mass = torch.einsum('bhql,blk->bhqk', attn, owner_one_hot(owner, k))  # each row's attention on each passage
        length = ids.shape[1]
        rows = torch.zeros((b, length), dtype=torch.bool, device=ids.device)
        for i, t in enumerate(t_ids):  # the positions whose outputs predict target tokens
            rows[i, length - len(t) - 1:length - 1] = True
        mass = mass / mass.sum(-1, keepdim=True).clamp(min=1e-30)
        per_row = (mass * rows[:, None, :, None]).sum(2) / rows.sum(1).clamp(min=1)[:, None, None]
        return per_row.mean(1)


def adjustment_loss(retrieval_logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Mean over queries of KL(target ‖ softmax(retrieval_logits)), rows over all the
    batch's documents; ``target`` rows sum to one and are 0 off each query's close
    documents (their terms vanish: 0 · log 0 = 0)."""
    log_p = torch.log_softmax(retrieval_logits, dim=-1)
    entropy_part = torch.where(target > 0, target * torch.log(target.clamp(min=1e-30)), torch.zeros_like(target))
    return (entropy_part - target * log_p).sum(-1).mean()


class CrossDocumentAdjustment(Trainer):
    """Trains a ReAtt retriever by cross-document adjustment: a :class:`~pyterrier_selfsup.reatt.ReAtt`
    (its first B layers, its layer-B+1 query/key projections and the head weights w) taught
    by a separate frozen ``generator``, or a single-model :class:`~pyterrier_selfsup.reatt_t5.ReAttT5`
    that teaches itself (ReAtt proper: P_target is its own decoder's attention, and its
    generation loss trains the reader; queries need an ``answer``: ``queries=masked``).

    Args:
        generator: the teacher of a separate retriever (frozen: its scores are cached);
            None for a single model.
        k: close documents per query (ReAtt: 100 on 8 A100s; a few here).
        epochs: iterations; each after the first re-retrieves the close documents with
            the model as it is then (§3.1).
        alpha: the weight of the KL term (ReAtt: 8 beside the generation loss).
        target: how P_target is derived from a separate generator (module docstring).
        teacher_temperature: T of the likelihood target.
        generation_weight: the weight of a single model's generation loss.
        The rest as for :class:`~pyterrier_selfsup.training.Trainer`.
    """
    description = 'ReAtt adjustment'

    def __init__(self, model, generator: Optional[Generator], collection: Union[str, Collection], *, k: int = 8,
                 alpha: float = 1.0, target: str = 'likelihood', teacher_temperature: float = 1.0,
                 generation_weight: float = 1.0, batch_size: int = 8, **kwargs):
        from pyterrier_selfsup.reatt_t5 import ReAttT5
        super().__init__(model, collection, batch_size=batch_size, **kwargs)
        self.reader = model if isinstance(model, ReAttT5) else None
        self.reatt: ReAtt = model.retriever if self.reader is not None else model
        if self.reader is None:
            if generator is None:
                raise ValueError('a separate ReAtt retriever needs a generator to teach it')
            if target not in TARGETS:
                raise ValueError(f'target must be one of {TARGETS}, not {target!r}')
            if generator.trainable:
                raise NotImplementedError('a trainable separate generator is not supported: use a single-model '
                                          'ReAttT5, whose reader trains')
        self.generator = generator
        self.k = k
        self.alpha = alpha
        self.target = 'reader' if self.reader is not None else target
        self.teacher_temperature = teacher_temperature
        self.generation_weight = generation_weight
        self.close: Dict[str, List[str]] = {}  # qid -> its close documents this iteration
        self._attention: Dict[str, torch.Tensor] = {}  # qid -> its attention target this iteration
        self._teacher = None
        if self.reader is None:
            self._teacher = generator.scorer(normalise='sum', cache=score_cache_dir(self.collection.corpus_id,
                                                                                   generator, self.cache_dir))

    def parameters(self):
        modules = [self.reader.model, self.reatt.model] if self.reader is not None else [self.reatt.model]
        seen = set()
        for module in modules:  # the reader and its retriever share the encoder: each parameter once
            for p in module.parameters():
                if p.requires_grad and id(p) not in seen:
                    seen.add(id(p))
                    yield p

    def _train_mode(self, on: bool):
        self.reatt.model.train(on)
        if self.reader is not None:
            self.reader.model.train(on)

    def examples(self, topics: pd.DataFrame) -> List[Query]:
        if self.reader is not None and 'answer' not in topics.columns:
            raise ValueError('a single-model ReAtt reads to generate an answer: its topics need an answer column '
                             '(queries=masked)')
        return training_queries(topics)

    # -- close documents, once per iteration ------------------------------------------

    def on_epoch_start(self, examples: List[Query], epoch: int, resumed: bool):
        t0 = time.time()
        if epoch == 0:
            self.close = self._bm25_close(examples)
            source = 'bm25'
        else:  # the model as it is now: its own exact top k over a fresh token index
            self.close = self._own_close(examples)
            source = 'model'
        self._score_pairs(examples)
        self._train_mode(True)
        self.log.append({'step': self.state.get('step', 0), 'close documents': source,
                         'retrieval seconds': time.time() - t0})

    def _bm25_close(self, examples: List[Query]) -> Dict[str, List[str]]:
        from pyterrier_selfsup.bm25 import BM25
        extra = max((len(q.excluded) for q in examples), default=0)
        bm25 = BM25.from_collection(self.collection, num_results=self.k + extra, cache_dir=self.cache_dir)
        mask = mask_token(self.reatt)  # not a word: BM25 would match 'mask' (or 'extra', 'id', '0')
        results = bm25(pd.DataFrame({'qid': [q.qid for q in examples],
                                     'query': [q.query.replace(mask, ' ') for q in examples]}))
        ranked = results.sort_values(['qid', 'rank']).groupby('qid')['docno'].apply(list).to_dict()
        return {q.qid: [d for d in ranked.get(q.qid, []) if d not in q.excluded][:self.k] for q in examples}

    @contextmanager
    def _current_index(self):
        """The corpus' token index under the model as it is now (keys only, exhaustive
        search), thrown away afterwards."""
        from pyterrier_selfsup.token_index import ReAttIndex
        with tempfile.TemporaryDirectory() as tmp:
            yield ReAttIndex.build(Path(tmp) / 'index', self.reatt, self.collection.corpus_iter(), ivf=False)

    def _own_close(self, examples: List[Query]) -> Dict[str, List[str]]:
        with self._current_index() as index:
            vectors = index.query_vectors(self.reatt, [q.query for q in examples])
            extra = max((len(q.excluded) for q in examples), default=0)
            close = {}
            for q, v in zip(examples, vectors):
                docs, _ = index.search(v, self.k + extra, None, 0)
                close[q.qid] = [d for d in index.docnos[docs] if d not in q.excluded][:self.k]
        return close

    def _score_pairs(self, examples: List[Query]):
        """The generator's log p(q | d) of every (query, close document) pair, in one pass
        (cached: pairs scored before cost nothing); or its attention target of every query."""
        if self.reader is not None:  # its own attention, read with the current weights at each step
            return
        if self.target == 'attention':
            self._attention = {}
            with_close = [q for q in examples if self.close.get(q.qid)]
            by_size: Dict[int, List[Query]] = {}
            for q in with_close:  # rows of one call need the same number of passages
                by_size.setdefault(len(self.close[q.qid]), []).append(q)
            for group in by_size.values():
                for start in range(0, len(group), ATTENTION_CHUNK):
                    chunk = group[start:start + ATTENTION_CHUNK]
                    passages = [self.collection.texts(self.close[q.qid]) for q in chunk]
                    values = attention_target(self.generator, [q.query for q in chunk], passages)
                    self._attention.update({q.qid: v.cpu() for q, v in zip(chunk, values)})
            return
        frame = self._pairs(examples)
        if len(frame):
            self._teacher(frame)

    def _pairs(self, batch: List[Query]) -> pd.DataFrame:
        rows = [(q.qid, q.query, d) for q in batch for d in self.close.get(q.qid, [])]
        frame = pd.DataFrame(rows, columns=['qid', 'query', 'docno'])
        return frame.assign(text=self.collection.texts(frame['docno'].tolist()) if len(frame) else [])

    # -- the loss ---------------------------------------------------------------------

    def target_distribution(self, batch: List[Query], docnos: List[str]) -> torch.Tensor:
        """P_target, (b, len(docnos)): each query's close documents by the generator, 0 elsewhere."""
        scored = None
        if self.target == 'likelihood':
            scored = self._teacher(self._pairs(batch)).set_index(['qid', 'docno'])['score']
        column = {d: j for j, d in enumerate(docnos)}
        target = torch.zeros((len(batch), len(docnos)), dtype=torch.float32)
        for i, q in enumerate(batch):
            close = self.close.get(q.qid, [])
            if not close:
                continue
            if scored is None:
                values = self._attention[q.qid]
            else:
                logp = torch.tensor([float(scored[(q.qid, d)]) for d in close])
                values = torch.softmax(logp / self.teacher_temperature, dim=0)
            target[i, [column[d] for d in close]] = values
        return target

    def loss(self, batch: List[Query], rng: np.random.Generator) -> torch.Tensor:
        batch = [q for q in batch if self.close.get(q.qid)]
        if not batch:
            return torch.zeros((), requires_grad=True)
        docnos = list(dict.fromkeys(d for q in batch for d in self.close[q.qid]))  # close ∪ in-batch random
        q_vectors, q_mask = self.reatt.encode([q.query for q in batch], 'query')
        k_vectors, k_mask = self.reatt.encode(self.collection.texts(docnos), 'passage')
        logits = self.reatt.model.scores(q_vectors, q_mask, k_vectors, k_mask)  # (b, documents)
        if self.reader is not None:
            loss, target = self._reader_loss(batch, docnos)
            target = target.to(logits.device)
            loss = loss + self.alpha * adjustment_loss(logits, target)
        else:
            target = self.target_distribution(batch, docnos).to(logits.device)
            loss = self.alpha * adjustment_loss(logits, target)
        with torch.no_grad():  # how much of P_retrieval the close documents hold (in-batch random: the rest)
            p = torch.softmax(logits, dim=-1)
            self.record('close mass', float((p * (target > 0)).sum(-1).mean()))
            self.record('head weight max', float(self.reatt.model.head_weights.max()))
        return loss

    def _reader_loss(self, batch: List[Query], docnos: List[str]):
        """A single model's generation loss over each query's close documents (fused), and
        its own target attention (detached) placed on the batch's document columns."""
        column = {d: j for j, d in enumerate(docnos)}
        target = torch.zeros((len(batch), len(docnos)), dtype=torch.float32)
        nll = []
        by_size: Dict[int, List[int]] = {}
        for i, q in enumerate(batch):  # rows read together need the same number of documents
            by_size.setdefault(len(self.close[q.qid]), []).append(i)
        for rows in by_size.values():
            group = [batch[i] for i in rows]
            logp, attention = self.reader.read([q.query for q in group],
                                               [self.collection.texts(self.close[q.qid]) for q in group],
                                               [q.answer or '' for q in group])
            nll.append(-logp)
            for i, q, values in zip(rows, group, attention.cpu()):
                target[i, [column[d] for d in self.close[q.qid]]] = values
        nll = torch.cat(nll)
        self.record('generation nll', float(nll.detach().mean()))
        return self.generation_weight * nll.mean(), target

    # -- what the base class does with a DualEncoder ------------------------------------

    def load_encoder(self, path: Path):
        if self.reader is not None:
            from pyterrier_selfsup.reatt_t5 import ReAttT5
            saved = ReAttT5.from_pretrained(str(path), device='cpu')
            self.reader.model.load_state_dict(saved.model.state_dict())
            self.reatt.model.head_logits.data.copy_(saved.retriever.model.head_logits.data)
            return
        saved = ReAtt.from_pretrained(str(path), device='cpu')
        self.reatt.model.load_state_dict(saved.model.state_dict())

    def retriever(self):
        from pyterrier_selfsup.token_index import reatt_index
        return reatt_index(self.collection, self.reatt, cache_dir=self.cache_dir).exhaustive(self.reatt)

    def _validate(self, topics, qrels) -> float:
        import pyterrier as pt
        from ir_measures import nDCG

        with self._current_index() as index:
            result = pt.Experiment([index.exhaustive(self.reatt, num_results=100)], topics, qrels, [nDCG @ 10])
        self._train_mode(True)
        return float(result['nDCG@10'][0])


# -- trained on first use, like an index ------------------------------------------------

TRAINING_SETTINGS = ('model_name', 'retrieval_layer', 'head', 'special_tokens', 'queries', 'n_queries', 'k', 'epochs',
                     'batch_size', 'lr', 'alpha', 'target', 'teacher_temperature', 'generator', 'seed')


def adjusted_model_dir(collection: Collection, settings: dict, cache_dir=None) -> Path:
    """Where :func:`adjusted_retriever` keeps the model trained with ``settings`` (those of
    them that training depends on, :data:`TRAINING_SETTINGS`)."""
    from pyterrier_selfsup._cache import cache_key, cache_root
    key = {name: settings[name] for name in TRAINING_SETTINGS}
    return cache_root(cache_dir) / 'models' / cache_key(f'{collection.corpus_id}.reatt', key)


def adjusted_retriever(collection: Union[str, Collection], *, model_name: str, retrieval_layer: int, head: int,
                       special_tokens: bool = True, queries: str = 'sentences', n_queries: int = 5000, k: int = 8,
                       epochs: int = 2, batch_size: int = 8, lr: float = 2e-5, alpha: float = 1.0,
                       target: str = 'likelihood', teacher_temperature: float = 1.0, generator: str = 'smollm2',
                       seed: int = 0, candidate_tokens: Optional[int] = 128, nprobe: int = 32,
                       rescore: Optional[int] = None, num_results: int = 1000, cache_dir=None,
                       verbose: bool = False):
    """``model_name``'s ReAtt retriever (layer ``retrieval_layer``, head ``head`` to start)
    adapted to ``collection`` by cross-document adjustment with ``generator`` as the
    teacher, on ``n_queries`` training queries from ``queries`` (any source of
    :func:`~pyterrier_selfsup.queries.training_topics`); trained on first use and cached
    by corpus and settings; searched through its token index."""
    from pyterrier_selfsup._cache import build_once
    from pyterrier_selfsup.generator import load_generator
    from pyterrier_selfsup.queries import training_topics
    from pyterrier_selfsup.token_index import reatt_index
    from pyterrier_selfsup.training import fit_resumably
    collection = Collection(collection) if isinstance(collection, str) else collection
    settings = dict(model_name=model_name, retrieval_layer=retrieval_layer, head=head, special_tokens=special_tokens,
                    queries=queries, n_queries=n_queries, k=k, epochs=epochs, batch_size=batch_size, lr=lr,
                    alpha=alpha, target=target, teacher_temperature=teacher_temperature, generator=generator,
                    seed=seed)
    path = adjusted_model_dir(collection, settings, cache_dir)

    def train(staging: Path):
        gen = load_generator(generator, cache_dir=cache_dir, verbose=verbose)
        torch.manual_seed(seed)
        reatt = ReAtt.from_pretrained(model_name, retrieval_layer=retrieval_layer, head=head,
                                      special_tokens=special_tokens)
        topics = training_topics(collection, queries, n_queries, seed=seed, generator=gen, mask=mask_token(reatt),
                                 cache_dir=cache_dir)
        # a checkpoint at the end of each iteration only: an iteration's close documents come
        # from the model at its start, so a run resumed there matches an uninterrupted one
        trainer = CrossDocumentAdjustment(reatt, gen, collection, k=k, alpha=alpha, target=target,
                                          teacher_temperature=teacher_temperature, epochs=epochs,
                                          batch_size=batch_size, lr=lr, output_dir=staging, seed=seed,
                                          checkpoint_every='epoch', keep_checkpoints=1,
                                          cache_dir=cache_dir, verbose=verbose)
        fit_resumably(trainer, topics)

    # an interrupted training run continues from its last iteration's end when asked for again
    reatt = ReAtt.from_pretrained(str(build_once(path, train, resumable=True) / 'final'), verbose=verbose)
    index = reatt_index(collection, reatt, cache_dir=cache_dir, verbose=verbose)
    return index.retriever(reatt, num_results=num_results, candidate_tokens=candidate_tokens, nprobe=nprobe,
                           rescore=rescore)
