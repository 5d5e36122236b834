"""The query writer's key/value cache and attention: each prompt's keys and values held once and
read by all of its samples (:class:`WriterCache`, :func:`shared_prompt_attention`), a prefix
that every prompt begins with held once a call (:class:`SharedPrefix`), and the prefill's
attention computed a chunk of positions at a time (:func:`chunked_prefill_attention`).

The attention functions are registered with transformers' ``AttentionInterface`` and selected
for the forwards that read a :class:`WriterCache` (:func:`writer_attention`).
"""
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cache
from typing import Optional

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

# new tokens' room a sample's keys and values are given at a time: a sample whose query has
# ended leaves the batch, so the buffer grows by copying the rows still writing
NEW_TOKENS_RESERVED = 8


@dataclass
class SharedPrefix:
    """The tokens that every prompt of a call begins with, prefilled once: their number and
    each layer's keys and values, (1, heads, length, dim)."""
    length: int
    layers: list[tuple[torch.Tensor, torch.Tensor]]


class WriterLayer(DynamicLayer):
    """One layer's keys and values in two parts: the prompts' (one row a prompt, never copied
    to the samples) and the new tokens' (one row a sample, in a buffer with room for ``reserve``
    positions, written in place rather than concatenated). ``update`` returns the part it wrote
    to (the prompts' at the prefill, the new tokens' after it)."""

    def __init__(self, reserve: int, prefix: tuple[torch.Tensor, torch.Tensor] | None = None):
        super().__init__()
        self.reserve = reserve
        self.prefix = prefix
        self.prompt_keys = None  # (prompts, heads, dim, prompt length): transposed
        self.prompt_values = None  # (prompts, heads, prompt length, dim)
        self._keys = self._values = None  # (samples, heads, reserve, dim)
        self.new = 0  # new tokens held

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self.prompt_keys is None:  # the prefill: held as every step reads them (keys transposed)
            if self.prefix is not None:  # (the prompts' rest: after the prefix, for each prompt)
                rows = key_states.shape[0]
                keys, values = self.prefix
                key_states = torch.cat([keys.expand(rows, -1, -1, -1), key_states], dim=-2)
                value_states = torch.cat([values.expand(rows, -1, -1, -1), value_states], dim=-2)
            self.prompt_keys = key_states.transpose(-1, -2).contiguous()
            self.prompt_values = value_states.contiguous()
            self.keys, self.values = key_states, value_states
            return key_states, value_states
        step = key_states.shape[-2]
        if self._keys is None or self.new + step > self._keys.shape[-2]:
            size = self.new + step + self.reserve
            keys = key_states.new_empty((*key_states.shape[:2], size, key_states.shape[-1]))
            values = value_states.new_empty((*value_states.shape[:2], size, value_states.shape[-1]))
            if self.new:
                keys[:, :, :self.new] = self._keys[:, :, :self.new]
                values[:, :, :self.new] = self._values[:, :, :self.new]
            self._keys, self._values = keys, values
        self._keys[:, :, self.new:self.new + step] = key_states
        self._values[:, :, self.new:self.new + step] = value_states
        self.new += step
        self.keys, self.values = self._keys[:, :, :self.new], self._values[:, :, :self.new]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        if self.prompt_keys is None:  # (before the prefill: the prefix, if any)
            return 0 if self.prefix is None else self.prefix[0].shape[-2]
        return self.prompt_keys.shape[-1] + self.new

    def select_samples(self, indices: torch.Tensor) -> None:
        if self._keys is not None:
            self._keys, self._values = self._keys[indices], self._values[indices]
            self.keys, self.values = self._keys[:, :, :self.new], self._values[:, :, :self.new]

    def select_prompts(self, indices: torch.Tensor) -> None:
        self.prompt_keys, self.prompt_values = (self.prompt_keys[indices],
                                                self.prompt_values[indices])

    def batch_repeat_interleave(self, repeats: int) -> None:
        raise NotImplementedError('the query writer\'s cache shares a prompt across its samples: '
                                  'WriterCache.fork')

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        raise NotImplementedError('the query writer\'s cache selects samples through WriterCache')

    def reset(self) -> None:
        self.prefix = self.prompt_keys = self.prompt_values = self._keys = self._values = None
        self.new = 0
        super().reset()

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError('the query writer\'s cache is written forward only')


class WriterCache(DynamicCache):
    """The writer's key/value cache: a :class:`WriterLayer` a layer, for models whose layers
    all attend to every position.

    After the prefill, :meth:`fork` makes ``n`` samples of each prompt without copying it: sample
    ``i`` of prompt ``p`` is slot ``p * n + i``; ``slots`` lists the slots of the samples still
    writing. :meth:`batch_select_indices` drops finished samples, and the prompts none of whose
    samples is still writing once they are a quarter of those held."""

    def __init__(self, layers: int, reserve: int, prefix: Optional['SharedPrefix'] = None):
        prefixes = prefix.layers if prefix is not None else [None] * layers
        Cache.__init__(self, layers=[WriterLayer(reserve, kv) for kv in prefixes])
        self.prefix = prefix
        self.samples, self.slots, self.prompt_bias = 1, None, None

    @classmethod
    def empty_like(cls, part: 'WriterCache', prompts: int, width: int) -> 'WriterCache':
        """A zeroed cache with room for ``prompts`` prompts of up to ``width`` positions, laid
        out as ``part``'s; filled by :meth:`place`."""
        empty = cls(len(part.layers), part.layers[0].reserve)
        for layer, given in zip(empty.layers, part.layers):
            keys, values = given.prompt_keys, given.prompt_values
            layer.lazy_initialization(keys, values)
            layer.prompt_keys = keys.new_zeros((prompts, *keys.shape[1:-1], width))
            layer.prompt_values = values.new_zeros((prompts, values.shape[1], width,
                                                    values.shape[-1]))
        return empty

    def place(self, part: 'WriterCache', start: int) -> None:
        """``part``'s prompts as prompts ``start``, ``start + 1``, ..., each padded on the right to
        this cache's width."""
        for layer, given in zip(self.layers, part.layers):
            rows, length = given.prompt_keys.shape[0], given.prompt_keys.shape[-1]
            layer.prompt_keys[start:start + rows, ..., :length] = given.prompt_keys
            layer.prompt_values[start:start + rows, :, :length] = given.prompt_values

    def fork(self, n: int, prompt_mask: torch.Tensor) -> None:
        """``n`` samples of each prefilled prompt; ``prompt_mask`` (prompts, length): its
        real (not padding) positions."""
        self.samples = n
        self.slots = torch.arange(prompt_mask.shape[0] * n, device=prompt_mask.device)
        self.prompt_bias = torch.zeros(prompt_mask.shape, dtype=torch.float32,
                                       device=prompt_mask.device
                                       ).masked_fill_(~prompt_mask, float('-inf'))[:, None, None, :]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.slots = self.slots[indices]
        for layer in self.layers:
            layer.select_samples(indices)
        held = self.prompt_bias.shape[0]
        live = torch.unique(self.slots // self.samples)  # (sorted)
        if len(live) <= held * 3 // 4:
            for layer in self.layers:
                layer.select_prompts(live)
            self.prompt_bias = self.prompt_bias[live]
            self.slots = (torch.searchsorted(live, self.slots // self.samples) * self.samples
                          + self.slots % self.samples)

    def attend(self, layer: WriterLayer, query: torch.Tensor, scale: float) -> torch.Tensor:
        """One new token's attention (``query``: (samples, heads, 1, dim)) over its prompt and the
        tokens its sample wrote, each prompt's keys and values read once for all its samples
        (cascade attention: the two parts' softmaxes merged by their log-sum-exps); returns
        (samples, 1, heads, dim)."""
        rows, heads, _, dim = query.shape
        prompts, kv_heads = layer.prompt_keys.shape[:2]
        group, n = heads // kv_heads, self.samples
        # (query head h reads key/value head h // group)
        q = query.reshape(rows, kv_heads, group, dim).to(layer.prompt_keys.dtype)
        # the prompt part: the samples of a prompt as one block of queries
        slots = q.new_zeros((prompts * n, kv_heads, group, dim)).index_copy_(0, self.slots, q)
        slots = (slots.view(prompts, n, kv_heads, group, dim).transpose(1, 2)
                 .reshape(prompts, kv_heads, n * group, dim))
        scores = torch.matmul(slots, layer.prompt_keys).float() * scale
        scores += self.prompt_bias
        head = scores.amax(-1, keepdim=True)
        weights = torch.exp(scores - head)
        total = weights.sum(-1, keepdim=True)
        out = torch.matmul(weights.to(layer.prompt_values.dtype), layer.prompt_values).float()

        # (prompts, kv heads, n * group, -1) -> the rows' (rows, kv heads, group, -1)
        def of_rows(x):
            x = (x.view(prompts, kv_heads, n, group, -1).transpose(1, 2)
                 .reshape(prompts * n, kv_heads, group, -1))
            return x.index_select(0, self.slots)
        head, total, out = of_rows(head), of_rows(total), of_rows(out)
        if layer.new:  # the part each sample wrote
            scores = torch.matmul(q, layer.keys.transpose(-1, -2)).float() * scale
            head2 = scores.amax(-1, keepdim=True)
            weights = torch.exp(scores - head2)
            top = torch.maximum(head, head2)
            a, b = torch.exp(head - top), torch.exp(head2 - top)
            out = a * out + b * torch.matmul(weights.to(layer.values.dtype), layer.values).float()
            total = a * total + b * weights.sum(-1, keepdim=True)
        return (out / total).to(layer.prompt_values.dtype).reshape(rows, 1, heads, dim)


# the writer's cache during a decoding step (read by the attention function)
_WRITING: ContextVar[WriterCache | None] = ContextVar('selfsup_writer_cache', default=None)
SHARED_PROMPT = 'selfsup_shared_prompt'
CHUNKED_PREFILL = 'selfsup_chunked_prefill'
PREFILL_CHUNK = 32  # prompt positions a call of the prefill's attention attends from


def shared_prompt_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """The attention of a decoding step over a :class:`WriterCache` (registered as
    :data:`SHARED_PROMPT`; the cache holds where its prompts are padded, so it makes no mask)."""
    cache = _WRITING.get()
    if cache is None or query.shape[-2] != 1:
        raise RuntimeError(f'{SHARED_PROMPT} attention runs one new token a row over a WriterCache')
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    with torch.autocast(query.device.type, enabled=False):  # (its products in the dtypes it names)
        return cache.attend(cache.layers[module.layer_idx], query, scale), None


def chunked_prefill_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """The prompts' causal attention (registered as :data:`CHUNKED_PREFILL`), computed by SDPA
    for :data:`PREFILL_CHUNK` query positions at a time over the keys up to the chunk's end: the
    same attention as one call, but on a CPU it skips most of the masked part above the diagonal."""
    length = query.shape[-2]
    # (a GPU's kernels skip masked blocks; a prefill into a cache already written is not this one)
    if query.device.type != 'cpu' or key.shape[-2] != length or length <= PREFILL_CHUNK:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling,
                                      **kwargs)
    query, key = query.to(value.dtype), key.to(value.dtype)
    gqa = query.shape[1] != key.shape[1]
    outs = []
    for start in range(0, length, PREFILL_CHUNK):
        end = min(length, start + PREFILL_CHUNK)
        if attention_mask is None:  # (causal, no padding)
            mask = torch.ones(end - start, end, dtype=torch.bool, device=query.device).tril(start)
        else:
            mask = attention_mask[..., start:end, :end]
        outs.append(torch.nn.functional.scaled_dot_product_attention(
            query[:, :, start:end], key[:, :, :end], value[:, :, :end], attn_mask=mask,
            scale=scaling, enable_gqa=gqa))
    return torch.cat(outs, 2).transpose(1, 2).contiguous(), None


@cache
def _register_attention() -> None:
    """The writer's attention functions, registered with transformers once (not at import)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    AttentionInterface.register(SHARED_PROMPT, shared_prompt_attention)
    AttentionInterface.register(CHUNKED_PREFILL, chunked_prefill_attention)
    AttentionMaskInterface.register(CHUNKED_PREFILL, sdpa_mask)  # (the decoding step's makes none)


@contextmanager
def writer_attention(model: torch.nn.Module, cache, prefill: bool):
    """Within it, ``model``'s attention is the writer's if ``cache`` is a :class:`WriterCache`:
    :func:`chunked_prefill_attention` for the prefill, :func:`shared_prompt_attention` after."""
    if not isinstance(cache, WriterCache):
        yield
        return
    _register_attention()
    before, token = model.config._attn_implementation, _WRITING.set(cache)
    model.set_attn_implementation(CHUNKED_PREFILL if prefill else SHARED_PROMPT)
    try:
        yield
    finally:
        model.set_attn_implementation(before)
        _WRITING.reset(token)
