"""Training queries without a query log, for every trainer in this package.

Each source returns a topics frame (``qid``, ``query``); the corpus-derived ones add
``source_docno``, the passage a query was cut from, which trainers must not retrieve
as its answer (REALM prohibits such trivial retrievals). Sampling is deterministic
under ``seed`` and streams the corpus once (reservoir sampling), so it works on
corpora that do not fit in memory.
"""
import random
import re
from pathlib import Path
from typing import Iterable, List, Optional, Tuple, Union

import pandas as pd

from pyterrier_selfsup._cache import build_once, cache_key, cache_root
from pyterrier_selfsup.collections import Collection

SOURCES = ('sentences', 'spans', 'generated')  # or the name of a collection whose topic texts are used

_SENTENCE_END = re.compile(r'(?<=[.!?])\s+(?=[A-Z0-9"(\[])')


def given_topics(topics: pd.DataFrame) -> pd.DataFrame:
    """Query texts of existing topics; anything else in the frame (labels) is dropped."""
    if 'query' not in topics.columns:
        raise ValueError(f'topics need a query column; they have {list(topics.columns)}')
    return topics[['qid', 'query']].reset_index(drop=True)


def sentences(text: str) -> List[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def corpus_sentences(collection: Collection, n: int, *, seed: int = 0, min_words: int = 5,
                     max_words: int = 40) -> pd.DataFrame:
    """``n`` sentences, one from each of ``n`` documents drawn uniformly at random; a
    document's sentence is drawn among those of ``min_words``..``max_words`` words."""
    rng = random.Random(seed)

    def pick(doc):
        fitting = [s for s in sentences(doc['text']) if min_words <= len(s.split()) <= max_words]
        return rng.choice(fitting) if fitting else None

    return _frame('sent', _sample(collection.corpus_iter(), n, rng, pick))


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

    return _frame('span', _sample(collection.corpus_iter(), n, rng, pick))


def _sample(docs: Iterable[dict], n: int, rng: random.Random, pick) -> List[Tuple[str, str]]:
    """Reservoir sampling of ``n`` (docno, text picked from the document) pairs over the
    documents for which ``pick`` finds something."""
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


def _frame(prefix: str, pairs: List[Tuple[str, str]]) -> pd.DataFrame:
    return pd.DataFrame({'qid': [f'{prefix}-{i}' for i in range(len(pairs))],
                         'query': [q for _, q in pairs], 'source_docno': [d for d, _ in pairs]})


def generated_queries(collection: Collection, generator, n: int, *, seed: int = 0, max_new_tokens: int = 32,
                      **generate_kwargs) -> pd.DataFrame:
    """One query written by ``generator`` (a :class:`~pyterrier_selfsup.generator.Generator`,
    through its prompt) for each of ``n`` documents drawn uniformly at random (the thesis'
    conclusion: the generator as a source of synthetic queries). Greedy unless
    ``generate_kwargs`` say otherwise (``do_sample=True, top_p=0.92``); empty generations
    are dropped."""
    rng = random.Random(seed)
    docs = _sample(collection.corpus_iter(), n, rng, lambda doc: doc['text'] if doc['text'].strip() else None)
    texts = generator.generate([text for _, text in docs], max_new_tokens=max_new_tokens, **generate_kwargs)
    return _frame('gen', [(docno, q) for (docno, _), q in zip(docs, texts) if q.strip()])


def training_topics(collection: Collection, queries: str, n_queries: int, *, seed: int = 0, generator=None,
                    cache_dir: Optional[Union[str, Path]] = None) -> pd.DataFrame:
    """The training queries a pipeline names by ``queries``: ``n_queries`` corpus
    ``sentences`` or ``spans``, ``n_queries`` queries ``generated`` by ``generator`` (kept
    under ``<cache>/queries/``, keyed by the generator's fingerprint, so that every trainer
    given the same source trains on the same queries, written once), or the name of a
    collection whose topic texts are used (never its qrels)."""
    if queries == 'sentences':
        return corpus_sentences(collection, n_queries, seed=seed)
    if queries == 'spans':
        return cropped_spans(collection, n_queries, seed=seed)
    if queries != 'generated':
        return given_topics(Collection(queries).topics())
    if generator is None:
        raise ValueError("queries='generated' needs a generator")
    settings = {'generator': generator.fingerprint(), 'n': n_queries, 'seed': seed}
    path = cache_root(cache_dir) / 'queries' / cache_key(f'{collection.corpus_id}.generated', settings)

    def write(staging: Path):
        staging.mkdir(parents=True)
        generated_queries(collection, generator, n_queries, seed=seed).to_json(
            staging / 'topics.jsonl', orient='records', lines=True)

    return pd.read_json(build_once(path, write) / 'topics.jsonl', orient='records', lines=True, dtype=False)
