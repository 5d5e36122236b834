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
  reatt_masked     the same on 809 masked corpus sentences (ReAtt's own unsupervised
                   queries); not run yet: its teacher scoring alone is about 10 chunks of
                   512 passages at 5 min each on 2 cores for the first iteration

    python experiments/reatt_training.py [group ...]
"""
import sys
from pathlib import Path

from pyterrier_selfsup.experiment import copy_training_curves, run_experiment, write_results

RESULTS = Path(__file__).parent / 'results'
FIVE = ['beir/scifact/test', 'cranfield', 'vaswani', 'classic/cisi', 'classic/adi']
SCIFACT = ['beir/scifact/train', 'beir/scifact/test']
ADJUSTED = 'reatt_adjusted:queries=beir/scifact/train'
MASKED = 'reatt_adjusted:queries=masked,n_queries=809'

GROUPS = {
    'reatt_zero_shot': (FIVE, ['bm25', 'minilm', 'recon', 'reatt']),
    'reatt_adjusted': (SCIFACT, ['bm25', 'minilm', 'reatt', ADJUSTED]),
    'reatt_masked': (SCIFACT, ['bm25', 'reatt', ADJUSTED, MASKED]),
}


def main(groups):
    for group in groups:
        collections, pipelines = GROUPS[group]
        result = run_experiment(collections, pipelines, name=group, verbose=True)
        write_results(result, RESULTS)
        trained = [p for p in pipelines if p.startswith('reatt_adjusted')]
        if trained:
            copy_training_curves(trained, collections[0], RESULTS / 'reatt_curves')


if __name__ == '__main__':
    main(sys.argv[1:] or ['reatt_zero_shot', 'reatt_adjusted'])
