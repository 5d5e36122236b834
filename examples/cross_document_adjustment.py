"""Adapt a ReAtt retriever without labels by cross-document adjustment, then
search its token index.

    python examples/cross_document_adjustment.py [collection] [--queries N] [--epochs E]
        [--output-dir DIR]

Each iteration, every training query retrieves its k close documents with the model as it
is; SmolLM2, frozen, judges them by the likelihood of the query given each one, and the
retrieval head's scores over the close documents learn towards that judgement (ReAtt's
cross-document adjustment). The training queries are corpus sentences: no query log, no
label. The adapted model gets its own token index (its keys changed).
"""
import argparse

import pyterrier as pt
import torch
from ir_measures import nDCG

import pyterrier_selfsup as selfsup

parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
parser.add_argument('collection', nargs='?', default='classic/adi')
parser.add_argument('--queries', type=int, default=500,
                    help='corpus sentences to train on (at most)')
parser.add_argument('--epochs', type=int, default=selfsup.CrossDocumentAdjustmentSettings.epochs,
                    help='iterations, each re-retrieving the close documents')
parser.add_argument('--output-dir', default='runs/reatt')
args = parser.parse_args()

collection = selfsup.Collection(args.collection)
generator = selfsup.Generator.from_pretrained(selfsup.SMOLLM2, gguf_file=selfsup.SMOLLM2_GGUF)

torch.manual_seed(0)
# MiniLM's retrieval head
adapted = selfsup.ReAtt.from_pretrained(selfsup.MINILM, **selfsup.REATT_HEAD)
selfsup.CrossDocumentAdjustment(adapted, generator, collection, epochs=args.epochs,
                                output_dir=args.output_dir).fit(
    selfsup.corpus_sentences(collection, args.queries))

# the baselines, built after training so that their models are not held through it
bm25 = selfsup.BM25.from_collection(collection)
zero_shot = selfsup.ReAtt.from_pretrained(selfsup.MINILM, **selfsup.REATT_HEAD)
table = pt.Experiment(
    [bm25, selfsup.reatt_index(collection, zero_shot).exhaustive(zero_shot),
     # (each model its own index, cached)
     selfsup.reatt_index(collection, adapted).exhaustive(adapted)],
    collection.topics(), collection.qrels(), [nDCG @ 10],
    names=['BM25', 'ReAtt zero-shot', 'ReAtt adjusted'], baseline=0, round=4)
print(table.to_string())
print(f'the adapted model: {args.output_dir}/final (selfsup.ReAtt.from_pretrained loads it)')
