"""k passages read together by a generator: the attention machinery that ACROBArT and
ReAtt's cross-document adjustment share.

- :func:`concatenated_encoding` / :func:`concatenated_prompts`: the k passages of a query as
  one input, with ``owner``: the passage each position belongs to.
- :func:`biased_log_likelihood` (ACROBArT, thesis §4.3.2): log p(target | z_1..z_k) with a
  differentiable bias added to the attention logits towards each passage's tokens.
- :func:`checkpointed_layers`: the generator's layers recomputed in the backward pass, with
  the bias of their forward pass.

The bias goes in through an attention function registered with transformers
(:func:`enable_attention_bias`): the model's own eager attention plus the bias.
"""
import sys
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar

import numpy as np
import torch
import torch.utils.checkpoint

from pyterrier_selfsup.models.batching import pad
from pyterrier_selfsup.models.generator import Generator

# the additive attention bias of the forward pass under way: (b, 1, rows, columns)
_BIAS: ContextVar[torch.Tensor | None] = ContextVar('selfsup_attention_bias', default=None)
BIASED = 'selfsup_biased'


def _biased_attention(module, query, key, value, attention_mask, **kwargs):
    """The model's own eager attention, with the bias of the pass under way added to the
    logits of the modules marked for it."""
    eager = sys.modules[type(module).__module__].eager_attention_forward
    bias = _BIAS.get()
    if bias is not None and getattr(module, '_selfsup_biased', False):
        q_len, kv_len = query.shape[-2], key.shape[-2]
        if attention_mask is None:
            attention_mask = torch.zeros((1, 1, q_len, kv_len), dtype=query.dtype,
                                         device=query.device)
        elif attention_mask.dtype == torch.bool:
            attention_mask = torch.zeros_like(attention_mask, dtype=query.dtype).masked_fill(
                ~attention_mask, torch.finfo(query.dtype).min)
        # masked logits stay finite in the softmax's dtype: a row all -inf gives NaN, which
        # leaks into real rows through 0 * NaN
        floor = max(torch.finfo(query.dtype).min, torch.finfo(torch.float32).min) / 2
        attention_mask = attention_mask.to(query.dtype).clamp(min=floor)
        attention_mask = (attention_mask[..., -q_len:, -kv_len:]
                          + bias[..., -q_len:, -kv_len:].to(query.dtype))
    return eager(module, query, key, value, attention_mask, **kwargs)


def enable_attention_bias(generator: Generator):
    """Routes ``generator``'s attention through :func:`_biased_attention` and marks the
    modules that get the bias: the decoder's cross-attention of a seq2seq model, the
    self-attention of a decoder-only one."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask
    # (registered here, not at import)
    AttentionInterface.register(BIASED, _biased_attention)
    AttentionMaskInterface.register(BIASED, eager_mask)
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


def checkpointed_layers(generator: Generator, on: bool):
    """Gradient checkpointing of ``generator``'s layers (each ``GradientCheckpointingLayer``)
    on or off.

    Not transformers' own, which acts in training mode only and recomputes outside the
    :func:`attention_bias` context, losing the gradient towards the retriever; here the bias is
    set again for the recompute (``torch.utils.checkpoint``'s ``context_fn``)."""
    from transformers.modeling_layers import GradientCheckpointingLayer
    for module in generator.model.modules():
        if not isinstance(module, GradientCheckpointingLayer):
            continue
        mine = getattr(module.__dict__.get('forward'), CHECKPOINTED, False)
        if on and 'forward' not in module.__dict__:
            # (an attribute of this instance: the class's hides)
            module.forward = _checkpointed(module.forward)
        elif not on and mine:  # (only this function's own: another's wrapper stays)
            del module.forward


CHECKPOINTED = '_selfsup_checkpointed'


def _checkpointed(forward):
    def checkpointed(*args, **kwargs):
        if not torch.is_grad_enabled():
            return forward(*args, **kwargs)
        bias = _BIAS.get()
        return torch.utils.checkpoint.checkpoint(
            forward, *args, use_reentrant=False,
            context_fn=lambda: (nullcontext(), attention_bias(bias)), **kwargs)
    setattr(checkpointed, CHECKPOINTED, True)
    return checkpointed


def biased_log_likelihood(generator: Generator, targets: list[str], passages: list[list[str]],
                          weights: torch.Tensor, rows: slice | None = None) -> torch.Tensor:
    """log p_θ(target | z_1..z_k) with ``weights[i, j]`` (β·p_η(z_j|x_i), differentiable)
    added to the attention logits from the target's positions towards z_j's tokens.

    Seq2seq: each passage encoded on its own, the encoder outputs concatenated (thesis Eq.
    4.10), the bias on the decoder's cross-attention. Decoder-only: the passages one after
    another inside the prompt, the bias on the self-attention of the rows after them.

    ``rows``: only these rows of the batch (``weights`` holds theirs alone), padded as the whole
    batch pads them, so that each row's value is the one the whole batch gives it."""
    enable_attention_bias(generator)
    t_ids = generator.target_ids(targets)
    target_width = max(1, max(len(t) for t in t_ids))
    if generator.is_seq2seq:
        shape = {}
        # the whole batch's widths: its longest passage and its longest row of k
        if rows is not None:
            lengths = np.array([len(i) for i in generator.passage_ids([p for row in passages
                                                                       for p in row])])
            lengths = lengths.reshape(len(passages), -1)
            shape = dict(min_passage_width=int(lengths.max()), min_width=int(lengths.sum(1).max()))
            passages, t_ids = passages[rows], t_ids[rows]
        with generator.autocast():
            enc, enc_mask, owner = concatenated_encoding(generator, passages, **shape)
        bias = _owner_bias(weights, owner)[:, None, None, :].expand(len(t_ids), 1, target_width,
                                                                    enc.shape[1])
        with attention_bias(bias), generator.autocast():
            return generator.decode_logp(enc, enc_mask, t_ids, min_target_width=target_width)
    seqs, owner, after = concatenated_prompts(generator, passages, t_ids)
    length = owner.shape[1]
    if rows is not None:
        seqs, t_ids, owner, after = seqs[rows], t_ids[rows], owner[rows], after[rows]
    bias = _owner_bias(weights, owner)[:, None, None, :] * after[:, None, :, None]
    with attention_bias(bias), generator.autocast():
        return generator.sequence_logp(seqs, t_ids, min_length=length,
                                       min_target_width=target_width)


def concatenated_encoding(generator: Generator, passages: list[list[str]], *,
                          min_passage_width: int = 1, min_width: int = 1):
    """Seq2seq: each row's passages encoded one by one and their outputs concatenated (FiD):
    (outputs (b, width, d), mask (b, width), owner (b, width), -1 for padding).
    ``min_passage_width``, ``min_width``: at least this long a padded passage and row."""
    device = generator.device
    b, k = len(passages), len(passages[0])
    p_ids = generator.passage_ids([p for row in passages for p in row])
    ids, mask = pad(p_ids, generator.tokenizer.pad_token_id, device=device,
                    min_width=min_passage_width)
    encoded = generator.model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
    hidden, spans = [], []
    for i in range(b):
        rows = range(i * k, (i + 1) * k)
        lengths = [int(mask[r].sum()) for r in rows]
        hidden.append(torch.cat([encoded[r, :n] for r, n in zip(rows, lengths)]))
        spans.append(np.repeat(np.arange(k), lengths))
    width = max(min_width, max(len(h) for h in hidden))
    enc = torch.zeros((b, width, encoded.shape[-1]), dtype=encoded.dtype, device=device)
    enc_mask = torch.zeros((b, width), dtype=torch.long, device=device)
    owner = torch.full((b, width), -1, dtype=torch.long, device=device)
    for i, h in enumerate(hidden):
        enc[i, :len(h)], enc_mask[i, :len(h)] = h, 1
        owner[i, :len(h)] = torch.as_tensor(spans[i], device=device)
    return enc, enc_mask, owner


def concatenated_prompts(generator: Generator, passages: list[list[str]], t_ids: list[list[int]]):
    """Decoder-only: one sequence per row, [head][z_1][sep][z_2]...[z_k][tail][target]:
    (sequences, owner (b, length), -1 off the passages, and after (b, length): the positions
    after the passages), left-padded as :meth:`Generator.sequence_logp` pads them."""
    device = generator.device
    tok = generator.tokenizer
    head, tail = generator.prompt.split('{passage}', 1)
    head_ids = generator.bos_ids + (tok(head, add_special_tokens=False)['input_ids'] if head
                                    else [])
    tail_ids = tok(tail, add_special_tokens=False)['input_ids'] if tail else []
    sep_ids = tok('\n\n', add_special_tokens=False)['input_ids']
    built = []
    for row, target in zip(passages, t_ids):
        bodies = [truncated_ids(generator, p) for p in row]
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
    """(b, length): weights[i, owner[i, t]] where a token belongs to passage owner[i, t],
    else 0."""
    # index -1 -> the zero column
    padded = torch.cat([weights, torch.zeros_like(weights[:, :1])], dim=1)
    return padded.gather(1, torch.where(owner >= 0, owner,
                                        torch.full_like(owner, weights.shape[1])))


def truncated_ids(generator: Generator, passage: str) -> list[int]:
    ids = generator.tokenizer(passage or '', add_special_tokens=False)['input_ids']
    return ids[:generator.max_passage_length]


def owner_one_hot(owner: torch.Tensor, k: int) -> torch.Tensor:
    """(b, L, k): 1 where a position belongs to passage j (``owner`` (b, L), -1: to none)."""
    return torch.nn.functional.one_hot(owner.clamp(min=0), k).float() * (owner >= 0)[..., None]


def first_position_shares(cross_attention: torch.Tensor, owner: torch.Tensor,
                          k: int) -> torch.Tensor:
    """ReAtt's P_target (§3.2) from a decoder's last-layer cross-attention (b, H, rows, L),
    softmaxed over all encoder positions: the first decoder position's weights summed per
    passage (``owner``) and averaged over heads, (b, k)."""
    weights = cross_attention[:, :, 0, :].float()
    return torch.einsum('bhw,bwk->bhk', weights, owner_one_hot(owner, k)).mean(1)
