"""Generator scoring throughput: ours against the plain one-pair-per-forward loop.

The pairs are what a re-ranker sees in ``pt.Experiment``: the first N beir/scifact test
queries, each with BM25's top k documents (title + text, 256 passage tokens), all
passed at once. Every method runs in this one process on the same pairs with the same
model (SmolLM2-135M-Instruct, de-quantised from its GGUF to fp32 weights):

- plain loop:         for each pair, prompt + query as one sequence, one forward, the
                      full logits, log-softmax, gather (fp32)
- ours, fp32:         Generator.log_likelihoods: pairs grouped by passage, each passage's
                      prompt encoded once into a key/value cache shared by all its targets,
                      length-sorted batches, output layer only on target positions
- ours, auto:         the same with precision 'auto' (bf16 autocast on this CPU)

    python experiments/generator_benchmark.py [--queries 40] [--depth 20]
writes experiments/results/generator_benchmark.{md,json}.
"""
import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

from pyterrier_selfsup import BM25, Collection, provenance
from pyterrier_selfsup.generator import SMOLLM2, SMOLLM2_GGUF, Generator

RESULTS = Path(__file__).parent / 'results'


def plain_loop(gen: Generator, targets, passages) -> np.ndarray:
    out = []
    with torch.inference_mode():
        for target, passage in zip(targets, passages):
            prefix, tokens = gen.passage_ids([passage])[0], gen.target_ids([target])[0]
            logits = gen.model(torch.tensor([prefix + tokens])).logits[0]
            logp = torch.log_softmax(logits.float(), dim=-1)
            out.append(sum(logp[len(prefix) - 1 + j, t].item() for j, t in enumerate(tokens)))
    return np.array(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--queries', type=int, default=40)
    parser.add_argument('--depth', type=int, default=20)
    parser.add_argument('--output', default='generator_benchmark')
    args = parser.parse_args()

    collection = Collection('beir/scifact/test')
    topics = collection.topics().head(args.queries)
    pairs = (BM25.from_collection(collection, num_results=args.depth) >> collection.text_loader())(topics)
    targets, passages = pairs['query'].tolist(), pairs['text'].tolist()

    gen = Generator.from_pretrained(SMOLLM2, gguf_file=SMOLLM2_GGUF, precision='fp32', device='cpu')
    prefix_tokens = [len(x) for x in gen.passage_ids(passages)]
    target_tokens = [len(x) for x in gen.target_ids(targets)]

    runs, scores = {}, {}
    t0 = time.perf_counter()
    scores['plain'] = plain_loop(gen, targets, passages)
    runs['plain loop, one pair per forward'] = ('fp32', time.perf_counter() - t0)
    t0 = time.perf_counter()
    scores['fp32'] = gen.log_likelihoods(targets, passages)
    runs['ours: grouped by passage, prefix cache, fp32'] = ('fp32', time.perf_counter() - t0)
    auto = Generator.from_pretrained(SMOLLM2, gguf_file=SMOLLM2_GGUF, precision='auto', device='cpu')
    dtype = str(auto.compute_dtype()).split('.')[1]
    t0 = time.perf_counter()
    scores['auto'] = auto.log_likelihoods(targets, passages)
    runs[f'ours: the same, precision auto ({dtype})'] = (dtype, time.perf_counter() - t0)

    plain_rate = len(pairs) / runs['plain loop, one pair per forward'][1]
    rows = [{'method': name, 'dtype': dtype, 'seconds': s, 'pairs_per_s': len(pairs) / s,
             'speedup': len(pairs) / s / plain_rate} for name, (dtype, s) in runs.items()]
    per_query = pairs.assign(auto=scores['auto'], plain=scores['plain']).groupby('qid')
    quality = {
        'ours fp32 vs plain loop, max |diff| (nats)': float(np.abs(scores['fp32'] - scores['plain']).max()),
        'ours auto vs plain loop, max |diff| (nats)': float(np.abs(scores['auto'] - scores['plain']).max()),
        'ours auto vs plain loop, mean per-query Spearman': float(np.mean(
            [spearmanr(g['auto'], g['plain'])[0] for _, g in per_query])),
    }
    settings = {
        'model': f'{SMOLLM2}/{SMOLLM2_GGUF}', 'prompt': gen.prompt,
        'data': f'first {args.queries} beir/scifact test queries x BM25 top {args.depth} = {len(pairs)} pairs, '
                f'{pairs["docno"].nunique()} distinct passages ({len(pairs) / pairs["docno"].nunique():.2f} '
                f'targets per passage)',
        'tokens': f'prompt+passage mean {np.mean(prefix_tokens):.0f} (max {gen.max_passage_length} passage '
                  f'tokens), query mean {np.mean(target_tokens):.1f}',
        'batch size (passages)': gen.batch_size, 'torch threads': torch.get_num_threads(),
    }
    header = provenance.header()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f'{args.output}.json').write_text(json.dumps(
        {'header': header, 'settings': settings, 'runs': rows, 'quality': quality}, indent=2))
    md = ['# Generator scoring benchmark', ''] + [f'- {k}: {v}' for k, v in {**header, **settings}.items()] + ['']
    md += ['| method | dtype | pairs/s | × plain loop | seconds |', '|---|---|---|---|---|']
    md += [f'| {r["method"]} | {r["dtype"]} | {r["pairs_per_s"]:.1f} | {r["speedup"]:.2f} | {r["seconds"]:.1f} |'
           for r in rows]
    md += ['', 'Agreement: ' + '; '.join(f'{k} {v:.4g}' for k, v in quality.items()) + '.', '']
    (RESULTS / f'{args.output}.md').write_text('\n'.join(md))
    print('\n'.join(md))


if __name__ == '__main__':
    main()
