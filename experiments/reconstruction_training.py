"""RUMBArt and ACROBArT adaptation of all-MiniLM-L6-v2 on beir/scifact (issue 4, item 6).

Groups, each one results file (written as soon as the group finishes):
  rumbart_main   start (zero-shot) vs RUMBArt with SmolLM2-135M-Instruct frozen as the
                 teacher, trained on the 809 train-query texts (labels unused)
  acrobart_main  the same with ACROBArT (k=3, 128 passage tokens)

Every group is evaluated on beir/scifact/train (the qrels of the queries whose texts were
used for training: the split on which choices may be made) and beir/scifact/test
(reported, never used for choices). Relevance labels are never used for training.
Training curves and logs are copied to experiments/results/reconstruction_curves/.

    python experiments/reconstruction_training.py [group ...]
"""
import shutil
import sys
from pathlib import Path

from pyterrier_selfsup import Collection
from pyterrier_selfsup.experiment import run_experiment, write_results
from pyterrier_selfsup.pipelines import get_pipeline
from pyterrier_selfsup.reconstruction import reconstruction_model_dir

RESULTS = Path(__file__).parent / 'results'
COLLECTIONS = ['beir/scifact/train', 'beir/scifact/test']
TRAIN = 'queries=beir/scifact/train'
GROUPS = {
    'rumbart_main': ['bm25', 'dual', f'rumbart:{TRAIN}'],
    # ACROBArT reads all k passages in one sequence, fwd and bwd through SmolLM2: k=3 and
    # 128 passage tokens keep a step under a minute on 2 cores
    'acrobart_main': ['bm25', 'dual', f'acrobart:{TRAIN},k=3,max_passage_length=128'],
}


def copy_curves(pipelines):
    corpus = Collection(COLLECTIONS[0])
    for spec in map(get_pipeline, pipelines):
        if spec.name.startswith(('rumbart', 'acrobart')):
            source = reconstruction_model_dir(corpus, {**spec.settings, 'method': spec.name.split(':')[0]})
            target = RESULTS / 'reconstruction_curves' / spec.name.replace(':', '_').replace(',', '_').replace('/', '-')
            target.mkdir(parents=True, exist_ok=True)
            for name in ('training_curve.png', 'training_log.jsonl'):
                shutil.copy(source / name, target / name)


def main(groups):
    for group in groups:
        result = run_experiment(COLLECTIONS, GROUPS[group], name=group, verbose=True)
        write_results(result, RESULTS)
        copy_curves(GROUPS[group])


if __name__ == '__main__':
    main(sys.argv[1:] or list(GROUPS))
