"""BM25 first stage: a PISA index of a collection, built once and reused from disk.

PISA rather than Terrier's Java BM25 because PISA ships its engine inside the wheel,
while Terrier fetches its jars from Maven at start-up, which offline machines cannot.
"""
import contextlib
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Optional, Union

import pandas as pd
from pyterrier_pisa import PisaIndex

from pyterrier_selfsup._cache import build_once, cache_key, cache_root
from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.retrieval.base import Retriever

# PISA reads a query line as "[id:]terms": anything before the first ':' is taken as an
# id and silently dropped, and a NUL ends the string inside the engine.
_UNSAFE = re.compile(r'[\x00-\x1f\x7f:]+')


def pisa_safe(query: str) -> str:
    """``query`` with the characters that PISA's query parser mishandles replaced by spaces."""
    return ' '.join(_UNSAFE.sub(' ', str(query)).split())


def pisa_index(collection: Union[str, Collection], *, stemmer: str = 'porter2', stops: str = 'terrier',
               k1: float = 0.9, b: float = 0.4, cache_dir: Optional[Union[str, Path]] = None,
               verbose: bool = False) -> PisaIndex:
    """The PISA index of ``collection``'s documents (title + text), built on first use.

    The index lives under ``<cache>/pisa/<collection>-<hash of the settings>``; ``k1`` and
    ``b`` are part of the build because PISA precomputes score bounds for them.
    """
    collection = Collection(collection) if isinstance(collection, str) else collection
    settings = {'stemmer': stemmer, 'stops': stops, 'k1': k1, 'b': b, 'text': 'default_text'}
    path = cache_root(cache_dir) / 'pisa' / cache_key(collection.corpus_id, settings)

    def build(staging: Path):
        # the engine's own log (a line per percent) is held back even when verbose: the
        # documents' progress bar says how far the build is
        with _engine_output_hidden() as terminal:
            index = PisaIndex(str(staging), text_field='text', stemmer=stemmer, stops=stops)
            index.index(collection.corpus_iter(verbose=verbose, progress_file=terminal,
                                               desc=f'BM25 index of {collection.name}'))
            # Opening a retriever writes PISA's score-bound file for (k1, b) into the
            # index directory: do it here, so that a finished index is never written to.
            index.bm25(k1=k1, b=b)

    return PisaIndex(str(build_once(path, build)))


@contextlib.contextmanager
def _engine_output_hidden():
    """Holds back what PISA's C++ code prints (a progress line per percent, file paths),
    and shows it only if the build fails. (pyterrier_pisa.log_level() is broken in 0.4.9.)"""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with tempfile.TemporaryFile() as captured, os.fdopen(os.dup(saved[2]), 'w') as terminal:
        for fd in saved:
            os.dup2(captured.fileno(), fd)
        try:
            yield terminal  # where our own progress bar still reaches the user
        except BaseException:
            for fd, copy in saved.items():
                os.dup2(copy, fd)
            captured.seek(0)
            sys.stderr.write(captured.read().decode(errors='replace')[-5000:])
            raise
        finally:
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)


class BM25(Retriever):
    """BM25 over a :class:`~pyterrier_pisa.PisaIndex`.

    Query text is made safe for PISA's parser (see :func:`pisa_safe`); the results carry
    the original query text. ``bm25 % k`` asks the engine for only ``k`` results.
    """

    def __init__(self, index: PisaIndex, *, k1: float = 0.9, b: float = 0.4, num_results: int = 1000):
        self.index = index
        self.k1 = k1
        self.b = b
        self.num_results = num_results
        self._engine = index.bm25(k1=k1, b=b, num_results=num_results)

    @classmethod
    def from_collection(cls, collection: Union[str, Collection], *, k1: float = 0.9, b: float = 0.4,
                        stemmer: str = 'porter2', stops: str = 'terrier', num_results: int = 1000,
                        cache_dir: Optional[Union[str, Path]] = None, verbose: bool = False) -> 'BM25':
        index = pisa_index(collection, stemmer=stemmer, stops=stops, k1=k1, b=b, cache_dir=cache_dir,
                           verbose=verbose)
        return cls(index, k1=k1, b=b, num_results=num_results)

    def retrieve(self, topics: pd.DataFrame) -> pd.DataFrame:
        original = topics['query'].reset_index(drop=True)
        safe = topics.reset_index(drop=True).assign(query=original.map(pisa_safe), _row=range(len(topics)))
        results = self._engine(safe)
        results['query'] = original.values[results['_row'].values]
        return results.drop(columns='_row')

    def fuse_rank_cutoff(self, k: int) -> Optional['BM25']:
        if k < self.num_results:
            return BM25(self.index, k1=self.k1, b=self.b, num_results=k)
        return None

    def __repr__(self):
        return f'BM25({self.index.path}, k1={self.k1}, b={self.b}, num_results={self.num_results})'
