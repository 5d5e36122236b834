"""Distant-supervision adaptation of all-MiniLM-L6-v2 on beir/scifact (issue 3, item 5).

Three groups, each one results file (written as soon as the group finishes):
  ds_main        start (zero-shot) vs training on the 809 train-query texts (1 and 3
                 epochs) and on 5,000 corpus sentences (no query log at all)
  ds_negatives   thesis Table 6.1 at small scale: extra hard negatives none / random /
                 BM25 ranks 2..30 / current retriever (train queries, 1 epoch)
  ds_dims        thesis §6.1.2 at small scale: projection to d = 64 .. 768 (train queries, 1 epoch)

Every group is evaluated on beir/scifact/train (the qrels of the queries whose texts were
used for training: the split on which choices may be made) and beir/scifact/test
(reported, never used for choices). Relevance labels are never used for training.
Training curves and logs are copied to experiments/results/ds_curves/.

    python experiments/reproduce/distant_supervision.py [group ...]
"""
import sys
from pathlib import Path

from curves import copy_training_curves  # (beside this script)

from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.harness.experiment import run_experiment, write_results

RESULTS = Path(__file__).resolve().parents[1] / 'results'
COLLECTIONS = ['beir/scifact/train', 'beir/scifact/test']
TRAIN = 'ds:queries=beir/scifact/train'
GROUPS = {
    'ds_main': ['bm25', 'dual_encoder', TRAIN, f'{TRAIN},epochs=3', 'ds:queries=sentences,n_queries=5000'],
    'ds_negatives': ['bm25', TRAIN] + [f'{TRAIN},negatives={n}' for n in ('random', 'bm25', 'retriever')],
    'ds_dims': ['bm25', 'dual_encoder'] + [f'{TRAIN},dim={d}' for d in (64, 128, 256, 768)] + [TRAIN],
}


def main(groups):
    for group in groups:
        result = run_experiment(COLLECTIONS, GROUPS[group], name=group, run=RunContext(verbose=True))
        write_results(result, RESULTS)
        copy_training_curves(GROUPS[group], COLLECTIONS[0], RESULTS / 'ds_curves')


if __name__ == '__main__':
    main(sys.argv[1:] or list(GROUPS))
