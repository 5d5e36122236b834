"""Writing training queries with a decoder-only generator (:class:`QueryWriter`).

Unlike ``model.generate(num_return_sequences=n)``, each prompt is prefilled once and read by
its ``n`` samples (:class:`WriterCache`); the head every prompt begins with is prefilled once a
call (:class:`SharedPrefix`); prefills run in forwards of ``prefill_tokens`` tokens; and a
sample stops at the end of its first line. It samples as ``generate`` does, or greedily.
"""
import logging
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Optional

import numpy as np
import torch

from pyterrier_selfsup.models._token_ids import cut_at_word
from pyterrier_selfsup.models.kv_cache import full_attention_layers
from pyterrier_selfsup.models.precision import casts_kept
from pyterrier_selfsup.models.prompts import (
    EXAMPLES_INTRO,
    INSTRUCTION,
    PAIR_PASSAGE_CHARS,
    PASSAGE_QUESTION,
    STYLES,
    SYSTEM_PROMPT,
    cut_to_tokens,
    first_line,
    writer_prompt,
)
from pyterrier_selfsup.models.writer_cache import (
    SharedPrefix,
    WriterCache,
    writer_attention,
)
from pyterrier_selfsup.models.writer_checkpoint import written_batches
from pyterrier_selfsup.models.writer_prefill import MIN_SHARED_PREFIX, Prefilling

logger = logging.getLogger(__name__)

# the top k transformers' generate samples from where a model's config sets none
GENERATE_TOP_K = 50
NUCLEUS_CANDIDATES = 256  # tokens sorted for nucleus sampling (more where a row's nucleus is wider)


class QueryWriter(Prefilling):
    """Queries written for passages by ``generator`` (a decoder-only
    :class:`~pyterrier_selfsup.models.generator.Generator`).

    Args:
        style: ``chat`` (the tokenizer's chat template, :data:`SYSTEM_PROMPT` and
            :data:`INSTRUCTION`; ``plain`` where the model has no template) or ``plain``
            (:data:`~pyterrier_selfsup.models.prompts.PASSAGE_QUESTION`, completed as text).
        examples: query texts shown in every prompt as the style to write in (at most
            ``max_examples``, chosen once by ``seed``).
        pairs: (passage, query) examples shown before the passage, each passage cut to
            :data:`PAIR_PASSAGE_CHARS` characters (earlier turns with ``chat``, completed
            prompts with ``plain``).
        max_passage_length: tokens of a passage shown (cut in the text).
        batch_size: passages written together (each sampled ``n`` times); it changes the
            queries' draws, not their distribution.
        prefill_tokens: tokens (padding included) a prefill forward runs at most.
        preallocated_cache: write into a :class:`WriterCache` for models whose layers all
            attend to every position; False: transformers' ``DynamicCache``.
        share_prefix: with the writer's cache, prefill the tokens every prompt begins with
            once a call (where there are at least :data:`MIN_SHARED_PREFIX` of them).

    Example::

        writer = QueryWriter(load_generator('smollm2'), style='chat')
        writer.write(['Scurvy is caused by a lack of vitamin C.'], n=3, do_sample=True)
    """

    def __init__(self, generator, *, style: str = 'chat', examples: Sequence[str] = (),
                 pairs: Sequence[tuple[str, str]] = (),
                 max_examples: int = 8, max_passage_length: int | None = None,
                 batch_size: int = 64, prefill_tokens: int = 4096, seed: int = 0,
                 preallocated_cache: bool = True, share_prefix: bool = True):
        if generator.is_seq2seq:
            raise ValueError('QueryWriter writes with decoder-only generators')
        if style not in STYLES:
            raise ValueError(f'style must be one of {STYLES}, not {style!r}')
        self.generator = generator
        self.tokenizer = generator.tokenizer
        self.style = style if style == 'plain' or self.tokenizer.chat_template else 'plain'
        examples = [e for e in dict.fromkeys(' '.join(e.split()) for e in examples) if e]
        if len(examples) > max_examples:
            keep = np.random.default_rng(seed).choice(len(examples), max_examples, replace=False)
            examples = [examples[i] for i in sorted(keep)]
        self.examples = examples
        self.pairs = [(cut_at_word(p, PAIR_PASSAGE_CHARS) or p, q)
                      for p, q in ((' '.join(p.split()), ' '.join(q.split())) for p, q in pairs)]
        self.max_passage_length = max_passage_length or generator.max_passage_length
        self.batch_size, self.prefill_tokens = batch_size, prefill_tokens
        self.preallocated_cache = preallocated_cache
        self.share_prefix = share_prefix

    def config(self) -> dict:
        """What the queries depend on besides the model (the key of cached queries): the
        prompt's every part, and what their draws depend on (batch, cache, shared prefix)."""
        shared = bool(self._shared_layers())
        return {'style': self.style, 'examples': self.examples,
                'max_passage_length': self.max_passage_length,
                'system': SYSTEM_PROMPT if self.style == 'chat' else None,
                'instruction': INSTRUCTION if self.style == 'chat' else PASSAGE_QUESTION,
                'examples_intro': EXAMPLES_INTRO,
                'pairs': [list(pair) for pair in self.pairs],
                'batch_size': self.batch_size, 'cache': 'shared prompt' if shared else 'dynamic',
                'prefix': 'shared' if self._prefix_shared() else 'each prompt'}

    def _shared_layers(self) -> int | None:
        """The decoder's number of layers if the writer writes into a :class:`WriterCache`, else
        None."""
        return (full_attention_layers(self.generator.model.config) if self.preallocated_cache
                else None)

    def _prefix_shared(self) -> bool:
        """Whether the prompts' common head is prefilled once a call (:class:`SharedPrefix`)."""
        return (self.share_prefix and bool(self._shared_layers())
                and len(self.head_ids) >= MIN_SHARED_PREFIX)

    # -- prompts ----------------------------------------------------------------------

    def prompt(self, passage: str) -> str:
        """The text the model continues for ``passage`` (already cut):
        :func:`~pyterrier_selfsup.models.prompts.writer_prompt`."""
        return writer_prompt(self.tokenizer, passage, style=self.style, examples=self.examples,
                             pairs=self.pairs)

    def prompt_ids(self, passages: Sequence[str]) -> list[list[int]]:
        cut = cut_to_tokens(self.tokenizer, passages, self.max_passage_length)
        ids = self.tokenizer([self.prompt(p) for p in cut], add_special_tokens=False)['input_ids']
        return [self.generator.bos_ids + x if self.style == 'plain' else x for x in ids]

    @cached_property
    def head_ids(self) -> list[int]:
        """The token ids of the prompt before its passage (the last may merge with the
        passage's first word)."""
        marker = '\x00passage\x00'
        head = self.prompt(marker).split(marker)[0]
        ids = self.tokenizer(head, add_special_tokens=False)['input_ids']
        return self.generator.bos_ids + ids if self.style == 'plain' else ids

    @cached_property
    def token_kinds(self) -> torch.Tensor:
        """:func:`token_kinds` of this writer's tokenizer and model."""
        return token_kinds(self.tokenizer, self.generator.model)

    # -- writing ----------------------------------------------------------------------

    def write(self, passages: Sequence[str], n: int = 1, *, do_sample: bool = False,
              temperature: float = 1.0, top_p: float = 1.0, top_k: int | None = None,
              max_new_tokens: int = 32, shared: bool = True,
              generator: torch.Generator | None = None,
              checkpoint: Path | None = None) -> list[list[str]]:
        """``n`` queries for each passage (greedy: ``n`` copies of one), the first line of each
        generation, stripped. ``shared=False``: each sample prefilled on its own. Sampling draws
        from ``generator`` (default: torch's global one); ``top_k`` None: the model's generation
        config's, 0: none.

        ``checkpoint``: a file that holds, after each batch, the queries written so far and the
        state of ``generator``; a call with the same file, passages and settings resumes from it
        and returns what one uninterrupted call returns. The caller removes the file.

        Example::

            writer.write(passages, 3, do_sample=True, checkpoint=Path('writing.pt'),
                         generator=torch.Generator().manual_seed(0))
        """
        if top_k is None:  # the model's, else generate's fallback
            top_k = getattr(self.generator.model.generation_config, 'top_k', None)
            top_k = GENERATE_TOP_K if top_k is None else top_k
        ids = self.prompt_ids(passages)
        out: list[list[str] | None] = [None] * len(ids)
        with self.generator.inference(), casts_kept(self.generator.model):
            prefix = self.shared_prefix(ids) if shared and self._prefix_shared() else None
            for idx in written_batches(self, ids, out, n, checkpoint, generator,
                                       do_sample=do_sample, temperature=temperature, top_p=top_p,
                                       top_k=top_k, max_new_tokens=max_new_tokens, shared=shared):
                prompts = [ids[i] for i in idx]
                if not shared:
                    prompts = [p for p in prompts for _ in range(n)]
                tokens = self._sample(prompts, 1 if not shared else n, do_sample=do_sample,
                                      temperature=temperature, top_p=top_p, top_k=top_k,
                                      max_new_tokens=max_new_tokens, generator=generator,
                                      prefix=prefix)
                texts = self.tokenizer.batch_decode(tokens, skip_special_tokens=True)
                for j, i in enumerate(idx):
                    out[i] = [first_line(t) for t in texts[j * n:(j + 1) * n]]
        return out

    def _sample(self, prompts: list[list[int]], n: int, *, do_sample: bool, temperature: float,
                top_p: float, top_k: int, max_new_tokens: int,
                generator: torch.Generator | None,
                prefix: Optional['SharedPrefix'] = None) -> list[list[int]]:
        """The new tokens of ``n`` continuations of each prompt (prompt-major), each ending
        with the token that ended it."""
        model, device = self.generator.model, self.generator.device
        cache, logits, mask = self.prefill(prompts, max_new_tokens, prefix)
        own_cache = isinstance(cache, WriterCache)
        if own_cache:  # one prefill a prompt, read by each of its samples
            cache.fork(n, mask.bool())
        elif n > 1:  # (DynamicCache: the prompt's cache copied to each sample)
            cache.batch_repeat_interleave(n)
        mask, logits = mask.repeat_interleave(n, 0), logits.repeat_interleave(n, 0)
        rows = mask.shape[0]
        written: list[list[int]] = [[] for _ in range(rows)]
        alive = torch.arange(rows, device=device)  # the rows still writing, in the cache's order
        started = torch.zeros(rows, dtype=torch.bool, device=device)
        kinds = self.token_kinds.to(device)
        for step in range(max_new_tokens):
            token = next_tokens(logits, do_sample, temperature, top_p, generator, top_k)
            kind = kinds[token]
            # the end of the text, or a line break after some text (the first line is the query:
            # a line break before any text is skipped, as the decoded text is stripped)
            ended = (kind & 1).bool() | ((kind & 2).bool() & started)
            started |= (kind & 4).bool()
            for row, t in zip(alive.tolist(), token.tolist()):
                written[row].append(t)
            keep = ~ended
            if step == max_new_tokens - 1 or not keep.any():
                break
            if not keep.all():  # finished rows leave the batch
                where = keep.nonzero().squeeze(1)
                cache.batch_select_indices(where)
                alive, token, mask, started = (alive[where], token[where], mask[where],
                                               started[where])
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            # (a WriterCache holds where its prompts are padded: no mask)
            with self.generator.autocast(), writer_attention(model, cache, prefill=False):
                output = model(input_ids=token[:, None], attention_mask=None if own_cache else mask,
                               position_ids=mask.sum(-1, keepdim=True) - 1, use_cache=True,
                               cache=cache)
            cache, logits = output.cache, output.logits[:, -1].float()
        return written


def _draw(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One index a row, drawn on ``generator``'s device (so a seeded CPU generator draws the
    same tokens for a model on a GPU)."""
    if generator is None or generator.device == probs.device:
        return torch.multinomial(probs, 1, generator=generator)
    return torch.multinomial(probs.to(generator.device), 1, generator=generator).to(probs.device)


def token_kinds(tokenizer, model) -> torch.Tensor:
    """A code per vocabulary entry, as bits: 1 ends the sequence, 2 holds a line break, 4
    holds text that is not white space."""
    vocab = len(tokenizer)
    size = max(vocab, model.config.vocab_size)
    kinds = torch.zeros(size, dtype=torch.uint8)
    for i in range(vocab):
        text = tokenizer.decode([i])
        kinds[i] = (2 if '\n' in text else 0) | (4 if text.strip() else 0)
    ends = model.generation_config.eos_token_id
    specials = [tokenizer.convert_tokens_to_ids(s)
                for s in ('<|im_end|>', '<|endoftext|>', '<|eot_id|>')]
    for i in (([ends] if isinstance(ends, int) else list(ends or []))
              + [tokenizer.eos_token_id] + specials):
        if isinstance(i, int) and i != tokenizer.unk_token_id and 0 <= i < size:
            kinds[i] = 1
    return kinds


def next_tokens(logits: torch.Tensor, do_sample: bool, temperature: float, top_p: float,
          generator: torch.Generator | None, top_k: int = 0) -> torch.Tensor:
    """The next token of each row: greedy, or drawn as ``generate`` draws (temperature, top
    k, then nucleus)."""
    if not do_sample:
        return logits.argmax(-1)
    # (x / 1 is x: no copy of the rows' logits)
    scaled = logits / temperature if temperature != 1.0 else logits
    if 0 < top_k < scaled.shape[-1]:  # the top k alone, renormalised
        values, idx = scaled.topk(top_k, dim=-1)
        top_probs, top_idx = torch.softmax(values, dim=-1), idx
    else:
        probs = torch.softmax(scaled, dim=-1)
        if top_p >= 1.0:
            return _draw(probs, generator).squeeze(1)
        # sorting only the top NUCLEUS_CANDIDATES (the whole row where its nucleus is wider)
        top_probs, top_idx = probs.topk(min(NUCLEUS_CANDIDATES, probs.shape[-1]), dim=-1)
        if bool((top_probs.sum(-1) < top_p).any()):
            top_probs, top_idx = probs.sort(dim=-1, descending=True)
    # nucleus: the most probable tokens until their mass reaches top_p
    outside = top_probs.cumsum(-1) - top_probs >= top_p
    drawn = _draw(top_probs.masked_fill(outside, 0.0), generator)
    return top_idx.gather(-1, drawn).squeeze(1)
