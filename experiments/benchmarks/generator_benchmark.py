"""Generator scoring throughput: ours against the plain one-pair-per-forward loop.

The pairs are what a re-ranker sees in ``pt.Experiment``: queries with BM25's top k
documents (title + text, 256 passage tokens), all passed at once. Two workloads: a slice
of scifact test (20 queries x top 20: passages rarely recur) and the whole of ADI (35
queries x all 82 documents: every passage serves every query). Every method runs in this
one process on the same pairs with the same model (SmolLM2-135M-Instruct, de-quantised
from its GGUF to fp32 weights):

- plain loop:         for each pair, prompt + query as one sequence, one forward, the
                      full logits, log-softmax, gather (fp32)
- ours, fp32:         Generator.log_likelihoods: pairs grouped by passage, each passage's
                      prompt encoded once into a key/value cache shared by all its targets,
                      length-sorted batches, output layer only on target positions
- ours, auto:         the same with precision 'auto' (bf16 autocast), only where the CPU
                      multiplies bf16 natively (elsewhere 'auto' is the fp32 row again)

    python experiments/benchmarks/generator_benchmark.py [scifact] [adi]
writes experiments/results/generator_benchmark.{md,json} (about 20 minutes on 2 cores).
"""
import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import spearmanr

from pyterrier_selfsup import BM25, Collection
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.models.generator import SMOLLM2, SMOLLM2_GGUF, Generator

RESULTS = Path(__file__).resolve().parents[1] / 'results'


def plain_loop(gen: Generator, targets, passages) -> np.ndarray:
    out = []
    with torch.inference_mode():
        for target, passage in zip(targets, passages):
            prefix, tokens = gen.passage_ids([passage])[0], gen.target_ids([target])[0]
            logits = gen.model(torch.tensor([prefix + tokens])).logits[0]
            logp = torch.log_softmax(logits.float(), dim=-1)
            out.append(sum(logp[len(prefix) - 1 + j, t].item() for j, t in enumerate(tokens)))
    return np.array(out)


WORKLOADS = {
    # a slice of a large re-ranking run: few passages recur, so this measures batching and bf16
    'scifact': ('beir/scifact/test', 20, 20),
    # a whole re-ranking run over a small collection: every passage serves every query
    'adi': ('classic/adi', 35, 100),
}


def measure(name, collection_name, n_queries, depth):
    collection = Collection(collection_name)
    topics = collection.topics().head(n_queries)
    pairs = (BM25.from_collection(collection, num_results=depth) >> collection.text_loader())(topics)
    targets, passages = pairs['query'].tolist(), pairs['text'].tolist()
    fp32 = Generator.from_pretrained(SMOLLM2, gguf_file=SMOLLM2_GGUF, precision='fp32', device='cpu')
    auto = Generator.from_pretrained(SMOLLM2, gguf_file=SMOLLM2_GGUF, precision='auto', device='cpu')
    dtype = str(auto.compute_dtype()).split('.')[1]
    prefix_tokens = [len(x) for x in fp32.passage_ids(passages)]
    target_tokens = [len(x) for x in fp32.target_ids(targets)]

    methods = [('plain', 'plain loop, one pair per forward', lambda: plain_loop(fp32, targets, passages)),
               ('fp32', 'ours: grouped by passage, prefix cache, fp32',
                lambda: fp32.log_likelihoods(targets, passages))]
    if dtype != 'float32':  # only a precision this machine runs natively ('auto' is fp32 without bf16 hardware)
        methods.append(('auto', f'ours: the same, precision auto ({dtype})',
                        lambda: auto.log_likelihoods(targets, passages)))
    runs, scores = {}, {}
    for key, label, run in methods:
        t0 = time.perf_counter()
        scores[key] = run()
        runs[label] = (dtype if key == 'auto' else 'fp32', time.perf_counter() - t0)
    plain_rate = len(pairs) / runs['plain loop, one pair per forward'][1]
    rows = [{'workload': name, 'method': label, 'dtype': dt, 'seconds': sec, 'pairs_per_s': len(pairs) / sec,
             'speedup': len(pairs) / sec / plain_rate} for label, (dt, sec) in runs.items()]
    quality = {'ours fp32 vs plain loop, max |diff| (nats)': float(np.abs(scores['fp32'] - scores['plain']).max())}
    if 'auto' in scores:
        per_query = pairs.assign(auto=scores['auto'], plain=scores['plain']).groupby('qid')
        quality.update({
            f'ours {dtype} vs plain loop, max |diff| (nats)': float(np.abs(scores['auto'] - scores['plain']).max()),
            f'ours {dtype} vs plain loop, mean per-query Spearman': float(np.mean(
                [spearmanr(g['auto'], g['plain'])[0] for _, g in per_query if len(g) > 1]))})
    # what sharing alone can save: tokens through the model, the loop's against ours (each
    # distinct passage's prompt once); the rest of a speed-up is batching and precision
    distinct = dict(zip(passages, prefix_tokens))  # prompt tokens of each distinct passage
    token_bound = (sum(prefix_tokens) + sum(target_tokens)) / (sum(distinct.values()) + sum(target_tokens))
    data = (f'{collection_name}: first {len(topics)} queries x BM25 top {depth} = {len(pairs)} pairs over '
            f'{pairs["docno"].nunique()} distinct passages ({len(pairs) / pairs["docno"].nunique():.2f} targets per '
            f'passage); prompt+passage tokens mean {np.mean(prefix_tokens):.0f}, query tokens mean '
            f'{np.mean(target_tokens):.1f}; tokens through the model, loop / ours: {token_bound:.2f}')
    return rows, quality, data


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('workloads', nargs='*', metavar='WORKLOAD', help=f'of {list(WORKLOADS)} (default: all)')
    args = parser.parse_args()
    unknown = set(args.workloads) - set(WORKLOADS)
    if unknown:
        parser.error(f'unknown workloads {sorted(unknown)}; known: {list(WORKLOADS)}')
    args.workloads = args.workloads or list(WORKLOADS)
    header = provenance.header()
    rows, quality, data = [], {}, {}
    for name in args.workloads:
        r, q, d = measure(name, *WORKLOADS[name])
        rows += r
        quality[name], data[f'workload {name}'] = q, d
    settings = {'model': f'{SMOLLM2}/{SMOLLM2_GGUF}', 'prompt': repr(Generator.from_pretrained(
                    SMOLLM2, gguf_file=SMOLLM2_GGUF, device='cpu').prompt), **data,
                'max passage tokens': 256, 'batch size (passages)': 16, 'torch threads': torch.get_num_threads()}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / 'generator_benchmark.json').write_text(json.dumps(
        {'header': header, 'settings': settings, 'runs': rows, 'quality': quality}, indent=2))
    md = ['# Generator scoring benchmark', ''] + [f'- {k}: {v}' for k, v in {**header, **settings}.items()] + ['']
    md += ['| workload | method | dtype | pairs/s | x plain loop | seconds |', '|---|---|---|---|---|---|']
    md += [f'| {r["workload"]} | {r["method"]} | {r["dtype"]} | {r["pairs_per_s"]:.1f} | {r["speedup"]:.2f} | '
           f'{r["seconds"]:.1f} |' for r in rows]
    md += [''] + [f'Agreement on {w}: ' + '; '.join(f'{k} {v:.4g}' for k, v in q.items()) + '.' for w, q in quality.items()]
    (RESULTS / 'generator_benchmark.md').write_text('\n'.join(md) + '\n')
    print('\n'.join(md))


if __name__ == '__main__':
    main()
