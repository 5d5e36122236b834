"""Training queries without a query log, for every trainer in this package.

Each source returns a topics frame (``qid``, ``query``) with ``source_docno``, the passage a
query was cut from, which trainers must not retrieve as its answer (REALM). Sampling is
deterministic under ``seed`` and streams the corpus once (reservoir sampling).
"""
import logging
import math
import random
import re
from collections.abc import Iterable

import pandas as pd

from pyterrier_selfsup.data.collections import Collection

logger = logging.getLogger(__name__)

_SENTENCE_END = re.compile(r'(?<=[.!?])\s+(?=[A-Z0-9"(\[])')
# lowercased collections (cranfield, ADI) have no capital to open a sentence; their
# tokenised punctuation stands alone (' . '), which abbreviations ('e.g. ') never do
_LOWERCASED_END = re.compile(r'(?<=\s[.!?])\s+')


def sentences(text: str) -> list[str]:
    splitter = _SENTENCE_END if any(c.isupper() for c in text) else _LOWERCASED_END
    return [s.strip() for s in splitter.split(text) if s.strip()]


def corpus_sentences(collection: Collection, n: int, *, seed: int = 0, min_words: int = 5,
                     max_words: int = 40) -> pd.DataFrame:
    """``n`` sentences, one from each of ``n`` documents drawn uniformly at random, among those of
    ``min_words``..``max_words`` words. A smaller corpus gives several sentences of a document, and
    a warning if it has fewer than ``n`` in all."""
    rng = random.Random(seed)

    def fitting(doc):
        return [s for s in sentences(doc['text']) if min_words <= len(s.split()) <= max_words]

    def pick(doc):
        found = fitting(doc)
        return rng.choice(found) if found else None

    pairs = reservoir_sample(collection.corpus_iter(), n, rng, pick)
    if len(pairs) < n:
        pairs = _top_up(collection, pairs, n, rng, lambda doc, k: fitting(doc), 'sentences')
    return _frame('sent', pairs)


def document_titles(collection: Collection, n: int, *, seed: int = 0,
                    min_words: int = 3) -> pd.DataFrame:
    """``n`` distinct document titles of ``min_words`` words or more as queries, one from each of
    ``n`` documents drawn uniformly at random; the source is the document. A collection without
    such titles raises ``ValueError``; one with fewer than ``n`` gives them all."""
    rng = random.Random(seed)
    seen_docs, seen_titles = set(), set()

    def titled():
        for doc in collection.irds.docs_iter():
            if doc.doc_id not in seen_docs:
                seen_docs.add(doc.doc_id)
                yield {'docno': doc.doc_id, 'title': getattr(doc, 'title', None) or ''}

    def pick(doc):
        title = ' '.join(doc['title'].split())
        if len(title.split()) < min_words or title.lower() in seen_titles:
            return None
        seen_titles.add(title.lower())
        return title

    pairs = reservoir_sample(titled(), n, rng, pick)
    if not pairs:
        raise ValueError(f'queries=titles: no document of {collection.name} has a title of '
                         f'{min_words} words or more')
    if len(pairs) < n:
        logger.info('%s: %d titles asked for, %d distinct titles in the corpus',
                    collection.name, n, len(pairs))
    return _frame('title', pairs)


def cropped_spans(collection: Collection, n: int, *, seed: int = 0, min_words: int = 5,
                  max_words: int = 30) -> pd.DataFrame:
    """``n`` random contiguous word spans (length uniform in ``min_words``..``max_words``),
    one from each of ``n`` documents drawn uniformly at random (Contriever's cropping)."""
    rng = random.Random(seed)

    def pick(doc):
        words = doc['text'].split()
        if len(words) < min_words:
            return None
        length = rng.randint(min_words, min(max_words, len(words)))
        start = rng.randint(0, len(words) - length)
        return ' '.join(words[start:start + length])

    pairs = reservoir_sample(collection.corpus_iter(), n, rng, pick)
    if len(pairs) < n:  # a small corpus: several spans of a document
        per_doc = math.ceil(n / max(1, len(pairs))) + 1
        pairs = _top_up(collection, pairs, n, rng,
                        lambda doc, k: [pick(doc) for _ in range(per_doc)], 'spans')
    return _frame('span', pairs)


MASK = '<extra_id_0>'  # T5's first sentinel: what a masked span is replaced by, by default
_WORD = re.compile(r"[\w][\w'\-/.]*[\w]|\w")


def salient_span(sentence: str, rng: random.Random) -> tuple[int, int] | None:
    """(start, end) of a span of ``sentence`` worth reconstructing, or None: a heuristic stand-in
    for salient span masking (REALM, ReAtt §3.3). In order of preference, one drawn at random
    among: words with a digit, capitalised words that do not open the sentence, words of at
    least 8 letters."""
    words = [(m.start(), m.end(), m.group()) for m in _WORD.finditer(sentence)]
    classes = [
        [w for w in words if any(c.isdigit() for c in w[2])],
        [w for i, w in enumerate(words) if i > 0 and w[2][:1].isupper()],
        [w for w in words if len(w[2]) >= 8 and w[2].isalpha()],
    ]
    for candidates in classes:
        if candidates:
            start, end, _ = rng.choice(candidates)
            return start, end
    return None


def masked_spans(collection: Collection, n: int, *, seed: int = 0, mask: str = MASK,
                 min_words: int = 5, max_words: int = 40) -> pd.DataFrame:
    """ReAtt's unsupervised queries (§3.3): ``n`` corpus sentences (one from each of ``n``
    documents drawn at random) with one salient span (:func:`salient_span`) replaced by
    ``mask``; the span is the ``answer`` a reader generates."""
    rng = random.Random(seed)

    def pick(doc):
        fitting = [s for s in sentences(doc['text']) if min_words <= len(s.split()) <= max_words]
        rng.shuffle(fitting)
        for sentence in fitting:
            span = salient_span(sentence, rng)
            if span is not None:
                return sentence[:span[0]] + mask + sentence[span[1]:], sentence[span[0]:span[1]]
        return None

    pairs = reservoir_sample(collection.corpus_iter(), n, rng, pick)
    return pd.DataFrame({'qid': [f'mask-{i}' for i in range(len(pairs))],
                         'query': [q for _, (q, _) in pairs],
                         'answer': [a for _, (_, a) in pairs],
                         'source_docno': [d for d, _ in pairs]})


def reservoir_sample(docs: Iterable[dict], n: int, rng: random.Random,
                     pick) -> list[tuple[str, str]]:
    """Reservoir sampling of ``n`` (docno, text picked from the document) pairs over the
    documents for which ``pick`` finds something, in one pass."""
    reservoir, seen = [], 0
    for doc in docs:
        query = pick(doc)
        if query is None:
            continue
        seen += 1
        if len(reservoir) < n:
            reservoir.append((doc['docno'], query))
        else:
            j = rng.randrange(seen)
            if j < n:
                reservoir[j] = (doc['docno'], query)
    return reservoir


def _top_up(collection: Collection, pairs: list[tuple[str, str]], n: int, rng: random.Random, more,
            what: str) -> list[tuple[str, str]]:
    """``pairs`` topped up to ``n`` with further distinct picks of the same documents, drawn at
    random from ``more(doc, n)``; a warning says when the corpus has fewer."""
    taken = set(pairs)
    pool = sorted({(doc['docno'], text) for doc in collection.corpus_iter()
                   for text in more(doc, n) if text is not None} - taken)
    rng.shuffle(pool)
    pairs = pairs + pool[:n - len(pairs)]
    if len(pairs) < n:
        logger.warning('%s: %d %s asked for, the corpus has only %d',
                       collection.name, n, what, len(pairs))
    else:
        logger.info('%s: %d %s from %d documents (several per document: the corpus is small)',
                    collection.name, n, what, len({d for d, _ in pairs}))
    return pairs


def text_if_any(doc: dict):
    """A document's text, or None where it has none (a ``pick`` for :func:`reservoir_sample`)."""
    return doc['text'] if doc['text'].strip() else None


def _frame(prefix: str, pairs: list[tuple[str, str]]) -> pd.DataFrame:
    return pd.DataFrame({'qid': [f'{prefix}-{i}' for i in range(len(pairs))],
                         'query': [q for _, q in pairs], 'source_docno': [d for d, _ in pairs]})
