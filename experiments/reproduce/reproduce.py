"""Reproduces one of the thesis' methods with one command, and compares it with the numbers
this repository expects.

Each method is trained at its shipped settings, without reading a relevance label, and
evaluated beside BM25 and all-MiniLM-L6-v2 zero-shot in one `pt.Experiment` (nDCG@10, R@100,
RR@10; paired t-tests against BM25, Holm-corrected). The results go to a directory of your
choice, and each pipeline's nDCG@10 is printed beside the expected one, read from
`experiments/results/reproduce/<method>-<collection>.csv` (written by `--expected`, on the
machine that file's header names).

    python experiments/reproduce/reproduce.py rumbart                  # on ADI, the default
    python experiments/reproduce/reproduce.py distill -c cranfield
    python experiments/reproduce/reproduce.py all --expected           # rewrites the expected files

Methods: distant_supervision, rumbart, acrobart, reatt (zero-shot and after cross-document
adjustment), distill (corpus only) and distill_log (with a query log: the collection's own
topic texts, two-fold, or scifact's train split for scifact).

`python scripts/docs_sections.py --write` writes the table of experiments/README.md from the
expected files.
"""
import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.harness.experiment import run_experiment, write_results

EXPECTED = Path(__file__).resolve().parents[1] / 'results' / 'reproduce'
START = ['bm25', 'minilm']
METHODS = {
    'distant_supervision': lambda log: START + ['distant_supervision'],
    'rumbart': lambda log: START + ['rumbart'],
    'acrobart': lambda log: START + ['acrobart'],
    'reatt': lambda log: START + ['reatt', 'reatt_adjusted'],
    'distill': lambda log: START + ['teacher', 'distill', 'hybrid'],
    'distill_log': lambda log: START + ['teacher', f'distill:queries={log}',
                                        f'hybrid:queries={log}'],
}
# the query log of a collection: another split's topic texts where there is one
QUERY_LOGS = {'beir/scifact/test': 'beir/scifact/train'}


def file_name(method: str, collection: str) -> str:
    return f"{method}-{collection.replace('/', '_')}"


def compare(table: pd.DataFrame, expected_csv: Path) -> pd.DataFrame:
    """Each pipeline's nDCG@10 beside the expected one, and their difference."""
    expected = pd.read_csv(expected_csv, comment='#').set_index('name')['nDCG@10']
    got = table.set_index('name')['nDCG@10']
    return pd.DataFrame({'expected': expected, 'got': got, 'difference': got - expected}).round(4)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    if argv is None:
        argv = sys.argv[1:]
    parser.add_argument('method', choices=[*METHODS, 'all'])
    parser.add_argument('-c', '--collection', default='classic/adi')
    parser.add_argument('--results-dir', default=None,
                        help='where the results files go (default: a temporary directory)')
    parser.add_argument('--expected', action='store_true',
                        help='write the results as the expected ones, under ' + str(EXPECTED))
    parser.add_argument('-q', '--quiet', action='store_true')
    args = parser.parse_args(argv)
    log = QUERY_LOGS.get(args.collection, 'crossfold')
    results_dir = Path(EXPECTED if args.expected else
                       args.results_dir or tempfile.mkdtemp(prefix='reproduce-'))
    for method in (METHODS if args.method == 'all' else [args.method]):
        name = file_name(method, args.collection)
        expected_csv = EXPECTED / f'{name}.csv'
        had_expected = expected_csv.exists()
        started = time.time()
        result = run_experiment([args.collection], METHODS[method](log), name=name,
                                run=RunContext(verbose=not args.quiet))
        paths = write_results(result, results_dir)
        print(f'{method} on {args.collection}: {time.time() - started:.0f} s; results in '
              f'{paths[0]}')
        if had_expected and not args.expected:
            got = pd.read_csv(results_dir / f'{name}.csv', comment='#')
            compared = compare(got, expected_csv)
            print(f'nDCG@10 against {expected_csv}:')
            print(compared.to_string())
            worst = compared['difference'].abs().max()
            print('the same numbers' if not math.isnan(worst) and worst < 5e-4 else
                  f'differences up to {worst:.4f}: expected on the same machine and code '
                  'within 0.0005; another CPU or GPU rounds otherwise, and a trainer that '
                  'writes queries can then draw other ones')
    return 0


if __name__ == '__main__':
    sys.exit(main())
