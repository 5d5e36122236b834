"""PyTerrier's own checks of a transformer (``pt.testing``): the inputs it accepts and the
outputs it gives, inspected on empty frames, and its schematic."""
import tempfile

import pyterrier as pt

from pyterrier_selfsup import BM25, DenseRetriever

_CACHE = tempfile.TemporaryDirectory(prefix='selfsup-pt-testing-')

TestBM25 = pt.testing.transformer_test_class(lambda: BM25.from_collection('classic/adi', cache_dir=_CACHE.name))
TestDense = pt.testing.transformer_test_class(
    lambda: DenseRetriever.from_collection('classic/adi', cache_dir=_CACHE.name))
