"""Training queries written for passages by a generator: one a passage (``generated``), several
sampled a passage (``sampled``, GPL's kind) and those BM25 checks lead back to their passage
(``roundtrip``). Each returns a topics frame (``qid``, ``query``, ``source_docno``).

    sampled_queries(Collection('classic/adi'), generator, 200)
"""
import logging
import math
import random
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.data.queries.cut import _frame, reservoir_sample, text_if_any
from pyterrier_selfsup.data.queries.logs import given_topics, query_file, query_log

logger = logging.getLogger(__name__)

ROUND_TRIP_DEPTH = 10
# the (passage, query) pairs a writer is shown with example_pairs=COLLECTION (InPars shows 3)
EXAMPLE_PAIRS = 3


def example_texts(examples: str | None) -> list:
    """The query texts a writer is shown: none, a file's, or a collection's topics'."""
    if not examples:
        return []
    if query_file(examples):
        return query_log(examples)['query'].tolist()
    return given_topics(Collection(examples).topics())['query'].tolist()


def example_pairs(name: str | None, n: int = EXAMPLE_PAIRS, seed: int = 0) -> list:
    """``n`` (passage, query) pairs of the collection ``name`` for a writer to be shown: topics
    drawn with ``seed`` among those with a judged relevant passage, each with its first
    relevant passage's text. This reads ``name``'s relevance judgements."""
    if not name:
        return []
    coll = Collection(name)
    qrels = coll.qrels()
    relevant = (qrels[qrels['label'] > 0].sort_values(['qid', 'docno'])
                .groupby('qid')['docno'].first())
    topics = coll.topics()
    topics = topics[topics['qid'].isin(relevant.index)].sort_values('qid')
    picked = topics.sample(n=min(n, len(topics)), random_state=seed)
    texts = coll.texts([relevant[q] for q in picked['qid']])
    return list(zip(texts, picked['query']))


def generated_queries(collection: Collection, generator, n: int, *, seed: int = 0,
                      max_new_tokens: int = 32, **generate_kwargs) -> pd.DataFrame:
    """One query written by ``generator`` for each of ``n`` documents drawn uniformly at
    random; greedy unless ``generate_kwargs`` say otherwise. Empty generations are dropped."""
    rng = random.Random(seed)
    docs = reservoir_sample(collection.corpus_iter(), n, rng, text_if_any)
    texts = generator.generate([text for _, text in docs], max_new_tokens=max_new_tokens,
                               **generate_kwargs)
    return _frame('gen', [(docno, q) for (docno, _), q in zip(docs, texts) if q.strip()])


# a small corpus gets more samples a passage, up to this: beyond it they repeat
MAX_PER_PASSAGE = 10


# how the writer samples by default: nucleus sampling, several queries a passage
SAMPLING = dict(per_passage=3, temperature=1.0, top_p=0.95)
QUERY_TOKENS = 32  # the most tokens a written query takes, by default


def sampled_queries(collection: Collection, generator, n: int, *,
                    per_passage: int = SAMPLING['per_passage'], seed: int = 0,
                    max_new_tokens: int = QUERY_TOKENS,
                    temperature: float = SAMPLING['temperature'],
                    top_p: float = SAMPLING['top_p'], top_k: int | None = None,
                    style: str = 'plain',
                    examples: Sequence[str] = (),
                    pairs: Sequence[tuple[str, str]] = (),
                    checkpoint: Path | None = None, writer=None) -> pd.DataFrame:
    """About ``n`` queries written by ``generator`` with nucleus sampling, ``per_passage`` for
    each of ⌈n / per_passage⌉ passages drawn uniformly at random; empty ones and repeats are
    dropped. On a corpus with fewer passages, each gets more, up to :data:`MAX_PER_PASSAGE`, and
    the ``n`` kept are spread over the passages (:func:`spread`).

    ``top_k``: the tokens sampled from (None: the model's generation config's);
    ``max_new_tokens``: the most a query takes. ``style``, ``examples``, ``pairs`` and
    ``checkpoint`` are the :class:`~pyterrier_selfsup.models.writing.QueryWriter`'s; ``writer``: a
    writer already made (then ``style``, ``examples`` and ``pairs`` are its own)."""
    import torch  # the generator's sampling is seeded through torch

    rng = random.Random(seed)
    docs = reservoir_sample(collection.corpus_iter(), math.ceil(n / per_passage), rng, text_if_any)
    if not docs:
        return _frame('gen', [])
    asked = per_passage
    per_passage = _queries_each(n, per_passage, len(docs))
    if writer is None:
        writer = generator.writer(style=style, examples=examples, pairs=pairs, seed=seed)
    texts = writer.write([text for _, text in docs], per_passage, max_new_tokens=max_new_tokens,
                         do_sample=True, temperature=temperature, top_p=top_p, top_k=top_k,
                         generator=torch.Generator().manual_seed(seed), checkpoint=checkpoint)
    kept, seen = [], set()
    for (docno, _), queries in zip(docs, texts):
        for query in queries:
            key = ' '.join(query.lower().split())
            if key and key not in seen:
                seen.add(key)
                kept.append((docno, query))
    if len(kept) < n:
        logger.warning('%s: %d sampled queries asked for, %d distinct written',
                       collection.name, n, len(kept))
    if per_passage > asked:  # each passage wrote more than asked: keep n spread over them all
        return _frame('gen', spread(kept, n))
    return _frame('gen', kept[:n])


def _queries_each(n: int, per_passage: int, passages: int) -> int:
    """Queries written for each of ``passages`` when ``n`` are asked, ``per_passage`` a passage:
    more where the corpus holds fewer passages than ``n / per_passage``, up to
    :data:`MAX_PER_PASSAGE`."""
    return min(max(per_passage, math.ceil(n / passages)), max(per_passage, MAX_PER_PASSAGE))


def spread(pairs: list[tuple[str, str]], n: int) -> list[tuple[str, str]]:
    """``n`` of the (docno, query) ``pairs``, in their order, spread over their passages: each
    passage's first query, then each one's second, and so on.

        spread([('a', 'q1'), ('a', 'q2'), ('b', 'q3'), ('b', 'q4')], 2)   # a's q1, b's q3
    """
    rank: dict[str, int] = {}
    ranks = []
    for docno, _ in pairs:
        ranks.append(rank.get(docno, 0))
        rank[docno] = ranks[-1] + 1
    taken = set(sorted(range(len(pairs)), key=lambda i: (ranks[i], i))[:n])
    return [pair for i, pair in enumerate(pairs) if i in taken]


def round_trip_queries(collection: Collection, generator, n: int, retriever, *, depth: int = 10,
                       seed: int = 0, max_tries: int = 10, max_new_tokens: int = 32,
                       **generate_kwargs) -> pd.DataFrame:
    """Up to ``n`` generated queries that pass a round-trip check: ``retriever`` ranks the
    passage a query was written for in its top ``depth``, and no earlier kept query has the same
    text (Promptagator's round-trip filtering). Passages are drawn at random, ``n`` a round,
    until ``n`` queries are kept or ``max_tries * n`` passages have been tried."""
    rng = random.Random(seed)
    docs = reservoir_sample(collection.corpus_iter(), max_tries * n, rng, text_if_any)
    rng.shuffle(docs)  # rounds of n from a uniform order (a reservoir's slots keep corpus order)
    kept, seen = [], set()
    for start in range(0, len(docs), n):
        batch = docs[start:start + n]
        texts = generator.generate([text for _, text in batch], max_new_tokens=max_new_tokens,
                                   **generate_kwargs)
        pairs = [(docno, q) for (docno, _), q in zip(batch, texts) if q.strip()]
        if pairs:
            topics = pd.DataFrame({'qid': [str(i) for i in range(len(pairs))],
                                   'query': [q for _, q in pairs]})
            top = retriever(topics).query('rank < @depth')
            found = set(zip(top['qid'], top['docno']))
            for i, (docno, query) in enumerate(pairs):
                if (str(i), docno) in found and query not in seen and len(kept) < n:
                    kept.append((docno, query))
                    seen.add(query)
        if len(kept) == n:
            break
    return _frame('rt', kept)
