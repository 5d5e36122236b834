"""Writing training queries: how fast, and how much like real queries (issue 30, items 3 and 4).

The same passages (drawn with seed 0 from the corpus, as ``sampled_queries`` draws them) are
given to each way of writing, in this one process, at the same sampling settings (3 a passage,
temperature 1.0, top-p 0.95, at most 32 new tokens, unless a row says otherwise):

- before: ``Generator.generate`` on each passage repeated once a sample (what ``sampled_queries``
  did until now: the prompt prefilled once a sample, every sequence run to 32 tokens);
- writer: :class:`~pyterrier_selfsup.models.writing.QueryWriter`, one prefill a passage shared
  by its samples, each sequence stopped at the end of its first line, finished ones leaving
  the batch; with the completion prompt (``plain``) or the chat template (``chat``), optionally
  shown example queries (``log``: 8 of the scifact train split's texts; a query log).

Label-free quality, beside each rate: the distinct fraction, the mean length in words, and
specificity: where the teacher (BM25 + MiniLM fused, the distillation teacher) ranks the
passage a query was written for (MRR@10, share in the top 10); and the same under BM25 alone
(a query that copies its passage is found by BM25 at once: lexical overlap, not realism).
The scifact train split's own query texts are a reference row (their "source" is their
judged passage: the only place labels are read, and only for that row).

    python experiments/benchmarks/query_generation.py [--passages 64] [--generators smollm2 qwen]
writes experiments/results/query_generation.{md,json};
    python experiments/benchmarks/query_generation.py --batch-sizes 8 16 32 64 [--passages 64]
the writer's rate against its passages a batch (SmolLM2, plain prompt, the same settings):
experiments/results/query_generation_batch.{md,json}.
"""
import argparse
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from pyterrier_selfsup import BM25, Collection
from pyterrier_selfsup.data.queries.cut import reservoir_sample, text_if_any
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.harness.methods import teacher_pipeline
from pyterrier_selfsup.models.generator import load_generator
from pyterrier_selfsup.models.writing import QueryWriter

RESULTS = Path(__file__).resolve().parents[1] / 'results'
SAMPLING = dict(do_sample=True, temperature=1.0, top_p=0.95)
PER_PASSAGE = 3


def specificity(ranker, queries: pd.DataFrame, k: int = 10):
    """MRR@k and top-k share of each query's source passage under ``ranker``."""
    topics = queries[['qid', 'query']]
    ranked = ranker(topics)
    ranked = ranked[ranked['rank'] < k]
    rank = {(q, d): r for q, d, r in zip(ranked['qid'], ranked['docno'], ranked['rank'])}
    found = [rank.get((q, d)) for q, d in zip(queries['qid'], queries['source_docno'])]
    return float(np.mean([1 / (r + 1) if r is not None else 0 for r in found])), \
        float(np.mean([r is not None for r in found]))


def quality(rows: list, label: str, per_passage: list, docnos: list, seconds: float, teacher, bm25, extra: dict):
    texts = [(d, q) for d, qs in zip(docnos, per_passage) for q in qs]
    written = len(texts)
    kept = [(d, q) for d, q in texts if q.strip()]
    keys = {' '.join(q.lower().split()) for _, q in kept}
    queries = pd.DataFrame({'qid': [str(i) for i in range(len(kept))], 'query': [q for _, q in kept],
                            'source_docno': [d for d, _ in kept]})
    t_mrr, t_top = specificity(teacher, queries)
    b_mrr, b_top = specificity(bm25, queries)
    rows.append({'writer': label, **extra, 'queries written': written, 'seconds': seconds,
                 'queries/s': written / seconds if seconds else None, 'distinct fraction': len(keys) / max(1, written),
                 'mean words': float(np.mean([len(q.split()) for _, q in kept])) if kept else 0.0,
                 'teacher MRR@10': t_mrr, 'teacher top-10': t_top, 'BM25 MRR@10': b_mrr,
                 'examples': [q for _, q in kept[:6]]})
    print({k: v for k, v in rows[-1].items() if k != 'examples'}, flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--passages', type=int, default=64)
    parser.add_argument('--generators', nargs='+', default=['smollm2', 'qwen'])
    parser.add_argument('--batch-sizes', nargs='+', type=int, help='only the batch-size sweep')
    args = parser.parse_args()
    coll = Collection('beir/scifact/train')
    header = provenance.header()
    docs = reservoir_sample(coll.corpus_iter(), args.passages, __import__('random').Random(0), text_if_any)
    docnos, passages = [d for d, _ in docs], [t for _, t in docs]
    if args.batch_sizes:
        return batch_sweep(args.batch_sizes, passages, header)
    bm25 = BM25.from_collection(coll, num_results=100)
    teacher = teacher_pipeline(coll, 'bm25+minilm', depth=100)
    log = coll.topics()['query'].tolist()
    rows = []
    # the reference: the train split's real queries and their judged passages (first judged one)
    qrels = coll.qrels().drop_duplicates('qid')
    real = coll.topics().merge(qrels[['qid', 'docno']], on='qid').rename(columns={'docno': 'source_docno'})
    real = real.sample(n=min(len(real), PER_PASSAGE * args.passages), random_state=0)
    quality(rows, 'scifact train queries (real; reference)', [[q] for q in real['query']],
            real['source_docno'].tolist(), 0.0, teacher, bm25, {'generator': '-', 'prompt': '-'})
    for name in args.generators:
        gen = load_generator(name)  # its default precision ('auto': bf16 where the CPU multiplies it natively)
        dtype = str(gen.compute_dtype()).split('.')[1]
        # (kind, prompt, passage tokens shown)
        kinds = [('before', 'plain', 256), ('writer', 'plain', 256), ('writer', 'plain', 128), ('writer', 'chat', 256),
                 ('writer', 'chat', 128), ('writer', 'chat+log', 256)]
        for kind, style, length in kinds:
            torch.manual_seed(0)
            t0 = time.perf_counter()
            if kind == 'before':
                flat = gen.generate([p for p in passages for _ in range(PER_PASSAGE)], max_new_tokens=32, **SAMPLING)
                out = [flat[i:i + PER_PASSAGE] for i in range(0, len(flat), PER_PASSAGE)]
            else:
                writer = QueryWriter(gen, style=style.split('+')[0], examples=log if 'log' in style else (),
                                     max_passage_length=length)
                writer.token_kinds  # (read once a model: not the writing's cost)
                t0 = time.perf_counter()
                out = writer.write(passages, PER_PASSAGE, max_new_tokens=32, generator=torch.Generator().manual_seed(0),
                                   **SAMPLING)
            seconds = time.perf_counter() - t0
            label = 'generate, prompt repeated a sample' if kind == 'before' else 'QueryWriter, shared prefill'
            quality(rows, label, out, docnos, seconds, teacher, bm25,
                    {'generator': name, 'dtype': dtype, 'prompt': style, 'passage tokens': length})
        # greedy, one a passage, chat: what a title-like query looks like
        t0 = time.perf_counter()
        out = QueryWriter(gen, style='chat').write(passages, 1, max_new_tokens=32)
        quality(rows, 'QueryWriter, greedy, 1 a passage', out, docnos, time.perf_counter() - t0, teacher, bm25,
                {'generator': name, 'dtype': dtype, 'prompt': 'chat', 'passage tokens': 256})
    for name in args.generators:  # the speed-up at the same settings
        before = next(r for r in rows if r['generator'] == name and r['writer'].startswith('generate'))
        for r in rows:
            if r['generator'] == name and r['queries/s']:
                r['x before'] = r['queries/s'] / before['queries/s']
    settings = {'data': f'beir/scifact corpus: {len(passages)} passages drawn with seed 0; {PER_PASSAGE} samples a '
                        f'passage, temperature {SAMPLING["temperature"]}, top-p {SAMPLING["top_p"]}, 32 new tokens',
                'teacher': 'BM25 (PISA) + all-MiniLM-L6-v2, each top 100, per-query z-scores summed 1:1',
                'torch threads': torch.get_num_threads()}
    cols = ['generator', 'dtype', 'writer', 'prompt', 'passage tokens', 'queries/s', 'x before', 'distinct fraction',
            'mean words', 'teacher MRR@10', 'teacher top-10', 'BM25 MRR@10']
    write_table('query_generation', 'Writing training queries: rate and label-free quality', header, settings, rows,
                cols, lambda r: f'{r["generator"]}, {r["writer"]}, {r.get("prompt")}, {r.get("passage tokens", "")} '
                                'passage tokens')


def write_table(name: str, title: str, header: dict, settings: dict, rows: list, cols: list, label) -> None:
    """``results/<name>.json`` (everything) and ``<name>.md``: the header and settings, a row a
    writer in ``cols``, and the first queries of each row that wrote some (titled by ``label(row)``)."""
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f'{name}.json').write_text(json.dumps({'header': header, 'settings': settings, 'rows': rows}, indent=2))
    fmt = lambda v: f'{v:.3g}' if isinstance(v, float) else ('' if v is None else str(v))  # noqa: E731
    md = [f'# {title}', ''] + [f'- {k}: {v}' for k, v in {**header, **settings}.items()] + ['']
    md += ['| ' + ' | '.join(cols) + ' |', '|' + '---|' * len(cols)]
    md += ['| ' + ' | '.join(fmt(r.get(c)) for c in cols) + ' |' for r in rows]
    md += ['', '## What they write (first queries of each row)', '']
    for r in rows:
        if 'examples' in r:
            md += [f'**{label(r)}**', ''] + [f'- {q}' for q in r['examples']] + ['']
    (RESULTS / f'{name}.md').write_text('\n'.join(md) + '\n')
    print('\n'.join(md))


def batch_sweep(sizes, passages, header):
    gen = load_generator('smollm2')
    rows = []
    for size in sizes:
        writer = QueryWriter(gen, style='plain', batch_size=size)
        writer.token_kinds
        t0 = time.perf_counter()
        writer.write(passages, PER_PASSAGE, max_new_tokens=32, generator=torch.Generator().manual_seed(0), **SAMPLING)
        seconds = time.perf_counter() - t0
        rows.append({'passages a batch': size, 'seconds': seconds, 'queries/s': PER_PASSAGE * len(passages) / seconds})
        print(rows[-1], flush=True)
    settings = {'data': f'beir/scifact corpus: {len(passages)} passages drawn with seed 0, {PER_PASSAGE} samples a passage',
                'generator': f'smollm2 ({str(gen.compute_dtype()).split(".")[1]}), plain prompt, 256 passage tokens'}
    (RESULTS / 'query_generation_batch.json').write_text(json.dumps({'header': header, 'settings': settings,
                                                                     'rows': rows}, indent=2))
    md = ['# QueryWriter: queries a second against passages a batch', ''] + \
        [f'- {k}: {v}' for k, v in {**header, **settings}.items()] + ['', '| passages a batch | queries/s | seconds |',
                                                                       '|---|---|---|']
    md += [f'| {r["passages a batch"]} | {r["queries/s"]:.2f} | {r["seconds"]:.1f} |' for r in rows]
    (RESULTS / 'query_generation_batch.md').write_text('\n'.join(md) + '\n')
    print('\n'.join(md))


if __name__ == '__main__':
    main()
