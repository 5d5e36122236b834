"""Trains each method on ADI through the harness, small, and records a digest of its final weights.

A refactoring that must not change what the trainers compute is checked with it: run it before
the change (``--save``), then after (``--check``), on the same machine. The digests depend on the
machine's CPU kernels, so a committed table is a record of one machine, not a test.

    python experiments/tools/trainer_fingerprints.py --save       # writes experiments/results/trainer_fingerprints.{md,json}
    python experiments/tools/trainer_fingerprints.py --check      # exits 1 unless every digest equals the committed one
    python experiments/tools/trainer_fingerprints.py --only ds    # the runs whose label starts with ds

Each run trains in an empty cache of its own, so nothing is reused between runs or sessions.
"""
import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / 'experiments' / 'results' / 'trainer_fingerprints'

# (label, method, settings): small enough to train in a minute or two each on 2 cores
RUNS = [
    ('ds', 'ds', dict(n_queries=64, batch_size=16)),
    ('ds bm25 negatives', 'ds', dict(n_queries=64, batch_size=16, negatives='bm25')),
    ('distill', 'distill', dict(queries='sentences', n_queries=96, rounds=2)),
    ('distill sampled', 'distill', dict(n_queries=48, rounds=2)),
    ('distill margin_mse', 'distill', dict(queries='sentences', n_queries=96, rounds=2, loss='margin_mse',
                                           passage_offsets=None)),
    ('distill both towers', 'distill', dict(queries='sentences', n_queries=96, rounds=2, train_passages=True,
                                            passage_offsets=None)),
    ('distill filtered', 'distill', dict(n_queries=48, rounds=2, filter_depth=10, verdict_share=0.0)),
    ('rumbart', 'rumbart', dict(n_queries=32, batch_size=8, refresh_every=2)),
    ('acrobart', 'acrobart', dict(n_queries=16, batch_size=4, k=3, refresh_every=2)),
    ('reatt', 'reatt', dict(n_queries=32, epochs=2, k=4)),
]


def tensors(value, prefix=''):
    """Every tensor in a nested dict or list, by a path name, in a stable order."""
    if isinstance(value, torch.Tensor):
        yield prefix, value
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            yield from tensors(value[key], f'{prefix}/{key}')
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from tensors(item, f'{prefix}/{i}')


def weights_digest(final: Path) -> str:
    """A digest of every tensor saved under ``final`` (safetensors and torch files), by name."""
    from safetensors.torch import load_file
    digest = hashlib.sha1()
    for path in sorted(final.rglob('*')):
        if path.suffix == '.safetensors':
            saved = load_file(path)
        elif path.suffix in ('.pt', '.bin') and path.name != 'trainer_state.pt':
            saved = torch.load(path, map_location='cpu', weights_only=False)
        else:
            continue
        for name, tensor in tensors(saved, str(path.relative_to(final))):
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--save', action='store_true', help='write the digests as the committed reference')
    parser.add_argument('--check', action='store_true', help='compare with the committed reference')
    parser.add_argument('--only', nargs='*', default=None, help='the runs whose label starts with one of these')
    args = parser.parse_args()

    from pyterrier_selfsup import Collection, RunContext
    from pyterrier_selfsup.harness import provenance, trained
    adi = Collection('classic/adi')
    reference = json.loads((RESULTS.with_suffix('.json')).read_text()) if RESULTS.with_suffix('.json').exists() \
        else {'digests': {}}
    digests, seconds, differ = {}, {}, []
    for label, method, settings in RUNS:
        if args.only and not any(label.startswith(o) for o in args.only):
            continue
        with tempfile.TemporaryDirectory() as cache:
            started = time.time()
            final = trained.train(adi, method, settings, run=RunContext(cache_dir=cache))
            digests[label], seconds[label] = weights_digest(final), round(time.time() - started, 1)
        known = reference['digests'].get(label)
        same = '' if known is None else ('same' if known == digests[label] else 'DIFFERENT')
        if same == 'DIFFERENT':
            differ.append(label)
        print(f'{label:24s} {digests[label]}  {seconds[label]:7.1f} s  {same}', flush=True)
    if args.save:
        header = provenance.header('python experiments/tools/trainer_fingerprints.py --save')
        record = {'header': header, 'runs': {label: {'method': m, 'settings': s} for label, m, s in RUNS},
                  'digests': {**reference['digests'], **digests}, 'seconds': {**reference.get('seconds', {}),
                                                                                **seconds}}
        RESULTS.with_suffix('.json').write_text(json.dumps(record, indent=1) + '\n')
        lines = ['# The trainers\' final weights on ADI, as digests', '']
        lines += [f'- {k}: {v}' for k, v in header.items()]
        lines += ['', 'Each run trains through the harness (`trained.train`) in an empty cache. A digest '
                  'covers every tensor of the final model; it depends on the CPU\'s kernels.', '',
                  '| run | method | settings | digest | seconds |', '|---|---|---|---|---|']
        for label, method, settings in RUNS:
            if label in record['digests']:
                shown = ', '.join(f'{k}={v}' for k, v in settings.items())
                lines.append(f'| {label} | {method} | {shown} | `{record["digests"][label]}` | '
                             f'{record["seconds"].get(label, "")} |')
        RESULTS.with_suffix('.md').write_text('\n'.join(lines) + '\n')
        print(f'wrote {RESULTS}.md and .json')
    if args.check and differ:
        print(f'different weights: {", ".join(differ)}', file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
