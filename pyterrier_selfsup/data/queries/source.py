"""One set of training queries (:class:`QuerySource`): what it is without making it, and the
queries themselves, written once and cached where a generator writes them; and the trainers'
view of any set (:class:`Query`, :func:`training_queries`).

    source = QuerySource('sampled', 2000, generator='smollm2')
    source.identity(Collection('classic/adi'))   # what the 2,000 queries are, as a dict
"""
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pyterrier_selfsup._cache import build_once, cache_key, cache_root
from pyterrier_selfsup.data.collections import Collection, UnknownCollectionError
from pyterrier_selfsup.data.queries import (
    CROSS_FOLDS,
    CROSSFOLD,
    CUT_FROM_CORPUS,
    GENERATED,
    QUERY_SOURCES,
)
from pyterrier_selfsup.data.queries.cut import (
    MASK,
    corpus_sentences,
    cropped_spans,
    document_titles,
    masked_spans,
)
from pyterrier_selfsup.data.queries.logs import (
    at_most,
    given_topics,
    other_folds,
    query_file,
    query_log,
)
from pyterrier_selfsup.data.queries.written import (
    QUERY_TOKENS,
    ROUND_TRIP_DEPTH,
    SAMPLING,
    example_pairs,
    example_texts,
    generated_queries,
    round_trip_queries,
    sampled_queries,
)

logger = logging.getLogger(__name__)

# how a writer's queries are drawn from a seed: raise it whenever a seed would write other
# queries, so that the earlier sets and models are not found
WRITER_VERSION = 2


@dataclass(frozen=True)
class Query:
    """A training query as the trainers see it."""
    qid: str
    query: str
    excluded: frozenset[str]  # the passage a corpus query was cut from: a trivial retrieval
    answer: str | None = None  # what a reader generates (queries=masked: the masked span)
    source: str | None = None  # the passage it was written for or cut from, if any


def training_queries(topics: pd.DataFrame) -> list[Query]:
    """The :class:`Query` of each topic: its text, the ``source_docno`` it was cut from (if
    any) as the passage it must not retrieve, and its ``answer`` (if any); labels unread."""
    queries = given_topics(topics)
    sources = topics['source_docno'] if 'source_docno' in topics.columns else [None] * len(topics)
    answers = topics['answer'] if 'answer' in topics.columns else [None] * len(topics)
    return [Query(qid, query, frozenset([s]) if isinstance(s, str) else frozenset(),
                  a if isinstance(a, str) else None, s if isinstance(s, str) else None)
            for qid, query, s, a in zip(queries['qid'], queries['query'], sources, answers)]


def query_sources(topics: pd.DataFrame, collection: Collection, *, excluded: bool,
                  sample: int = 50) -> dict[str, str]:
    """qid -> the ``source_docno`` of each topic that has one. ``excluded``: whether the
    trainer keeps each query's source out of its candidates; where it does not and most of
    ``sample`` queries stand word for word in their sources, a warning says how to exclude them."""
    if 'source_docno' not in topics:
        return {}
    sources = {q: d for q, d in zip(topics['qid'].astype(str), topics['source_docno'])
               if isinstance(d, str)}
    if not excluded and sources:
        some = topics[topics['source_docno'].notna()].head(sample)
        texts = collection.texts(some['source_docno'].tolist())
        cut = sum(query in text for query, text in zip(some['query'], texts))
        if cut > len(some) / 2:
            logger.warning('%d of %d training queries stand word for word in the passage they '
                           'name (source_docno), and these settings let them retrieve it: say '
                           "queries='sentences' (or spans, masked, titles) to exclude it", cut,
                           len(some))
    return sources


def _lines_digest(lines) -> str:
    """A digest of ``lines`` (strings), in order."""
    digest = hashlib.sha256()
    for line in lines:
        digest.update(f'{line}\n'.encode())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class QuerySource:
    """One set of training queries.

    Args:
        queries: a source's name (:data:`QUERY_SOURCES`), a file of query texts, or a
            collection whose topic texts are read.
        n_queries: how many (a longer query log is sampled down to this many).
        seed: draws the passages, the sample of a log and the writer's samples.
        fold: with ``crossfold``, the fold whose queries the model answers (it trains on the
            others').
        generator: the name of the generator that writes (written sources).
        style, examples, per_passage, pairs: the writer's prompt (``plain`` or ``chat``), a
            query log whose texts it is shown as the style to write in, the queries it writes a
            passage, and a collection whose judged pairs it is shown (``sampled`` only).
        top_k, tokens: the writer's top-k sampling (None: the model's generation config's) and
            the most tokens a query takes (``sampled`` only).
        mask: what replaces a masked sentence's span (``masked`` only).
    """
    queries: str
    n_queries: int
    seed: int = 0
    fold: int | None = None
    generator: str = 'smollm2'
    style: str = 'plain'
    examples: str | None = None
    per_passage: int = SAMPLING['per_passage']
    pairs: str | None = None
    top_k: int | None = None
    tokens: int = QUERY_TOKENS
    mask: str = MASK

    @classmethod
    def of(cls, settings, fold: int | None = None, **changes) -> 'QuerySource':
        """The source a method's settings name (their ``queries``, ``n_queries``, ``seed``, and
        where they have them the writer's: ``generator``, ``query_style``, ``query_examples``,
        ``per_passage`` and ``example_pairs``)."""
        own = {'generator': 'generator', 'style': 'query_style', 'examples': 'query_examples',
               'per_passage': 'per_passage', 'pairs': 'example_pairs', 'top_k': 'top_k',
               'tokens': 'query_tokens'}
        named = {mine: getattr(settings, theirs) for mine, theirs in own.items()
                 if hasattr(settings, theirs)}
        return cls(settings.queries, settings.n_queries, settings.seed, fold,
                   **{**named, **changes})

    @property
    def written(self) -> bool:
        """Whether a generator writes these queries, each for a passage."""
        return self.queries in GENERATED

    @property
    def cut(self) -> bool:
        """Whether these queries are cut from the passage they name (a trivial match)."""
        return self.queries in CUT_FROM_CORPUS

    def log(self, collection: Collection) -> pd.DataFrame:
        """A query log's texts before they are sampled down: a file's, a collection's topics'
        or, with ``crossfold``, ``collection``'s outside the fold."""
        if self.queries == CROSSFOLD:
            if self.fold is None:
                raise ValueError('queries=crossfold trains one model a fold: which fold it answers '
                                 '(fold=) is missing')
            return other_folds(collection.topics(), self.fold, CROSS_FOLDS)
        if query_file(self.queries):
            return query_log(self.queries)
        try:
            return given_topics(Collection(self.queries).topics())
        except UnknownCollectionError as error:
            raise UnknownCollectionError(
                f'queries={self.queries!r} is neither a source ({", ".join(QUERY_SOURCES)}), a '
                f'file of query texts, nor a collection: {error}') from None

    def identity(self, collection: Collection) -> dict:
        """What this set of queries is, without making it: the key of the written queries and of
        the models trained on any set (a query log by its texts' digest, written queries by their
        generator and writer's settings)."""
        out = {'source': self.queries, 'n': self.n_queries, 'seed': self.seed}
        if self.cut:
            if self.queries == 'masked':
                out['mask'] = self.mask
        elif self.written:
            out['generator'] = self.generator
            out['version'] = WRITER_VERSION
            if self.queries == 'sampled':
                out['writer'] = {
                    'style': self.style, 'per_passage': self.per_passage, 'sampling': SAMPLING,
                    'examples': (_lines_digest(texts)
                                 if (texts := example_texts(self.examples)) else None),
                    'pairs': self.pairs}
                if self.top_k is not None:
                    out['writer']['top_k'] = self.top_k
                if self.tokens != QUERY_TOKENS:
                    out['writer']['tokens'] = self.tokens
            if self.queries == 'roundtrip':
                out['check'] = f'bm25 top {ROUND_TRIP_DEPTH}'
        else:
            out['source'] = ('crossfold' if self.queries == CROSSFOLD else
                             'file' if query_file(self.queries) else 'topics')
            log = self.log(collection)
            out['texts'] = _lines_digest(f'{q}\t{t}' for q, t in zip(log['qid'], log['query']))
            if self.queries == CROSSFOLD:
                out.update(collection=collection.name, fold=self.fold, folds=CROSS_FOLDS)
        return out

    def topics(self, collection: Collection, *, generator=None,
               round_trip: Callable[[], Any] | None = None,
               cache_dir: None | str | Path = None) -> pd.DataFrame:
        """The training queries (``qid``, ``query``; ``source_docno`` where they have one).

        Written queries are written once under ``<cache>/queries/``, keyed by :meth:`identity` and
        the generator's fingerprint, resumably; the others are read as they are asked for.

        Args:
            generator: the :class:`~pyterrier_selfsup.models.generator.Generator` that writes.
            round_trip: makes the retriever whose top :data:`ROUND_TRIP_DEPTH` keeps a ``roundtrip``
                query; called only when it writes.
            cache_dir: the cache the written queries are kept in.
        """
        q, n, seed = self.queries, self.n_queries, self.seed
        if q == 'sentences':
            return corpus_sentences(collection, n, seed=seed)
        if q == 'spans':
            return cropped_spans(collection, n, seed=seed)
        if q == 'titles':
            return document_titles(collection, n, seed=seed)
        if q == 'masked':
            return masked_spans(collection, n, seed=seed, mask=self.mask)
        if not self.written:
            return at_most(self.log(collection), n, seed)
        if generator is None:
            raise ValueError(f'queries={q!r} needs a generator')
        key = dict(self.identity(collection), fingerprint=generator.fingerprint())
        writer = None
        if q == 'sampled':
            writer = generator.writer(style=self.style, examples=example_texts(self.examples),
                                      pairs=example_pairs(self.pairs, seed=seed), seed=seed)
            key['writer settings'] = writer.config()
        path = cache_root(cache_dir) / 'queries' / cache_key(f'{collection.corpus_id}.{q}',
                                                             collection.cache_settings(key))

        def write(staging: Path):
            staging.mkdir(parents=True, exist_ok=True)
            checkpoint = staging / 'writing.pt'
            if q == 'generated':
                topics = generated_queries(collection, generator, n, seed=seed)
            elif q == 'sampled':
                topics = sampled_queries(collection, generator, n, seed=seed, writer=writer,
                                         per_passage=self.per_passage, top_k=self.top_k,
                                         max_new_tokens=self.tokens, checkpoint=checkpoint)
            else:
                if round_trip is None:
                    raise ValueError('queries=roundtrip needs the retriever that checks them')
                topics = round_trip_queries(collection, generator, n, round_trip(),
                                            depth=ROUND_TRIP_DEPTH, seed=seed)
            topics.to_json(staging / 'topics.jsonl', orient='records', lines=True)
            checkpoint.unlink(missing_ok=True)

        built = build_once(path, write, what=f'the {q} training queries of {collection.name}',
                           check=lambda built: _topics_damage(built / 'topics.jsonl'),
                           on_damage='set aside', resumable=True)
        return _read_topics(built / 'topics.jsonl')


def _read_topics(path: Path) -> pd.DataFrame:
    return pd.read_json(path, orient='records', lines=True, dtype=False)


def _topics_damage(path: Path) -> str | None:
    """A written-queries file that does not parse or lacks a query column: damaged, and rebuilt
    whole (one random stream wrote it)."""
    try:
        topics = _read_topics(path)
    except (OSError, ValueError) as error:
        return f'{path.name} does not parse ({str(error).splitlines()[0][:200]})'
    if not {'qid', 'query'} <= set(topics.columns) or topics['query'].isna().any():
        return f'{path.name} lacks queries'
    return None
