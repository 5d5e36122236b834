"""The generator as a re-ranker: log p(query | document), with its scores cached.

    bm25 % 100 >> collection.text_loader() >> gen.scorer()      # gen: a Generator
    gen.scorer(cache=score_cache_dir(collection, gen)) # each pair scored once, ever
"""
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_selfsup._cache import disk_faults
from pyterrier_selfsup._distributed import distributed
from pyterrier_selfsup.models.score_cache import SCORE_DB, cached_count, open_score_cache
from pyterrier_selfsup.progress import progress

NORMALISATIONS = ('sum', 'mean')


class ReconstructionScorer(pt.Transformer):
    """Re-ranks by log p(query | document) under a
    :class:`~pyterrier_selfsup.models.generator.Generator`.

    ``normalise``: ``mean`` (per query token) or ``sum``; both rank a query's candidates alike.

    ``cache``: a directory for a ``Sqlite3ScorerCache`` of the summed log-likelihoods, keyed by
    (query text, docno), for one corpus and one generator (:func:`score_cache_dir`). Several
    processes may share it; :meth:`fill` splits a scoring job between the processes of a group.
    """

    CHUNK = 512  # passages per cache commit
    BUSY_SECONDS = 600  # how long a commit waits for another process's to finish

    def __init__(self, generator, *, normalise: str = 'mean', text_field: str = 'text',
                 cache: str | Path | None = None):
        if normalise not in NORMALISATIONS:
            raise ValueError(f'normalise must be one of {NORMALISATIONS}, not {normalise!r}')
        self.generator = generator
        self.normalise = normalise
        self.text_field = text_field
        self.cache_path = Path(cache) if cache is not None else None
        self._missing = _LogLikelihood(generator, text_field)  # what scores the cache's misses
        self.cache = None if cache is None else open_score_cache(self.cache_path, self._missing,
                                                                 busy_seconds=self.BUSY_SECONDS)

    def fill(self, pairs: pd.DataFrame):
        """Scores every (query, docno) pair of ``pairs`` into the cache; under torch.distributed
        each process scores its share of the passages, and every process returns when the cache
        holds them all."""
        if self.cache is None:
            raise ValueError('fill needs a scorer with a cache')
        rank, world_size = distributed()
        if world_size > 1:
            passages = pd.unique(pairs['docno'])[rank::world_size]
            pairs = pairs[pairs['docno'].isin(set(passages))]
        if len(pairs):
            self(pairs)
        if world_size > 1:
            import torch.distributed as dist
            dist.barrier()

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        pt.validate.result_frame(inp, extra_columns=['query', self.text_field])
        out = inp.drop(columns=['score', 'rank'], errors='ignore').reset_index(drop=True)
        if not len(out):
            return out.assign(score=pd.Series(dtype=float), rank=pd.Series(dtype=int))
        if self.cache is not None:
            # one row per (query, docno), so that a query text under two qids is scored once
            pairs = out.drop_duplicates(['query', 'docno'])
            # by passage (its prompt encoded once), committed every CHUNK passages so that an
            # interrupted run keeps what it did; one progress stage for the pairs not cached
            passages = pairs['docno'].unique()
            missing = len(pairs) - cached_count(self.cache, pairs) if self.generator.verbose else 0
            self._missing.tracker = progress(total=missing, desc='generator scoring', unit='pair',
                                             enabled=self.generator.verbose and missing > 0)
            try:
                looked_up = pd.concat([
                    self._cached(pairs[pairs['docno'].isin(set(passages[i:i + self.CHUNK]))])
                    for i in range(0, len(passages), self.CHUNK)]
                ).set_index(['query', 'docno'])['loglik']
            finally:
                self._missing.tracker.close()
                self._missing.tracker = None
            scores = looked_up.reindex(pd.MultiIndex.from_frame(out[['query', 'docno']])
                                       ).to_numpy(dtype=np.float64)
        else:
            scores = self.generator.log_likelihoods(out['query'].tolist(),
                                                    out[self.text_field].tolist())
        if self.normalise == 'mean':
            scores = scores / np.maximum(self.generator.target_lengths(out['query'].tolist()), 1)
        out['score'] = scores
        return pt.model.add_ranks(out)

    def _cached(self, pairs: pd.DataFrame) -> pd.DataFrame:
        # a failed commit ('database or disk is full') is rolled back; a disk fault says so
        with disk_faults('the score cache', self.cache_path / SCORE_DB, undo=self.cache.db.rollback,
                         fate='the scores committed before (every 512 passages) are kept'):
            try:
                return self.cache(pairs)
            except sqlite3.IntegrityError:
                # another process inserted some of these pairs meanwhile: look up again
                self.cache.db.rollback()
                return self.cache(pairs)

    def __repr__(self):
        return f'ReconstructionScorer({self.generator!r}, normalise={self.normalise!r})'


class _LogLikelihood(pt.Transformer):
    """Adds ``loglik``, the summed log p(query | text): what the score cache stores."""

    def __init__(self, generator, text_field: str):
        self.generator = generator
        self.text_field = text_field
        self.tracker = None  # the progress of the scorer's call under way, where it has one

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        return inp.assign(loglik=self.generator.log_likelihoods(inp['query'].tolist(),
                                                                inp[self.text_field].tolist(),
                                                                tracker=self.tracker))
