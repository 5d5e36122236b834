"""Re-rank BM25 by the generator's likelihood of the query given each passage,
log p(query | passage).

    python examples/rerank_with_generator.py [collection] [--depth K] [--queries N]

SmolLM2-135M-Instruct reads each of BM25's top K passages and scores the query's tokens
(mean log-probability a token). Scores are cached on disk, keyed by the corpus and the
generator, so that a second run (or a trainer that uses the same teacher) scores nothing
twice. On a CPU this is the expensive part: K passages a query.
"""
import argparse

import pyterrier as pt
from ir_measures import RR, nDCG

import pyterrier_selfsup as selfsup
from pyterrier_selfsup.models.score_cache import score_cache_dir

parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
parser.add_argument('collection', nargs='?', default='classic/adi')
parser.add_argument('--depth', type=int, default=100, help='BM25 results re-ranked a query')
parser.add_argument('--queries', type=int, help='the first N queries only (default: all)')
args = parser.parse_args()

collection = selfsup.Collection(args.collection)
bm25 = selfsup.BM25.from_collection(collection)
generator = selfsup.Generator.from_pretrained(selfsup.SMOLLM2, gguf_file=selfsup.SMOLLM2_GGUF)
# mean log p a query token
scorer = generator.scorer(cache=score_cache_dir(collection.corpus_id, generator))

topics = collection.topics().head(args.queries)  # (None: all of them)
table = pt.Experiment([bm25 % args.depth, bm25 % args.depth >> collection.text_loader() >> scorer],
                      topics, collection.qrels(), [nDCG @ 10, RR @ 10, 'mrt'],
                      names=['BM25', f'BM25 top {args.depth} >> SmolLM2 log p(q|d)'],
                      baseline=0, round=4)
print(table.to_string())
