"""Where RUMBArt's memory goes on ADI (issue 32, item 1): a first probe.

    python experiments/memory_probe.py

runs RUMBArt as examples/reconstruction.py does (MiniLM, SmolLM2 frozen, k=5, batches of 16) on
100 of ADI's corpus sentences, each run a process of its own, and records its peak resident
memory (the child's own ru_maxrss):
- without gradient checkpointing (``checkpointing=False``: as the trainer was before issue 32);
- the same with MALLOC_ARENA_MAX=2 (glibc's arenas: is it the allocator keeping freed memory?);
- with the passage tower frozen (train_passages=False: no passage is encoded with gradients);
- with batches of 4 queries, 4 of them accumulated into a step (a quarter of the activations at a time);
- as the example runs it now: the encoder's gradient checkpointing on (the trainer's default, the
  RNG state kept: each layer's activations recomputed in the backward pass), and whether its final
  weights equal those of the run without;
and, for the example, where the peak falls (experiments/peak_memory.py: the main thread's stack at
the highest sample). Writes experiments/results/memory_probe.{md,json}.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pyterrier_selfsup.harness import provenance

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / 'experiments' / 'results'
QUERIES = 100

# RUMBArt as examples/reconstruction.py builds it, with two settings open
CHILD = '''
import sys, torch
import pyterrier_selfsup as selfsup
train_passages, batch_size, accumulation = sys.argv[1] == 'True', int(sys.argv[2]), int(sys.argv[3])
checkpointing = sys.argv[5] == 'checkpointing'
collection = selfsup.Collection('classic/adi')
generator = selfsup.Generator.from_pretrained(selfsup.SMOLLM2, gguf_file=selfsup.SMOLLM2_GGUF, max_passage_length=256)
torch.manual_seed(0)
trainer = selfsup.Rumbart(selfsup.DualEncoder.from_pretrained(selfsup.MINILM), generator, collection, k=5,
                          batch_size=batch_size, accumulation=accumulation, train_passages=train_passages,
                          checkpointing=checkpointing, output_dir=sys.argv[4], verbose=False)
trainer.fit(selfsup.corpus_sentences(collection, {queries}))
'''.format(queries=QUERIES)


def peak(command, env=None, cwd=None):
    """(peak resident GiB, seconds, output) of ``command`` run as a child."""
    started = time.time()
    with tempfile.TemporaryFile('w+') as log:
        proc = subprocess.Popen(command, env={**os.environ, **(env or {})}, cwd=cwd, stdout=log,
                                stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        log.seek(0)
        output = log.read()
    if os.waitstatus_to_exitcode(status):
        sys.exit(f'{command} failed:\n{output[-3000:]}')
    return round(usage.ru_maxrss / 2**20, 2), round(time.time() - started, 1), output


def main():
    header = provenance.header()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        example = [sys.executable, str(ROOT / 'examples' / 'reconstruction.py'), '--queries', str(QUERIES),
                   '--output-dir']
        runs = [('without gradient checkpointing (k=5, batches of 16, passages trained)',
                 [sys.executable, '-c', CHILD, 'True', '16', '1', f'{work}/a', 'keep'], None),
                ('the same, MALLOC_ARENA_MAX=2',
                 [sys.executable, '-c', CHILD, 'True', '16', '1', f'{work}/b', 'keep'], {'MALLOC_ARENA_MAX': '2'}),
                ('passage tower frozen (train_passages=False)',
                 [sys.executable, '-c', CHILD, 'False', '16', '1', f'{work}/c', 'keep'], None),
                ('batches of 4, 4 accumulated a step, no checkpointing',
                 [sys.executable, '-c', CHILD, 'True', '4', '4', f'{work}/d', 'keep'], None),
                ('the example as it runs now (gradient checkpointing, batches of 16)', example + [f'{work}/f'], None)]
        for name, command, env in runs:
            gib, seconds, _ = peak(command, env, cwd=work)
            rows.append({'run': name, 'peak GiB': gib, 'seconds': seconds})
            print(rows[-1], flush=True)
        from safetensors.torch import load_file
        example_weights, checkpointed = (load_file(next(Path(f'{work}/{run}/final').rglob('*.safetensors')))
                                         for run in ('a', 'f'))
        difference = max((example_weights[k] - checkpointed[k]).abs().max().item() for k in example_weights)
        rows[-1]['largest weight difference from the run without checkpointing'] = difference
        _, _, located = peak([sys.executable, str(ROOT / 'experiments' / 'peak_memory.py')] + example[1:] +
                             [f'{work}/e'], cwd=work)
    where = located[located.rfind('PEAK MiB'):].strip()
    settings = {'collection': f'classic/adi, {QUERIES} corpus sentences (the example: --queries {QUERIES})',
                'models': 'MiniLM (trained), SmolLM2-135M-Instruct Q4_1 GGUF (frozen teacher)'}
    (RESULTS / 'memory_probe.json').write_text(json.dumps({'header': header, 'settings': settings, 'rows': rows,
                                                           'peak located': where}, indent=1))
    frames = re.sub(r'\n\s*\n', '\n', where)
    md = ['# Where RUMBArt\'s memory goes on ADI', '',
          *(f'- {k}: {v}' for k, v in {**header, **settings}.items()), '',
          '| run | peak resident memory (GiB) | seconds |', '|---|---|---|',
          *(f'| {r["run"]} | {r["peak GiB"]:.2f} | {r["seconds"]:.0f} |' for r in rows), '',
          f'The example\'s final weights (checkpointed) against those of the run without checkpointing: '
          f'largest difference {rows[-1]["largest weight difference from the run without checkpointing"]:.3g}.', '',
          'Where the example\'s peak falls (`experiments/peak_memory.py`):', '', '```', frames, '```', '']
    (RESULTS / 'memory_probe.md').write_text('\n'.join(md))
    print('\n'.join(md))


if __name__ == '__main__':
    main()
