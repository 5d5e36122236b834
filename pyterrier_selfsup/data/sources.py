"""The registry of training-query sources: what each name a pipeline's ``queries`` may take
means, what a set of queries is, and how each set is made.

A :class:`QuerySource` is one set of training queries: the source's name, how many, the seed,
and for written queries the writer's settings. Its :meth:`~QuerySource.identity` says what the
set is without making it (a query log by its texts' digest, written queries by their writer);
the queries written once and cached are keyed by it, and so are the models trained on them
(:mod:`pyterrier_selfsup.harness.store`).

The sources:

- cut from the corpus (:data:`CUT_FROM_CORPUS`): ``sentences``, ``spans``, ``masked``
  sentences and document ``titles``, each with the passage it was cut from;
- written for a passage by a generator (:data:`GENERATED`): ``generated`` (greedy, one a
  passage), ``sampled`` (nucleus sampling, several a passage) and ``roundtrip`` (generated,
  then kept where BM25 ranks the passage in its top :data:`ROUND_TRIP_DEPTH`);
- a query log: a file of query texts, or the name of a collection whose topic texts are read
  (never its qrels);
- ``crossfold``: the evaluated collection's own topic texts outside one of :data:`CROSS_FOLDS`
  folds (one model a fold).

    source = QuerySource('sampled', 2000, generator='smollm2')
    source.identity(Collection('classic/adi'))   # what the 2,000 queries are, as a dict
"""
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pyterrier_selfsup._cache import build_once, cache_key, cache_root
from pyterrier_selfsup.data.collections import Collection, UnknownCollectionError
from pyterrier_selfsup.data.queries import (
    MASK,
    corpus_sentences,
    cropped_spans,
    document_titles,
    given_topics,
    masked_spans,
    other_folds,
    query_log,
)
from pyterrier_selfsup.data.source_names import (
    CROSS_FOLDS,
    CROSSFOLD,
    CUT_FROM_CORPUS,
    GENERATED,
    QUERY_SOURCES,
)
from pyterrier_selfsup.data.written_queries import (
    QUERY_TOKENS,
    SAMPLING,
    generated_queries,
    round_trip_queries,
    sampled_queries,
)

ROUND_TRIP_DEPTH = 10
# the (passage, query) pairs a writer is shown with example_pairs=COLLECTION (InPars shows 3)
EXAMPLE_PAIRS = 3
# How a writer's queries are drawn from a seed. Raise it whenever a seed would write other
# queries (another prompt, another sampling loop): the sets and the models of the earlier
# version are then not found, and are written and trained again.
WRITER_VERSION = 2


def query_file(queries: Any) -> bool:
    """Whether a pipeline's ``queries`` names a file (a query log), not a source or a
    collection."""
    return isinstance(queries, str) and queries not in QUERY_SOURCES and Path(queries).is_file()


def at_most(topics: pd.DataFrame, n: int | None, seed: int = 0) -> pd.DataFrame:
    """A query log's texts, or ``n`` of them drawn with ``seed`` where it has more."""
    if n is None or n <= 0 or len(topics) <= n:
        return topics
    return topics.sample(n=n, random_state=seed).sort_index().reset_index(drop=True)


def example_texts(examples: str | None) -> list:
    """The query texts a writer is shown: none, a file's, or a collection's topics'."""
    if not examples:
        return []
    if query_file(examples):
        return query_log(examples)['query'].tolist()
    return given_topics(Collection(examples).topics())['query'].tolist()


def example_pairs(name: str | None, n: int = EXAMPLE_PAIRS, seed: int = 0) -> list:
    """``n`` (passage, query) pairs of the collection ``name`` for a writer to be shown (none
    for None): topics drawn with ``seed`` among those with a judged relevant passage, each with
    the text of its first relevant passage by docno. This reads that collection's relevance
    judgements: name another collection than the one the model adapts to."""
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
        """What this set of queries is, without making it: keys the written queries and the
        models trained on any set. A query log is named by its texts' digest, wherever it lies;
        written queries by their generator's name and their writer's settings."""
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
                # (named where they are not the defaults: the defaults' queries keep their key)
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

        Queries cut from the corpus and query logs are read as they are asked for. Written
        queries are written once under ``<cache>/queries/``, keyed by :meth:`identity`, the
        generator's fingerprint and the writer's own settings, resumably (a stopped run resumes
        after the last batch it wrote).

        Args:
            generator: the :class:`~pyterrier_selfsup.models.generator.Generator` that writes
                (written sources).
            round_trip: makes the retriever whose top :data:`ROUND_TRIP_DEPTH` keeps a
                ``roundtrip`` query (BM25 in the pipelines); called only when it writes.
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
            # (resumable: sampled queries are written with a checkpoint in the staging directory)
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
    """A written-queries file that does not parse, or lacks a query column (garbled where its
    size still matches): damaged, and rebuilt whole (sampled queries come from one random
    stream, so a part rebuilt alone would not be the same queries)."""
    try:
        topics = _read_topics(path)
    except (OSError, ValueError) as error:
        return f'{path.name} does not parse ({str(error).splitlines()[0][:200]})'
    if not {'qid', 'query'} <= set(topics.columns) or topics['query'].isna().any():
        return f'{path.name} lacks queries'
    return None
