"""A trainer on one process against two (gloo) (issue 17).

``--method distill``: the `distill` pipeline's trainer at its shipped settings but one
round, on scifact's cached sampled queries: the teacher's ranking of the queries (split
over the processes), the optimiser steps (each process its share of each batch,
gradients all-reduced), and the whole fit.

``--method rumbart``: the `rumbart` pipeline's trainer (MiniLM, both towers, SmolLM2 the
teacher, k=5, batch 16) on 96 sentences cut from the corpus, its index refreshed every
2 steps: the generator's scoring of every (query, candidate) pair into a score cache of
its own (the passages split over the processes), the steps, and the refreshes (the whole
corpus re-encoded, in shards).

Each is run by `fit` in one process (all the cores) and in two gloo processes (the cores
split between them). On 2 CPU cores two processes cannot be faster; what this measures is
what data parallelism costs on top of the work (all-reduce of 22.7M gradients a step,
gathering rankings, joining shards), and that the two runs agree (their per-step losses).

    python experiments/benchmarks/data_parallel.py [--method distill|rumbart] [--collection beir/scifact/train]

Writes experiments/results/data_parallel.{md,json} (distill) or
data_parallel_rumbart.{md,json}.
"""
import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parents[1] / 'results'
SETTINGS = {'distill': {'rounds': 1},
            'rumbart': {'queries': 'sentences', 'n_queries': 96, 'refresh_every': 2}}


def fit(method: str, collection_name: str, output_dir: str, out: str, rank: int = 0, world_size: int = 1,
        store: str = '', checkpointing=None, changes=None, scores=None):
    """One run of ``method``'s trainer; rank 0 writes its costs to ``out``. ``checkpointing``: the
    trainer's gradient checkpointing (None: its default); ``changes``: settings changed from
    :data:`SETTINGS`; ``scores``: RUMBArt's score cache (None: one of the run's own)."""
    import torch
    import torch.distributed as dist

    from pyterrier_selfsup.context import RunContext
    from pyterrier_selfsup.data.collections import Collection
    from pyterrier_selfsup.harness import trained
    from pyterrier_selfsup.harness.methods import METHODS
    if world_size > 1:
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // world_size))
        dist.init_process_group('gloo', init_method=f'file://{store}', rank=rank, world_size=world_size)
    try:
        collection = Collection(collection_name)
        settings = trained.training_settings(method, SETTINGS[method])
        typed = trained.typed_settings(method, settings)
        if checkpointing is not None:
            typed = typed.replace(gradient_checkpointing=checkpointing)
        if changes:
            typed = typed.replace(**changes)
        trainer, topics = METHODS[method](collection, typed, RunContext(output_dir=Path(output_dir)))
        if method == 'rumbart':  # a score cache of the run's own: every pair is scored in this run
            trainer._teacher = trainer.generator.scorer(normalise='sum',
                                                        cache=Path(scores or Path(output_dir) / 'scores'))
        start = time.perf_counter()
        trainer.fit(topics)
        seconds = time.perf_counter() - start
        if rank == 0:
            steps = [r for r in trainer.log if 'loss' in r]
            refreshes = [r['refresh seconds'] for r in trainer.log if 'refresh seconds' in r][1:]  # (not the start's)
            # between two steps' records: the step, and a refresh after every refresh_every-th
            gaps = np.diff([r['time'] for r in steps])
            plain = [g for g, r in zip(gaps, steps[1:]) if 'refresh_every' not in settings
                     or (r['step'] - 1) % settings['refresh_every']]
            row = {'processes': world_size, 'threads a process': torch.get_num_threads(),
                   'checkpointing': trainer.uses_gradient_checkpointing, 'fit seconds': seconds,
                   'teacher seconds': sum(r.get('teacher seconds', 0.0) for r in trainer.log),
                   'steps': len(steps), 'step seconds': float(np.mean(plain)),
                   'gaps seconds': [float(g) for g in gaps],
                   'teacher fills': [(r['step'], r['teacher seconds']) for r in trainer.log
                                     if 'teacher seconds' in r],
                   'staleness': [(r['step'], r['staleness']) for r in trainer.log if 'staleness' in r],
                   'losses': [r['loss'] for r in steps]}
            if method == 'rumbart':
                import sqlite3
                db = sqlite3.connect(Path(scores or Path(output_dir) / 'scores') / 'db.sqlite3')
                row.update({'refreshes': len(refreshes),
                            'refresh seconds': float(np.mean(refreshes)) if refreshes else None,
                            'pairs scored': db.execute('SELECT COUNT(*) FROM cache').fetchone()[0]})
            Path(out).write_text(json.dumps(row))
    finally:
        if world_size > 1:
            dist.destroy_process_group()


def _spawned(rank, method, collection_name, output_dir, out, store):
    fit(method, collection_name, output_dir, out, rank=rank, world_size=2, store=store)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--method', choices=sorted(SETTINGS), default='distill')
    parser.add_argument('--collection', default='beir/scifact/train')
    args = parser.parse_args(argv)
    import torch.multiprocessing as mp

    from pyterrier_selfsup.harness import provenance, trained
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        fit(args.method, args.collection, f'{tmp}/one', f'{tmp}/one.json')
        rows.append(json.loads(Path(f'{tmp}/one.json').read_text()))
        mp.spawn(_spawned, args=(args.method, args.collection, f'{tmp}/two', f'{tmp}/two.json', f'{tmp}/store'),
                 nprocs=2)
        rows.append(json.loads(Path(f'{tmp}/two.json').read_text()))
    differences = np.abs(np.array(rows[0]['losses']) - np.array(rows[1]['losses']))
    agree = float(differences.max())
    relative = float((differences / np.abs(np.array(rows[0]['losses']))).max())
    header = provenance.header()
    settings = trained.training_settings(args.method, SETTINGS[args.method])
    title = {'distill': 'distillation', 'rumbart': 'RUMBArt'}[args.method]
    data = {'distill': "the `distill` pipeline's cached sampled queries",
            'rumbart': f'{settings["n_queries"]} sentences cut from the corpus'}[args.method]
    lines = [f'# Data-parallel {title}: one process against two (gloo)', '',
             *(f'- {k}: {v}' for k, v in header.items()),
             f'- model: {provenance.model_revision(trained.MINILM)}',
             f'- data: {args.collection}, {data}',
             f'- settings: {", ".join(f"{k}={v}" for k, v in settings.items())}',
             f'- per-step losses, one process against two: max |difference| {agree:.2e}, {relative:.1%} of the loss '
             '(dropout: the masks differ with the split, and with them the candidates retrieved)',
             '- s / step: between two steps with no refresh between them', '']
    if args.method == 'rumbart':
        lines += ['| processes | threads a process | pairs scored | teacher s | pairs / s | s / step | refresh s '
                  '| steps | fit s |', '|---|---|---|---|---|---|---|---|---|']
        lines += [f'| {r["processes"]} | {r["threads a process"]} | {r["pairs scored"]} | {r["teacher seconds"]:.1f} '
                  f'| {r["pairs scored"] / r["teacher seconds"]:.2f} | {r["step seconds"]:.2f} | '
                  f'{r["refresh seconds"]:.1f} | {r["steps"]} | {r["fit seconds"]:.1f} |' for r in rows]
    else:
        lines += ['| processes | threads a process | teacher ranking s | s / step | steps | fit s |',
                  '|---|---|---|---|---|---|']
        lines += [f'| {r["processes"]} | {r["threads a process"]} | {r["teacher seconds"]:.1f} | '
                  f'{r["step seconds"]:.2f} | {r["steps"]} | {r["fit seconds"]:.1f} |' for r in rows]
    lines += ['']
    RESULTS.mkdir(exist_ok=True)
    name = 'data_parallel' if args.method == 'distill' else f'data_parallel_{args.method}'
    (RESULTS / f'{name}.md').write_text('\n'.join(lines))
    (RESULTS / f'{name}.json').write_text(json.dumps({'header': header, 'settings': settings, 'rows': rows},
                                                     indent=1))
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
