"""One round of the shipped `distill` trainer on one process against two (gloo) (issue 17).

The `distill` pipeline's trainer at its shipped settings but one round, on scifact's
cached sampled queries, run by `fit` in one process (all the cores) and in two gloo
processes (the cores split between them): the teacher's ranking of the queries (split over
the processes), the optimiser steps (each process its share of each batch, gradients
all-reduced), and the whole fit. On 2 CPU cores two processes cannot be faster; what this
measures is what data parallelism costs on top of the work (all-reduce of 22.7M gradients
a step, gathering the rankings), and that the two runs agree (their per-step losses).

    python experiments/data_parallel.py [--collection beir/scifact/train]

Writes experiments/results/data_parallel.{md,json}.
"""
import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / 'results'
SETTINGS = {'rounds': 1}


def fit(collection_name: str, output_dir: str, out: str, rank: int = 0, world_size: int = 1, store: str = ''):
    import torch
    import torch.distributed as dist

    from pyterrier_selfsup.data.collections import Collection
    from pyterrier_selfsup.harness import trained
    if world_size > 1:
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // world_size))
        dist.init_process_group('gloo', init_method=f'file://{store}', rank=rank, world_size=world_size)
    try:
        collection = Collection(collection_name)
        settings = trained.training_settings('distill', SETTINGS)
        trainer, topics = trained.METHODS['distill'](collection, settings, output_dir=Path(output_dir))
        start = time.perf_counter()
        trainer.fit(topics)
        seconds = time.perf_counter() - start
        if rank == 0:
            steps = [r for r in trainer.log if 'loss' in r]
            Path(out).write_text(json.dumps({
                'processes': world_size, 'threads a process': torch.get_num_threads(), 'fit seconds': seconds,
                'teacher seconds': sum(r.get('teacher seconds', 0.0) for r in trainer.log),
                'steps': len(steps), 'step seconds': (steps[-1]['time'] - steps[0]['time']) / (len(steps) - 1),
                'losses': [r['loss'] for r in steps]}))
    finally:
        if world_size > 1:
            dist.destroy_process_group()


def _spawned(rank, collection_name, output_dir, out, store):
    fit(collection_name, output_dir, out, rank=rank, world_size=2, store=store)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--collection', default='beir/scifact/train')
    args = parser.parse_args(argv)
    import torch.multiprocessing as mp

    from pyterrier_selfsup.harness import provenance, trained
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        fit(args.collection, f'{tmp}/one', f'{tmp}/one.json')
        rows.append(json.loads(Path(f'{tmp}/one.json').read_text()))
        mp.spawn(_spawned, args=(args.collection, f'{tmp}/two', f'{tmp}/two.json', f'{tmp}/store'), nprocs=2)
        rows.append(json.loads(Path(f'{tmp}/two.json').read_text()))
    agree = float(np.max(np.abs(np.array(rows[0]['losses']) - np.array(rows[1]['losses']))))
    header = provenance.header()
    settings = trained.training_settings('distill', SETTINGS)
    lines = ['# Data-parallel distillation: one process against two (gloo)', '',
             *(f'- {k}: {v}' for k, v in header.items()),
             f'- model: {provenance.model_revision(trained.MINILM)}',
             f'- data: {args.collection}, the `distill` pipeline\'s cached sampled queries',
             f'- settings: {", ".join(f"{k}={v}" for k, v in settings.items())}',
             f'- per-step losses, one process against two: max |difference| {agree:.2e} (dropout: the masks '
             'differ with the split)', '',
             '| processes | threads a process | teacher ranking s | s / step | steps | fit s |',
             '|---|---|---|---|---|---|']
    lines += [f'| {r["processes"]} | {r["threads a process"]} | {r["teacher seconds"]:.1f} | '
              f'{r["step seconds"]:.2f} | {r["steps"]} | {r["fit seconds"]:.1f} |' for r in rows]
    lines += ['']
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / 'data_parallel.md').write_text('\n'.join(lines))
    (RESULTS / 'data_parallel.json').write_text(json.dumps({'header': header, 'rows': rows}, indent=1))
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
