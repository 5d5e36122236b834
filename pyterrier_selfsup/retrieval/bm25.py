"""BM25 first stage: a PISA index of a collection, built once and reused from disk.

PISA ships its engine inside the wheel, where Terrier fetches its jars from Maven at start-up.
"""
import contextlib
import os
import re
import sys
from pathlib import Path
from typing import Optional

import pandas as pd
from pyterrier_pisa import PisaIndex

from pyterrier_selfsup._cache import build_once, cache_key, cache_root, disk_faults
from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.progress import progress
from pyterrier_selfsup.retrieval.base import Retriever

# PISA reads a query line as "[id:]terms": anything before the first ':' is taken as an
# id and silently dropped, and a NUL ends the string inside the engine.
_UNSAFE = re.compile(r'[\x00-\x1f\x7f:]+')


def pisa_safe(query: str) -> str:
    """``query`` with the characters that PISA's query parser mishandles replaced by spaces."""
    return ' '.join(_UNSAFE.sub(' ', str(query)).split())


def pisa_index(collection: str | Collection, *, stemmer: str = 'porter2',
               stops: str = 'terrier', k1: float = 0.9, b: float = 0.4,
               cache_dir: str | Path | None = None, verbose: bool = False) -> PisaIndex:
    """The PISA index of ``collection``'s documents (title + text), built on first use under
    ``<cache>/pisa/<collection>-<hash of the settings>`` (``k1`` and ``b`` included: PISA
    precomputes score bounds for them).

    The build is refused early below :data:`SPACE_PER_TEXT_BYTE` times the corpus text of free
    space, and PISA's own output goes to a log in the build's directory
    (:func:`_engine_output_logged`).
    """
    collection = Collection.of(collection)
    settings = {'stemmer': stemmer, 'stops': stops, 'k1': k1, 'b': b, 'text': 'default_text'}
    path = cache_root(cache_dir) / 'pisa' / cache_key(collection.corpus_id,
                                                      collection.cache_settings(settings))
    what = f'the BM25 index of {collection.name}'

    def build(staging: Path):
        # the engine's own log is held back even when verbose: the progress bar says how far
        with _engine_output_logged(staging / ENGINE_LOG, what) as terminal, \
                progress(total=collection.docs_count, desc='BM25 index', unit='doc',
                         enabled=verbose, file=terminal) as stage:
            index = PisaIndex(str(staging), text_field='text', stemmer=stemmer, stops=stops)
            index.index(stage.counting(collection.corpus_iter()))
            # opening a retriever writes PISA's score-bound file: here, so a finished index is never
            # written to
            index.bm25(k1=k1, b=b)

    def needs():
        text = collection.text_bytes()
        return None if text is None else int(SPACE_PER_TEXT_BYTE * text)

    return PisaIndex(str(build_once(path, build, what=what, needs=needs, check=_pisa_damage)))


# PISA's index and its build's batch files take up to three times the corpus text
SPACE_PER_TEXT_BYTE = 3.0
ENGINE_LOG = 'pisa-build.log'
# room reserved in the log, so that even on a full disk the engine's last words are written
LOG_RESERVE = 64 << 10
_PISA_FILES = ('fwd.documents', 'inv.docs', 'inv.freqs', 'inv.sizes', 'pt_meta.json')


def _pisa_damage(path: Path) -> str | None:
    """The files a complete PISA index must have, non-empty."""
    for name in _PISA_FILES:
        if not (path / name).is_file() or not (path / name).stat().st_size:
            return f'{name} is missing or empty'
    return None


@contextlib.contextmanager
def _engine_output_logged(log: Path, what: str):
    """Sends what PISA's C++ code prints to ``log``, whose path is printed first, and shows the
    log's end if the build fails in Python. An exception inside the engine ends the process in
    C++ before any handler here runs: the next run keeps the log beside the index as
    ``<index>.failed-build.log``. (pyterrier_pisa's ``log_level()`` does not silence it.)"""
    sys.stdout.flush()
    sys.stderr.flush()
    log.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    with disk_faults(what, log, undo=lambda: os.close(fd)):
        os.posix_fallocate(fd, 0, LOG_RESERVE)
    print(f'{what}: building; the engine writes to {log}', file=sys.stderr, flush=True)
    saved = {out: os.dup(out) for out in (1, 2)}
    with os.fdopen(os.dup(saved[2]), 'w') as terminal:
        for out in saved:
            os.dup2(fd, out)
        try:
            yield terminal  # where our own progress bar still reaches the user
        except BaseException:
            for out, copy in saved.items():
                os.dup2(copy, out)
            sys.stderr.write(read_engine_log(log)[-5000:])
            raise
        finally:
            for out, copy in saved.items():
                os.dup2(copy, out)
                os.close(copy)
            os.ftruncate(fd, max(os.lseek(fd, 0, os.SEEK_CUR), 0))  # the unused reserve
            os.close(fd)


def read_engine_log(log: Path) -> str:
    """An engine log's text (without the unused reserve: NUL bytes)."""
    return log.read_bytes().rstrip(b'\0').decode(errors='replace')


class BM25(Retriever):
    """BM25 over a :class:`~pyterrier_pisa.PisaIndex`; query text is made safe for PISA's parser
    (:func:`pisa_safe`) and the results carry the original. ``bm25 % k`` asks for ``k`` results."""

    def __init__(self, index: PisaIndex, *, k1: float = 0.9, b: float = 0.4,
                 num_results: int = 1000):
        self.index = index
        self.k1 = k1
        self.b = b
        self.num_results = num_results
        self._engine = index.bm25(k1=k1, b=b, num_results=num_results)

    @classmethod
    def from_collection(cls, collection: str | Collection, *, k1: float = 0.9, b: float = 0.4,
                        stemmer: str = 'porter2', stops: str = 'terrier', num_results: int = 1000,
                        cache_dir: str | Path | None = None,
                        verbose: bool = False) -> 'BM25':
        index = pisa_index(collection, stemmer=stemmer, stops=stops, k1=k1, b=b,
                           cache_dir=cache_dir, verbose=verbose)
        return cls(index, k1=k1, b=b, num_results=num_results)

    def retrieve(self, topics: pd.DataFrame) -> pd.DataFrame:
        original = topics['query'].reset_index(drop=True)
        safe = topics.reset_index(drop=True).assign(query=original.map(pisa_safe),
                                                    _row=range(len(topics)))
        results = self._engine(safe)
        results['query'] = original.values[results['_row'].values]
        return results.drop(columns='_row')

    def fuse_rank_cutoff(self, k: int) -> Optional['BM25']:
        if k < self.num_results:
            return BM25(self.index, k1=self.k1, b=self.b, num_results=k)
        return None

    def __repr__(self):
        return f'BM25({self.index.path}, k1={self.k1}, b={self.b}, num_results={self.num_results})'
