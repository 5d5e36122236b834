"""BM25, MiniLM dense retrieval, and MiniLM re-ranking BM25's top 100 two ways,
in one pt.Experiment.

    python examples/rerank_bm25_with_minilm.py [collection] [--queries N]   (default: classic/adi)

`minilm.scorer()` re-ranks from the passage vectors the FlexIndex already holds: one query
encoding a query. `text_loader() >> minilm.encoder.scorer()` gives the same scores by
encoding the text of every candidate again (100 passages a query): use it for a model
whose index you have not built.
"""
import argparse

import pyterrier as pt
from ir_measures import RR, R, nDCG

import pyterrier_selfsup as selfsup

parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
parser.add_argument('collection', nargs='?', default='classic/adi')
parser.add_argument('--queries', type=int, help='the first N queries only (default: all)')
args = parser.parse_args()

collection = selfsup.Collection(args.collection)
# PISA index, built once, reused from disk
bm25 = selfsup.BM25.from_collection(collection)
# all-MiniLM-L6-v2 + FlexIndex, exact search
minilm = selfsup.DenseRetriever.from_collection(collection)

topics = collection.topics().head(args.queries)  # (None: all of them)
table = pt.Experiment(
    [bm25, minilm, bm25 % 100 >> minilm.scorer(),
     bm25 % 100 >> collection.text_loader() >> minilm.encoder.scorer()],
    topics, collection.qrels(), [nDCG @ 10, R @ 100, RR @ 10, 'mrt'],
    names=['BM25', 'MiniLM', 'BM25 >> MiniLM (stored vectors)', 'BM25 >> MiniLM (re-encoded)'],
    baseline=0, round=4)
print(table.to_string())
