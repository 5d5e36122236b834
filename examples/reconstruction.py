"""Adapt MiniLM with the generator as its teacher:
RUMBArt, or ACROBArT (retrieve, then reconstruct).

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

parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
parser.add_argument('collection', nargs='?', default='classic/adi')
parser.add_argument('--method', choices=['rumbart', 'acrobart'], default='rumbart')
parser.add_argument('--queries', type=int, default=500,
                    help='corpus sentences to train on (at most)')
parser.add_argument('--k', type=int, default=None,
                    help='passages retrieved a query (default: 5, ACROBArT 3)')
parser.add_argument('--passage-tokens', type=int, default=None,
                    help="the generator's passage length (default: 256, ACROBArT 128)")
parser.add_argument('--output-dir', default=None, help='default: runs/<method>')
args = parser.parse_args()

collection = selfsup.Collection(args.collection)
# A step's memory grows with the queries taken at once and their k passages, which RUMBArt and
# ACROBArT encode with gradients: 16 queries an optimiser step (the shipped batches of 16), taken
# 4 at a time, keep a step within a laptop's memory (experiments/results/memory_probe.md).
# ACROBArT's generator also reads a query's k passages in one sequence with gradients: k=3, 128
# tokens a passage (as experiments/README.md, "ACROBArT on scifact").
acrobart = args.method == 'acrobart'
k = args.k or (3 if acrobart else 5)
passage_tokens = args.passage_tokens or (128 if acrobart else 256)
batches = dict(batch_size=4, accumulation=4)
generator = selfsup.Generator.from_pretrained(selfsup.SMOLLM2, gguf_file=selfsup.SMOLLM2_GGUF,
                                              max_passage_length=passage_tokens)  # frozen

torch.manual_seed(0)
trainer = {'rumbart': selfsup.Rumbart, 'acrobart': selfsup.Acrobart}[args.method]
output_dir = args.output_dir or f'runs/{args.method}'
# the rest at the shipped settings (selfsup list)
adapted = trainer(selfsup.DualEncoder.from_pretrained(selfsup.MINILM), generator, collection, k=k,
                  output_dir=output_dir, **batches)
adapted.fit(selfsup.corpus_sentences(collection, args.queries))

# the baselines, built after training so that their models are not held through it
bm25 = selfsup.BM25.from_collection(collection)
minilm = selfsup.DenseRetriever.from_collection(collection)
table = pt.Experiment([bm25, minilm, adapted], collection.topics(), collection.qrels(), [nDCG @ 10],
                      names=['BM25', 'MiniLM', f'MiniLM + {args.method}'], baseline=0, round=4)
print(table.to_string())
print(f'the adapted model: {output_dir}/final (examples/load_trained_model.py searches with it)')
