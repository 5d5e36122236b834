"""Load a trained model back and search with it:
what any of the trainers saved under <output_dir>/final.

    python examples/load_trained_model.py MODEL_DIR [collection] [--docs FILE] [--query TEXT]
                                          [--precision auto|fp32|bf16]

A dense model (distant supervision, RUMBArt, ACROBArT, distillation) loads as a
`DualEncoder`; its index over the collection is built on first use and cached under a key
of its weights, so the same model finds its index again. On a collection with relevance
judgements it is compared with BM25; `--docs` searches a corpus of your own instead of
the collection (see examples/your_own_corpus.py for the formats). `--precision` is the
precision it encodes at: `auto` (bf16 where the hardware multiplies it natively) by default,
`fp32` to rank exactly as the `distill` pipeline, which searches in fp32, ranked when trained.
"""
import argparse

import pandas as pd
import pyterrier as pt
from ir_measures import nDCG

import pyterrier_selfsup as selfsup

parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
parser.add_argument('model_dir')
parser.add_argument('collection', nargs='?', default='classic/adi')
parser.add_argument('--docs',
                    help='a documents file of your own, searched instead of the collection')
parser.add_argument('--query', action='append', help='a query to search (repeatable)')
parser.add_argument('--precision', default='auto', choices=['auto', 'fp32', 'bf16'],
                    help='the precision the model encodes at')
args = parser.parse_args()

collection = (selfsup.Collection.from_files(args.docs) if args.docs
              else selfsup.Collection(args.collection))
# its index: built once, cached
model = selfsup.DenseRetriever.from_dual_encoder(collection, args.model_dir,
                                                  precision=args.precision)
if args.query:
    results = model(pd.DataFrame({'qid': [str(i) for i in range(len(args.query))],
                                  'query': args.query}))
    for qid, query in enumerate(args.query):
        best = results[results['qid'] == str(qid)].head(3)
        print(f'{query}')
        for docno, score, text in zip(best['docno'], best['score'],
                                      collection.texts(list(best['docno']))):
            print(f'  {docno} {score:.3f}: {text[:100]}')
if collection.irds.has_qrels():
    bm25 = selfsup.BM25.from_collection(collection)
    table = pt.Experiment([bm25, model], collection.topics(), collection.qrels(), [nDCG @ 10],
                          names=['BM25', args.model_dir], baseline=0, round=4)
    print(table.to_string())
