"""Measures the values the effectiveness tests hold each trained method to, on two CPU kinds.

It runs the tests marked ``effectiveness`` twice, one process after the other: as this CPU
runs them, then with torch and oneDNN held to AVX2 (``ATEN_CPU_CAPABILITY=avx2
ONEDNN_MAX_CPU_ISA=AVX2``, as on an AVX2-only AMD EPYC). Each time the tests record what they
would check (``$SELFSUP_RECORD_EFFECTIVENESS``, tests/effectiveness.py) instead of checking it.
A run's committed value is this CPU's; its tolerance is twice the larger difference between the
two kinds (its nDCG@10's or its start's), and at least ``--floor``.

    source scripts/bootstrap.sh && python scripts/effectiveness_values.py [--floor 0.005]

writes tests/data/effectiveness.json. The tests run in fp32 on every CPU kind (they set
``$SELFSUP_CPU_FLAGS`` as on an AVX2-only CPU), so the two kinds differ only by their kernels.
"""
import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VALUES = ROOT / 'tests' / 'data' / 'effectiveness.json'
KINDS = {'native': {}, 'avx2': {'ATEN_CPU_CAPABILITY': 'avx2', 'ONEDNN_MAX_CPU_ISA': 'AVX2'}}


def record(kind: str, out: Path) -> dict:
    """The effectiveness tests' runs, by key, as the CPU kind ``kind`` gives them."""
    env = {**os.environ, **KINDS[kind], 'SELFSUP_RECORD_EFFECTIVENESS': str(out)}
    command = [sys.executable, '-m', 'pytest', '-m', 'effectiveness', '-p', 'no:cacheprovider',
               '-q', '-n', '0', '-o', 'addopts=']
    print(f'{kind}: {" ".join(command[2:])}', flush=True)
    subprocess.run(command, cwd=ROOT, env=env, check=True)
    return {r['key']: r for r in map(json.loads, out.read_text().splitlines())}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--floor', type=float, default=0.005,
                        help='the least tolerance a run is given (nDCG@10)')
    args = parser.parse_args()
    from pyterrier_selfsup.harness.provenance import code_revision, machine, packages
    if 'no commit named' in code_revision():
        sys.exit('the values would name no commit: `source scripts/bootstrap.sh` first, which '
                 'sets $SELFSUP_CODE_REVISION to the checkout\'s')
    with tempfile.TemporaryDirectory() as tmp:
        measured = {kind: record(kind, Path(tmp) / f'{kind}.jsonl') for kind in KINDS}
    native, avx2 = measured['native'], measured['avx2']
    assert native.keys() == avx2.keys(), (native.keys(), avx2.keys())
    runs = {}
    for key, run in sorted(native.items()):
        spread = max(abs(run[m] - avx2[key][m]) for m in ('nDCG@10', 'start'))
        tolerance = max(args.floor, math.ceil(2 * spread * 1e4) / 1e4)
        runs[key] = {'method': run['method'], 'nDCG@10': round(run['nDCG@10'], 6),
                     'start': round(run['start'], 6), 'tolerance': tolerance,
                     'avx2': {m: round(avx2[key][m], 6) for m in ('nDCG@10', 'start')}}
        print(f'{key}: {run["start"]:.4f} -> {run["nDCG@10"]:.4f} '
              f'(avx2: {avx2[key]["start"]:.4f} -> {avx2[key]["nDCG@10"]:.4f}), '
              f'tolerance {tolerance}')
    VALUES.write_text(json.dumps({
        'about': 'nDCG@10 on classic/adi of the tests marked effectiveness, in fp32; written by '
                 'scripts/effectiveness_values.py: the native values, and avx2 those with torch '
                 'and oneDNN held to AVX2 on the same machine',
        'machine': machine(), 'packages': packages(), 'code': code_revision(),
        'date': datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'),
        'floor': args.floor, 'runs': runs}, indent=1) + '\n')
    print(f'wrote {VALUES.relative_to(ROOT)}')


if __name__ == '__main__':
    main()
