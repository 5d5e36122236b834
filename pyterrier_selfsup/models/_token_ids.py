"""Less tokenization for an encoder that reads the same long texts again and again.

Two savings, each giving the ids a full tokenization gives:

- :func:`tokenize_cut`: a text far longer than the tokens kept is cut at a word's end before it
  is tokenized (a 10,000-character document kept to 256 tokens need not be read to its end).
  Where a cut text gives fewer tokens than are kept, the whole text is tokenized after all.
- :class:`KeptTokenIds`: the token ids of passages kept between encodings of one corpus, so
  that a trainer's index refresh does not tokenize the corpus again. On a GPU, tokenization
  takes most of a refresh (measured: docs/results.md).
"""
import hashlib
import threading
from collections.abc import Callable, Sequence

import numpy as np

# A text is cut before tokenization where it has more than this many characters for each token
# kept. English runs about 4.5 characters a word piece; a cut text that falls short of the kept
# tokens (digits, symbols) is tokenized whole, so this bounds only how often that happens.
CHARS_PER_TOKEN = 8


def splits_at_spaces(backend) -> bool:
    """Whether a Rust tokenizer (``tokenizers.Tokenizer``) splits its pre-tokens where a word
    ends before a space, so that the tokens of a text cut there begin the whole text's tokens.
    True of BERT's word pieces, byte-level BPE and SentencePiece's split metaspace; false where
    the pre-tokenizer keeps the text whole, where the normalizer rewrites the space itself, or
    where an added token holds a space (the tokens could then span the cut)."""
    pre = backend.pre_tokenizer
    if pre is None:
        return False
    if any(' ' in token.content for token in backend.get_added_tokens_decoder().values()):
        return False
    try:
        text = backend.normalizer.normalize_str('ab cd') if backend.normalizer else 'ab cd'
        pieces = pre.pre_tokenize_str(text)
    except Exception:  # (a normalizer or pre-tokenizer without a Python-side view)
        return False
    return text == 'ab cd' and len(pieces) >= 2 and pieces[0][1][1] <= 2


def cut_at_word(text: str, limit: int) -> str | None:
    """``text`` cut at the last word's end (a non-space followed by a space) within ``limit``
    characters, or None where it is no longer than ``limit`` or has no such place."""
    if len(text) <= limit:
        return None
    end = text.rfind(' ', 1, limit + 1)
    while end > 0 and text[end - 1].isspace():
        end = text.rfind(' ', 1, end)
    return text[:end] if end > 0 else None


def tokenize_cut(encode: Callable[[list[str]], list[list[int]]], texts: Sequence[str],
                 max_length: int) -> list[list[int]]:
    """``encode(texts)`` (a tokenizer truncating on the right to ``max_length`` ids), where each
    text longer than ``max_length * CHARS_PER_TOKEN`` characters is cut at a word's end first.
    A cut text that still gives ``max_length`` ids gives those of the whole text; one that gives
    fewer is tokenized whole."""
    limit = max_length * CHARS_PER_TOKEN
    cut = [cut_at_word(t, limit) for t in texts]
    ids = encode([c if c is not None else t for c, t in zip(cut, texts)])
    short = [i for i, c in enumerate(cut) if c is not None and len(ids[i]) < max_length]
    if short:
        for i, whole in zip(short, encode([texts[i] for i in short])):
            ids[i] = whole
    return ids


def digest(text: str) -> bytes:
    """16 bytes that stand for ``text`` (BLAKE2b), so that a kept text costs its ids only."""
    return hashlib.blake2b(text.encode('utf-8', 'surrogatepass'), digest_size=16).digest()


class KeptTokenIds:
    """Token ids of texts, kept by each text's digest up to ``max_tokens`` ids in all (int32
    arrays: 4 bytes an id, and about 200 bytes a text besides). Texts past the budget are
    tokenized every time. A copy of the encoder that holds it (a trainer's snapshot for an
    asynchronous refresh) shares it; lookups and stores from two threads are safe."""

    def __init__(self, max_tokens: int):
        self.max_tokens = max_tokens
        self.tokens = 0
        self._ids: dict[bytes, np.ndarray] = {}
        self._lock = threading.Lock()

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):  # (pickled empty: the ids are a cache, and a lock does not pickle)
        return KeptTokenIds, (self.max_tokens,)

    def __len__(self) -> int:
        return len(self._ids)

    def ids(self, texts: Sequence[str],
            tokenize: Callable[[list[str]], list[list[int]]]) -> list[Sequence[int]]:
        """The ids of ``texts``: those kept, and ``tokenize`` of the rest (kept while the
        budget lasts)."""
        keys = [digest(t) for t in texts]
        found = [self._ids.get(k) for k in keys]
        missing = [i for i, f in enumerate(found) if f is None]
        if missing:
            fresh = tokenize([texts[i] for i in missing])
            with self._lock:
                for i, ids in zip(missing, fresh):
                    found[i] = ids
                    if self.tokens + len(ids) <= self.max_tokens and keys[i] not in self._ids:
                        self._ids[keys[i]] = np.asarray(ids, dtype=np.int32)
                        self.tokens += len(ids)
        return found
