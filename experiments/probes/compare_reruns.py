"""Do the redesigned package's numbers match the ones committed before it (issue 15)?

Reads pairs of committed results files, the first run and its rerun, and writes
experiments/results/redesign_reruns.md: every (collection, pipeline) in both, its measures
in each, and the difference. The reruns come from

    bash experiments/reproduce/baseline.sh --save baseline_rerun   # (its later --save wins)
    python experiments/reproduce/reconstruction_training.py rumbart_frozen_rerun

and this script from

    python experiments/probes/compare_reruns.py
"""
from pathlib import Path

import pandas as pd

RESULTS = Path(__file__).resolve().parents[1] / 'results'
PAIRS = [('baseline', 'baseline_rerun'), ('rumbart_frozen', 'rumbart_frozen_rerun')]
MEASURES = ['nDCG@10', 'R@100', 'RR@10']


def header(name: str) -> dict:
    lines = [line[2:] for line in (RESULTS / f'{name}.csv').read_text().splitlines() if line.startswith('# ')]
    return dict(line.split(': ', 1) for line in lines if ': ' in line)


def main():
    out = ['# Reruns by the redesigned package', '',
           'Each pair: a results file committed before the redesign (issue 15) and its rerun by the '
           'redesigned code, on the same machine kind (2 CPU cores). Written by '
           '`python experiments/probes/compare_reruns.py`.', '']
    for first, rerun in PAIRS:
        a = pd.read_csv(RESULTS / f'{first}.csv', comment='#').set_index(['collection', 'name'])
        b = pd.read_csv(RESULTS / f'{rerun}.csv', comment='#').set_index(['collection', 'name'])
        both = a.index.intersection(b.index)
        ha, hb = header(first), header(rerun)
        out += [f'## {first} against {rerun}', '',
                f'- {first}: code {ha.get("code")}, {ha.get("date")}, {ha.get("machine")}',
                f'- {rerun}: code {hb.get("code")}, {hb.get("date")}, {hb.get("machine")}', '',
                '| collection | pipeline | ' + ' | '.join(f'{m} first / rerun / diff' for m in MEASURES) + ' |',
                '|---|---|' + '---|' * len(MEASURES)]
        for collection, name in both:
            cells = [f'{a.loc[(collection, name), m]:.4f} / {b.loc[(collection, name), m]:.4f} / '
                     f'{b.loc[(collection, name), m] - a.loc[(collection, name), m]:+.4f}' for m in MEASURES]
            out.append(f'| {collection} | {name} | ' + ' | '.join(cells) + ' |')
        diffs = (b.loc[both, MEASURES] - a.loc[both, MEASURES]).abs()
        out += ['', f'Largest absolute difference: {diffs.max().max():.4f} ({len(both)} rows).', '']
    (RESULTS / 'redesign_reruns.md').write_text('\n'.join(out))
    print('\n'.join(out))


if __name__ == '__main__':
    main()
