"""How a dual encoder's two sides read their texts: each side's prompt and max length, and the
token ids of a batch from the fast tokenizer's Rust code
(:mod:`~pyterrier_selfsup.models._token_ids`).

A class that mixes :class:`SideTokenizer` in sets ``tokenizer``, ``prompts`` (``query`` and
``passage``), ``max_length``, ``query_max_length``, ``_rust_tokenizers`` (an empty dict) and
``_kept_ids`` (None).
"""
from collections.abc import Sequence

import numpy as np
from tokenizers import Tokenizer

from pyterrier_selfsup.models._token_ids import KeptTokenIds, splits_at_spaces, tokenize_cut
from pyterrier_selfsup.models.batching import (
    budget_batches,
    clean_texts,
    pad,
    tokenized_in_slices,
)

# token ids a trainer keeps between refreshes of its index
KEPT_TOKENS = 2 ** 26


class SideTokenizer:
    """Each side's texts as token ids: a query or a passage, after the side's prompt, cut to the
    side's max length."""

    def side_max_length(self, side: str) -> int:
        """The tokens a text of ``side`` (``'query'`` or ``'passage'``) is cut to."""
        return self.query_max_length if side == 'query' else self.max_length

    def prompted(self, texts: Sequence, side: str) -> list[str]:
        """``texts`` (cleaned) as ``side`` reads them: each after the side's prompt."""
        prompt = self.prompts[side]
        texts = clean_texts(list(texts))
        return [prompt + t for t in texts] if prompt else texts

    def tokenize(self, texts: list[str], side: str, padding: bool | str = True):
        """The tokenizer's batch of ``texts`` as ``side`` reads them."""
        return self._tokenized(self.prompted(texts, side), side, padding)

    def _tokenized(self, texts: list[str], side: str, padding: bool | str = True):
        return self.tokenizer(texts, padding=padding, truncation=True,
                              max_length=self.side_max_length(side),
                              return_tensors='pt' if padding else None)

    def token_ids(self, texts: list[str], side: str) -> list[Sequence[int]]:
        """The ids :meth:`tokenize` gives ``texts`` (truncated, unpadded), from the fast tokenizer's
        Rust code directly where there is one (the wrapper builds masks inference never reads). A
        text far longer than the ids kept is cut at a word's end first (:func:`tokenize_cut`, the
        same ids), and passages' ids are kept where :meth:`keep_passage_token_ids` says so."""
        texts = self.prompted(texts, side)
        # (read once: another thread may let the kept ids go meanwhile)
        kept = self._kept_ids if side == 'passage' else None
        if kept is not None:
            return kept.ids(texts, lambda missing: self._token_ids(missing, side))
        return self._token_ids(texts, side)

    def _token_ids(self, texts: list[str], side: str) -> list[list[int]]:
        max_length = self.side_max_length(side)
        if not getattr(self.tokenizer, 'is_fast', False):
            return self._tokenized(texts, side, padding=False)['input_ids']
        if max_length not in self._rust_tokenizers:
            backend = Tokenizer.from_str(self.tokenizer.backend_tokenizer.to_str())
            backend.no_padding()
            backend.enable_truncation(max_length, direction=self.tokenizer.truncation_side)
            cuts = self.tokenizer.truncation_side == 'right' and splits_at_spaces(backend)
            self._rust_tokenizers[max_length] = backend, cuts
        backend, cuts = self._rust_tokenizers[max_length]
        encode = getattr(backend, 'encode_batch_fast', backend.encode_batch)  # (no offsets)

        def ids(some: list[str]) -> list[list[int]]:
            return [e.ids for e in encode(some)]
        return tokenize_cut(ids, texts, max_length) if cuts else ids(texts)

    def keep_passage_token_ids(self, max_tokens: int | None = KEPT_TOKENS):
        """Keeps the token ids of the passages it encodes, up to ``max_tokens`` ids, so that
        encoding the same corpus again skips their tokenization; None lets them go."""
        self._kept_ids = KeptTokenIds(max_tokens) if max_tokens else None

    def _batches(self, texts: list[str], side: str, batch_size: int):
        """(positions in ``texts``, input ids, attention mask) for each inference batch: texts
        longest first, in slices tokenized on a thread (:func:`tokenized_in_slices`), each slice cut
        into batches of at most ``batch_size`` times the side's ``max_length`` padded tokens
        (:func:`budget_batches`)."""
        budget = batch_size * self.side_max_length(side)
        order = np.argsort([-len(t) for t in texts], kind='stable')
        left = self.tokenizer.padding_side == 'left'
        for positions, ids in tokenized_in_slices(lambda chunk: self.token_ids(chunk, side),
                                                  texts, order):
            lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
            by_length = np.argsort(-lengths, kind='stable')
            for batch in budget_batches(lengths[by_length], budget):
                rows = by_length[batch]
                input_ids, mask = pad([ids[r] for r in rows], self.tokenizer.pad_token_id,
                                      left=left)
                yield positions[rows], input_ids, mask
