"""Retrieve-and-reconstruct training (thesis §4.3): a generator teaches the retriever.

For each training query x, the k passages z_1..z_k that a MIPS index built with the
passage encoder returns (the index is stale between refreshes, REALM's trick) are
re-scored with the current encoder: p_η(z|x) = softmax over the k of q·p / temperature.

- :class:`Rumbart` (Algorithms 1-2) marginalises over them,
  loss = -log Σ_k p_η(z_k|x) p_θ(x|z_k), computed in log space (logsumexp). With a
  frozen generator p_θ(x|z) of a pair never changes: it is computed once, kept in an
  on-disk score cache, and reused across steps, refreshes and runs.
- :class:`Acrobart` (Algorithm 3) gives the generator all k passages at once and adds
  β·p_η(z_j|x) (β trainable) to the attention logits from the target's positions
  towards passage j's tokens (decoder cross-attention for seq2seq generators,
  self-attention for decoder-only ones); loss = -log p_θ(x | z_1..z_k, p_η).

Options from REALM: a null document (the empty passage, always a candidate) and, for
queries cut from the corpus, never retrieving the passage they came from. From RAG
(Lewis et al., 2020, §2.4): ``train_passages=False`` unties the encoder and freezes the
passage tower, so that only queries are encoded with gradients (a step costs a fraction
of the full one) and the index never goes stale (a refresh only re-retrieves).

    trainer = Rumbart(DualEncoder.from_pretrained(MINILM), Generator.from_pretrained(SMOLLM2, gguf_file=...),
                      'beir/scifact/test', output_dir='runs/rumbart')
    trainer.fit(pt.get_dataset('irds:beir/scifact/train').get_topics())   # labels never read
"""
import logging
import sys
import time
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cached_property
from pathlib import Path
from typing import List, Optional, Tuple, Union

import numpy as np
import pandas as pd
import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from pyterrier_selfsup._cache import build_once, cache_key, cache_root
from pyterrier_selfsup.collections import Collection
from pyterrier_selfsup.dense import MINILM, DenseRetriever, flex_index
from pyterrier_selfsup.distant import DS_DEFAULTS, adapted_model_dir, adapted_retriever
from pyterrier_selfsup.dual_encoder import DualEncoder
from pyterrier_selfsup.generator import MAX_PASSAGE_LENGTH, Generator, _pad, load_generator, score_cache_dir
from pyterrier_selfsup.queries import Query, training_queries, training_topics
from pyterrier_selfsup.training import Trainer, fit_resumably

logger = logging.getLogger(__name__)

NULL_DOCNO = '__null__'
STALENESS_PROBE = 1000  # training queries whose candidates are compared before and after a refresh


def candidate_overlap(before: List[List[str]], after: List[List[str]]) -> float:
    """Mean over queries of the share of one's real candidates (the null document aside)
    that the other list also has."""
    shares = []
    for a, b in zip(before, after):
        a = [d for d in a if d != NULL_DOCNO]
        shares.append(len(set(a) & set(b)) / len(a) if a else 1.0)
    return float(np.mean(shares)) if shares else float('nan')


def marginal_nll(retriever_logits: torch.Tensor, teacher_logp: torch.Tensor) -> torch.Tensor:
    """Mean over queries of -log Σ_z softmax(retriever_logits)_z · exp(teacher_logp_z):
    RUMBArt's loss (thesis Eq. 4.8-4.9) in log space, as RAG's ``get_nll`` computes it."""
    return -torch.logsumexp(torch.log_softmax(retriever_logits, dim=-1) + teacher_logp, dim=-1).mean()


class RetrieveAndReconstruct(Trainer):
    """What RUMBArt and ACROBArT share: the stale MIPS index, its refreshes, retrieval of
    the k candidates and their re-scoring by the current encoder.

    Args:
        k: passages retrieved per query (thesis: 5).
        refresh_every: rebuild the index from the current passage encoder every this
            many optimiser steps (REALM/thesis Alg. 2); None: never (it stays as built at
            the start). Each rebuild's time is logged as ``refresh seconds``.
        null_document: add the empty passage to every query's candidates (REALM).
        train_passages: False: passages get their own frozen copy of the start encoder
            and only the query tower trains (RAG); candidates are scored against the
            index's own vectors, and refreshes re-retrieve without re-encoding.
        Resuming from a checkpoint rebuilds the index from the checkpoint's encoder (a
        refresh at the resume step), so a resumed run matches an uninterrupted one
        exactly only when the checkpoint falls on a refresh.
        The rest as for :class:`~pyterrier_selfsup.training.Trainer` (thesis defaults:
        lr 1e-4 with warm-up and linear decay, gradient ``accumulation``).
    """

    def __init__(self, encoder: DualEncoder, generator: Generator, collection: Union[str, Collection], *,
                 k: int = 5, refresh_every: Optional[int] = 50, null_document: bool = False,
                 train_passages: bool = True, batch_size: int = 16, lr: float = 1e-4, **kwargs):
        super().__init__(encoder, collection, batch_size=batch_size, lr=lr, **kwargs)
        self.generator = generator
        self.k = k
        self.refresh_every = refresh_every
        self.null_document = null_document
        self.train_passages = train_passages
        self._index = None
        self._vectors: Optional[np.ndarray] = None  # the index's, in corpus order

    def parameters(self):
        yield from self.encoder.model.parameters()
        if self.generator.trainable:
            yield from self.generator.model.parameters()

    def _train_mode(self, on: bool):
        self.encoder.model.train(on)
        if self.generator.trainable:
            self.generator.model.train(on)

    def save_extra(self, path: Path):
        if self.generator.trainable:
            self.generator.save_pretrained(path / 'generator')

    def load_extra(self, path: Path):
        if self.generator.trainable:
            from safetensors.torch import load_file
            self.generator.model.load_state_dict(load_file(path / 'generator' / 'model.safetensors'), strict=False)

    # -- data and index ---------------------------------------------------------------

    def examples(self, topics: pd.DataFrame) -> List[Query]:
        return training_queries(topics)

    @cached_property
    def _docnos(self) -> np.ndarray:
        return np.array([d['docno'] for d in self.collection.corpus_iter()], dtype=object)

    @cached_property
    def _rows(self) -> dict:
        return {d: i for i, d in enumerate(self._docnos)}

    @cached_property
    def _null_vector(self) -> np.ndarray:
        return self.encoder.encode_docs([''])[0]

    def on_epoch_start(self, examples: List[Query], epoch: int, resumed: bool):
        if self._index is None:
            self.refresh(examples, initial=True)

    def on_step_end(self, examples: List[Query]):
        if self.refresh_every and self.state['step'] % self.refresh_every == 0:
            self.refresh(examples)

    def refresh(self, examples: List[Query], initial: bool = False):
        """Rebuilds the MIPS index from the current passage encoder. The start encoder's
        vectors come from the cached FlexIndex when it exists (built once per passage side)."""
        import faiss
        t0 = time.time()
        # how stale the index had become: the current queries' top k from it and from the
        # rebuilt one (logged, so that a refresh period can be judged by what it changes)
        probe = examples[:STALENESS_PROBE] if self._index is not None and self.train_passages else []
        if probe:
            probe_vectors = self.encoder.encode_queries([q.query for q in probe])
            stale = self.retrieve(probe_vectors, probe)
        # a frozen passage tower's vectors never change: its index is built once
        if self._index is None or self.train_passages:
            if initial:
                docnos, vectors, _ = flex_index(self.collection, self.encoder, cache_dir=self.cache_dir).payload()
                if list(docnos.fwd[np.arange(len(vectors))]) != list(self._docnos):
                    raise RuntimeError('the cached index lists the documents in another order than the corpus')
                vectors = np.ascontiguousarray(vectors, dtype=np.float32)
            else:
                vectors = self.encoder.encode_docs(self.collection.texts(list(self._docnos)))
            index = faiss.IndexFlatIP(vectors.shape[1])
            index.add(vectors)
            self._index, self._vectors = index, vectors
            if not self.train_passages:
                self.encoder.model.untie()
                for p in self.encoder.model.passage_parameters():
                    p.requires_grad_(False)
        self._train_mode(True)
        record = {'step': self.state.get('step', 0), 'refresh seconds': time.time() - t0}
        if probe:
            record['stale overlap'] = candidate_overlap(stale, self.retrieve(probe_vectors, probe))
        self.log.append(record)
        logger.info('MIPS index %s in %.0f s', 'built' if initial else 'refreshed', time.time() - t0)
        self.after_refresh(examples)

    def after_refresh(self, examples: List[Query]):
        """After each (re)build of the index (RUMBArt fills its teacher cache here)."""

    def retrieve(self, query_vectors: np.ndarray, batch: List[Query]) -> List[List[str]]:
        """Each query's top k from the stale index, excluded passages skipped (and the null
        document added, if asked for)."""
        extra = max(len(q.excluded) for q in batch)
        _, ids = self._index.search(np.ascontiguousarray(query_vectors, dtype=np.float32),
                                    min(self.k + extra, len(self._docnos)))
        out = []
        for q, row in zip(batch, ids):
            docnos = [d for d in self._docnos[row[row >= 0]] if d not in q.excluded][:self.k]
            out.append(docnos + ([NULL_DOCNO] if self.null_document else []))
        return out

    def candidates(self, batch: List[Query]) -> Tuple[List[List[str]], List[List[str]], torch.Tensor]:
        """(docnos, texts, retriever logits (b, k)) for a batch, the logits with gradients:
        current query encoder, stale index, candidates re-encoded by the current encoder."""
        queries = self.encoder.encode([q.query for q in batch], 'query')
        docnos = self.retrieve(queries.detach().float().cpu().numpy(), batch)
        width = min(len(d) for d in docnos)
        docnos = [d[:width] for d in docnos]  # a corpus smaller than k + exclusions
        texts = self.texts(docnos)
        if self.train_passages:
            passages = self.encoder.encode([t for row in texts for t in row], 'passage').view(len(batch), width, -1)
        else:  # the frozen tower's vectors, as the index holds them
            vectors = [[self._null_vector if d == NULL_DOCNO else self._vectors[self._rows[d]] for d in row]
                       for row in docnos]
            passages = torch.from_numpy(np.stack(vectors)).to(queries.device)
        logits = torch.einsum('bd,bkd->bk', queries, passages) / self.encoder.temperature
        if self.null_document:  # the prior's share on the null document (the last candidate)
            self.record('null prior', torch.softmax(logits.detach(), dim=-1)[:, -1].mean().item())
        return docnos, texts, logits

    def texts(self, docnos: List[List[str]]) -> List[List[str]]:
        flat = [d for row in docnos for d in row if d != NULL_DOCNO]
        lookup = dict(zip(flat, self.collection.texts(flat))) if flat else {}
        return [[lookup.get(d, '') for d in row] for row in docnos]


class Rumbart(RetrieveAndReconstruct):
    """RUMBArt: marginalisation over the k retrieved passages (thesis §4.3.1).

    A frozen generator's log p_θ(x|z) goes through an on-disk cache keyed by the
    generator's fingerprint and the corpus: after each refresh the pairs of all training
    queries are scored in one pass (passages shared across queries are encoded once),
    and a batch only looks them up. A trainable generator is scored with gradients.
    ``teacher_temperature`` divides log p_θ before marginalising (1: the thesis)."""
    description = 'RUMBArt'

    def __init__(self, *args, teacher_temperature: float = 1.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.teacher_temperature = teacher_temperature
        self._teacher = None
        if not self.generator.trainable:
            self._teacher = self.generator.scorer(
                normalise='sum', cache=score_cache_dir(self.collection.corpus_id, self.generator, self.cache_dir))

    def after_refresh(self, examples: List[Query]):
        if self._teacher is None:
            return
        t0 = time.time()
        vectors = self.encoder.encode_queries([q.query for q in examples])
        self._train_mode(True)
        docnos = []
        for start in range(0, len(examples), 1024):
            docnos += self.retrieve(vectors[start:start + 1024], examples[start:start + 1024])
        # one call for all pairs: the scorer goes by passage (each passage's prompt encoded
        # once for all its queries) and commits to the cache as it goes
        self.teacher_logp(examples, docnos, self.texts(docnos))
        self.log.append({'step': self.state.get('step', 0), 'teacher seconds': time.time() - t0})

    def teacher_logp(self, batch: List[Query], docnos: List[List[str]], texts: List[List[str]]) -> torch.Tensor:
        """log p_θ(x | z) for each query's candidates, (b, k)."""
        queries = [q.query for q, row in zip(batch, docnos) for _ in row]
        flat_texts = [t for row in texts for t in row]
        if self._teacher is not None:
            frame = pd.DataFrame({'qid': [q.qid for q, row in zip(batch, docnos) for _ in row], 'query': queries,
                                  'docno': [d for row in docnos for d in row], 'text': flat_texts})
            scored = self._teacher(frame).set_index(['qid', 'docno'])['score']  # rows come back re-ordered
            values = torch.tensor(scored.reindex(pd.MultiIndex.from_frame(frame[['qid', 'docno']]))
                                  .to_numpy(dtype=np.float32))
        else:
            values = self.generator.log_likelihood(queries, flat_texts)
        return values.view(len(batch), -1).to(self.encoder.device)

    def loss(self, batch: List[Query], rng: np.random.Generator) -> torch.Tensor:
        docnos, texts, logits = self.candidates(batch)
        teacher = self.teacher_logp(batch, docnos, texts) / self.teacher_temperature
        loss = marginal_nll(logits, teacher)
        if self.null_document:  # the posterior's share on it: how often it explains the query best
            posterior = torch.softmax(torch.log_softmax(logits.detach(), dim=-1) + teacher, dim=-1)
            self.record('null posterior', posterior[:, -1].mean().item())
        # the loss cannot go below -mean(max_z log p(x|z)) (all of p(z|x) on the teacher's
        # best): the excess is what the retriever can still gain, comparable across batches
        self.record('excess loss', (loss + teacher.max(dim=1).values.mean()).item())
        return loss


# -- ACROBArT ---------------------------------------------------------------------------

# The additive attention bias of the forward pass under way: (b, 1, rows, columns), rows
# and columns aligned with the end of the attended sequences.
_BIAS: ContextVar[Optional[torch.Tensor]] = ContextVar('selfsup_attention_bias', default=None)
BIASED = 'selfsup_biased'


def _biased_attention(module, query, key, value, attention_mask, **kwargs):
    """The model's own eager attention, with the bias of the pass under way added to the
    logits of the modules marked for it."""
    eager = sys.modules[type(module).__module__].eager_attention_forward
    bias = _BIAS.get()
    if bias is not None and getattr(module, '_selfsup_biased', False):
        q_len, kv_len = query.shape[-2], key.shape[-2]
        if attention_mask is None:
            attention_mask = torch.zeros((1, 1, q_len, kv_len), dtype=query.dtype, device=query.device)
        elif attention_mask.dtype == torch.bool:
            attention_mask = torch.zeros_like(attention_mask, dtype=query.dtype).masked_fill(
                ~attention_mask, torch.finfo(query.dtype).min)
        # Masked logits must stay finite in the dtype the softmax runs in (fp32 for
        # Llama even in fp64): a padding row masked with -inf everywhere gives NaN, and
        # NaN values at padding positions leak into real rows through 0 * NaN.
        floor = max(torch.finfo(query.dtype).min, torch.finfo(torch.float32).min) / 2
        attention_mask = attention_mask.to(query.dtype).clamp(min=floor)
        attention_mask = attention_mask[..., -q_len:, -kv_len:] + bias[..., -q_len:, -kv_len:].to(query.dtype)
    return eager(module, query, key, value, attention_mask, **kwargs)


AttentionInterface.register(BIASED, _biased_attention)
AttentionMaskInterface.register(BIASED, eager_mask)


def enable_attention_bias(generator: Generator):
    """Routes ``generator``'s attention through :func:`_biased_attention` and marks the
    modules that get the bias: the decoder's cross-attention of a seq2seq model, the
    self-attention of a decoder-only one."""
    model = generator.model
    if model.config._attn_implementation != BIASED:
        model.set_attn_implementation(BIASED)
    for name, module in model.named_modules():
        leaf = name.rsplit('.', 1)[-1]
        if generator.is_seq2seq:
            module._selfsup_biased = leaf in ('encoder_attn', 'EncDecAttention', 'crossattention')
        else:
            module._selfsup_biased = leaf in ('self_attn', 'attn', 'attention')


@contextmanager
def attention_bias(bias: torch.Tensor):
    token = _BIAS.set(bias)
    try:
        yield
    finally:
        _BIAS.reset(token)


def acrobart_log_likelihood(generator: Generator, targets: List[str], passages: List[List[str]],
                            weights: torch.Tensor) -> torch.Tensor:
    """log p_θ(target | z_1..z_k) with ``weights[i, j]`` (β·p_η(z_j|x_i), differentiable)
    added to the attention logits from the target's positions towards z_j's tokens.

    Seq2seq: each passage encoded on its own, the encoder outputs concatenated (thesis
    Eq. 4.10), the bias on the decoder's cross-attention. Decoder-only: the passages
    one after another inside the prompt, the bias on the self-attention of the rows
    that follow the passages (the prompt's tail and the target)."""
    enable_attention_bias(generator)
    b, k = weights.shape
    t_ids = generator.target_ids(targets)
    if generator.is_seq2seq:
        enc, enc_mask, owner = concatenated_encoding(generator, passages)
        target_width = max(1, max(len(t) for t in t_ids))
        bias = _owner_bias(weights, owner)[:, None, None, :].expand(b, 1, target_width, enc.shape[1])
        with attention_bias(bias), generator._autocast():
            return generator._decode_logp(enc, enc_mask, t_ids)
    seqs, owner, after = concatenated_prompts(generator, passages, t_ids)
    bias = _owner_bias(weights, owner)[:, None, None, :] * after[:, None, :, None]
    with attention_bias(bias), generator._autocast():
        return generator._sequence_logp(seqs, t_ids)


def concatenated_encoding(generator: Generator, passages: List[List[str]]):
    """Seq2seq: each row's passages encoded one by one and their encoder outputs
    concatenated (FiD; thesis Eq. 4.10): (outputs (b, width, d), mask (b, width), owner
    (b, width): the passage each position belongs to, -1 for padding)."""
    device = generator.device
    b, k = len(passages), len(passages[0])
    p_ids = generator.passage_ids([p for row in passages for p in row])
    ids, mask = _pad(p_ids, generator.tokenizer.pad_token_id, device=device)
    encoded = generator.model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
    hidden, spans = [], []
    for i in range(b):
        rows = range(i * k, (i + 1) * k)
        lengths = [int(mask[r].sum()) for r in rows]
        hidden.append(torch.cat([encoded[r, :n] for r, n in zip(rows, lengths)]))
        spans.append(np.repeat(np.arange(k), lengths))
    width = max(len(h) for h in hidden)
    enc = torch.zeros((b, width, encoded.shape[-1]), dtype=encoded.dtype, device=device)
    enc_mask = torch.zeros((b, width), dtype=torch.long, device=device)
    owner = torch.full((b, width), -1, dtype=torch.long, device=device)
    for i, h in enumerate(hidden):
        enc[i, :len(h)], enc_mask[i, :len(h)] = h, 1
        owner[i, :len(h)] = torch.as_tensor(spans[i], device=device)
    return enc, enc_mask, owner


def concatenated_prompts(generator: Generator, passages: List[List[str]], t_ids: List[List[int]]):
    """Decoder-only: one sequence per row, [head][z_1][sep][z_2]...[z_k][tail][target]
    (the prompt's head and tail around all k passages): (sequences, owner (b, length):
    the passage each position belongs to, -1 elsewhere, and after (b, length): the
    positions after the passages, the prompt's tail and the target), the tensors
    left-padded as :meth:`Generator._sequence_logp` pads the sequences."""
    device = generator.device
    tok = generator.tokenizer
    head, tail = generator.prompt.split('{passage}', 1)
    head_ids = generator._bos + (tok(head, add_special_tokens=False)['input_ids'] if head else [])
    tail_ids = tok(tail, add_special_tokens=False)['input_ids'] if tail else []
    sep_ids = tok('\n\n', add_special_tokens=False)['input_ids']
    built = []
    for row, target in zip(passages, t_ids):
        bodies = [_truncated_ids(generator, p) for p in row]
        seq, own = list(head_ids), [-1] * len(head_ids)
        for j, body in enumerate(bodies):
            piece = body + (sep_ids if j < len(bodies) - 1 else [])
            seq += piece
            own += [j] * len(body) + [-1] * (len(piece) - len(body))
        seq += tail_ids + target
        own += [-1] * (len(tail_ids) + len(target))
        built.append((seq, own, len(tail_ids) + len(target)))
    length = max(len(s) for s, _, _ in built)
    owner = torch.full((len(built), length), -1, dtype=torch.long, device=device)
    after = torch.zeros((len(built), length), dtype=torch.bool, device=device)
    for i, (seq, own, n_after) in enumerate(built):
        owner[i, length - len(seq):] = torch.as_tensor(own, device=device)
        after[i, length - n_after:] = True
    return [seq for seq, _, _ in built], owner, after


def _owner_bias(weights: torch.Tensor, owner: torch.Tensor) -> torch.Tensor:
    """(b, length): weights[i, owner[i, t]] where a token belongs to passage owner[i, t], else 0."""
    padded = torch.cat([weights, torch.zeros_like(weights[:, :1])], dim=1)  # index -1 -> the zero column
    return padded.gather(1, torch.where(owner >= 0, owner, torch.full_like(owner, weights.shape[1])))


def _truncated_ids(generator: Generator, passage: str) -> List[int]:
    ids = generator.tokenizer(passage or '', add_special_tokens=False)['input_ids']
    return ids[:generator.max_passage_length]


class Acrobart(RetrieveAndReconstruct):
    """ACROBArT: the k passages go to the generator together, the retrieval scores bias
    its attention (thesis §4.3.2). β is trainable (initial value ``beta``); the
    reconstruction loss reaches the retriever through the bias."""
    description = 'ACROBArT'

    def __init__(self, *args, beta: float = 1.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.beta = torch.nn.Parameter(torch.tensor(float(beta), device=self.encoder.device))

    def parameters(self):
        yield from super().parameters()
        yield self.beta

    def save_extra(self, path: Path):
        super().save_extra(path)
        torch.save({'beta': self.beta.detach().cpu()}, path / 'acrobart.pt')

    def load_extra(self, path: Path):
        super().load_extra(path)
        with torch.no_grad():
            self.beta.copy_(torch.load(path / 'acrobart.pt')['beta'])

    def loss(self, batch: List[Query], rng: np.random.Generator) -> torch.Tensor:
        docnos, texts, logits = self.candidates(batch)
        self.record('beta', self.beta.item())  # the value this step uses, before its update
        weights = self.beta * torch.softmax(logits, dim=-1)
        return -acrobart_log_likelihood(self.generator, [q.query for q in batch], texts, weights).mean()


# -- trained on first use, like an index ------------------------------------------------

METHODS = {'rumbart': Rumbart, 'acrobart': Acrobart}
CHECKPOINT_EVERY = 25  # steps, where no refresh period sets it


# options added after models had been cached: left out of the cache key at their default
_LATER_DEFAULTS = {'train_passages': True}


def reconstruction_model_dir(collection: Collection, settings: dict, cache_dir=None, *,
                             method: Optional[str] = None) -> Path:
    """Where :func:`reconstruction_retriever` keeps the model trained with ``settings``
    (``final/``, ``training_log.jsonl``, ``training_curve.png``; while it trains, under
    ``<dir>.partial`` with its last step checkpoint); ``method`` if the settings do not name it."""
    settings = dict(settings, method=method or settings['method'])
    for name, default in _LATER_DEFAULTS.items():  # keys of models cached before the option existed
        if settings.get(name) == default:
            del settings[name]
    return cache_root(cache_dir) / 'models' / cache_key(f'{collection.corpus_id}.{settings["method"]}', settings)


def _ds_settings(settings: dict) -> dict:
    return dict(DS_DEFAULTS, queries=settings['queries'], n_queries=settings['n_queries'], seed=settings['seed'])


def start_model(collection: Collection, settings: dict, cache_dir=None) -> str:
    """The model that a :func:`reconstruction_retriever` run with ``settings`` starts from:
    all-MiniLM-L6-v2, the ds pipeline's model trained on the same queries (``start='ds'``),
    or a path."""
    start = settings['start']
    if start == 'ds':
        return str(adapted_model_dir(collection, _ds_settings(settings), cache_dir) / 'final')
    return MINILM if start == 'minilm' else start


def reconstruction_retriever(collection: Union[str, Collection], *, method: str = 'rumbart', start: str = 'minilm',
                             queries: str = 'sentences', n_queries: int = 5000, k: int = 5,
                             refresh_every: Optional[int] = 25, null_document: bool = False,
                             train_passages: bool = True, epochs: int = 1,
                             batch_size: int = 16, accumulation: int = 1, lr: float = 2e-5,
                             teacher_temperature: float = 1.0, beta: float = 1.0, generator: str = 'smollm2',
                             max_passage_length: int = MAX_PASSAGE_LENGTH, seed: int = 0,
                             cache_dir: Optional[Union[str, Path]] = None, verbose: bool = False):
    """A dense retriever adapted to ``collection`` by RUMBArt or ACROBArT with a frozen
    generator, starting from all-MiniLM-L6-v2 (``start='minilm'``) or from its
    distant-supervision adaptation on the same queries (``start='ds'``). Trained on first
    use and cached by corpus and settings. ``train_passages=False``: only the query tower
    trains, the passages keep the start encoder (RAG's choice; see :class:`RetrieveAndReconstruct`)."""
    if method not in METHODS:
        raise ValueError(f'method must be one of {sorted(METHODS)}, not {method!r}')
    collection = Collection(collection) if isinstance(collection, str) else collection
    settings = dict(method=method, start=start, queries=queries, n_queries=n_queries, k=k,
                    refresh_every=refresh_every, null_document=null_document, train_passages=train_passages,
                    epochs=epochs, batch_size=batch_size, accumulation=accumulation, lr=lr, generator=generator,
                    max_passage_length=max_passage_length, seed=seed)
    extra = {'teacher_temperature': teacher_temperature} if method == 'rumbart' else {'beta': beta}
    settings.update(extra)
    path = reconstruction_model_dir(collection, settings, cache_dir)

    def train(staging: Path):
        if start == 'ds':  # the ds pipeline's model, trained on the same queries (on first use)
            adapted_retriever(collection, cache_dir=cache_dir, verbose=verbose, **_ds_settings(settings))
        start_path = start_model(collection, settings, cache_dir)
        gen = load_generator(generator, cache_dir=cache_dir, max_passage_length=max_passage_length, verbose=verbose)
        torch.manual_seed(seed)
        # A run resumes exactly from a checkpoint taken right after a refresh (its index is
        # rebuilt from the checkpoint's encoder); a frozen passage tower's index never changes.
        checkpoint_every = refresh_every or (None if train_passages else CHECKPOINT_EVERY)
        trainer = METHODS[method](DualEncoder.from_pretrained(start_path), gen, collection, k=k,
                                  refresh_every=refresh_every, null_document=null_document,
                                  train_passages=train_passages, epochs=epochs,
                                  batch_size=batch_size, accumulation=accumulation, lr=lr, output_dir=staging,
                                  checkpoint_every=checkpoint_every, keep_checkpoints=1,
                                  seed=seed, cache_dir=cache_dir, verbose=verbose, **extra)
        # generated queries are written by the generator at its default settings, whatever this
        # run's passage length, so that every trainer given that source trains on the same queries
        writer = gen if max_passage_length == MAX_PASSAGE_LENGTH else generator
        fit_resumably(trainer, training_topics(collection, queries, n_queries, seed=seed, generator=writer,
                                               cache_dir=cache_dir))

    # an interrupted training run continues from its last checkpoint when asked for again
    return DenseRetriever.from_dual_encoder(collection, str(build_once(path, train, resumable=True) / 'final'),
                                            cache_dir=cache_dir, verbose=verbose)
