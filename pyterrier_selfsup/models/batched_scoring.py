"""A generator's log-likelihoods of many (target, passage) pairs without gradients, batched.

Pairs are grouped by passage and each passage is encoded once (the encoder's output for seq2seq
models, the prompt's key/value cache for decoder-only ones,
:class:`~pyterrier_selfsup.models.kv_cache.PrefixCache`); its targets are then scored from it in
chunks within :data:`LOGITS_BUDGET`, only the target positions reaching the output layer.
"""
from collections import defaultdict
from collections.abc import Iterator, Sequence
from functools import cached_property

import numpy as np
import torch
from transformers import DynamicCache

from pyterrier_selfsup.models.batching import clean_texts, pad
from pyterrier_selfsup.models.kv_cache import PrefixCache, full_attention_layers
from pyterrier_selfsup.progress import Progress, progress

# bytes of fp32 logits one chunk of targets may produce on a CPU (the log-softmax peaks at a
# few times this); on a GPU only the 4 * batch_size bound applies
LOGITS_BUDGET = 64 * 2 ** 20


class BatchedScoring:
    """:meth:`log_likelihoods` for a :class:`~pyterrier_selfsup.models.generator.Generator`."""

    def log_likelihoods(self, targets: Sequence[str], passages: Sequence[str], *,
                        tracker: Progress | None = None) -> np.ndarray:
        """Σ_j log p(target_j | passage, target_<j) for each (target, passage) pair, without
        gradients, each distinct passage encoded once. ``tracker``: the progress of a larger job,
        which this call's pairs count towards, instead of a stage of its own."""
        if len(targets) != len(passages):
            raise ValueError(f'{len(targets)} targets but {len(passages)} passages')
        out = np.zeros(len(targets), dtype=np.float64)
        if not len(targets):
            return out
        passage_keys, pair_passage = np.unique(np.asarray(clean_texts(list(passages)),
                                                          dtype=object), return_inverse=True)
        target_keys, pair_target = np.unique(np.asarray(clean_texts(list(targets)), dtype=object),
                                             return_inverse=True)
        p_ids = self.passage_ids(list(passage_keys))
        t_ids = self.target_ids(list(target_keys))
        pairs_of = defaultdict(list)
        for pair, p in enumerate(pair_passage):
            pairs_of[p].append(pair)
        order = sorted(pairs_of, key=lambda p: -len(p_ids[p]))  # longest first: fail fast on memory
        batches = [order[i:i + self.batch_size] for i in range(0, len(order), self.batch_size)]

        def pairs_in(batch) -> int:
            return sum(len(pairs_of[p]) for p in batch)
        if tracker is None:
            batches = progress(batches, total=len(pair_passage), desc='generator scoring',
                               unit='pair', count=pairs_in,
                               enabled=self.verbose and len(batches) > 1)
        scored = []  # (pairs, their values on the device): copied back once, at the end
        with self.inference():
            for batch in batches:
                rows = [(pair, row) for row, p in enumerate(batch) for pair in pairs_of[p]]
                # targets sorted by length, so that a chunk pads little
                rows.sort(key=lambda pair_row: len(t_ids[pair_target[pair_row[0]]]))
                score = self._seq2seq_logp if self.is_seq2seq else self._score_causal
                scored.extend(score([p_ids[p] for p in batch],
                                    [(row, t_ids[pair_target[pair]]) for pair, row in rows], rows))
                if tracker is not None:
                    tracker.update(pairs_in(batch))
        if scored:
            out[np.concatenate([pairs for pairs, _ in scored])] = torch.cat(
                [values.double() for _, values in scored]).cpu().numpy()
        return out

    def _score_causal(self, prefixes: list[list[int]], items: list[tuple[int, list[int]]], rows):
        """Prefixes left-padded, so that every row's last position predicts its first
        target token; their key/value cache is then shared by all targets of the row."""
        pad_id = self.tokenizer.pad_token_id
        ids, mask = pad(prefixes, pad_id, left=True, device=self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                         logits_to_keep=1)
        first = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
        cache = out.cache
        lengths = mask.sum(-1)
        for start, end in self._target_chunks(items):
            part = items[start:end]
            idx = torch.tensor([row for row, _ in part], device=self.device)
            targets, t_mask = pad([t for _, t in part], pad_id, device=self.device)
            values = first[idx].gather(1, targets[:, :1]).squeeze(1) * t_mask[:, 0]
            if targets.shape[1] > 1:
                expanded = (PrefixCache(cache, idx) if self._prefix_cache_fits else
                            DynamicCache(ddp_cache_data=[(layer.keys.index_select(0, idx),
                                                          layer.values.index_select(0, idx))
                                                         for layer in cache.layers],
                                         config=self.model.config))
                logits = self.model(input_ids=targets[:, :-1],
                                    attention_mask=torch.cat([mask.index_select(0, idx),
                                                              t_mask[:, :-1]], 1),
                                    position_ids=lengths.index_select(0, idx)[:, None]
                                    + torch.arange(targets.shape[1] - 1, device=self.device),
                                    use_cache=False, cache=expanded).logits
                values = values + gather_logp(logits, targets[:, 1:], t_mask[:, 1:])
            yield [rows[start + i][0] for i in range(len(part))], values

    @cached_property
    def _prefix_cache_fits(self) -> bool:
        """Whether targets read their prefixes through a :class:`PrefixCache` (where every layer
        attends to every position)."""
        return full_attention_layers(self.model.config) is not None

    def _target_chunks(self, items: list[tuple[int, list[int]]]) -> Iterator[tuple[int, int]]:
        """:func:`target_chunks` for this generator: ``4 * batch_size`` targets a chunk, and on
        a CPU no more logits than :data:`LOGITS_BUDGET` bytes."""
        budget = LOGITS_BUDGET if self.device.type == 'cpu' else float('inf')
        row_bytes = 4 * self.model.get_output_embeddings().weight.shape[0]
        return target_chunks([len(t) for _, t in items], 4 * self.batch_size, row_bytes, budget)

    def _seq2seq_logp(self, passages, items, rows):
        """Each passage through the encoder once; its output is shared by its targets."""
        ids, mask = pad(passages, self.tokenizer.pad_token_id, device=self.device)
        encoded = self.model.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        for start, end in self._target_chunks(items):
            part = items[start:end]
            idx = torch.tensor([row for row, _ in part], device=self.device)
            yield ([rows[start + i][0] for i in range(len(part))],
                   self.decode_logp(encoded.index_select(0, idx), mask.index_select(0, idx),
                                    [t for _, t in part]))


def target_chunks(lengths: list[int], most: int, row_bytes: int,
                  budget: float) -> Iterator[tuple[int, int]]:
    """(start, end) of consecutive chunks of targets of ``lengths`` tokens: at most ``most``
    targets, and no more fp32 logits (targets x longest target x ``row_bytes``) than ``budget``."""
    start = 0
    while start < len(lengths):
        end, longest = start + 1, lengths[start]
        while end < len(lengths) and end - start < most:
            wider = max(longest, lengths[end])
            if (end + 1 - start) * wider * row_bytes > budget:
                break
            end, longest = end + 1, wider
        yield start, end
        start = end


def gather_logp(logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Σ over unmasked positions of log softmax(logits)[target], per row, in fp32: the
    target's logit minus the logsumexp (no vocabulary-sized log-softmax is written)."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    return (logp * mask).sum(-1)
