"""A cross-encoder as a re-ranker: sentence-transformers' ``CrossEncoder`` scoring (query,
passage) pairs, as a PyTerrier transformer; a part of distillation's teacher
(``teacher=bm25+student+ce``).

    bm25 % 30 >> collection.text_loader() >> CrossEncoderScorer(GPL_CROSS_ENCODER)
"""

import pandas as pd
import pyterrier as pt

from pyterrier_selfsup.models.batching import clean_texts
from pyterrier_selfsup.models.names import GPL_CROSS_ENCODER  # noqa: F401 (teacher=...+ce's)
from pyterrier_selfsup.models.precision import resolve_device


class CrossEncoderScorer(pt.Transformer):
    """Scores each (query, text) row of a result frame with a cross-encoder; the frame comes back
    re-ranked by the new ``score``.

    Args:
        model_name: a sentence-transformers ``CrossEncoder`` by hub name or path.
        batch_size: pairs a forward.
        text_field: the column that holds each passage's text.
        device: where it runs (None: a GPU where there is one).
    """

    def __init__(self, model_name: str = GPL_CROSS_ENCODER, *, batch_size: int = 64,
                 text_field: str = 'text', device: str | None = None):
        from sentence_transformers import CrossEncoder
        self.model_name, self.batch_size, self.text_field = model_name, batch_size, text_field
        self.model = CrossEncoder(str(model_name), device=str(resolve_device(device)))

    def transform(self, results: pd.DataFrame) -> pd.DataFrame:
        if not len(results):
            return results.assign(score=pd.Series(dtype='float64'))
        pairs: list[list[str]] = [list(pair) for pair in zip(
            clean_texts(results['query'].tolist()), clean_texts(results[self.text_field].tolist()))]
        scores = self.model.predict(pairs, batch_size=self.batch_size, show_progress_bar=False)
        out = results.assign(score=[float(s) for s in scores])
        return pt.model.add_ranks(out)

    def __repr__(self):
        return f'CrossEncoderScorer({self.model_name!r})'
