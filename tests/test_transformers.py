"""PyTerrier's own check of a transformer (``pt.testing``): the input columns it accepts and
the output columns it gives, inspected on empty frames."""
import tempfile

import pyterrier as pt

from pyterrier_selfsup import BM25, DenseRetriever

_CACHE = tempfile.TemporaryDirectory(prefix='selfsup-pt-testing-')


class TestBM25(pt.testing.transformer_test_class(
        lambda: BM25.from_collection('classic/adi', cache_dir=_CACHE.name))):
    test_schematic = None  # it fetches the class's documentation page: no network here


class TestDense(pt.testing.transformer_test_class(
        lambda: DenseRetriever.from_collection('classic/adi', cache_dir=_CACHE.name))):
    test_schematic = None
