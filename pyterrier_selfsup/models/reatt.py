"""Retrieval as Attention (ReAtt; Jiang et al., 2022, §2.2): a transformer's own attention
as a token-level late-interaction retriever.

The first B layers of an encoder encode query and document independently (a bi-encoder).
At layer B+1, head h's pre-softmax attention from query tokens to document tokens,
A = Q_q K_dᵀ (times the layer's own scaling: 1/√e for BERT, 1 for T5), scores the pair:

    r_h(q, d) = mean over query tokens of the max over document tokens of A      (Eq. 1)
    r(q, d)   = Σ_h softmax(w / τ)_h · r_h(q, d)

with w learnable and τ low, so that training ends up selecting one *retrieval head*.
Backbones: BERT-family encoders and the T5 encoder (pre-norm: layer B+1's attention reads its
layer norm of the B-th layer's output).

    reatt = ReAtt.from_pretrained('sentence-transformers/all-MiniLM-L6-v2', retrieval_layer=3,
                                  head=...)
    bm25 % 100 >> collection.text_loader() >> reatt.scorer()
"""
import copy
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyterrier as pt
import torch
from torch.nn.utils.rnn import pad_sequence
from transformers import AutoConfig, AutoModel, AutoTokenizer

from pyterrier_selfsup._cache import weights_fingerprint
from pyterrier_selfsup.models.batching import clean_texts, to_device
from pyterrier_selfsup.models.hub import read_saved_config
from pyterrier_selfsup.models.precision import resolve_device
from pyterrier_selfsup.models.trainable import TrainableModel
from pyterrier_selfsup.progress import progress

REATT_CONFIG_FILE = 'reatt.json'
HEAD_WEIGHTS_FILE = 'reatt_heads.pt'


@dataclass
class _Attention:
    """Layer B+1's self-attention, as far as retrieval needs it."""
    query: torch.nn.Linear
    key: torch.nn.Linear
    norm: torch.nn.Module | None  # a pre-norm transformer's layer norm before attention (T5)
    heads: int
    head_dim: int
    scaling: float


def _stack(model: torch.nn.Module):
    """(the module that runs the layers, the name of its layer list)."""
    encoder = model.encoder if hasattr(model, 'encoder') else model
    for name in ('layer', 'block'):
        if isinstance(getattr(encoder, name, None), torch.nn.ModuleList):
            return encoder, name
    raise ValueError(f'{type(model).__name__}: no layer list (neither encoder.layer nor '
                     'encoder.block)')


def n_layers(model: torch.nn.Module) -> int:
    stack, name = _stack(model)
    return len(getattr(stack, name))


def retrieval_attention(model: torch.nn.Module, layer: int) -> _Attention:
    """The self-attention of ``model``'s layer ``layer``, counted from 0 (so layer B+1 of
    the paper, after B bi-encoder layers, is ``layer=B``)."""
    stack, name = _stack(model)
    block = getattr(stack, name)[layer]
    if name == 'layer':  # BERT family: post-norm, the previous layer's output goes in as is
        attn = block.attention.self
        return _Attention(attn.query, attn.key, None, attn.num_attention_heads,
                          attn.attention_head_size, float(attn.scaling))
    sub = block.layer[0]  # T5: pre-norm, unscaled dot products
    attn = sub.SelfAttention
    return _Attention(attn.q, attn.k, sub.layer_norm, attn.n_heads, attn.key_value_proj_dim, 1.0)


def first_layers(model: torch.nn.Module, n: int) -> torch.nn.Module:
    """A view of ``model`` that runs its embeddings and only its first ``n`` layers, sharing
    its parameters (without a T5 stack's final layer norm)."""
    stack, name = _stack(model)
    view_stack = copy.copy(stack)
    view_stack._modules = dict(stack._modules)  # nn.Module keeps submodules in this dict
    setattr(view_stack, name, torch.nn.ModuleList(list(getattr(stack, name))[:n]))
    if hasattr(view_stack, 'final_layer_norm'):
        view_stack.final_layer_norm = torch.nn.Identity()
    if stack is model:
        return view_stack
    view = copy.copy(model)
    view._modules = dict(model._modules)
    view.encoder = view_stack
    return view


class ReAttModel(torch.nn.Module):
    """The trainable part: the encoder, its retrieval layer, and the head weights w."""

    def __init__(self, encoder: torch.nn.Module, retrieval_layer: int, *,
                 head_temperature: float = 0.1):
        super().__init__()
        total = n_layers(encoder)
        if not 0 <= retrieval_layer < total:
            raise ValueError(f'retrieval_layer must be in 0..{total - 1} (B: the layers before it '
                             f'are the bi-encoder), not {retrieval_layer}')
        self.encoder = encoder
        self.retrieval_layer = retrieval_layer
        self.head_temperature = head_temperature
        self.attention = retrieval_attention(encoder, retrieval_layer)
        self.head_logits = torch.nn.Parameter(torch.zeros(self.attention.heads))
        # a list: not a registered submodule
        self._bi_encoder = [first_layers(encoder, retrieval_layer)]

    @property
    def head_weights(self) -> torch.Tensor:
        """P_head = softmax(w / τ)."""
        return torch.softmax(self.head_logits / self.head_temperature, dim=0)

    @property
    def retrieval_head(self) -> int:
        return int(self.head_logits.argmax())

    def select_head(self, head: int, margin: float = 1.0):
        """Puts (nearly) all of P_head on ``head``: w = ``margin`` there, 0 elsewhere."""
        with torch.no_grad():
            self.head_logits.zero_()
            self.head_logits[head] = margin

    def states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The bi-encoder's output: hidden states after the first B layers, (b, L, hidden)."""
        return self._bi_encoder[0](input_ids=input_ids,
                                   attention_mask=attention_mask).last_hidden_state

    def project(self, hidden: torch.Tensor, side: str) -> torch.Tensor:
        """Layer B+1's query (``side='query'``) or key vectors per head, (b, H, L, e)."""
        att = self.attention
        if att.norm is not None:
            hidden = att.norm(hidden)
        proj = att.query if side == 'query' else att.key
        b, length, _ = hidden.shape
        return proj(hidden).view(b, length, att.heads, att.head_dim).transpose(1, 2)

    def head_scores(self, q: torch.Tensor, q_mask: torch.Tensor, k: torch.Tensor,
                    k_mask: torch.Tensor, chunk: int = 64) -> torch.Tensor:
        """r_h(q_i, d_j) for every query i and document j, (n_q, n_d, H); documents in chunks
        of ``chunk`` to bound memory."""
        out = []
        q_mask = q_mask.to(q.dtype)
        n_tokens = q_mask.sum(1).clamp(min=1)  # (n_q,)
        for start in range(0, len(k), chunk):
            kc, mc = k[start:start + chunk], k_mask[start:start + chunk]
            logits = torch.einsum('ihqe,jhde->ijhqd', q, kc) * self.attention.scaling
            logits = logits.masked_fill(~mc.bool()[None, :, None, None, :],
                                        torch.finfo(logits.dtype).min)
            best = logits.max(dim=-1).values
            r = (best * q_mask[:, None, None, :]).sum(-1) / n_tokens[:, None, None]
            # a document with no token to score (nothing left after truncation) cannot be retrieved
            out.append(r.masked_fill(~mc.bool().any(1)[None, :, None], float('-inf')))
        return torch.cat(out, dim=1) if out else q.new_zeros((len(q), 0, self.attention.heads))

    def scores(self, q: torch.Tensor, q_mask: torch.Tensor, k: torch.Tensor,
               k_mask: torch.Tensor) -> torch.Tensor:
        """r(q_i, d_j) = Σ_h P_head,h r_h, (n_q, n_d); -inf for a document with no token."""
        r = self.head_scores(q, q_mask, k, k_mask)
        empty = torch.isneginf(r).all(-1)  # (0 · -inf would be NaN where a head weight underflows)
        return (r.masked_fill(empty[..., None], 0.0) @ self.head_weights.to(r.dtype)
                ).masked_fill(empty, float('-inf'))


class ReAtt(TrainableModel):
    """A ReAtt retriever over any BERT-family or T5 encoder: tokenisation, encoding, scoring,
    a re-ranker (:meth:`scorer`), save and load.

    ``retrieval_layer`` is B, counted from 0, so that the B layers before it are the bi-encoder;
    ``head_temperature`` is τ."""

    def __init__(self, model: ReAttModel, tokenizer, *, name: str = 'reatt', max_length: int = 256,
                 query_max_length: int = 64, special_tokens: bool = True, batch_size: int = 32,
                 device: str | None = None, precision: str = 'auto', verbose: bool = False):
        self.device = resolve_device(device)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.name = name
        self.max_length = max_length
        self.query_max_length = query_max_length
        self.special_tokens = special_tokens
        self.batch_size = batch_size
        self.precision = precision
        self.verbose = verbose

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, retrieval_layer: int | None = None,
                        head_temperature: float | None = None, head: int | None = None,
                        max_length: int | None = None, **kwargs) -> 'ReAtt':
        """A hub name or path: any encoder (a T5 checkpoint gives its encoder), or a directory
        written by :meth:`save_pretrained`. ``retrieval_layer`` defaults to the checkpoint's own,
        else half the depth; ``head`` puts P_head on one head, else heads start uniform."""
        saved = read_saved_config(name_or_path, REATT_CONFIG_FILE) or {}
        config = AutoConfig.from_pretrained(name_or_path)
        if getattr(config, 'is_encoder_decoder', False):  # a seq2seq checkpoint: its encoder only
            from transformers import T5EncoderModel
            encoder = T5EncoderModel.from_pretrained(name_or_path)
        else:
            encoder = AutoModel.from_pretrained(name_or_path)
        for value in (saved.get('retrieval_layer'), getattr(config, 'retrieval_layer', None),
                      n_layers(encoder) // 2):
            if retrieval_layer is None:
                retrieval_layer = value
        if head is None and not saved:
            head = getattr(config, 'retrieval_head', None)
        model = ReAttModel(encoder, retrieval_layer,
                           head_temperature=head_temperature or saved.get('head_temperature', 0.1))
        if saved and (Path(name_or_path) / HEAD_WEIGHTS_FILE).is_file():
            model.head_logits.data.copy_(torch.load(Path(name_or_path) / HEAD_WEIGHTS_FILE,
                                                    map_location='cpu'))
        if head is not None:
            model.select_head(head)
        tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        limit = min(tokenizer.model_max_length,
                    getattr(config, 'max_position_embeddings', math.inf))
        max_length = max_length or saved.get('max_length') or int(min(256, limit))
        for key in ('query_max_length', 'special_tokens', 'name'):
            if key in saved:
                kwargs.setdefault(key, saved[key])
        kwargs.setdefault('name', str(name_or_path))
        return cls(model, tokenizer, max_length=max_length, **kwargs)

    def config(self) -> dict:
        return {'name': self.name, 'retrieval_layer': self.model.retrieval_layer,
                'head_temperature': self.model.head_temperature, 'max_length': self.max_length,
                'query_max_length': self.query_max_length, 'special_tokens': self.special_tokens}

    def save_pretrained(self, path: str | Path) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.encoder.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        torch.save(self.model.head_logits.detach().cpu(), path / HEAD_WEIGHTS_FILE)
        (path / REATT_CONFIG_FILE).write_text(json.dumps(self.config(), indent=2))
        return path

    def fingerprint(self) -> str:
        return weights_fingerprint(self.config(), self.model)

    # -- what a trainer needs ------------------------------------------------------

    def torch_modules(self) -> list[torch.nn.Module]:
        return [self.model]

    def load_weights(self, path: str | Path):
        self.model.load_state_dict(
            ReAtt.from_pretrained(str(path), device='cpu').model.state_dict())

    # -- encoding ---------------------------------------------------------------------

    def tokenize(self, texts: Sequence[str], side: str) -> dict[str, torch.Tensor]:
        max_length = self.query_max_length if side == 'query' else self.max_length
        batch = self.tokenizer(clean_texts(list(texts)), padding=True, truncation=True,
                               max_length=max_length, return_tensors='pt',
                               return_special_tokens_mask=True)
        out = {'input_ids': to_device(batch['input_ids'], self.device),
               'attention_mask': to_device(batch['attention_mask'], self.device)}
        # which tokens score: all real ones, or (special_tokens=False) those of the text itself
        out['score_mask'] = out['attention_mask'] * (
            1 if self.special_tokens else 1 - to_device(batch['special_tokens_mask'], self.device))
        return out

    def encode(self, texts: Sequence[str], side: str):
        """(vectors (b, H, L, e), mask (b, L)) of layer B+1's queries or keys, with gradients."""
        batch = self.tokenize(texts, side)
        with self.autocast():
            vectors = self.model.project(self.model.states(batch['input_ids'],
                                                           batch['attention_mask']), side)
        if vectors.dtype in (torch.float16, torch.bfloat16):
            vectors = vectors.float()
        return vectors, batch['score_mask']

    def token_vectors(self, texts: Sequence[str], side: str) -> list[torch.Tensor]:
        """Inference: each text's layer-B+1 query or key vectors, (L, H, e) without padding."""
        texts = list(texts)
        order = np.argsort([-len(t) if isinstance(t, str) else 0 for t in texts], kind='stable')
        out: list[torch.Tensor | None] = [None] * len(texts)
        batches = progress(range(0, len(texts), self.batch_size), total=len(texts),
                           desc=f'ReAtt {side}s', unit=side,
                           count=lambda start: len(order[start:start + self.batch_size]),
                           enabled=self.verbose and len(texts) > self.batch_size)
        with self.inference():
            for start in batches:
                idx = order[start:start + self.batch_size]
                vectors, mask = self.encode([texts[i] for i in idx], side)
                for row, i in enumerate(idx):
                    out[i] = vectors[row, :, mask[row].bool()].transpose(0, 1).contiguous()
        return out

    def score_texts(self, queries: Sequence[str], docs: Sequence[str], *,
                    per_head: bool = False) -> np.ndarray:
        """r(q_i, d_i) for aligned pairs (``per_head``: r_h for every head, (n, H)); each
        distinct query and document is encoded once."""
        uq, qi = np.unique(np.asarray(clean_texts(list(queries)), dtype=object),
                           return_inverse=True)
        ud, di = np.unique(np.asarray(clean_texts(list(docs)), dtype=object), return_inverse=True)
        q_vectors, d_vectors = self.token_vectors(uq, 'query'), self.token_vectors(ud, 'passage')
        out = np.empty((len(qi), self.model.attention.heads), dtype=np.float32)
        with torch.inference_mode():
            for i in range(len(uq)):
                rows = np.flatnonzero(qi == i)
                q, q_mask = pad_tokens([q_vectors[i]])
                k, k_mask = pad_tokens([d_vectors[j] for j in di[rows]])
                out[rows] = self.model.head_scores(q, q_mask, k, k_mask)[0].cpu().numpy()
        return out if per_head else mix_heads(out, self.model.head_weights)

    # -- PyTerrier --------------------------------------------------------------------

    def scorer(self, *, text_field: str = 'text') -> pt.Transformer:
        """A re-ranker: scores each (query, text) row by r(q, d)."""
        return ReAttScorer(self, text_field=text_field)

    def __repr__(self):
        return (f'ReAtt({self.name!r}, retrieval_layer={self.model.retrieval_layer}, '
                f'heads={self.model.attention.heads})')


class ReAttScorer(pt.Transformer):
    def __init__(self, reatt: ReAtt, *, text_field: str = 'text'):
        self.reatt = reatt
        self.text_field = text_field

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pt.validate.columns(inp, includes=['qid', 'query', self.text_field])
        out = inp.copy()
        if not len(out):
            out['score'] = pd.Series(dtype=float)
            return pt.model.add_ranks(out)
        out['score'] = self.reatt.score_texts(out['query'].tolist(), out[self.text_field].tolist())
        return pt.model.add_ranks(out)


def mix_heads(per_head: np.ndarray, weights: torch.Tensor) -> np.ndarray:
    """Σ_h weights_h · r_h per row of ``per_head`` (n, H); -inf where every head is -inf."""
    empty = np.isneginf(per_head).all(axis=1)
    out = np.where(empty[:, None], 0.0, per_head) @ weights.detach().float().cpu().numpy()
    return np.where(empty, -np.inf, out).astype(np.float32)


def pad_tokens(pieces: list[torch.Tensor]):
    """Per-text token vectors (L_i, H, e) as one padded batch (b, H, L, e) and its mask (b, L)."""
    # an empty filler piece appended and dropped: empty texts still get one masked position
    filler = pieces[0].new_zeros((1,) + tuple(pieces[0].shape[1:]))
    vectors = pad_sequence(list(pieces) + [filler], batch_first=True)[:-1].permute(0, 2, 1, 3)
    mask = pad_sequence([torch.ones(len(p), dtype=torch.long, device=p.device) for p in pieces]
                        + [torch.zeros(1, dtype=torch.long, device=filler.device)],
                        batch_first=True)[:-1]
    return vectors, mask
