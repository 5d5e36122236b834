"""The generator scorer's memory and time against the size of its target chunks (LOGITS_BUDGET).

The pairs are those RUMBArt's teacher scores after an index refresh in
examples/reconstruction.py: ADI's 235 corpus sentences as queries, each with BM25's top 5
documents (1,174 pairs, 82 passages shared), SmolLM2-135M-Instruct (de-quantised from its
GGUF), 256 passage tokens, precision 'auto' and 'fp32'. Each budget runs in a process of its own (so
its peak resident memory is its own): the model loaded, then one
Generator.log_likelihoods call timed, with the process's peak memory before and after it.
'none' is the bound of 4 * batch_size targets alone (the behaviour before the budget).

    python experiments/benchmarks/generator_memory.py
writes experiments/results/generator_memory.{md,json} (about 10 minutes on 2 cores).
"""
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from pyterrier_selfsup.harness import provenance

RESULTS = Path(__file__).resolve().parents[1] / 'results'
# (precision, MiB of fp32 logits a chunk of targets may produce); fp32 shows what the chunking
# itself changes (nothing but float rounding), auto what bf16 products in other shapes change
RUNS = [('auto', 'none'), ('auto', '256'), ('auto', '64'), ('auto', '32'), ('auto', '16'), ('fp32', 'none'), ('fp32', '64')]


def child(precision: str, budget: str, out: str):
    import resource

    import pyterrier_selfsup as selfsup
    from pyterrier_selfsup.models import batched_scoring as generator
    generator.LOGITS_BUDGET = float('inf') if budget == 'none' else int(budget) * 2 ** 20
    adi = selfsup.Collection('classic/adi')
    pairs = selfsup.BM25.from_collection(adi, num_results=5)(selfsup.corpus_sentences(adi, 500)[['qid', 'query']])
    text = {d['docno']: d['text'] for d in adi.corpus_iter()}
    gen = selfsup.Generator.from_pretrained(selfsup.SMOLLM2, gguf_file=selfsup.SMOLLM2_GGUF, max_passage_length=256,
                                         precision=precision)
    gen.log_likelihoods(['warm up'], [text[pairs['docno'].iloc[0]]])
    def peak():  # GiB (ru_maxrss is KiB)
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    before, started = peak(), time.perf_counter()
    scores = gen.log_likelihoods(pairs['query'].tolist(), [text[d] for d in pairs['docno']])
    seconds = time.perf_counter() - started
    np.save(out, scores)
    print(json.dumps({'precision': precision, 'budget MiB': budget, 'pairs': len(pairs), 'passages': int(pairs['docno'].nunique()),
                      'seconds': round(seconds, 1), 'peak GiB before': round(before, 2),
                      'peak GiB after': round(peak(), 2), 'dtype': str(gen.model.dtype)}))


def main():
    header = provenance.header()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for precision, budget in RUNS:
            out = f'{work}/{precision}-{budget}.npy'
            proc = subprocess.run([sys.executable, __file__, '--child', precision, budget, out],
                                  capture_output=True, text=True)
            if proc.returncode:
                raise SystemExit(proc.stderr[-3000:])
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            rows[-1]['largest |difference| from none'] = float(np.abs(np.load(out) - np.load(f'{work}/{precision}-none.npy')).max())
            print(rows[-1], flush=True)
    settings = {'generator': 'SmolLM2-135M-Instruct (Q4_1 GGUF de-quantised), 256 passage tokens, batch_size 16',
                'pairs': f'classic/adi: {rows[0]["pairs"]} pairs = 235 corpus sentences x BM25 top 5 ({rows[0]["passages"]} passages)'}
    (RESULTS / 'generator_memory.json').write_text(json.dumps({'header': header, 'settings': settings, 'rows': rows},
                                                              indent=1))
    md = ['# Generator scoring: memory and time against the target chunks\' logits budget', '',
          *(f'- {k}: {v}' for k, v in {**header, **settings}.items()), '',
          '| precision | logits budget (MiB) | seconds | peak memory before / after scoring (GiB) | largest score difference from none |',
          '|---|---|---|---|---|',
          *(f'| {r["precision"]} | {r["budget MiB"]} | {r["seconds"]:.1f} | {r["peak GiB before"]:.2f} / {r["peak GiB after"]:.2f} '
            f'| {r["largest |difference| from none"]:.2g} |' for r in rows), '',
          'Scores are summed log-probabilities (nats) of a query of up to 64 tokens, compared with the',
          "budget 'none' at the same precision: 'auto' multiplies in bf16 where the CPU has it, and bf16",
          'products in batches of other shapes round differently.', '']
    (RESULTS / 'generator_memory.md').write_text('\n'.join(md))
    print('\n'.join(md))


if __name__ == '__main__':
    if sys.argv[1:2] == ['--child']:
        child(*sys.argv[2:5])
    else:
        main()
