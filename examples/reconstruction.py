"""Adapt MiniLM with the generator as its teacher: RUMBArt, or ACROBArT (retrieve, then reconstruct).

    python examples/reconstruction.py [collection] [--method rumbart|acrobart] [--queries N] [--k K]

Each training query retrieves k passages from a FAISS index of the corpus that is refreshed
every few steps; SmolLM2, frozen, scores how well each passage reconstructs the query, and
the retriever learns towards the posterior p(z|x) ∝ p_η(z|x)·p_θ(x|z) (RUMBArt). ACROBArT
gives the generator all k passages at once and adds β·p_η(z_j|x) to its attention towards
passage j (thesis §4.3). The training queries are corpus sentences: no query log, no label.
"""
import argparse

import pyterrier as pt
import torch
from ir_measures import nDCG

import pyterrier_selfsup as selfsup

parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
parser.add_argument('collection', nargs='?', default='classic/adi')
parser.add_argument('--method', choices=['rumbart', 'acrobart'], default='rumbart')
parser.add_argument('--queries', type=int, default=500, help='corpus sentences to train on (at most)')
parser.add_argument('--k', type=int, default=5, help='passages retrieved a query')
parser.add_argument('--output-dir', default=None, help='default: runs/<method>')
args = parser.parse_args()

collection = selfsup.Collection(args.collection)
bm25 = selfsup.BM25.from_collection(collection)
minilm = selfsup.DenseRetriever.from_collection(collection)
generator = selfsup.Generator.from_pretrained(selfsup.SMOLLM2, gguf_file=selfsup.SMOLLM2_GGUF)  # frozen

torch.manual_seed(0)
trainer = {'rumbart': selfsup.Rumbart, 'acrobart': selfsup.Acrobart}[args.method]
output_dir = args.output_dir or f'runs/{args.method}'
adapted = trainer(selfsup.DualEncoder.from_pretrained(selfsup.MINILM), generator, collection, k=args.k,
                  refresh_every=25, lr=2e-5, output_dir=output_dir)
adapted.fit(selfsup.corpus_sentences(collection, args.queries))

table = pt.Experiment([bm25, minilm, adapted], collection.topics(), collection.qrels(), [nDCG @ 10],
                      names=['BM25', 'MiniLM', f'MiniLM + {args.method}'], baseline=0, round=4)
print(table.to_string())
print(f'the adapted model: {output_dir}/final (examples/load_trained_model.py searches with it)')
