"""What every first-stage retriever of this package checks at the door."""
import pandas as pd
import pyterrier as pt


class Retriever(pt.Transformer):
    """A query frame (``qid``, ``query``) in, a result frame out.

    A frame without a ``query`` column is refused with an error that names it; an
    empty frame gives an empty result frame, without touching any model or index.
    Subclasses implement :meth:`retrieve` for non-empty, validated topics.
    """

    def transform(self, topics: pd.DataFrame) -> pd.DataFrame:
        pt.validate.query_frame(topics, extra_columns=['query'])
        if len(topics) == 0:
            return empty_results(topics)
        return self.retrieve(topics)

    def retrieve(self, topics: pd.DataFrame) -> pd.DataFrame:
        raise NotImplementedError


def empty_results(topics: pd.DataFrame) -> pd.DataFrame:
    return topics.iloc[:0].assign(
        docno=pd.Series(dtype=object), score=pd.Series(dtype='float64'), rank=pd.Series(dtype='int64'))
