"""Retrieval as Attention on the collections here (issue 5, item 5).

Groups, each one results file (written as soon as the group finishes):
  reatt_zero_shot  the zero-shot retrieval head of all-MiniLM-L6-v2 (`reatt`: layer 1,
                   head 1, special tokens out, chosen on scifact train by reatt_heads.py),
                   every document scored exactly, beside BM25, MiniLM dense retrieval and the
                   reconstruction scorer (SmolLM2 re-ranking BM25's top 100), on scifact test,
                   cranfield, vaswani, CISI and ADI: one pt.Experiment per collection
  reatt_adjusted   the same head after cross-document adjustment with SmolLM2's likelihoods
                   as the target, on the train-query texts (labels unused); scifact train
                   (choices) and test (reported)
  reatt_masked     the same head adapted on 256 masked corpus sentences instead (ReAtt's own
                   unsupervised queries, §3.3: a salient span hidden by the student's [MASK]),
                   one iteration over BM25's close documents as in ReAtt's unsupervised
                   adaptation (App. B); scifact train and test, beside the train-query adjustment
  reatt_masked_others
                   the same unsupervised adaptation on cranfield, vaswani, CISI and ADI, none of
                   which has training queries (ADI: 80 sentences, one from each of its documents
                   that has one). 256 sentences is a budget for 2 cores: the teacher scores 8
                   pairs per sentence, 10 to 30 s for 16 pairs

    python experiments/reproduce/reatt_training.py [group ...]
"""
import sys
from pathlib import Path

from curves import copy_training_curves  # (beside this script)

from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.harness.experiment import run_experiment, write_results

RESULTS = Path(__file__).resolve().parents[1] / 'results'
FIVE = ['beir/scifact/test', 'cranfield', 'vaswani', 'classic/cisi', 'classic/adi']
SCIFACT = ['beir/scifact/train', 'beir/scifact/test']
ADJUSTED = 'reatt_adjusted:queries=beir/scifact/train'
# unsupervised adaptation: one iteration over BM25's close documents (ReAtt App. B)
MASKED = 'reatt_adjusted:queries=masked,n_queries=256,epochs=1'

GROUPS = {
    'reatt_zero_shot': (FIVE, ['bm25', 'minilm', 'query_likelihood', 'reatt']),
    'reatt_adjusted': (SCIFACT, ['bm25', 'minilm', 'reatt', ADJUSTED]),
    'reatt_masked': (SCIFACT, ['bm25', 'minilm', 'reatt', ADJUSTED, MASKED]),
    'reatt_masked_others': (FIVE[1:], ['bm25', 'minilm', 'reatt', MASKED]),
}


def main(groups):
    for group in groups:
        collections, pipelines = GROUPS[group]
        result = run_experiment(collections, pipelines, name=group, run=RunContext(verbose=True))
        write_results(result, RESULTS)
        trained = [p for p in pipelines if p.startswith('reatt_adjusted')]
        corpora = {Collection(c).corpus_id: c for c in collections}  # a collection of each corpus
        for corpus, collection in corpora.items() if trained else ():
            folder = RESULTS / 'reatt_curves' / (corpus.replace('/', '_') if len(corpora) > 1 else '')
            copy_training_curves(trained, collection, folder)

if __name__ == '__main__':
    main(sys.argv[1:] or ['reatt_zero_shot', 'reatt_adjusted'])
