"""Writing training queries with a decoder-only generator: prompts an instruct model reads as
instructions, one prefill a passage shared by its samples, and a stop at the end of the line.

:class:`QueryWriter` wraps a :class:`~pyterrier_selfsup.models.generator.Generator`'s model
and tokenizer. What it does that ``model.generate(num_return_sequences=n)`` does not:

- **one prefill a passage**: the prompt is run once and its key/value cache copied to the
  passage's ``n`` samples (``DynamicCache.batch_repeat_interleave``); ``generate`` copies the
  prompt ``n`` times before its first forward, so it prefills it ``n`` times;
- **a stop at the end of the first line** (only the first line is kept), and at the end of
  the assistant's turn, per sequence: a finished sequence leaves the batch (its rows of the
  cache are dropped), so a batch costs what its unfinished sequences cost, not its longest;
- **prompts for instruct models**: the tokenizer's chat template with a system prompt
  (``style='chat'``), optionally showing example queries (a query log's, or titles: the
  style to write in), or the completion prompt the project used before (``style='plain'``).

The sampling loop is written here, not taken from ``generate``, so that the prefix sharing
and the per-sequence stop are explicit; it samples as ``generate`` does with ``do_sample``,
``temperature``, ``top_k`` (the model's generation config's, 50 by default, as ``generate``
applies it) and ``top_p`` (nucleus: the smallest set of tokens whose probability reaches
``top_p``, within the top k), or greedily. A test checks both against the unshared path.
"""
import logging
from contextlib import contextmanager
from functools import cached_property
from typing import List, Optional, Sequence

import numpy as np
import pyterrier as pt
import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer, get_layer_types_and_kwargs

from pyterrier_selfsup.models._base import clean_texts, pad

logger = logging.getLogger(__name__)

STYLES = ('chat', 'plain')
SYSTEM_PROMPT = 'You write search queries that a user of a search engine would type.'
INSTRUCTION = 'Write one search query that the passage below answers. Reply with the query only, on one line.'
EXAMPLES_INTRO = 'Queries that users of this collection wrote (write in their style, about the passage):'
PLAIN_PROMPT = 'Passage: {passage}\nA question this passage answers:'
GENERATE_TOP_K = 50  # the top k transformers' generate samples from where a model's config sets none
NUCLEUS_CANDIDATES = 256  # tokens sorted for nucleus sampling (more where a row's nucleus is wider)


class QueryWriter:
    """Queries written for passages by ``generator`` (a decoder-only
    :class:`~pyterrier_selfsup.models.generator.Generator`).

    Args:
        style: ``chat`` (the tokenizer's chat template, :data:`SYSTEM_PROMPT` and
            :data:`INSTRUCTION`; models without a template fall back to ``plain``) or
            ``plain`` (:data:`PLAIN_PROMPT`, completed as text).
        examples: query texts shown in every prompt as the style to write in (a query log's;
            at most ``max_examples`` of them, chosen once by ``seed``).
        max_passage_length: tokens of a passage shown (cut in the text).
        batch_size: passages prefilled together (each then sampled ``n`` times). On 2 cores 64
            wrote 10.1 queries/s and 32 8.5 (``query_generation_batch.md``); 32 keeps a batch's
            key/value cache at half the size, and the draws of query sets cached before. The
            queries' distribution does not depend on it, their draws from the random stream do.
        preallocated_cache: the key/value cache a batch writes into (:class:`WriterCache`: room
            for the prompt and every new token, held in the dtype attention reads) rather than
            transformers' ``DynamicCache`` (which concatenates at every step, and under bf16
            autocast holds fp32 keys that attention casts again at every step). The same numbers
            (``experiments/writer_backends.py`` compares the queries); False: the dynamic cache.
    """

    def __init__(self, generator, *, style: str = 'chat', examples: Sequence[str] = (), max_examples: int = 8,
                 max_passage_length: Optional[int] = None, batch_size: int = 32, seed: int = 0,
                 preallocated_cache: bool = True):
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
        self.max_passage_length = max_passage_length or generator.max_passage_length
        self.batch_size = batch_size
        self.preallocated_cache = preallocated_cache

    def config(self) -> dict:
        """What the queries depend on besides the model (keys cached queries)."""
        return {'style': self.style, 'examples': self.examples, 'max_passage_length': self.max_passage_length,
                'system': SYSTEM_PROMPT if self.style == 'chat' else None,
                'instruction': INSTRUCTION if self.style == 'chat' else PLAIN_PROMPT}

    # -- prompts ----------------------------------------------------------------------

    def prompt(self, passage: str) -> str:
        """The text the model continues for ``passage`` (already cut)."""
        shown = ''
        if self.examples:
            shown = EXAMPLES_INTRO + '\n' + ''.join(f'- {e}\n' for e in self.examples) + '\n'
        if self.style == 'plain':
            return shown + PLAIN_PROMPT.replace('{passage}', passage)
        messages = [{'role': 'system', 'content': SYSTEM_PROMPT},
                    {'role': 'user', 'content': f'{shown}{INSTRUCTION}\n\nPassage: {passage}'}]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def prompt_ids(self, passages: Sequence[str]) -> List[List[int]]:
        passages = clean_texts(list(passages))
        enc = self.tokenizer(passages, add_special_tokens=False, return_offsets_mapping=True)
        cut = [text[:offsets[self.max_passage_length - 1][1]] if len(offsets) > self.max_passage_length else text
               for text, offsets in zip(passages, enc['offset_mapping'])]
        ids = self.tokenizer([self.prompt(p) for p in cut], add_special_tokens=False)['input_ids']
        return [self.generator.bos_ids + x if self.style == 'plain' else x for x in ids]

    @cached_property
    def token_kinds(self) -> torch.Tensor:
        """A code per vocabulary entry: 1 ends the sequence (end of text or of the assistant's
        turn), 2 holds a line break, 4 holds text that is not white space (bits, combined)."""
        vocab = len(self.tokenizer)
        size = max(vocab, self.generator.model.config.vocab_size)
        kinds = torch.zeros(size, dtype=torch.uint8)
        for i in range(vocab):
            text = self.tokenizer.decode([i])
            kinds[i] = (2 if '\n' in text else 0) | (4 if text.strip() else 0)
        ends = self.generator.model.generation_config.eos_token_id
        specials = [self.tokenizer.convert_tokens_to_ids(s) for s in ('<|im_end|>', '<|endoftext|>', '<|eot_id|>')]
        for i in ([ends] if isinstance(ends, int) else list(ends or [])) + [self.tokenizer.eos_token_id] + specials:
            if isinstance(i, int) and i != self.tokenizer.unk_token_id and 0 <= i < size:
                kinds[i] = 1
        return kinds

    # -- writing ----------------------------------------------------------------------

    def write(self, passages: Sequence[str], n: int = 1, *, do_sample: bool = False, temperature: float = 1.0,
              top_p: float = 1.0, top_k: Optional[int] = None, max_new_tokens: int = 32, shared: bool = True,
              generator: Optional[torch.Generator] = None) -> List[List[str]]:
        """``n`` queries for each passage (greedy: ``n`` copies of one), the first line of each
        generation, stripped. ``shared=False``: each sample prefilled on its own (the
        reference the shared path is tested against). Sampling draws from ``generator``
        (a ``torch.Generator``; default: torch's global one); ``top_k`` None: the model's
        generation config's (what ``generate`` would apply), 0: none."""
        if top_k is None:  # the model's, else what generate falls back on (transformers' 50)
            top_k = getattr(self.generator.model.generation_config, 'top_k', None)
            top_k = GENERATE_TOP_K if top_k is None else top_k
        ids = self.prompt_ids(passages)
        order = np.argsort([-len(x) for x in ids], kind='stable')  # by length: little padding in a batch
        out: List[Optional[List[str]]] = [None] * len(ids)
        batches = range(0, len(order), self.batch_size)
        if self.generator.verbose and len(batches) > 1:
            batches = pt.tqdm(batches, desc='writing queries', unit='batch')
        with casts_kept(self.generator.model), self.generator.inference():
            for start in batches:
                idx = order[start:start + self.batch_size]
                prompts = [ids[i] for i in idx]
                if not shared:
                    prompts = [p for p in prompts for _ in range(n)]
                tokens = self._sample(prompts, 1 if not shared else n, do_sample=do_sample, temperature=temperature,
                                      top_p=top_p, top_k=top_k, max_new_tokens=max_new_tokens, generator=generator)
                texts = self.tokenizer.batch_decode(tokens, skip_special_tokens=True)
                for j, i in enumerate(idx):
                    out[i] = [t.strip().split('\n')[0].strip() for t in texts[j * n:(j + 1) * n]]
        return out

    def prefill(self, prompts: List[List[int]], max_new_tokens: int):
        """The prompts' forward pass (left-padded, one batch): their key/value cache, with room
        for ``max_new_tokens`` more, the next token's logits (fp32) and the attention mask."""
        model = self.generator.model
        input_ids, mask = pad(prompts, self.tokenizer.pad_token_id, left=True, device=self.generator.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        given, layers = {}, WriterCache.layers_if_it_fits(model.config) if self.preallocated_cache else None
        if layers:
            given[self.generator._cache_argument] = WriterCache(layers, max_new_tokens)
        with self.generator.autocast():  # (the output layer on the last position only: the next token's)
            output = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True,
                           logits_to_keep=1, **given)
        return _cache_of(output), output.logits[:, -1].float(), mask

    def _sample(self, prompts: List[List[int]], n: int, *, do_sample: bool, temperature: float, top_p: float,
                top_k: int, max_new_tokens: int, generator: Optional[torch.Generator]) -> List[List[int]]:
        """The new tokens of ``n`` continuations of each prompt (rows: prompt-major), each up
        to and with the token that ended it."""
        model, device = self.generator.model, self.generator.device
        cache, logits, mask = self.prefill(prompts, max_new_tokens)
        if n > 1:  # one prefill a prompt, its cache copied to each of its samples
            cache.batch_repeat_interleave(n)
            mask, logits = mask.repeat_interleave(n, 0), logits.repeat_interleave(n, 0)
        rows = mask.shape[0]
        written: List[List[int]] = [[] for _ in range(rows)]
        alive = torch.arange(rows, device=device)  # the rows still writing, in the cache's order
        started = torch.zeros(rows, dtype=torch.bool, device=device)  # has a row written any text yet
        kinds = self.token_kinds.to(device)
        for step in range(max_new_tokens):
            token = self._next(logits, do_sample, temperature, top_p, generator, top_k)
            kind = kinds[token]
            # the end of the text, or a line break after some text (the first line is the query:
            # a line break before any text is skipped, as the decoded text is stripped)
            ended = (kind & 1).bool() | ((kind & 2).bool() & started)
            started |= (kind & 4).bool()
            for row, t in zip(alive.tolist(), token.tolist()):
                written[row].append(t)  # (decoded without special tokens, cut at the first line)
            keep = ~ended
            if step == max_new_tokens - 1 or not keep.any():
                break
            if not keep.all():  # finished rows leave the batch
                where = keep.nonzero().squeeze(1)
                cache.batch_select_indices(where)
                alive, token, mask, started = alive[where], token[where], mask[where], started[where]
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            with self.generator.autocast():
                output = model(input_ids=token[:, None], attention_mask=mask,
                               position_ids=mask.sum(-1, keepdim=True) - 1, use_cache=True,
                               **{self.generator._cache_argument: cache})
            cache, logits = _cache_of(output), output.logits[:, -1].float()
        return written

    @staticmethod
    def _next(logits: torch.Tensor, do_sample: bool, temperature: float, top_p: float,
              generator: Optional[torch.Generator], top_k: int = 0) -> torch.Tensor:
        """The next token of each row: greedy, or drawn as ``generate`` draws (temperature,
        then the top k, then the nucleus of their renormalised distribution)."""
        if not do_sample:
            return logits.argmax(-1)
        scaled = logits / temperature
        if 0 < top_k < scaled.shape[-1]:  # the top k alone, renormalised
            values, idx = scaled.topk(top_k, dim=-1)
            top_probs, top_idx = torch.softmax(values, dim=-1), idx
        else:
            probs = torch.softmax(scaled, dim=-1)
            if top_p >= 1.0:
                return _draw(probs, generator).squeeze(1)
            # Rather than sorting the whole vocabulary at every step, the top NUCLEUS_CANDIDATES are
            # sorted, and the whole only for a row whose nucleus is not inside them (the same set
            # either way); the draw is among the candidates
            top_probs, top_idx = probs.topk(min(NUCLEUS_CANDIDATES, probs.shape[-1]), dim=-1)
            if bool((top_probs.sum(-1) < top_p).any()):
                top_probs, top_idx = probs.sort(dim=-1, descending=True)
        # nucleus: the most probable tokens until their mass reaches top_p
        outside = top_probs.cumsum(-1) - top_probs >= top_p
        drawn = _draw(top_probs.masked_fill(outside, 0.0), generator)
        return top_idx.gather(-1, drawn).squeeze(1)


class WriterLayer(DynamicLayer):
    """One layer's keys and values in a buffer with room for ``reserve`` more positions than the
    prompt, written in place (``DynamicLayer`` concatenates: every step copies the whole cache),
    and both held in the values' dtype: under bf16 autocast the rotary embedding leaves the keys
    in fp32 while the values come out of their projection in bf16, and attention cast the keys
    (the whole cache) to bf16 at every step; cast once on the way in, they are the same bf16
    values attention reads. Without autocast the two dtypes are the model's own."""

    def __init__(self, reserve: int):
        super().__init__()
        self.reserve, self.length = reserve, 0
        self._keys = self._values = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        new = key_states.shape[-2]
        if self._keys is None or self.length + new > self._keys.shape[-2]:  # (room: the prompt and the reserve)
            size, dtype = self.length + new + self.reserve, value_states.dtype
            keys = key_states.new_empty((*key_states.shape[:2], size, key_states.shape[-1]), dtype=dtype)
            values = value_states.new_empty((*value_states.shape[:2], size, value_states.shape[-1]), dtype=dtype)
            if self.length:
                keys[:, :, :self.length] = self._keys[:, :, :self.length]
                values[:, :, :self.length] = self._values[:, :, :self.length]
            self._keys, self._values = keys, values
        self._keys[:, :, self.length:self.length + new] = key_states
        self._values[:, :, self.length:self.length + new] = value_states
        self.length += new
        return self._views()

    def _views(self):
        self.keys, self.values = self._keys[:, :, :self.length], self._values[:, :, :self.length]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.length:
            self._keys = self._keys.repeat_interleave(repeats, dim=0)
            self._values = self._values.repeat_interleave(repeats, dim=0)
            self._views()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.length:
            self._keys, self._values = self._keys[indices], self._values[indices]
            self._views()

    def reset(self) -> None:
        self._keys = self._values = None
        self.length = 0
        super().reset()

    def crop(self, tokens_to_remove: int) -> None:
        raise NotImplementedError('the query writer\'s cache is written forward only')


class WriterCache(DynamicCache):
    """The writer's key/value cache: a :class:`WriterLayer` a layer, for models whose layers all
    attend to every position (others keep ``DynamicCache``, which knows their layer kinds)."""

    def __init__(self, layers: int, reserve: int):
        Cache.__init__(self, layers=[WriterLayer(reserve) for _ in range(layers)])

    @staticmethod
    def layers_if_it_fits(config) -> Optional[int]:
        """The decoder's number of layers, if every one is a full-attention layer (else None)."""
        if getattr(config, 'is_encoder_decoder', False):
            return None
        text = config.get_text_config(decoder=True)
        kinds, _ = get_layer_types_and_kwargs(text)
        return text.num_hidden_layers if all(kind == 'full_attention' for kind in kinds) else None


@contextmanager
def casts_kept(model: torch.nn.Module):
    """Within one autocast region, each weight is cast to the lower precision once, not at every
    use. Autocast keeps its casts only of leaf tensors that require grad (`cached_cast` in
    torch's autocast_mode.cpp), so a frozen model's weights were cast again at every forward:
    for SmolLM2, 135M weights read and written at each of the ~30 one-token steps of a batch.
    Marking its floating-point weights as requiring grad for the region (no graph is recorded
    under inference mode) keeps the same casts, so the same numbers; the region's end clears
    the cache, and every weight marked is unmarked, whatever ends the region."""
    marked = []
    try:
        for p in model.parameters():
            if p.is_floating_point() and not p.requires_grad:
                p.requires_grad_(True)
                marked.append(p)
        yield
    finally:
        for p in marked:
            p.requires_grad_(False)


def _draw(probs: torch.Tensor, generator: Optional[torch.Generator]) -> torch.Tensor:
    """One index a row, drawn where ``generator`` lives (a seeded CPU generator draws the
    same tokens whether the model runs on the CPU or a GPU; torch refuses a CPU generator
    for a CUDA tensor)."""
    if generator is None or generator.device == probs.device:
        return torch.multinomial(probs, 1, generator=generator)
    return torch.multinomial(probs.to(generator.device), 1, generator=generator).to(probs.device)


def _cache_of(output):
    """A forward's key/value cache: ``cache`` since transformers 5.24 (``past_key_values``
    warns there), ``past_key_values`` before."""
    return output['cache'] if 'cache' in output else output.past_key_values
