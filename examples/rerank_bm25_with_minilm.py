"""BM25, MiniLM dense retrieval, and MiniLM re-ranking BM25's top 100, in one pt.Experiment.

    python examples/rerank_bm25_with_minilm.py [collection]     (default: classic/cisi)
"""
import sys

import pyterrier as pt
from ir_measures import RR, R, nDCG

import pyterrier_selfsup as selfsup

collection = selfsup.Collection(sys.argv[1] if len(sys.argv) > 1 else 'classic/cisi')
bm25 = selfsup.BM25.from_collection(collection)
minilm = selfsup.DenseRetriever.from_collection(collection)

print(pt.Experiment(
    [bm25, minilm, bm25 % 100 >> collection.text_loader() >> minilm.encoder.scorer()],
    collection.topics(), collection.qrels(), [nDCG @ 10, R @ 100, RR @ 10, 'mrt'],
    names=['BM25', 'MiniLM', 'BM25 >> MiniLM'], baseline=0, round=4))
