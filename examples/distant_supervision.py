"""Adapt MiniLM to a corpus without labels by distant supervision,
and compare it with BM25 and its start.

    python examples/distant_supervision.py [collection] [--queries N] [--epochs E]
        [--output-dir DIR]

BM25's top passage for each training query is its positive, the other queries' positives
in the batch its negatives (thesis §4.2.3). The training queries are sentences cut from
the corpus itself: no query log and no relevance label is read.
"""
import argparse

import pyterrier as pt
import torch
from ir_measures import nDCG

import pyterrier_selfsup as selfsup

parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
parser.add_argument('collection', nargs='?', default='classic/adi')
parser.add_argument('--queries', type=int, default=5000,
                    help='corpus sentences to train on (at most)')
parser.add_argument('--epochs', type=int, default=1)
parser.add_argument('--output-dir', default='runs/distant-supervision')
args = parser.parse_args()

collection = selfsup.Collection(args.collection)
bm25 = selfsup.BM25.from_collection(collection)
minilm = selfsup.DenseRetriever.from_collection(collection)

torch.manual_seed(0)
queries = selfsup.corpus_sentences(collection, args.queries)   # texts from the corpus: no labels
adapted = selfsup.DistantSupervision(selfsup.DualEncoder.from_pretrained(selfsup.MINILM),
                                     collection, epochs=args.epochs,
                                     output_dir=args.output_dir).fit(queries)

table = pt.Experiment([bm25, minilm, adapted], collection.topics(), collection.qrels(), [nDCG @ 10],
                      names=['BM25', 'MiniLM', 'MiniLM adapted'], baseline=0, round=4)
print(table.to_string())
print(f'the adapted model: {args.output_dir}/final '
      '(examples/load_trained_model.py searches with it)')
