"""The MS MARCO plan (issue 17): what a refresh, an epoch and the index cost at 8.8M
passages, worked out from the measurements committed under experiments/results, no
number typed in but MS MARCO's size and the encoders' published shapes.

Reads distill_step_cost.json (CPU encoding rate), data_parallel_rumbart.json (CPU RUMBArt
step and refresh, 1 and 2 processes), search_scaling.json (exact and IVF search at 1M),
token_index_scaling.json (the ReAtt token index up to 10M keys) and, where a GPU run has
been committed, the newest gpu/**/gpu_benchmark.json by its date; writes msmarco_plan.md.

    python experiments/benchmarks/msmarco_plan.py
"""
import json
import math
import re
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / 'results'
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / 'scripts'))
from docs_sections import newest_gpu_indexing  # noqa: E402  (the rate the docs quote)

PASSAGES = 8_841_823  # MS MARCO passage ranking's collection (ir_datasets: msmarco-passage)
TARGET_SECONDS, TARGET_GPUS = 600, 8  # the target: a BERT-base refresh in 10 minutes on 8 GPUs
# (layers, hidden, intermediate) as published: per-token encoder FLOPs ∝ layers · (4 h² + 2 h i)
MINILM_SHAPE, BERT_BASE_SHAPE = (6, 384, 1536), (12, 768, 3072)


def load(name):
    path = RESULTS / name
    return json.loads(path.read_text()) if path.is_file() else None


def newest_gpu_benchmark():
    """The newest committed GPU benchmark (by the date in its header) and its path under the
    results, or (None, None) where no GPU run has been committed."""
    runs = [(json.loads(path.read_text()), path) for path in RESULTS.glob('gpu/**/gpu_benchmark.json')]
    if not runs:
        return None, None
    data, path = max(runs, key=lambda run: run[0]['header']['date'])
    rumbart = path.with_name('gpu_benchmark_rumbart.json')  # (later runs time RUMBArt apart)
    if 'rumbart' not in data['rows'] and rumbart.is_file():
        rows = json.loads(rumbart.read_text())['rows']
        data['rows']['rumbart'] = rows[max(rows)]  # the last run: warm
    return data, path.relative_to(RESULTS)


def cpu_of(machine: str) -> str:
    """A results header's machine as a table names it: the CPU's model and flags."""
    return re.sub(r', \d+ cores.*', '', machine.split(', ', 1)[1])


def per_token_cost(shape):
    layers, hidden, intermediate = shape
    return layers * (4 * hidden ** 2 + 2 * hidden * intermediate)


def hours(seconds):
    return f'{seconds / 3600:.1f} h' if seconds >= 3600 else f'{seconds / 60:.1f} min'


def main():
    bert_ratio = per_token_cost(BERT_BASE_SHAPE) / per_token_cost(MINILM_SHAPE)
    cost = load('distill_step_cost.json')
    cpu_rate, cpu = cost['passages per second'], cpu_of(cost['header']['machine'])
    rumbart = load('data_parallel_rumbart.json')
    search = load('search_scaling.json')
    tokens = load('token_index_scaling.json')
    gpu, gpu_file = newest_gpu_benchmark()
    one_cpu = next(r for r in rumbart['rows'] if r['processes'] == 1)
    exact_1m = next(r for r in search['rows'] if r['size'] == 1_000_000 and r['search'] == 'exact')
    exact_100k = next(r for r in search['rows'] if r['size'] == 100_000 and r['search'] == 'exact')
    growth = exact_1m['ms_per_query'] / exact_100k['ms_per_query']  # for 10x the passages
    ivf_1m = next(r for r in search['rows'] if r['size'] == 1_000_000 and r.get('shipped') and r['search'] == 'ivf')
    need_bert = PASSAGES / TARGET_SECONDS / TARGET_GPUS
    lines = ['# MS MARCO plan: what 8.8M passages cost, from the measurements', '',
             '`python experiments/benchmarks/msmarco_plan.py`: every number below is computed from the committed results '
             'files named in each row, MS MARCO\'s size (8,841,823 passages) and the encoders\' published shapes '
             f'(all-MiniLM-L6-v2: 6 layers of 384; BERT-base: 12 of 768, {bert_ratio:.1f}x MiniLM\'s FLOPs a '
             'token). The measured passages are scifact\'s (title and abstract, cut at 256 tokens), longer than '
             'MS MARCO\'s: times per passage are upper bounds for MS MARCO.', '',
             '## A refresh: the whole corpus re-encoded', '',
             '| encoder | where | passages / s | one refresh | source |', '|---|---|---|---|---|',
             f'| MiniLM | 2 cores of an {cpu} (bf16, torch) | {cpu_rate:.0f} | '
             f'{hours(PASSAGES / cpu_rate)} | distill_step_cost.json |',
             f'| BERT-base | 2 CPU cores, by the FLOPs ratio | {cpu_rate / bert_ratio:.0f} | '
             f'{hours(PASSAGES * bert_ratio / cpu_rate)} | the same |']
    indexing, indexing_machine, indexing_file = newest_gpu_indexing()
    if gpu and indexing:
        # (bf16 indexing, tokenization included: a GPU refresh's precision, precision=auto)
        rate = indexing['bf16']
        gpu['rows']['encoding']['passages / s'] = rate
        lines += [f'| MiniLM | 1 GPU ({indexing_machine.split("GPU: ")[-1]}, bf16) | {rate:.0f} | '
                  f'{hours(PASSAGES / rate)} | {indexing_file} |',
                  f'| MiniLM | 8 such GPUs (sharded, `fresh_index`) | {8 * rate:.0f} | {hours(PASSAGES / rate / 8)} '
                  '| the same, x8 (sharding measured on CPU: sharded_encoding.md) |',
                  f'| BERT-base | 8 such GPUs, by the FLOPs ratio | {8 * rate / bert_ratio:.0f} | '
                  f'{hours(PASSAGES * bert_ratio / rate / 8)} | the same |']
    else:
        lines += ['| MiniLM or BERT-base | GPUs | not measured: no GPU has been lent since the GPU run was written '
                  '(scripts/gpu/README.md) | | |']
    lines += ['', f'**The target** (a BERT-base refresh in {TARGET_SECONDS // 60} minutes on {TARGET_GPUS} GPUs) '
              f'needs {need_bert:,.0f} BERT-base passages a second on each GPU, which by the FLOPs ratio is '
              f'{need_bert * bert_ratio:,.0f} MiniLM passages a second on each'
              + (f': one GPU measured {gpu["rows"]["encoding"]["passages / s"]:,.0f} '
                 f'({"met" if gpu["rows"]["encoding"]["passages / s"] >= need_bert * bert_ratio else "not met"}).'
                 if gpu else '; to be compared with the GPU run\'s MiniLM rate.'),
              f'On these 2 cores the same refresh takes {hours(PASSAGES * bert_ratio / cpu_rate)}: the CPU is for '
              'corpora of thousands to a few hundred thousand passages.', '',
              '## An epoch of RUMBArt', '',
              'RUMBArt\'s shipped schedule (5,000 queries, batch 16, a refresh every 25 steps) makes '
              f'{math.ceil(5000 / 16)} steps and {math.ceil(5000 / 16) // 25} refreshes an epoch. Measured '
              f'on 2 cores of an {cpu_of(rumbart["header"]["machine"])} (data_parallel_rumbart.json, 1 '
              f'process; the refreshes below are at the {cpu}\'s rate above): '
              f'{one_cpu["step seconds"]:.2f} s a step, '
              f'{one_cpu["refresh seconds"]:.0f} s a refresh of scifact\'s 5,183 passages, '
              f'{one_cpu["pairs scored"] / one_cpu["teacher seconds"]:.1f} teacher pairs a second.', '',
              '| corpus | where | steps | refreshes | teacher (5 pairs a query) | epoch |', '|---|---|---|---|---|---|']
    steps = math.ceil(5000 / 16)
    refreshes = steps // 25
    teacher_rate = one_cpu['pairs scored'] / one_cpu['teacher seconds']
    for label, n in (('scifact (5,183)', 5183), ('MS MARCO (8.8M)', PASSAGES)):
        refresh = n / cpu_rate
        epoch = steps * one_cpu['step seconds'] + refreshes * refresh + (refreshes + 1) * 5000 * 5 / teacher_rate
        lines.append(f'| {label} | 2 CPU cores | {steps} | {refreshes} x {hours(refresh)} | '
                     f'{hours((refreshes + 1) * 5000 * 5 / teacher_rate)} (at most: pairs scored once are cached) '
                     f'| {hours(epoch)} |')
    if gpu:
        g = gpu['rows']['rumbart']
        refresh = PASSAGES / gpu['rows']['encoding']['passages / s']
        teacher = (refreshes + 1) * 5000 * 5 / g['teacher pairs / s']
        lines.append(f'| MS MARCO (8.8M) | 1 GPU | {steps} | {refreshes} x {hours(refresh)} | {hours(teacher)} | '
                     f'{hours(steps * g["step seconds"] + refreshes * refresh + teacher)} |')
    lines += ['', '## The index and search', '',
              f'- Dense vectors, fp32: MiniLM {PASSAGES * 384 * 4 / 2 ** 30:.1f} GiB, BERT-base '
              f'{PASSAGES * 768 * 4 / 2 ** 30:.1f} GiB; an IVF file holds a second copy (search_scaling.md).',
              f'- Search (search_scaling.json, 2 cores, synthetic passages): exact {exact_100k["ms_per_query"]:.1f} ms '
              f'a query at 100k, {exact_1m["ms_per_query"]:.1f} ms at 1M ({growth:.1f}x for 10x the passages; '
              f'at most linear, so at most {exact_1m["ms_per_query"] * PASSAGES / 1e6:.0f} ms at 8.8M); IVF as '
              f'shipped {ivf_1m["ms_per_query"]:.1f} ms at 1M, recall@100 {ivf_1m["recall100"]:.3f}. '
              '`search=\'auto\'` turns IVF on from 1M passages.']
    if tokens:
        big = max(tokens['rows'], key=lambda r: r['keys'])
        per_key = (big['keys MiB'] + big['ivf MiB']) / big['keys']
        lines.append(f'- ReAtt token index (token_index_scaling.json): at {big["keys"]:,} keys exhaustive scoring '
                     f'takes {big["exhaustive ms"]:.0f} ms a query and the two-stage search {big["two-stage ms"]:.0f} '
                     f'ms (recall@10 {big["recall@10"]:.3f}); keys and IVF take {per_key * 2 ** 20:.0f} bytes a key.')
    lines += ['', '## What changes at that scale', '',
              '- `search=\'auto\'` is IVF (n_list = 4,096 at 8.8M passages, a sixteenth probed).',
              '- RUMBArt/ACROBArT: `train_passages=False` (RAG\'s frozen passage tower) makes a refresh a re-retrieval '
              'instead of a re-encoding; with `train_passages=True` a refresh is the cost above, so `refresh_every` '
              'has to grow with the corpus.',
              '- Several GPUs: `torchrun --nproc_per_node 8 -m pyterrier_selfsup train ...` (nccl); refreshes are '
              'encoded in shards, the teacher\'s pairs split by passage. The shards meet in rank 0\'s temporary '
              'directory: on several nodes TMPDIR must be a filesystem they share.', '']
    (RESULTS / 'msmarco_plan.md').write_text('\n'.join(lines))
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
