"""Retrieval as attention (ReAtt): one attention head of MiniLM as a retriever, over a token index.

    python examples/reatt_token_index.py [collection] [--candidate-tokens K]

The first layer encodes query and document apart; the second layer's pre-softmax attention
from query tokens to document tokens, max over the document and mean over the query, scores
the pair. It re-ranks BM25 from the texts (`reatt.scorer()`), or retrieves from a token
index: every document token's key, built once and cached, searched exactly
(`index.exhaustive`) or in two stages (`index.retriever`: each query token's K nearest
document tokens give the candidates, then the best are scored exactly).
"""
import argparse

import pyterrier as pt
from ir_measures import R, nDCG

import pyterrier_selfsup as selfsup

parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
parser.add_argument('collection', nargs='?', default='classic/adi')
parser.add_argument('--candidate-tokens', type=int, default=2048,
                    help="K': document tokens a query token")
args = parser.parse_args()

collection = selfsup.Collection(args.collection)
bm25 = selfsup.BM25.from_collection(collection)
# the head whose attention re-ranks BM25's top 100 best on scifact train (no test labels read)
reatt = selfsup.ReAtt.from_pretrained(selfsup.MINILM, retrieval_layer=1, head=1,
                                      special_tokens=False)
index = selfsup.reatt_index(collection, reatt)   # built once, cached

table = pt.Experiment(
    [bm25, bm25 % 100 >> collection.text_loader() >> reatt.scorer(), index.exhaustive(reatt),
     index.retriever(reatt, candidate_tokens=args.candidate_tokens, nprobe=64, rescore=512)],
    collection.topics(), collection.qrels(), [nDCG @ 10, R @ 100, 'mrt'],
    names=['BM25', 'BM25 >> ReAtt', 'ReAtt, exact',
           f"ReAtt, two stages (K'={args.candidate_tokens})"],
    baseline=0, round=4)
print(table.to_string())
