"""The training queries a pipeline names: a :class:`~pyterrier_selfsup.data.sources.QuerySource`
with its generator loaded and its round-trip retriever built where it needs them.

    topics = training_topics(Collection('classic/adi'), 'sampled', 200, generator='smollm2')
"""

import pandas as pd

from pyterrier_selfsup.context import SILENT, RunContext
from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.data.queries import MASK
from pyterrier_selfsup.data.sources import ROUND_TRIP_DEPTH, QuerySource
from pyterrier_selfsup.data.written_queries import SAMPLING
from pyterrier_selfsup.models.generator import Generator, load_generator
from pyterrier_selfsup.retrieval.bm25 import BM25
from pyterrier_selfsup.training.settings import DistillationSettings


def source_topics(collection: Collection, source: QuerySource, *,
                  generator: None | str | Generator = None,
                  run: RunContext = SILENT) -> pd.DataFrame:
    """The queries of ``source`` on ``collection``
    (:meth:`~pyterrier_selfsup.data.sources.QuerySource.topics`). ``generator``: a
    :class:`Generator`, or a name for :func:`load_generator` (loaded at its default settings,
    and only for a source that writes; None: the source's own). ``run``: the cache the written
    queries and the round-trip check's BM25 index are kept in."""
    if source.written and (generator is None or isinstance(generator, str)):
        generator = load_generator(generator or source.generator, cache_dir=run.cache_dir)

    def round_trip():
        return BM25.from_collection(collection, cache_dir=run.cache_dir) % ROUND_TRIP_DEPTH

    return source.topics(collection, generator=generator if source.written else None,
                         round_trip=round_trip, cache_dir=run.cache_dir)


def training_topics(collection: Collection, queries: str, n_queries: int, *, seed: int = 0,
                    generator: None | str | Generator = None, mask: str = MASK,
                    run: RunContext = SILENT, fold: int | None = None, style: str = 'plain',
                    examples: str | None = None,
                    per_passage: int = SAMPLING['per_passage'],
                    pairs: str | None = None) -> pd.DataFrame:
    """The training queries a pipeline names by ``queries`` (the sources of
    :mod:`~pyterrier_selfsup.data.sources`): ``n_queries`` of them drawn with ``seed``.
    ``generator``: what writes written sources (a :class:`Generator` or a name; SmolLM2 where
    None). ``style``, ``examples``, ``per_passage`` and ``pairs``: the writer's prompt, a query
    log whose texts it is shown, queries a passage, and a collection whose judged pairs it is
    shown (``sampled``). ``mask``: what replaces a masked sentence's span. ``fold``: with
    ``crossfold``, the fold the model answers."""
    source = QuerySource(queries, n_queries, seed, fold,
                         generator=generator if isinstance(generator, str) else 'smollm2',
                         style=style, examples=examples, per_passage=per_passage, pairs=pairs,
                         mask=mask)
    return source_topics(collection, source, generator=generator, run=run)


def distillation_topics(collection: Collection, s: DistillationSettings, *,
                        generator: None | str | Generator = None, run: RunContext = SILENT,
                        fold: int | None = None) -> pd.DataFrame:
    """The training queries of a distillation with settings ``s``: what its trainer trains on,
    and what a report of them reads.

        topics = distillation_topics(Collection('classic/adi'), DistillationSettings(),
                                     generator='smollm2')
    """
    return source_topics(collection, QuerySource.of(s, fold), generator=generator, run=run)
