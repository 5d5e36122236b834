"""Training queries a user gives: a query log (a file of query texts, or a collection's topic
texts, never its judgements), and the cross-validation folds of a collection's own topics.

    query_log('queries.txt')                       # qid, query
    other_folds(Collection('classic/adi').topics(), fold=0)
"""
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from pyterrier_selfsup.data.queries import QUERY_SOURCES


def given_topics(topics: pd.DataFrame) -> pd.DataFrame:
    """Query texts of existing topics; anything else in the frame (labels) is dropped."""
    if 'query' not in topics.columns:
        raise ValueError(f'topics need a query column; they have {list(topics.columns)}')
    return topics[['qid', 'query']].reset_index(drop=True)


def query_log(path) -> pd.DataFrame:
    """The query texts of a query log without judgements: a plain text file (one query a line),
    or JSON lines, CSV or TSV with ``qid`` and ``query`` fields
    (:func:`~pyterrier_selfsup.data.local.read_queries`)."""
    from pyterrier_selfsup.data.local import read_queries
    queries = read_queries(path)
    return pd.DataFrame({'qid': [q.query_id for q in queries], 'query': [q.text for q in queries]})


def folds(qids: Iterable[str], n: int = 2, *, seed: int = 0) -> dict:
    """Each qid's fold in 0..n-1: the sorted qids in a seeded random order, dealt out in turn."""
    qids = sorted(set(map(str, qids)))
    order = random.Random(seed).sample(qids, len(qids))
    return {qid: i % n for i, qid in enumerate(order)}


def other_folds(topics: pd.DataFrame, fold: int, n: int = 2, *, seed: int = 0) -> pd.DataFrame:
    """The query texts of ``topics`` outside ``fold`` (:func:`folds`): what the model that
    answers ``fold``'s queries trains on."""
    topics = given_topics(topics)
    assigned = folds(topics['qid'], n, seed=seed)
    return topics[[assigned[str(q)] != fold for q in topics['qid']]].reset_index(drop=True)


def query_file(queries: Any) -> bool:
    """Whether a pipeline's ``queries`` names a file (a query log), not a source or a
    collection."""
    return isinstance(queries, str) and queries not in QUERY_SOURCES and Path(queries).is_file()


def at_most(topics: pd.DataFrame, n: int | None, seed: int = 0) -> pd.DataFrame:
    """A query log's texts, or ``n`` of them drawn with ``seed`` where it has more."""
    if n is None or n <= 0 or len(topics) <= n:
        return topics
    return topics.sample(n=n, random_state=seed).sort_index().reset_index(drop=True)
