"""RUMBArt's steps with its index refreshed synchronously, asynchronously, and never (issue 49).

The `rumbart` trainer of `data_parallel.py` (MiniLM, both towers, SmolLM2 the teacher, k=5,
batch 16, sentences cut from the corpus), its index refreshed every 2 steps, run three times in
one process, in this order:

- never: ``refresh_every=None`` (the index of the start encoder throughout);
- sync: the shipped ``refresh='sync'`` (training waits while the corpus is re-encoded);
- async: ``refresh='async'`` (a thread re-encodes a copy of the weights while training goes on;
  the new index is swapped in after the first step that finds it ready).

The three share one score cache, so the teacher scores a (query, passage) pair once over all
three runs. After each swap of the index RUMBArt's teacher scores the new candidates on the
main thread in either mode; that time is logged apart (``teacher seconds``) and taken out of the
step rate, which is (the time between the first step and the last, less the teacher's fills in
between) / the steps between them.

On a CPU the background thread shares the cores with training, so an asynchronous refresh can
only hide the time the training thread leaves a core idle; on a GPU it can hide most of it.

    python experiments/benchmarks/async_refresh.py [--collection cranfield] [--n-queries 160] [--tag cpu]

Writes experiments/results/async_refresh[_<tag>].{md,json}.
"""
import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import data_parallel  # noqa: E402  (its `fit` runs the trainer and reads its log)

RESULTS = Path(__file__).resolve().parents[1] / 'results'
MODES = {'never': {'refresh_every': None}, 'sync': {'refresh': 'sync'},
         'async': {'refresh': 'async'}}


def steps_rate(row: dict) -> float:
    """Steps a second between the first step and the last, the teacher's fills left out."""
    fills = sum(seconds for step, seconds in row['teacher fills'] if step > 0)
    return len(row['gaps seconds']) / (sum(row['gaps seconds']) - fills)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--collection', default='cranfield')
    parser.add_argument('--n-queries', type=int, default=160)
    parser.add_argument('--tag', default='')
    parser.add_argument('--results-dir', type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    import torch

    from pyterrier_selfsup.harness import provenance
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode, changes in MODES.items():
            out = Path(tmp) / f'{mode}.json'
            data_parallel.fit('rumbart', args.collection, f'{tmp}/{mode}', str(out),
                              changes={'n_queries': args.n_queries, **changes},
                              scores=f'{tmp}/scores')
            rows[mode] = json.loads(out.read_text())
            rows[mode]['steps / s (teacher fills left out)'] = steps_rate(rows[mode])
            print(mode, rows[mode]['steps / s (teacher fills left out)'], flush=True)
    never = rows['never']['steps / s (teacher fills left out)']
    header = provenance.header()
    lines = ['# RUMBArt with its index refreshed synchronously, asynchronously, and never', '',
             *(f'- {k}: {v}' for k, v in header.items()),
             f'- data: {args.collection}, {args.n_queries} sentences cut from the corpus '
             f'(data_parallel.py\'s rumbart settings otherwise: MiniLM, both towers, SmolLM2, '
             f'k=5, batch 16, refresh every 2 steps)',
             f'- device: {"cuda" if torch.cuda.is_available() else "cpu"}, torch threads '
             f'{torch.get_num_threads()}', '',
             '| refresh | steps | steps / s (teacher fills left out) | against never | '
             'refresh seconds (mean, each) | staleness (step of swap, steps) | fit seconds |',
             '|---|---|---|---|---|---|---|']
    for mode, row in rows.items():
        rate = row['steps / s (teacher fills left out)']
        refresh = row.get('refresh seconds')
        lines.append(f'| {mode} | {row["steps"]} | {rate:.3f} | {rate / never:.2f} | '
                     f'{"—" if refresh is None else format(refresh, ".1f")} | '
                     f'{row["staleness"] or "—"} | {row["fit seconds"]:.0f} |')
    lines += ['', 'The teacher scores each new candidate pair once over the three runs (one score '
              'cache), so its fills are left out of the rate.', '']
    args.results_dir.mkdir(parents=True, exist_ok=True)
    stem = '_'.join(['async_refresh'] + ([args.tag] if args.tag else []))
    (args.results_dir / f'{stem}.json').write_text(json.dumps({'header': header, 'rows': rows},
                                                              indent=1))
    (args.results_dir / f'{stem}.md').write_text('\n'.join(lines))
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
