"""The generator's score cache: a pyterrier-caching ``Sqlite3ScorerCache`` of summed
log-likelihoods, one a corpus and generator, opened whole or repaired: a damaged database is
set aside and what SQLite can still read of it is copied into a fresh one."""
import json
import logging
import sqlite3
from contextlib import closing
from pathlib import Path

import pandas as pd
import pyterrier as pt

from pyterrier_selfsup._cache import cache_key, cache_root, locked, set_aside, writable

logger = logging.getLogger(__name__)

SCORE_DB = 'db.sqlite3'  # (pyterrier-caching's Sqlite3ScorerCache: this file and pt_meta.json)


def score_cache_damage(path: Path) -> str | None:
    """What is wrong with the score cache at ``path``, or None: its metadata, the file's header
    and length, and SQLite's own ``quick_check`` of every page."""
    if not path.exists():
        return None
    try:
        json.loads((path / 'pt_meta.json').read_text())
        with open(path / SCORE_DB, 'rb') as fh:
            header = fh.read(100)
        size = (path / SCORE_DB).stat().st_size
    except (OSError, ValueError) as error:
        return f'its files cannot be read ({error})'
    if not header.startswith(b'SQLite format 3\0'):
        return f'{SCORE_DB} is not a SQLite database (its header is garbled)'
    page = int.from_bytes(header[16:18], 'big')
    page = 65536 if page == 1 else page
    if not page or size % page:
        return f'{SCORE_DB} is {size:,} bytes, not a whole number of {page}-byte pages (truncated?)'
    try:
        with closing(sqlite3.connect(path / SCORE_DB)) as db:
            verdict = [row[0] for row in db.execute('PRAGMA quick_check')]
    except sqlite3.DatabaseError as error:
        return f'{SCORE_DB}: {error}'
    return None if verdict == ['ok'] else f'{SCORE_DB}: {"; ".join(verdict[:3])}'


def _copy_readable_scores(source: Path, db) -> int:
    """Copies every row of the damaged cache ``source`` that SQLite can still read into ``db``
    (ranges of rowids halved down to single rows where a read fails); the number of rows in
    ``db``. The damaged file is read through its own connection, so its damage cannot fail
    ``db``'s commit."""
    rows = []
    try:
        damaged = sqlite3.connect(source)
    except sqlite3.DatabaseError:
        return 0
    with closing(damaged):
        try:
            top = damaged.execute('SELECT max(rowid) FROM cache').fetchone()[0] or 0
        except sqlite3.DatabaseError:
            # (the table's root is lost: an upper bound, a row being >16 bytes)
            top = source.stat().st_size // 16

        def read(low: int, high: int):
            try:
                rows.extend(damaged.execute('SELECT * FROM cache WHERE rowid BETWEEN ? AND ?',
                                            (low, high)).fetchall())
            except sqlite3.DatabaseError:
                if low < high:
                    middle = (low + high) // 2
                    read(low, middle)
                    read(middle + 1, high)

        for low in range(0, top + 1, 4096):
            read(low, min(low + 4095, top))
    db.executemany('INSERT OR IGNORE INTO cache VALUES (?, ?, ?)', rows)
    db.commit()
    return db.execute('SELECT count(*) FROM cache').fetchone()[0]


def cached_count(cache, pairs: pd.DataFrame) -> int:
    """How many (query, docno) pairs of ``pairs`` the score cache ``cache`` holds, read from the
    table as ``Sqlite3ScorerCache`` keeps it (``[group]`` the query, ``key`` the docno)."""
    held = 0
    for query, docnos in pairs.groupby('query', sort=False)['docno']:
        docnos = docnos.unique().tolist()
        # (SQLite's variables a statement: 999 before 3.32)
        for start in range(0, len(docnos), 500):
            part = docnos[start:start + 500]
            asked = ', '.join('?' * len(part))
            held += cache.db.execute('SELECT count(*) FROM cache WHERE [group]=? AND key IN '
                                     f'({asked})', [query, *part]).fetchone()[0]
    return held


def score_cache_dir(corpus, generator, cache_dir=None) -> Path:
    """Where the summed log-likelihoods of ``generator`` on ``corpus`` (a
    :class:`~pyterrier_selfsup.data.collections.Collection` or a corpus id) are cached, keyed by
    the generator's fingerprint and the documents' contents.

        score_cache_dir(Collection('classic/adi'), generator)
    """
    key = {'generator': generator.fingerprint()}
    if not isinstance(corpus, str):
        corpus, key = corpus.corpus_id, corpus.cache_settings(key)
    return cache_root(cache_dir) / 'generator-scores' / cache_key(
        f'{corpus}.{generator.name.rstrip("/").rsplit("/", 1)[-1]}', key)


def open_score_cache(path: Path, scorer: pt.Transformer, busy_seconds: int = 600):
    """The score cache at ``path`` (created, under a lock, if missing), whose misses ``scorer``
    fills, keyed by (query, docno). A damaged cache is set aside as ``<path>.damaged`` and its
    readable rows copied into a new one. A commit waits up to ``busy_seconds`` for another's."""
    from pyterrier_caching import Sqlite3ScorerCache
    writable(path.parent, f'the score cache {path.name}')
    with locked(path.with_name(path.name + '.lock')):
        problem = score_cache_damage(path)
        if problem is not None:
            aside = set_aside(path)
        cache = Sqlite3ScorerCache(str(path), scorer, group='query', key='docno', value='loglik')
        if problem is not None:
            recovered = _copy_readable_scores(aside / SCORE_DB, cache.db)
            logger.warning('the score cache at %s was damaged (%s): set aside as %s; %d scores '
                           'recovered from it, the rest are scored again when asked for',
                           path, problem, aside, recovered)
    cache.db.execute(f'PRAGMA busy_timeout = {busy_seconds * 1000}')
    return cache
