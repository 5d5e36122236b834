"""What holds the training examples' memory on ADI, and what each lever does (issue 32, item 1).

    python experiments/probes/memory_probe.py

runs each training example at its defaults on ADI (500 corpus sentences asked for: ADI has
235), each run a process of its own, and records its peak resident memory (the child's own
ru_maxrss), with a trainer setting changed where the row says so (the child sets it on every
trainer the example makes):
- ``checkpointing=False``: as the trainers were before issue 32, every layer's activations kept
  for the backward pass; else on (the default of every trainer here but cross-document
  adjustment's, which this probe turned off): each layer recomputed there, the RNG state kept,
  and for ACROBArT the generator's layers too (the attention bias set again for the recompute);
- the batches RUMBArt's and ACROBArT's examples took before (16 queries at once; 4 for ACROBArT)
  against those they take now (4 at a time for RUMBArt, 2 for ACROBArT, accumulated into the
  same 16 queries a step; RUMBArt without checkpointing on 100 of the sentences, 7.64 GiB, is in
  the git history of memory_probe.md, the run before this one);
- ``MALLOC_ARENA_MAX=1``: one arena for every thread, whether the memory kept is spread over the
  threads' arenas;
- ``MALLOC_MMAP_THRESHOLD_=131072``: glibc serves every allocation of 128 KiB or more from a
  mapping of its own and unmaps it when freed (by default the threshold rises after each large
  free, and freed blocks below it stay in the heap): whether a peak that creeps up across steps
  is memory glibc keeps rather than tensors that live (an explanation, not a fix).
- cross-document adjustment's documents scored 16 at a time rather than 64 (``head_scores``'
  chunk): the same scores, their gradient summed in another order; does it hold less?
Where a row's only change is checkpointing, the final weights are compared with its pair's.
Writes experiments/results/memory_probe.{md,json}; ``--rows 3 11`` runs those rows only and
keeps the others' results from the JSON (each row then has its own date and code).
"""
import json
import os
import sys
import tempfile
from pathlib import Path

from pyterrier_selfsup.harness import provenance

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / 'scripts'))
from measured import run_measured  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / 'experiments' / 'results'

# an example run with KEY=VALUE set on every trainer it makes (values read as Python literals)
CHILD = '''
import ast, runpy, sys
from pyterrier_selfsup.training.loop import Trainer
changes = dict(arg.split('=', 1) for arg in sys.argv[1].split(',') if arg)
changes = {k: ast.literal_eval(v) for k, v in changes.items()}
if 'reatt_chunk' in changes:  # ReAtt's documents scored this many at a time (head_scores' chunk)
    from pyterrier_selfsup.models.reatt import ReAttModel
    ReAttModel.head_scores.__defaults__ = (changes.pop('reatt_chunk'),)
made = Trainer.__init__
def changed(self, *args, **kwargs):
    made(self, *args, **{**kwargs, **changes})
Trainer.__init__ = changed
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name='__main__')
'''

RUNS = [  # (name, example and its arguments, trainer changes, environment, the run whose weights it should equal)
    ('distant supervision, checkpointing off', ['distant_supervision.py'], 'checkpointing=False', None, None),
    ('distant supervision (the example now)', ['distant_supervision.py'], '', None, 0),
    ('RUMBArt, batches of 16 (the example before, checkpointing on)', ['reconstruction.py'],
     'batch_size=16,accumulation=1', None, None),
    ('RUMBArt, 4 queries at a time, 4 a step (the example now)', ['reconstruction.py'], '', None, None),
    ('ACROBArT, 4 queries at a time, checkpointing off (the example before)', ['reconstruction.py', '--method',
     'acrobart'], 'batch_size=4,accumulation=4,checkpointing=False', None, None),
    ('ACROBArT, 4 queries at a time (the example now)', ['reconstruction.py', '--method', 'acrobart'],
     'batch_size=4,accumulation=4', None, 4),
    ('ACROBArT, 4 queries at a time, MALLOC_MMAP_THRESHOLD_=131072', ['reconstruction.py', '--method', 'acrobart'],
     'batch_size=4,accumulation=4', {'MALLOC_MMAP_THRESHOLD_': '131072'}, 4),
    ('ACROBArT, 2 queries at a time, 8 a step', ['reconstruction.py', '--method', 'acrobart'],
     'batch_size=2,accumulation=8', None, None),
    ('cross-document adjustment, checkpointing off (the example now)', ['cross_document_adjustment.py'],
     'checkpointing=False', None, None),
    ('cross-document adjustment, checkpointing on', ['cross_document_adjustment.py'], 'checkpointing=True', None, 8),
    ('cross-document adjustment, documents scored 16 at a time', ['cross_document_adjustment.py'],
     'reatt_chunk=16', None, None),
    ('cross-document adjustment, MALLOC_MMAP_THRESHOLD_=131072', ['cross_document_adjustment.py'],
     'checkpointing=False', {'MALLOC_MMAP_THRESHOLD_': '131072'}, 8),
    # one malloc arena for all threads: whether the kept memory is spread over per-thread arenas
    # (torch's OpenMP threads allocate too) rather than the heap's fragments (an explanation, as above)
    ('ACROBArT, 4 queries at a time, MALLOC_ARENA_MAX=1', ['reconstruction.py', '--method', 'acrobart'],
     'batch_size=4,accumulation=4', {'MALLOC_ARENA_MAX': '1'}, 5),
    ('cross-document adjustment, MALLOC_ARENA_MAX=1', ['cross_document_adjustment.py'],
     'checkpointing=False', {'MALLOC_ARENA_MAX': '1'}, 8),
]


def peak(command, env=None, cwd=None):
    """(peak resident GiB, seconds, output) of ``command`` run as a child (its own peak:
    scripts/measured.py)."""
    with tempfile.TemporaryFile('w+') as log:
        run = run_measured(command, env={**os.environ, **(env or {})}, cwd=cwd, log=log)
        log.seek(0)
        output = log.read()
    if run.rc:
        sys.exit(f'{command} failed:\n{output[-3000:]}')
    return run.peak_gib, run.seconds, output


def seconds_note(row: dict) -> str:
    load = row.get('load')
    if load:
        return f' (load {load.split()[0]})'
    return ' (beside other jobs)' if row.get('date') == '2026-11-26 06:44 UTC' else ''


def weights(directory: Path) -> dict:
    from safetensors.torch import load_file
    return {name: tensor for path in sorted(directory.rglob('*.safetensors')) for name, tensor in
            load_file(path).items()}


def main():
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument('--rows', nargs='+', type=int, help='run only these rows (0-based), keep the others')
    parser.add_argument('--md', action='store_true', help='only rewrite memory_probe.md from memory_probe.json')
    args = parser.parse_args()
    if args.md:
        kept = json.loads((RESULTS / 'memory_probe.json').read_text())
        return write_md(kept['header'], kept['settings'], kept['rows'], kept['header']['command'].split('--rows')[1:])
    header = provenance.header()
    kept = json.loads((RESULTS / 'memory_probe.json').read_text()) if args.rows else None
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for i, (name, example, changes, env, pair) in enumerate(RUNS):
            if args.rows and i not in args.rows:
                row = next(r for r in kept['rows'] if r['row'] == i)
                rows.append({**row, 'run': name})
                continue
            out = Path(work) / f'run{i}'
            command = [sys.executable, '-c', CHILD, changes, str(ROOT / 'examples' / example[0]), *example[1:],
                       '--output-dir', str(out)]
            load = provenance.load()
            gib, seconds, output = peak(command, env, cwd=work)
            adapted = [line for line in output.splitlines() if line.split()[1:2] and line.split()[1] in
                       ('MiniLM', 'ReAtt') and ('adapted' in line or '+' in line or 'adjusted' in line)]
            row = {'row': i, 'run': name, 'peak GiB': gib, 'seconds': seconds, 'date': header['date'],
                   'code': header['code'], 'load': load,
                   'nDCG@10': float(adapted[-1].split()[-4]) if adapted else None}
            if pair is not None and not (args.rows and pair not in args.rows):
                mine, theirs = weights(out / 'final'), weights(Path(work) / f'run{pair}' / 'final')
                row['largest weight difference'] = max((mine[k] - theirs[k]).abs().max().item() for k in mine)
                row['compared with'] = RUNS[pair][0]
            rows.append(row)
            print(row, flush=True)
    settings = {'collection': 'classic/adi (82 documents), each example at its defaults (500 corpus sentences '
                              'asked for, 235 there)',
                'models': 'MiniLM (trained; ReAtt over it for the adjustment), SmolLM2-135M-Instruct Q4_1 GGUF '
                          '(frozen teacher)'}
    (RESULTS / 'memory_probe.json').write_text(json.dumps({'header': header, 'settings': settings, 'rows': rows},
                                                          indent=1))
    write_md(header, settings, rows, [' '.join(map(str, args.rows))] if args.rows else [])


def write_md(header: dict, settings: dict, rows: list, rerun: list):
    md = ['# What holds the training examples\' memory on ADI', '',
          *(f'- {k}: {v}' for k, v in {**header, **settings}.items()),
          *(['- rows: each run\'s own date and code are in memory_probe.json (this file rewritten with '
             f'--rows {rerun[0].strip()})'] if rerun else []), '',
          '| run | peak resident memory (GiB) | seconds | adapted nDCG@10 | final weights |', '|---|---|---|---|---|',
          *(f'| {r["run"]} | {r["peak GiB"]:.2f} | {r["seconds"]:.0f}{seconds_note(r)} | {r["nDCG@10"]} | ' +
            (f'largest difference {r["largest weight difference"]:.3g} from "{r["compared with"]}"'
             if 'compared with' in r else '') + ' |' for r in rows), '',
          'Seconds are comparable only between rows run alone. A row shows the 1-minute load average as it began '
          'where it recorded one (on 2 cores, a load above 2 means other jobs); the rows of 2026-11-26 06:44 ran '
          'beside memory_scaling.py and memory_timeline.py before the load was recorded. Memory is each run\'s '
          'own either way.', '']
    (RESULTS / 'memory_probe.md').write_text('\n'.join(md))
    print('\n'.join(md))


if __name__ == '__main__':
    main()
