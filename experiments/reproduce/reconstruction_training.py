"""RUMBArt and ACROBArT adaptation of all-MiniLM-L6-v2 on beir/scifact (issue 4, item 6).

Groups, each one results file (written as soon as the group finishes):
  rumbart_main   start (zero-shot) vs RUMBArt with SmolLM2-135M-Instruct frozen as the
                 teacher, trained on the 809 train-query texts (labels unused)
  acrobart_main  the same with ACROBArT (k=3, 128 passage tokens)
  rumbart_teacher  the teacher's temperature: 1 (the thesis) against 4, the value that
                 teacher_diagnostics.py picked on the train split (posterior P@1)
  rumbart_frozen  RAG's choice (train_passages=False): the passage tower stays MiniLM and
                 only queries train, a step costing a fraction of a full one; one epoch as
                 above, and ten at the thesis' lr 1e-4, which only this makes affordable here
  rumbart_k      the number of candidates k (3, 5, 10), with the frozen passage tower
                 (one epoch, lr 2e-5, T=4): k=10 raises the ceiling of what reordering can
                 reach, and costs new teacher pairs, not encoder work
  rumbart_seeds  the frozen-passage run of rumbart_frozen under three seeds (batch order,
                 and so what each refresh retrieves): how much of a difference is noise
  rumbart_queries  corpus-only queries against the train-query texts (frozen passage
                 tower, T=4): as many corpus sentences, and as many queries SmolLM2 wrote
                 for sampled passages, as there are train queries (809); a query's own
                 passage is excluded from its retrieval
  rumbart_start  RUMBArt from the distant-supervision model trained on the same query
                 texts (start=ds; ds_main's ds:queries=beir/scifact/train) instead of MiniLM,
                 with the frozen passage tower and with both towers trained
  rumbart_refresh  the refresh period (both towers trained, T=4): every 10 steps, every
                 25 (the default), never (the start's index throughout)
  rumbart_roundtrip  generated queries as in rumbart_queries, against generated queries kept
                 only if BM25 finds their passage in its top 10 (round-trip filtering;
                 query_sources.md shows why: most generated queries are generic)
  rumbart_target  the thesis' marginal likelihood against ART's KL target (target=art), at the
                 shipped teacher temperature, with the frozen passage tower
  rumbart_start_seeds  rumbart_start's frozen-passage run under seeds 0-2; the seed also
                 trains the distant-supervision start anew, so the spread is the whole pipeline's
  acrobart_sources  ACROBArT (k=3, 128 passage tokens) with the frozen passage tower, which
                 makes it affordable enough to run it on each query source and start: the
                 train-query texts, corpus sentences, generated queries (809 each), start=ds
  rumbart_frozen_rerun  rumbart_frozen's one-epoch frozen-passage run, rerun end to end (teacher
                 scores included, from a cold cache) by the redesigned package (issue 15): its
                 numbers must match rumbart_frozen's within seed noise; curves in
                 reconstruction_curves/rerun/

Every group is evaluated on beir/scifact/train (the qrels of the queries whose texts were
used for training: the split on which choices may be made) and beir/scifact/test
(reported, never used for choices). Relevance labels are never used for training.
Training curves and logs are copied to experiments/results/reconstruction_curves/.

    python experiments/reproduce/reconstruction_training.py [group ...]
"""
import sys
from pathlib import Path

from curves import copy_training_curves  # (beside this script)

from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.harness.experiment import run_experiment, write_results

RESULTS = Path(__file__).resolve().parents[1] / 'results'
COLLECTIONS = ['beir/scifact/train', 'beir/scifact/test']
TRAIN = 'queries=beir/scifact/train'
FROZEN = f'rumbart:{TRAIN},teacher_temperature=4,train_passages=false'  # the cheap configuration
ACROBART = 'acrobart:k=3,max_passage_length=128,train_passages=false'  # + the queries


def frozen_on(source: str) -> str:
    """FROZEN trained on 809 corpus-only queries from ``source`` instead of the train texts."""
    return f'rumbart:queries={source},n_queries=809,teacher_temperature=4,train_passages=false'


GROUPS = {
    'rumbart_main': ['bm25', 'dual_encoder', f'rumbart:{TRAIN}'],
    # ACROBArT reads all k passages in one sequence, fwd and bwd through SmolLM2: k=3 and
    # 128 passage tokens keep a step under a minute on 2 cores
    'acrobart_main': ['bm25', 'dual_encoder', f'acrobart:{TRAIN},k=3,max_passage_length=128'],
    'rumbart_teacher': ['bm25', 'dual_encoder', f'rumbart:{TRAIN}', f'rumbart:{TRAIN},teacher_temperature=4'],
    'rumbart_frozen': ['bm25', 'dual_encoder', f'rumbart:{TRAIN},teacher_temperature=4',
                       f'rumbart:{TRAIN},teacher_temperature=4,train_passages=false',
                       f'rumbart:{TRAIN},teacher_temperature=4,train_passages=false,epochs=10,lr=1e-4'],
    'rumbart_k': ['bm25', 'dual_encoder'] + [f'rumbart:{TRAIN},teacher_temperature=4,train_passages=false,k={k}'
                                     for k in (3, 5, 10)],
    'rumbart_seeds': ['bm25', 'dual_encoder'] + [f'{FROZEN},seed={seed}' if seed else FROZEN for seed in (0, 1, 2)],
    'rumbart_queries': ['bm25', 'dual_encoder', FROZEN, frozen_on('sentences'), frozen_on('generated')],
    'rumbart_start': ['bm25', f'ds:{TRAIN}', f'{FROZEN},start=ds', f'rumbart:{TRAIN},teacher_temperature=4,start=ds'],
    'rumbart_refresh': ['bm25', 'dual_encoder'] + [f'rumbart:{TRAIN},teacher_temperature=4,refresh_every={r}'
                                           for r in (10, 25, 0)],
    'rumbart_roundtrip': ['bm25', 'dual_encoder', FROZEN, frozen_on('generated'), frozen_on('roundtrip')],
    # the thesis' marginal likelihood against ART's KL target, at the shipped teacher
    # temperature, with the passage tower frozen (minutes a model here, not hours)
    'rumbart_target': ['bm25', 'dual_encoder', f'rumbart:{TRAIN},train_passages=false',
                       f'rumbart:{TRAIN},train_passages=false,target=art'],
    'rumbart_start_seeds': ['bm25'] + [f'{FROZEN},start=ds,seed={seed}' if seed else f'{FROZEN},start=ds'
                                       for seed in (0, 1, 2)],
    'acrobart_sources': ['bm25', 'dual_encoder', f'{ACROBART},{TRAIN}', f'{ACROBART},{TRAIN},start=ds'] + [
        f'{ACROBART},queries={source},n_queries=809' for source in ('sentences', 'generated')],
    'rumbart_frozen_rerun': ['bm25', 'dual_encoder', FROZEN],
}
CURVES = {'rumbart_frozen_rerun': 'reconstruction_curves/rerun'}  # beside the first run's, not over them


def main(groups):
    for group in groups:
        result = run_experiment(COLLECTIONS, GROUPS[group], name=group, run=RunContext(verbose=True))
        write_results(result, RESULTS)
        trained_here = [p for p in GROUPS[group] if p.startswith(('rumbart', 'acrobart'))]  # ds's are in ds_curves/
        copy_training_curves(trained_here, COLLECTIONS[0], RESULTS / CURVES.get(group, 'reconstruction_curves'))


if __name__ == '__main__':
    main(sys.argv[1:] or list(GROUPS))
