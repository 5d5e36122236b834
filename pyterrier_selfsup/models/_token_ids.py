"""Less tokenization for an encoder that reads the same long texts again and again.

Two savings, each giving the ids a full tokenization gives:

- :func:`tokenize_cut`: a text far longer than the tokens kept is cut at a word's end before it
  is tokenized; where a cut text gives fewer tokens than are kept, the whole text is tokenized.
- :class:`KeptTokenIds`: the token ids of passages kept between encodings of one corpus, so
  that a trainer's index refresh does not tokenize the corpus again.
"""
import hashlib
import threading
from collections.abc import Callable, Sequence

import numpy as np

# a text is cut before tokenization where it has more than this many characters a kept
# token (a cut text that falls short is tokenized whole)
CHARS_PER_TOKEN = 8


def splits_at_spaces(backend) -> bool:
    """Whether a Rust tokenizer splits its pre-tokens where a word ends before a space, so that
    the tokens of a text cut there begin the whole text's tokens (false where the pre-tokenizer
    keeps the text whole, the normalizer rewrites the space, or an added token holds a space)."""
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
    """``encode(texts)`` (a tokenizer truncating on the right to ``max_length`` ids), each text
    longer than ``max_length * CHARS_PER_TOKEN`` characters cut at a word's end first; a cut text
    that gives fewer than ``max_length`` ids is tokenized whole."""
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
    """Token ids of texts, kept by each text's digest up to ``max_tokens`` ids in all; texts past
    the budget are tokenized every time. Copies of the encoder share it; it is thread-safe."""

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
