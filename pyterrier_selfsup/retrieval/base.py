"""What every first-stage retriever of this package checks at the door, and the one search
the trainers all make: each query's top k, skipping the passages it may not retrieve."""
import logging
from collections.abc import Sequence

import numpy as np
import pandas as pd
import pyterrier as pt

from pyterrier_selfsup.data.queries.source import Query

logger = logging.getLogger(__name__)


class Retriever(pt.Transformer):
    """A query frame (``qid``, ``query``) in, a result frame out.

    A frame without a ``query`` column is refused; an empty frame gives an empty result frame;
    a query with no text retrieves nothing, with a warning. Subclasses implement
    :meth:`retrieve` for non-empty, validated topics that all have text.
    """

    def transform(self, topics: pd.DataFrame) -> pd.DataFrame:
        pt.validate.query_frame(topics, extra_columns=['query'])
        missing = ~topics['query'].map(has_text).astype(bool)
        if missing.any():
            qids = topics.loc[missing, 'qid'].astype(str).tolist()
            logger.warning('%d queries have no text and retrieve nothing: qid %s', len(qids),
                           ', '.join(qids[:10]) + (' ...' if len(qids) > 10 else ''))
            topics = topics[~missing]
        if len(topics) == 0:
            return empty_results(topics)
        return self.retrieve(topics)

    def retrieve(self, topics: pd.DataFrame) -> pd.DataFrame:
        raise NotImplementedError


def has_text(query) -> bool:
    return isinstance(query, str) and bool(query.strip())


def empty_results(topics: pd.DataFrame) -> pd.DataFrame:
    return topics.iloc[:0].assign(
        docno=pd.Series(dtype=object), score=pd.Series(dtype='float64'),
        rank=pd.Series(dtype='int64'))


def top_k_excluding(retriever: pt.Transformer, queries: Sequence[Query], k: int, *,
                    query_vectors: np.ndarray | None = None) -> dict[str, list[str]]:
    """Each query's top ``k`` docnos by ``retriever``, skipping its ``excluded`` passages:
    :func:`ranked_excluding` without the scores."""
    ranked = ranked_excluding(retriever, queries, k, query_vectors=query_vectors)
    return {qid: docnos for qid, (docnos, _) in ranked.items()}


def ranked_excluding(retriever: pt.Transformer, queries: Sequence[Query], k: int, *,
                     query_vectors: np.ndarray | None = None
                     ) -> dict[str, tuple[list[str], np.ndarray]]:
    """Each query's top ``k`` (docnos, scores) by ``retriever``, skipping its ``excluded``
    passages (REALM's trivial retrieval): qid -> (docnos, scores).

    ``retriever`` is any of this package's retrievers, or a FlexIndex retriever with
    ``query_vectors`` given (one row per query). ``retriever % (k + the most exclusions)`` is
    compiled, so that an engine stops at that depth."""
    queries = list(queries)
    if not queries:
        return {}
    extra = max(len(q.excluded) for q in queries)
    topics = pd.DataFrame({'qid': [q.qid for q in queries], 'query': [q.query for q in queries]})
    if any(getattr(q, 'source', None) for q in queries):  # (a labelling teacher scores it too)
        topics['source_docno'] = [getattr(q, 'source', None) for q in queries]
    if query_vectors is not None:
        topics['query_vec'] = list(np.asarray(query_vectors, dtype=np.float32))
    results = (retriever % (k + extra)).compile()(topics)
    ranked = {qid: (group['docno'].tolist(), group['score'].to_numpy(dtype=np.float64))
              for qid, group in (results.sort_values(['qid', 'rank'], kind='stable')
                                 .groupby('qid', sort=False))}
    out = {}
    for q in queries:
        docnos, scores = ranked.get(q.qid, ([], np.zeros(0)))
        keep = [i for i, d in enumerate(docnos) if d not in q.excluded][:k]
        out[q.qid] = ([docnos[i] for i in keep], scores[keep])
    return out
