"""Distil a teacher stronger than the student, without labels:
BM25 and MiniLM fused, taught to MiniLM.

    python examples/distillation.py [collection] [--queries N] [--rounds R] [--output-dir DIR]

The teacher is a PyTerrier pipeline: BM25's top 100 and the student's own top 100, fused by
per-query z-scores, which ranks above both of its parts. The student (MiniLM's query tower,
against its start's passage vectors) learns the teacher's softmax over its top 30; with
`--rounds` above 1, each round the improved student re-enters its teacher. The training
queries are SmolLM2's samples from the corpus's passages: no query log and no relevance label
is read.
(`--queries-from sentences` trains on corpus sentences instead: no generator, less gain.)
"""
import argparse

import pyterrier as pt
import torch
from ir_measures import nDCG

import pyterrier_selfsup as selfsup

parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
parser.add_argument('collection', nargs='?', default='classic/adi')
shipped = selfsup.DistillationSettings()  # the settings `selfsup run -p distill` trains with
parser.add_argument('--queries', type=int, default=shipped.n_queries,
                    help='training queries to write (at most)')
parser.add_argument('--queries-from', choices=['sampled', 'sentences'], default='sampled')
parser.add_argument('--rounds', type=int, default=shipped.rounds,
                    help='epochs, each with the teacher re-ranking')
parser.add_argument('--output-dir', default='runs/distill')
args = parser.parse_args()

collection = selfsup.Collection(args.collection)
bm25 = selfsup.BM25.from_collection(collection, num_results=100)
minilm = selfsup.DenseRetriever.from_collection(collection)

if args.queries_from == 'sampled':
    # SmolLM2 writes them (each run: `selfsup run -p distill` caches them)
    # (the generator is not kept: training does not need it, and it holds 0.5 GiB)
    queries = selfsup.sampled_queries(collection, selfsup.Generator.from_pretrained(
        selfsup.SMOLLM2, gguf_file=selfsup.SMOLLM2_GGUF), args.queries)
else:
    queries = selfsup.corpus_sentences(collection, args.queries)


def teacher(student):  # the student re-enters its teacher each round
    return selfsup.Fusion({'bm25': bm25, 'student': student})


torch.manual_seed(0)
# the rest at the shipped corpus-only settings: the passage side frozen, the last round kept, and
# a held-out tenth of the queries for the label-free signal
distilled = selfsup.Distillation(
    selfsup.DualEncoder.from_pretrained(selfsup.MINILM, precision=shipped.precision),
    collection, teacher, queries=args.queries_from, rounds=args.rounds,
    output_dir=args.output_dir).fit(queries)

table = pt.Experiment([bm25, minilm, teacher(minilm), distilled], collection.topics(),
                      collection.qrels(), [nDCG @ 10],
                      names=['BM25', 'MiniLM', 'teacher (BM25 + MiniLM)', 'MiniLM distilled'],
                      baseline=0, round=4)
print(table.to_string())
print(f'the distilled model: {args.output_dir}/final '
      '(examples/load_trained_model.py searches with it)')
