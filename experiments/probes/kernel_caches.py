"""What PyTorch's CPU kernel caches hold through a training run (issue 32): the two training
examples that peaked over 3 GiB on ADI, each with the caches at PyTorch's default capacity
(1024 kernels each) and at the package's bound (``_kernel_caches.KERNEL_CACHE_CAPACITY``).

oneDNN and ideep over it keep every kernel they build, keyed by its tensors' shapes, and a
trainer meets new sequence lengths at every step. After each optimiser step the run records
glibc's own account of its heap (``mallinfo2``: the bytes in use, and the bytes freed but kept)
and its resident memory; and, as a whole, its peak resident memory (``scripts/measured.py``),
its time and the adapted model's nDCG@10 as the example prints it (the same weights give the same
figure).

    python experiments/probes/kernel_caches.py
writes experiments/results/kernel_caches.{md,json}. The examples run in this machine's cache
($SELFSUP_CACHE or ~/.cache/pyterrier-selfsup), warmed by a first run of each that is not
measured, so that every measured run finds the same indexes and teacher scores.
"""
import argparse
import ctypes
import json
import os
import runpy
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / 'experiments' / 'results'
EXAMPLES = {'ACROBArT': ['reconstruction.py', '--method', 'acrobart'],
            'cross-document adjustment': ['cross_document_adjustment.py']}
DEFAULT = 1024  # PyTorch's capacity of each cache
MARK = 'KC '


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ('arena', 'ordblks', 'smblks', 'hblks', 'hblkhd', 'usmblks',
                                                     'fsmblks', 'uordblks', 'fordblks', 'keepcost')]


def child(script: str, args: list):
    """Runs an example in this process, printing the heap's account after each optimiser step."""
    libc = ctypes.CDLL('libc.so.6')
    libc.mallinfo2.restype = _MallInfo2
    from pyterrier_selfsup.progress import resident_gib
    from pyterrier_selfsup.training import loop
    step = loop.Trainer._step

    def recorded(self, *args, **kwargs):
        out = step(self, *args, **kwargs)
        info = libc.mallinfo2()
        print(MARK + json.dumps({'step': self.state['step'], 'in use MiB': round(info.uordblks / 2 ** 20),
                                 'kept free MiB': round(info.fordblks / 2 ** 20),
                                 'resident MiB': round(resident_gib() * 1024)}), flush=True)
        return out
    loop.Trainer._step = recorded
    sys.argv = [script, *args]
    runpy.run_path(script, run_name='__main__')


def adapted_ndcg(stdout: str) -> str:
    """The last row of the example's pt.Experiment table: the adapted model's nDCG@10."""
    rows = [line.split() for line in stdout.splitlines() if line.strip()[:1].isdigit() and 'nDCG' not in line]
    return rows[-1][-4] if rows else ''


def main():
    from pyterrier_selfsup._kernel_caches import KERNEL_CACHE_CAPACITY, VARIABLES
    from pyterrier_selfsup.harness import provenance
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / 'scripts'))
    from measured import run_measured
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.parse_args()
    header = provenance.header()
    runs = []
    with tempfile.TemporaryDirectory() as work:
        for name, (script, *args) in EXAMPLES.items():
            command = [sys.executable, __file__, '--child', str(ROOT / 'examples' / script), *args]
            for capacity in ('warm-up', DEFAULT, KERNEL_CACHE_CAPACITY):
                env = {**os.environ, **{v: str(DEFAULT if capacity == 'warm-up' else capacity) for v in VARIABLES}}
                with open(f'{work}/log', 'w+') as log:
                    run = run_measured(command, env=env, cwd=work, log=log)
                    log.seek(0)
                    said = log.read()
                if run.rc:
                    raise RuntimeError(f'{name} ({capacity}) failed:\n{said[-3000:]}')
                if capacity == 'warm-up':
                    continue
                steps = [json.loads(line[len(MARK):]) for line in said.splitlines() if line.startswith(MARK)]
                runs.append({'example': name, 'capacity': capacity, 'peak GiB': run.peak_gib,
                             'seconds': round(run.seconds), 'nDCG@10': adapted_ndcg(said), 'steps': steps})
                print({k: v for k, v in runs[-1].items() if k != 'steps'}, flush=True)
    (RESULTS / 'kernel_caches.json').write_text(json.dumps({'header': header, 'runs': runs}, indent=1))
    md = ['# PyTorch\'s CPU kernel caches through a training run (ADI)', '',
          *(f'- {k}: {v}' for k, v in header.items()),
          f'- capacity: the kernels each cache keeps (oneDNN\'s primitive cache and ideep\'s, set by '
          f'{" and ".join(VARIABLES)}): {DEFAULT} is PyTorch\'s default, {KERNEL_CACHE_CAPACITY} the package\'s',
          '- each run the example at its defaults, a process of its own, in a warm cache; in use / kept free: '
          'glibc\'s heap (mallinfo2) after the optimiser step', '',
          '| example | capacity | peak memory (GiB) | seconds | adapted nDCG@10 | heap in use after step 1 → last (MiB) '
          '| kept free after the last step (MiB) |',
          '|---|---|---|---|---|---|---|',
          *(f'| {r["example"]} | {r["capacity"]} | {r["peak GiB"]:.2f} | {r["seconds"]} | {r["nDCG@10"]} | '
            f'{r["steps"][0]["in use MiB"]} → {r["steps"][-1]["in use MiB"]} ({len(r["steps"])} steps) | '
            f'{r["steps"][-1]["kept free MiB"]} |' for r in runs), '',
          'Heap in use after each step (MiB):', '',
          *(f'- {r["example"]}, {r["capacity"]}: ' + ' '.join(str(s['in use MiB']) for s in r['steps']) for r in runs),
          '']
    (RESULTS / 'kernel_caches.md').write_text('\n'.join(md))
    print('\n'.join(md))


if __name__ == '__main__':
    if sys.argv[1:2] == ['--child']:
        child(sys.argv[2], sys.argv[3:])
    else:
        main()
