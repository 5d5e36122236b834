"""The prompt forward passes of a :class:`~pyterrier_selfsup.models.writing.QueryWriter`: into
its key/value cache in forwards of at most ``prefill_tokens`` tokens, and the head that every
prompt begins with prefilled once a call
(:class:`~pyterrier_selfsup.models.writer_cache.SharedPrefix`).
"""
from typing import Optional

import torch

from pyterrier_selfsup.models.batching import pad
from pyterrier_selfsup.models.writer_cache import (
    NEW_TOKENS_RESERVED,
    SharedPrefix,
    WriterCache,
    writer_attention,
)

# tokens every prompt begins with from which they are prefilled once a call; shorter heads
# are prefilled with each passage
MIN_SHARED_PREFIX = 128


class Prefilling:
    """What a writer's prompts go through before sampling; the writer sets ``generator``,
    ``tokenizer``, ``prefill_tokens``, ``head_ids`` and ``_shared_layers``."""

    def shared_prefix(self, prompts: list[list[int]]) -> Optional['SharedPrefix']:
        """The keys and values of the longest head (within :attr:`head_ids`) that all ``prompts``
        begin with, each keeping one token of its own; None where it is shorter than
        :data:`MIN_SHARED_PREFIX`."""
        head = self.head_ids
        length = min(len(head), min(len(p) for p in prompts) - 1)
        for p in prompts:
            while length and p[:length] != head[:length]:
                length -= 1
        if length < MIN_SHARED_PREFIX:
            return None
        cache, _, _ = self._prefill([head[:length]], WriterCache(self._shared_layers(), 1))
        return SharedPrefix(length, [(layer.keys, layer.values) for layer in cache.layers])

    def prefill(self, prompts: list[list[int]], max_new_tokens: int,
                prefix: Optional['SharedPrefix'] = None):
        """The prompts' forward passes (left-padded): their key/value cache, with room for
        ``max_new_tokens`` more, the next token's logits (fp32) and the attention mask. Into a
        :class:`WriterCache` in forwards of at most ``prefill_tokens`` tokens, each part copied
        in as it is prefilled; into a ``DynamicCache`` in one. With a ``prefix``, only what
        follows it is run."""
        layers = self._shared_layers()
        if not layers:
            return self._prefill(prompts, None)
        # each part copied into the joined cache as soon as it is prefilled (not held twice)
        skip = prefix.length if prefix is not None else 0
        width = max(len(p) for p in prompts)
        joined, logits, masks, start = None, [], [], 0
        while start < len(prompts):
            size = max(1, self.prefill_tokens // max(1, len(prompts[start]) - skip))
            cache, part_logits, mask = self._prefill(prompts[start:start + size],
                                                     WriterCache(layers, min(max_new_tokens,
                                                                             NEW_TOKENS_RESERVED),
                                                                 prefix=prefix))
            if start == 0 and size >= len(prompts):
                return cache, part_logits, mask
            if joined is None:
                joined = WriterCache.empty_like(cache, len(prompts), width)
            joined.place(cache, start)
            logits.append(part_logits)
            masks.append(torch.nn.functional.pad(mask, (0, width - mask.shape[1])))
            start += size
            del cache
        return joined, torch.cat(logits), torch.cat(masks)

    def _prefill(self, prompts: list[list[int]], cache: Optional['WriterCache']):
        skip = cache.prefix.length if cache is not None and cache.prefix is not None else 0
        input_ids, mask = pad([p[skip:] for p in prompts], self.tokenizer.pad_token_id, left=True,
                              device=self.generator.device)
        if skip:  # (the prefix's positions come first, then each prompt's rest, left-padded)
            mask = torch.cat([torch.ones_like(mask[:, :1]).expand(-1, skip), mask], dim=1)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, skip:]
        # (the output layer on the last position only: the next token's)
        with self.generator.autocast(), writer_attention(self.generator.model, cache, prefill=True):
            output = self.generator.model(input_ids=input_ids, attention_mask=mask,
                                          position_ids=positions, use_cache=True,
                                          logits_to_keep=1, cache=cache)
        return output.cache, output.logits[:, -1].float(), mask
