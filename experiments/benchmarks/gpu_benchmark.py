"""The package's costs on one device, GPU or CPU (issue 17): what a refresh, the teacher and
a training step cost there, as the MS MARCO plan in the README needs them.

1. Encoding: all-MiniLM-L6-v2 (`DualEncoder`, precision `auto`: bf16 on CUDA and on CPUs
   with native bf16) over scifact's first ``--passages`` passages, passages / s.
2. The generator: SmolLM2-135M-Instruct's log p(query | passage) (`Generator.log_likelihoods`,
   precision `auto`) of scifact train's first ``--queries`` queries each with ``--per-query``
   passages of the corpus, pairs / s.
3. RUMBArt's trainer as `data_parallel.py --method rumbart` runs it, in one process: its
   teacher's scoring (pairs / s), s / step (MiniLM, both towers, batch 16, k 5) and the time
   of a refresh (the whole corpus re-encoded); with gradient checkpointing (its default) and
   without, one run after the other in one process (``--rumbart-runs``), after a warm-up run
   whose numbers are dropped: the first run in a process pays for CUDA's kernels loading on
   their first use, and on an H100 it took 2.13 s a step where the same run second took 0.43
   (results/gpu/2026-11-26-h100/). ``--only-rumbart``: these runs alone.

Each part also reports the GPU memory torch allocated at its peak (CUDA only).

    python experiments/benchmarks/gpu_benchmark.py [--results-dir DIR] [--rumbart-runs warm-up,on,off] [--only-rumbart]

Runs on whatever torch sees (CUDA if there is a GPU). On a lent GPU machine it is one step
of scripts/gpu/run.sh, which writes the results where the device tool returns them; they
are committed as experiments/results/gpu_benchmark.{md,json}.
"""
import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
import data_parallel  # noqa: E402  (the RUMBArt run is its one-process run)

RESULTS = Path(__file__).resolve().parents[1] / 'results'


def synchronise():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def reset_peak():
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_gib() -> float:
    """The most GPU memory torch allocated since :func:`reset_peak` (NaN on a CPU)."""
    return torch.cuda.max_memory_allocated() / 2 ** 30 if torch.cuda.is_available() else float('nan')


def measured(part, *args) -> dict:
    reset_peak()
    row = part(*args)
    row['GPU peak GiB'] = peak_gib()
    return row


def encoding(n_passages: int) -> dict:
    from pyterrier_selfsup import MINILM, Collection, DualEncoder
    texts = [d['text'] for _, d in zip(range(n_passages), Collection('beir/scifact/test').corpus_iter())]
    encoder = DualEncoder.from_pretrained(MINILM)
    encoder.encode_docs(texts[:64])  # warm-up (kernels, allocator)
    synchronise()
    start = time.perf_counter()
    encoder.encode_docs(texts)
    synchronise()
    seconds = time.perf_counter() - start
    return {'passages': len(texts), 'seconds': seconds, 'passages / s': len(texts) / seconds,
            'device': str(encoder.device), 'dtype': str(encoder.compute_dtype()).replace('torch.', '')}


def generator(n_queries: int, per_query: int) -> dict:
    from pyterrier_selfsup import Collection
    from pyterrier_selfsup.models.generator import load_generator
    collection = Collection('beir/scifact/train')
    queries = collection.topics()['query'].head(n_queries).tolist()
    passages = [d['text'] for _, d in zip(range(n_queries * per_query), collection.corpus_iter())]
    pairs_q = [q for q in queries for _ in range(per_query)]
    gen = load_generator('smollm2')
    # a whole round first, for both scorers: CUDA loads each kernel on its first use, and a warm-up
    # of a few pairs left the first timed round at a quarter of the second (H200, 2026-11-27)
    gen.log_likelihoods(pairs_q, passages)
    plain_scoring(gen, pairs_q, passages)
    synchronise()
    start = time.perf_counter()
    scores = gen.log_likelihoods(pairs_q, passages)
    synchronise()
    seconds = time.perf_counter() - start
    tokens = np.mean([len(t) for t in gen.passage_ids(passages)])
    plain_seconds, plain_scores = plain_scoring(gen, pairs_q, passages)
    return {'pairs': len(pairs_q), 'seconds': seconds, 'pairs / s': len(pairs_q) / seconds,
            'passage tokens (mean)': float(tokens), 'device': str(gen.device),
            'dtype': str(gen.compute_dtype()).replace('torch.', ''),
            'plain loop seconds': plain_seconds, 'plain loop pairs / s': len(pairs_q) / plain_seconds,
            'max |ours - plain| (nats)': float(np.abs(scores - plain_scores).max())}


def plain_scoring(gen, targets, passages, batch_size: int = 16):
    """The peer of `Generator.log_likelihoods`: one forward per pair over the passage's prompt
    and the target together, ``batch_size`` pairs at a time, padded on the right, the logits
    kept whole; the same token ids, model and precision. Returns (seconds, scores)."""
    from pyterrier_selfsup.models.batching import pad
    p_ids, t_ids = gen.passage_ids(passages), gen.target_ids(targets)
    out = np.zeros(len(targets))
    synchronise()
    start = time.perf_counter()
    with gen.inference():
        for b in range(0, len(targets), batch_size):
            rows = range(b, min(b + batch_size, len(targets)))
            ids, mask = pad([p_ids[i] + t_ids[i] for i in rows], gen.tokenizer.pad_token_id,
                            device=gen.device)
            logp = torch.log_softmax(gen.model(input_ids=ids, attention_mask=mask).logits.float(), -1)
            for j, i in enumerate(rows):
                first = len(p_ids[i]) - 1
                positions = torch.arange(first, first + len(t_ids[i]), device=gen.device)
                wanted = torch.tensor(t_ids[i], device=gen.device)
                out[i] = logp[j, positions, wanted].sum().item()
    synchronise()
    return time.perf_counter() - start, out


def rumbart(checkpointing: bool) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        data_parallel.fit('rumbart', 'beir/scifact/train', f'{tmp}/run', f'{tmp}/row.json',
                          checkpointing=checkpointing)
        row = json.loads(Path(f'{tmp}/row.json').read_text())
    row.pop('losses')
    row['teacher pairs / s'] = row['pairs scored'] / row['teacher seconds']
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--passages', type=int, default=5183)
    parser.add_argument('--queries', type=int, default=100)
    parser.add_argument('--per-query', type=int, default=10)
    parser.add_argument('--results-dir', type=Path, default=RESULTS)
    parser.add_argument('--rumbart-runs', default='warm-up,on,off',
                        help='RUMBArt runs, in this order in one process: on / off: with / without gradient '
                             'checkpointing; warm-up: a run at the default whose numbers are dropped; none: no run')
    parser.add_argument('--only-rumbart', action='store_true', help='the RUMBArt runs alone')
    args = parser.parse_args(argv)
    from pyterrier_selfsup.harness import provenance, trained
    rows = {}
    if not args.only_rumbart:
        rows['encoding'] = measured(encoding, args.passages)
        rows['generator'] = measured(generator, args.queries, args.per_query)
    runs = [] if args.rumbart_runs == 'none' else args.rumbart_runs.split(',')
    for i, run in enumerate(runs):
        row = measured(rumbart, {'warm-up': None, 'on': True, 'off': False}[run])
        if run != 'warm-up':
            rows[f'rumbart, checkpointing {run} (run {i + 1} of {len(runs)})'] = row
    header = provenance.header()
    settings = trained.training_settings('rumbart', data_parallel.SETTINGS['rumbart'])
    lines = ['# The package\'s costs on one device', '', *(f'- {k}: {v}' for k, v in header.items()),
             f'- models: {provenance.model_revision(trained.MINILM)}; SmolLM2-135M-Instruct (Q4_1 GGUF, dequantised)',
             f'- RUMBArt settings: {", ".join(f"{k}={v}" for k, v in settings.items())}', '',
             '| what | on | precision | measured | rate | GPU peak (GiB) |', '|---|---|---|---|---|---|']
    if 'encoding' in rows:
        e, g = rows['encoding'], rows['generator']
        lines += [f'| MiniLM encoding | {e["device"]} | {e["dtype"]} | {e["passages"]} scifact passages in '
                  f'{e["seconds"]:.1f} s | **{e["passages / s"]:.1f} passages / s** | {e["GPU peak GiB"]:.2f} |',
                  f'| SmolLM2 scoring | {g["device"]} | {g["dtype"]} | {g["pairs"]} pairs (passages of '
                  f'{g["passage tokens (mean)"]:.0f} tokens) in {g["seconds"]:.1f} s | '
                  f'**{g["pairs / s"]:.1f} pairs / s** | {g["GPU peak GiB"]:.2f} |',
                  f'| SmolLM2 scoring, plain loop (one forward per pair, 16 pairs a batch) | {g["device"]} | '
                  f'{g["dtype"]} | the same pairs in {g["plain loop seconds"]:.1f} s | '
                  f'{g["plain loop pairs / s"]:.1f} pairs / s (ours: {g["pairs / s"] / g["plain loop pairs / s"]:.2f} '
                  f'times; max difference {g["max |ours - plain| (nats)"]:.3f} nats) | |']
    for name, x in rows.items():
        if not name.startswith('rumbart'):
            continue
        lines += [f'| RUMBArt teacher (cached scoring), {name[9:]} | | | {x["pairs scored"]} pairs in '
                  f'{x["teacher seconds"]:.1f} s | {x["teacher pairs / s"]:.1f} pairs / s | |',
                  f'| RUMBArt step (both towers), {name[9:]} | | | {x["steps"]} steps | '
                  f'**{x["step seconds"]:.2f} s / step** | |',
                  f'| RUMBArt refresh (5,183 passages re-encoded), {name[9:]} | | | {x["refreshes"]} refreshes | '
                  f'**{x["refresh seconds"]:.1f} s** | {x["GPU peak GiB"]:.2f} (the whole run) |']
    lines += ['', f'RUMBArt runs in this order, in one process: {args.rumbart_runs} (a warm-up run\'s numbers are '
              'dropped).', '']
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / 'gpu_benchmark.md').write_text('\n'.join(lines))
    (args.results_dir / 'gpu_benchmark.json').write_text(json.dumps({'header': header, 'rows': rows}, indent=1))
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
