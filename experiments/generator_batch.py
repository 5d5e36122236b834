"""ACROBArT's generator a few queries at a time (``Acrobart(generator_batch=...)``, issue 32):
the same step as the whole batch at once, for how much less memory?

One ACROBArT step at its shipped settings (all-MiniLM-L6-v2, SmolLM2-135M-Instruct at precision
``auto``, k 5, 16 queries: ADI's first 16 topics as query texts, no labels read), in a process of
its own for each ``generator_batch`` (the whole batch at once, and 4, the default): its loss,
β's gradient, a hash of every gradient of the retriever, its peak resident memory and its time.

    python experiments/generator_batch.py
writes experiments/results/generator_batch.md.
"""
import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / 'experiments' / 'results'
BATCHES = ['whole', '4']


def step(generator_batch: str, out: str):
    import numpy as np
    import torch

    import pyterrier_selfsup as selfsup
    from pyterrier_selfsup.models.generator import load_generator
    from pyterrier_selfsup.training.reconstruction import Acrobart
    collection = selfsup.Collection('classic/adi')
    encoder = selfsup.DualEncoder.from_pretrained(selfsup.MINILM)
    generator = load_generator('smollm2')
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Acrobart(encoder, generator, collection, batch_size=16, output_dir=tmp, verbose=False,
                           generator_batch=None if generator_batch == 'whole' else int(generator_batch))
        batch = trainer.examples(collection.topics().head(16))
        trainer.refresh(batch, initial=True)
        trainer.on_fit_start()
        trainer.train_mode(True)
        torch.manual_seed(0)  # (the encoder's dropout)
        start = time.perf_counter()
        loss = trainer.loss(batch, np.random.default_rng(0))
        loss.backward()
        seconds = time.perf_counter() - start
        trainer.on_fit_end()
    grads = hashlib.sha1()
    for name, p in sorted(encoder.model.named_parameters()):
        if p.grad is not None:
            grads.update(name.encode() + p.grad.detach().float().cpu().numpy().tobytes())
    Path(out).write_text(json.dumps({'loss': loss.item(), 'beta gradient': trainer.beta.grad.item(),
                                     'retriever gradients (sha1)': grads.hexdigest(), 'step seconds': seconds,
                                     'generator dtype': str(generator.compute_dtype()).replace('torch.', '')}))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--step', help=argparse.SUPPRESS)  # (a child: one step with this generator_batch)
    parser.add_argument('--out', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.step:
        return step(args.step, args.out)
    from pyterrier_selfsup.harness import provenance
    header, rows = provenance.header(), {}
    with tempfile.TemporaryDirectory() as tmp:
        for batch in BATCHES:
            out = f'{tmp}/{batch}.json'
            run = provenance.run_measured([sys.executable, __file__, '--step', batch, '--out', out])
            if run.rc:
                sys.exit(f'generator_batch {batch}: exit {run.rc}')
            rows[batch] = {**json.loads(Path(out).read_text()), 'peak GiB': run.peak_gib, 'seconds': run.seconds}
    same = {key: len({json.dumps(r[key]) for r in rows.values()}) == 1
            for key in ('loss', 'beta gradient', 'retriever gradients (sha1)')}
    lines = ['# ACROBArT\'s generator a few queries at a time', '', *(f'- {k}: {v}' for k, v in header.items()),
             '- command: python experiments/generator_batch.py', '- one ACROBArT step at its shipped settings '
             '(MiniLM, SmolLM2 at precision auto, k 5, 16 queries: ADI\'s first 16 topics), a process each', '',
             '| generator_batch | generator dtype | loss | β gradient | retriever gradients (sha1) | step (s) '
             '| process (s) | peak (GiB) |', '|---|---|---|---|---|---|---|---|']
    lines += [f'| {b} | {r["generator dtype"]} | {r["loss"]!r} | {r["beta gradient"]!r} | '
              f'{r["retriever gradients (sha1)"][:12]} | {r["step seconds"]:.1f} | {r["seconds"]:.0f} | '
              f'{r["peak GiB"]:.2f} |' for b, r in rows.items()]
    lines += ['', 'Equal across the rows, bit for bit: ' + ', '.join(f'{k}: {"yes" if v else "NO"}'
                                                                  for k, v in same.items()), '']
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / 'generator_batch.md').write_text('\n'.join(lines))
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
