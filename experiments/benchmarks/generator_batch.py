"""ACROBArT's generator a few queries at a time (``Acrobart(generator_batch=...)``, issue 32):
the same step as the whole batch at once, for how much less memory?

One ACROBArT step at its shipped settings (all-MiniLM-L6-v2, SmolLM2-135M-Instruct at precision
``auto``, k 5, 16 queries: ADI's first 16 topics as query texts, no labels read), in a process of
its own for each ``generator_batch`` (the whole batch at once, and 4, the default), taken by
``Acrobart.fit`` on those 16 queries: its loss, β and a hash of the retriever's weights after the
step, its peak resident memory and its time.

On a GPU (scripts/gpu/run.sh) each row also gives the GPU memory torch allocated at its peak;
there the two rows need not be equal bit for bit (CUDA may choose other kernels for 4 rows than
for 16), and the table says whether they are.

    python experiments/benchmarks/generator_batch.py [--results-dir DIR]
writes experiments/results/generator_batch.md (or DIR/generator_batch.md).
"""
import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / 'experiments' / 'results'
BATCHES = ['whole', '4']


def step(generator_batch: str, out: str):
    import torch

    import pyterrier_selfsup as selfsup
    from pyterrier_selfsup.models.generator import load_generator
    from pyterrier_selfsup.training.acrobart import Acrobart
    collection = selfsup.Collection('classic/adi')
    encoder = selfsup.DualEncoder.from_pretrained(selfsup.MINILM)
    generator = load_generator('smollm2')
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Acrobart(encoder, generator, collection, batch_size=16, output_dir=tmp, verbose=False,
                           generator_batch=None if generator_batch == 'whole' else int(generator_batch))
        torch.manual_seed(0)  # (the encoder's dropout masks, as `selfsup train` seeds them before `fit`)
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        trainer.fit(collection.topics().head(16))  # one step, as `fit` takes it (its index, checkpointing)
        seconds = time.perf_counter() - start
    weights = hashlib.sha1()
    for name, value in sorted(encoder.model.state_dict().items()):
        weights.update(name.encode() + value.detach().float().cpu().numpy().tobytes())
    Path(out).write_text(json.dumps({'loss': [r['loss'] for r in trainer.log if 'loss' in r][0],
                                     'beta after': trainer.beta.item(), 'retriever after (sha1)': weights.hexdigest(),
                                     'fit seconds': seconds, 'device': str(encoder.device),
                                     'GPU peak GiB': torch.cuda.max_memory_allocated() / 2 ** 30
                                     if torch.cuda.is_available() else None,
                                     'generator dtype': str(generator.compute_dtype()).replace('torch.', '')}))


def gib(value) -> str:
    return '' if value is None else f'{value:.2f}'


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--step', help=argparse.SUPPRESS)  # (a child: one step with this generator_batch)
    parser.add_argument('--out', help=argparse.SUPPRESS)
    parser.add_argument('--results-dir', type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.step:
        return step(args.step, args.out)
    from pyterrier_selfsup.harness import provenance
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / 'scripts'))
    from measured import run_measured
    header, rows = provenance.header(), {}
    with tempfile.TemporaryDirectory() as tmp:
        for batch in BATCHES:
            out = f'{tmp}/{batch}.json'
            run = run_measured([sys.executable, __file__, '--step', batch, '--out', out])
            if run.rc:
                sys.exit(f'generator_batch {batch}: exit {run.rc}')
            rows[batch] = {**json.loads(Path(out).read_text()), 'peak GiB': run.peak_gib, 'seconds': run.seconds}
    same = {key: len({json.dumps(r[key]) for r in rows.values()}) == 1
            for key in ('loss', 'beta after', 'retriever after (sha1)')}
    lines = ['# ACROBArT\'s generator a few queries at a time', '', *(f'- {k}: {v}' for k, v in header.items()),
             '- command: python experiments/benchmarks/generator_batch.py', '- one ACROBArT step at its shipped settings '
             '(MiniLM, SmolLM2 at precision auto, k 5, 16 queries: ADI\'s first 16 topics), a process each: '
             '`Acrobart.fit` on those 16 (its index built, gradient checkpointing on, one optimiser step)', '',
             '| generator_batch | device | generator dtype | loss | β after | retriever after (sha1) | fit (s) '
             '| process (s) | peak (GiB) | GPU peak (GiB) |', '|---|---|---|---|---|---|---|---|---|---|']
    lines += [f'| {b} | {r.get("device", "cpu")} | {r["generator dtype"]} | {r["loss"]!r} | {r["beta after"]!r} | '
              f'{r["retriever after (sha1)"][:12]} | {r["fit seconds"]:.1f} | {r["seconds"]:.0f} | '
              f'{r["peak GiB"]:.2f} | {gib(r.get("GPU peak GiB"))} |'
              for b, r in rows.items()]
    lines += ['', 'Equal across the rows, bit for bit: ' + ', '.join(f'{k}: {"yes" if v else "NO"}'
                                                                  for k, v in same.items()), '']
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / 'generator_batch.md').write_text('\n'.join(lines))
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
