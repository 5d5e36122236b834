"""What the distillation example prints on ADI at its defaults, committed, so that a later run can be
checked against it; and what `selfsup run -p distill` reaches on ADI, in an empty cache, beside it
(issue 31: the example trains with the shipped settings, from the same source as the pipeline, so the
two train the same model).

    python experiments/tools/example_numbers.py            # runs it, writes experiments/results/example_numbers.{md,json}
    python experiments/tools/example_numbers.py --check    # runs it, and exits 1 unless the table equals the committed one

The example runs as a user runs it (`python examples/distillation.py`), in a temporary directory,
with the cache of this machine ($SELFSUP_CACHE or ~/.cache/pyterrier-selfsup: the indexes are reused
if they are there; the example writes its queries and trains each time); the pipeline runs with an
empty cache of its own (`--cache-dir`), so that it trains too.
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from pyterrier_selfsup.harness import provenance

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / 'experiments' / 'results'
EXAMPLE = ['distillation.py', 'classic/adi']


def table_of(stdout: str) -> list:
    """The pt.Experiment table the example prints: its rows, as printed (name, nDCG@10)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ['name', 'nDCG@10'])
    rows = []
    for line in lines[start + 1:]:
        parts = line.split()
        if not parts or not parts[0].isdigit():
            break
        # "0  BM25  0.4855 ..." -> the name is every word between the index and the first number
        numbers = [i for i, p in enumerate(parts[1:], 1) if _number(p)]
        rows.append({'name': ' '.join(parts[1:numbers[0]]), 'nDCG@10': float(parts[numbers[0]])})
    return rows


def _number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--check', action='store_true', help='compare with the committed table; write nothing')
    args = parser.parse_args()
    started = time.time()
    with tempfile.TemporaryDirectory() as work:
        proc = subprocess.run([sys.executable, str(ROOT / 'examples' / EXAMPLE[0]), *EXAMPLE[1:]], cwd=work,
                              capture_output=True, text=True)
        if proc.returncode:
            sys.exit(f'{EXAMPLE[0]} failed:\n{proc.stderr[-3000:]}')
        pipeline = subprocess.run([sys.executable, '-m', 'pyterrier_selfsup', 'run', '-c', EXAMPLE[1], '-p', 'distill',
                                   '--cache-dir', f'{work}/cache', '--save', 'pipeline', '--results-dir', work],
                                  cwd=work, capture_output=True, text=True)
        if pipeline.returncode:
            sys.exit(f'selfsup run -p distill failed:\n{pipeline.stderr[-3000:]}')
        ran = pd.read_csv(f'{work}/pipeline.csv', comment='#').set_index('name')
    pipeline_row = {'name': 'selfsup run -p distill', 'nDCG@10': round(float(ran.loc['distill', 'nDCG@10']), 4)}
    rows = table_of(proc.stdout) + [pipeline_row]
    if args.check:
        committed = json.loads((RESULTS / 'example_numbers.json').read_text())['rows']
        same = rows == committed
        print(json.dumps({'now': rows, 'committed': committed, 'equal': same}, indent=1))
        sys.exit(0 if same else 1)
    header = provenance.header(f'example_numbers.py ({" ".join(EXAMPLE)})')
    settings = {'example': f'python examples/{" ".join(EXAMPLE)} (its defaults: the shipped distill settings)',
                'wall time': f'{time.time() - started:.0f} s'}
    (RESULTS / 'example_numbers.json').write_text(json.dumps({'header': header, 'settings': settings, 'rows': rows},
                                                             indent=1))
    md = ['# The distillation example on ADI, at its defaults, and the distill pipeline', '',
          *(f'- {k}: {v}' for k, v in {**header, **settings}.items()), '',
          '| pipeline | nDCG@10 |', '|---|---|', *(f'| {r["name"]} | {r["nDCG@10"]:.4f} |' for r in rows), '',
          'The last row: `selfsup run -c classic/adi -p distill` in an empty cache (its own queries, its own '
          'training), beside the example\'s own rows.', '',
          'Its output, as printed:', '', '```', proc.stdout.strip(), '```', '']
    (RESULTS / 'example_numbers.md').write_text('\n'.join(md))
    print('\n'.join(md))


if __name__ == '__main__':
    main()
