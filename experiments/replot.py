"""Redraws every experiment figure under results/ from its CSV (issue 18), measuring nothing.

Each `<name>.csv` written by the harness (`write_results`: provenance lines, then one row
per collection and pipeline with the measures and the corrected test against the
baseline) becomes `<name>.png` again through `pyterrier_selfsup.harness.plots`; where a
`<name>.perquery.csv` was kept (runs from now on), with confidence intervals and a
win/tie/loss strip.

    python experiments/replot.py [NAME ...]      # all of them without names
"""
import sys
from pathlib import Path

import pandas as pd

from pyterrier_selfsup.harness.plots import plot_results

RESULTS = Path(__file__).parent / 'results'
FOOTER = ('date', 'code', 'machine', 'models')


def read(path: Path):
    header = [line[2:].rstrip('\n') for line in path.read_text().splitlines() if line.startswith('# ')]
    return header, pd.read_csv(path, comment=None, skiprows=len(header))


def replot(path: Path) -> Path:
    header, table = read(path)
    per_query = path.with_suffix('.perquery.csv')
    per_query = pd.read_csv(per_query) if per_query.is_file() else None
    footer = [line for line in header if line.split(':')[0] in FOOTER]
    return plot_results(table, path.with_suffix('.png'), title=path.stem, per_query=per_query, footer=footer,
                        header=header)


def main(argv=None):
    names = (argv if argv is not None else sys.argv[1:])
    paths = [RESULTS / f'{n}.csv' for n in names] if names else sorted(RESULTS.glob('*.csv'))
    for path in paths:
        if path.name.endswith('.perquery.csv'):
            continue
        header, table = read(path)
        if not {'collection', 'name'} <= set(table.columns):
            print(f'skipped {path.name}: not an experiment table')
            continue
        print(replot(path))


if __name__ == '__main__':
    main()
