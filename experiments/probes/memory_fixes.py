"""Three memory fixes checked on ADI, each against the code path it replaced, a process a side
(issue 32): the same output, bit for bit, and the peak resident memory of each.

- ``score``: the teacher's scoring (``Generator.log_likelihoods``, SmolLM2) of 560 pairs (each
  ADI topic with 16 documents drawn with seed 0), its targets reading their prefixes through a
  ``PrefixCache`` (``new``) or a ``DynamicCache`` built from copies of them (``old``);
- ``write``: the distillation example's queries (``sampled_queries`` at the shipped settings),
  the writer's new-token buffers grown ``NEW_TOKENS_RESERVED`` (8) positions at a time
  (``new``) or reserved for the longest query at once (``old``);
- ``hold``: both of the above in one process, the frozen generator's matrices held in the dtype
  its products run in and its other weights copied out of the checkpoint's mapping
  (``generator.matrices_in_compute_dtype``, ``new``) or all of it held as loaded (``old``): fp32,
  views of the mapped checkpoint. ``weights``: the bytes of the generator's weights.

    python experiments/probes/memory_fixes.py
writes experiments/results/memory_fixes.{md,json}.
"""
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pyterrier_selfsup.harness import provenance

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / 'scripts'))
from measured import run_measured  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / 'experiments' / 'results'
CHECKS = {'score': 'the teacher scoring 560 ADI pairs (SmolLM2)',
          'write': "SmolLM2 writing the distillation example's ADI queries",
          'hold': 'both, in one process'}
SIDES = {'score': {'old': 'DynamicCache of copied prefixes', 'new': 'PrefixCache'},
         'write': {'old': 'room for 32 new tokens at once', 'new': 'room grown 8 tokens at a time'},
         'hold': {'old': 'weights as loaded (fp32, mapped)', 'new': 'matrices in bf16, the rest copied'}}


def child(check: str, side: str, out: str):
    """One side of one check, in this process: its output saved to ``out`` (.json; floats written
    exactly, so that the comparison is bit for bit)."""
    import numpy as np

    import pyterrier_selfsup as selfsup
    from pyterrier_selfsup.models import generator as G
    from pyterrier_selfsup.models import writing as W
    collection = selfsup.Collection('classic/adi')
    if check == 'hold' and side == 'old':
        G.matrices_in_compute_dtype = lambda model, dtype: 0
    gen = selfsup.Generator.from_pretrained(selfsup.SMOLLM2, gguf_file=selfsup.SMOLLM2_GGUF)
    weights = sum(t.nbytes for t in [*gen.model.parameters(), *gen.model.buffers()])  # (a tied weight once)
    started = time.time()
    outputs = {}
    if check in ('score', 'hold'):
        if check == 'score' and side == 'old':
            G.Generator._prefix_cache_fits = property(lambda self: False)
        docs = list(collection.corpus_iter())
        rng = np.random.default_rng(0)
        pairs = [(q, docs[j]['text']) for q in collection.topics()['query']
                 for j in rng.choice(len(docs), 16, replace=False)]
        outputs['scores'] = gen.log_likelihoods([q for q, _ in pairs], [p for _, p in pairs]).tolist()
    if check in ('write', 'hold'):
        if check == 'write' and side == 'old':
            W.NEW_TOKENS_RESERVED = 10 ** 9  # (capped at max_new_tokens: all of it at once)
        frame = selfsup.sampled_queries(collection, gen, selfsup.DistillationSettings().n_queries)
        outputs['queries'] = frame.to_dict('records')
    Path(out).write_text(json.dumps(outputs))
    print(json.dumps({'seconds': round(time.time() - started, 1),
                      'items': sum(len(v) for v in outputs.values()), 'weights GiB': round(weights / 2 ** 30, 2)}))


def same(a: str, b: str) -> bool:
    return json.loads(Path(a).read_text()) == json.loads(Path(b).read_text())


def main():
    header = provenance.header()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        env = {**os.environ, 'SELFSUP_CACHE': f'{work}/cache'}
        # SmolLM2's GGUF converted before any side runs (wait4 would report the conversion's peak where larger)
        subprocess.run([sys.executable, '-c', 'import pyterrier_selfsup as s; '
                        's.Generator.from_pretrained(s.SMOLLM2, gguf_file=s.SMOLLM2_GGUF)'], env=env, check=True,
                       stdout=subprocess.DEVNULL)  # (its errors on stderr)
        for check in CHECKS:
            outs = {}
            for side in ('old', 'new'):
                outs[side] = f'{work}/{check}-{side}.json'
                with open(f'{work}/{check}-{side}.log', 'w+') as log:
                    run = run_measured([sys.executable, __file__, '--child', check, side, outs[side]],
                                                  env=env, log=log)
                    log.seek(0)
                    said = log.read()
                if run.rc:
                    raise RuntimeError(f'{check} {side} failed:\n{said[-3000:]}')
                # (seconds: the scoring or the writing alone, without loading the model)
                done = json.loads([line for line in said.splitlines() if line.startswith('{')][-1])
                rows.append({'check': check, 'side': side, 'path': SIDES[check][side], **done,
                             'peak GiB': run.peak_gib})
                print(rows[-1], flush=True)
            rows[-1]['same output as old'] = same(outs['old'], outs['new'])
    (RESULTS / 'memory_fixes.json').write_text(json.dumps({'header': header, 'rows': rows}, indent=1))
    md = ['# Three memory fixes against the paths they replaced (ADI)', '',
          *(f'- {k}: {v}' for k, v in header.items()),
          '- each side a process of its own (its own peak resident memory: scripts/measured.py), in a cache of '
          'the run\'s own where SmolLM2\'s GGUF was converted first; seconds: the scoring or the writing alone, '
          'without loading the model; weights: the bytes of SmolLM2\'s weights, as held', '',
          '| check | path | items | seconds | weights (GiB) | peak memory (GiB) | output the same as the old path\'s |',
          '|---|---|---|---|---|---|---|',
          *(f'| {CHECKS[r["check"]]} | {r["side"]}: {r["path"]} | {r["items"]} | {r["seconds"]} | '
            f'{r["weights GiB"]:.2f} | {r["peak GiB"]:.2f} | {"" if "same output as old" not in r else ("yes, bit for bit" if r["same output as old"] else "NO")} |'
            for r in rows), '']
    (RESULTS / 'memory_fixes.md').write_text('\n'.join(md))
    print('\n'.join(md))


if __name__ == '__main__':
    if sys.argv[1:2] == ['--child']:
        child(*sys.argv[2:5])
    else:
        main()
