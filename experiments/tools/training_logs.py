"""Timings and losses read from the committed training logs (``results/*_curves/**/training_log.jsonl.gz``),
so that the figures `experiments/probes/research_log.md` quotes from them can be recomputed.

Per run: optimiser steps; the median time between consecutive steps (the log's timestamps:
encoder work plus whatever a step waited for, such as teacher scoring of newly retrieved
pairs; a refresh falls between two steps and is counted there); each refresh's seconds and
the teacher-scoring seconds logged with it; and, where logged, the mean excess loss over
the first and the last 25 steps; the β ACROBArT's first and last steps used; where logged
(runs since these were added), the mean share of the query's candidates a refresh left in
place (``stale overlap``: the current queries' top k from the stale index that the rebuilt
one also returns) and the null document's mean share of p(z|x) and of the posterior; for
ReAtt's cross-document adjustment, each iteration's seconds finding and teacher-scoring the
close documents (with their source), the mean loss and the mean share of P_retrieval on
the close documents (``close mass``) over the first and the last 25 steps; for distillation,
the share of a batch's queries on whose top candidate student and teacher agree (``top-1
agreement``), over the first and the last 25 steps.

    python experiments/tools/training_logs.py
writes experiments/results/training_logs.md.
"""
from pathlib import Path

import numpy as np

from pyterrier_selfsup.harness.experiment import read_training_log

RESULTS = Path(__file__).resolve().parents[1] / 'results'
WINDOW = 25


def summarise(log_file: Path) -> dict:
    records = read_training_log(log_file.parent)
    steps = [r for r in records if 'loss' in r]
    times = np.array([r['time'] for r in steps])
    excess = [r['excess loss'] for r in steps if 'excess loss' in r]
    refreshes = [r for r in records if 'refresh seconds' in r]
    beta = [r['beta'] for r in steps if 'beta' in r]
    overlap = [r['stale overlap'] for r in refreshes if 'stale overlap' in r]
    null = {name: [r[name] for r in steps if name in r] for name in ('null prior', 'null posterior')}
    close = [r for r in records if 'close documents' in r]
    mass = [r['close mass'] for r in steps if 'close mass' in r]
    losses = [r['loss'] for r in steps]
    agree = [r['top-1 agreement'] for r in steps if 'top-1 agreement' in r]
    return {
        'steps': len(steps),
        'median step s': float(np.median(np.diff(times))) if len(times) > 1 else float('nan'),
        # each refresh as seconds (step), or their number and total where there are many
        'refresh s (step)': (', '.join(f'{r["refresh seconds"]:.0f} ({r["step"]})' for r in refreshes)
                             if len(refreshes) <= 6 else
                             f'{len(refreshes)} refreshes, {sum(r["refresh seconds"] for r in refreshes):.0f} in all'),
        'teacher s': f'{sum(r["teacher seconds"] for r in records if "teacher seconds" in r):.0f}',
        f'excess loss, first / last {WINDOW} steps': (f'{np.mean(excess[:WINDOW]):.2f} / {np.mean(excess[-WINDOW:]):.2f}'
                                                      if excess else ''),
        # the β ACROBArT's first and last steps used (in logs written since it is logged)
        'β first / last': f'{beta[0]:.4f} / {beta[-1]:.4f}' if beta else '',
        'stale overlap, mean (min)': f'{np.mean(overlap):.3f} ({min(overlap):.3f})' if overlap else '',
        'null share of prior / posterior': (f'{np.mean(null["null prior"]):.3f} / {np.mean(null["null posterior"]):.3f}'
                                            if null['null prior'] else ''),
        f'loss, first / last {WINDOW} steps': f'{np.mean(losses[:WINDOW]):.3f} / {np.mean(losses[-WINDOW:]):.3f}',
        # distillation: the share of a batch's queries whose top candidate is the teacher's (runs since it is logged)
        f'top-1 agreement, first / last {WINDOW} steps': (f'{np.mean(agree[:WINDOW]):.3f} / {np.mean(agree[-WINDOW:]):.3f}'
                                                          if agree else ''),
        # cross-document adjustment: each iteration's close documents, and P_retrieval's mass on them
        'close documents s (source)': ', '.join(f'{r["retrieval seconds"]:.0f} ({r["close documents"]})'
                                                for r in close),
        f'close mass, first / last {WINDOW} steps': f'{np.mean(mass[:WINDOW]):.3f} / {np.mean(mass[-WINDOW:]):.3f}'
                                                    if mass else '',
    }


def main():
    lines = ['# Training logs', '', 'From `python experiments/tools/training_logs.py`; see its docstring for what each '
             'column is. Seconds are wall-clock on the machine named in the matching results file.', '']
    for curves in sorted(RESULTS.glob('*_curves')):
        rows = {str(log.parent.relative_to(curves)): summarise(log)  # runs of several corpora: corpus/run
                for log in sorted(curves.rglob('training_log.jsonl*'))}
        if not rows:
            continue
        columns = list(next(iter(rows.values())))
        lines += [f'## {curves.name}', '', '| run | ' + ' | '.join(columns) + ' |',
                  '|---|' + '---|' * len(columns)]
        for name, row in rows.items():
            cells = [f'{v:.1f}' if isinstance(v, float) else str(v) for v in row.values()]
            lines.append(f'| {name} | ' + ' | '.join(cells) + ' |')
        lines.append('')
    (RESULTS / 'training_logs.md').write_text('\n'.join(lines))
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
