"""What a distillation step costs, query tower only against both towers (issue 16), and
against the passage tower's top layer over cached lower-layer states (issue 30).

The shipped `distill` trains the query tower only, against the start encoder's passage
vectors. GPL trains both towers. This script times the real code path of each: the
`distill` pipeline's trainer (as `selfsup train` builds it, on scifact's cached sampled
queries), its round-0 targets, then `loss` + `backward` + an AdamW step on the same
batches, for ``train_passages`` false and true, ``passage_layers=1`` (the top layer's
states below computed as a passage is first met: the timed steps include that) and for a few
candidate depths. It also
times a no-grad encoding of the corpus's passages (what each round costs when the passage
tower trains: the index is rebuilt), and projects the cost of the shipped schedule (its
steps a round times its rounds) for each.

    python experiments/benchmarks/distill_step_cost.py [--steps 3] [--collection beir/scifact/train]

Writes experiments/results/distill_step_cost.{md,json}.
"""
import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.harness import provenance, trained
from pyterrier_selfsup.harness.methods import METHODS

RESULTS = Path(__file__).resolve().parents[1] / 'results'


def time_steps(collection: Collection, settings: dict, steps: int) -> dict:
    """Seconds per optimiser step (mean of ``steps`` after one warm-up) of the distill
    trainer with ``settings``, and the passages a step encodes."""
    s = trained.training_settings('distill', settings)
    with tempfile.TemporaryDirectory() as tmp:
        trainer, topics = METHODS['distill'](collection, trained.typed_settings('distill', s),
                                                     RunContext(output_dir=Path(tmp)))
        examples = trainer.examples(topics)
        trainer.on_fit_start()
        trainer.on_epoch_start(examples, 0, False)
        params = [p for p in trainer.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=s['lr'])
        batches = trainer.batches(len(examples), 0)
        seconds, passages = [], []
        for b in range(steps + 1):  # step 0: a warm-up (kernels, allocators) on two queries
            batch = [examples[i] for i in batches[b]][:None if b else 2]
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            start = time.perf_counter()
            loss = trainer.loss(batch, np.random.default_rng(b))
            if loss is None:  # a batch the method cannot learn from (none with sampled queries)
                continue
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            if b:  # the first step warms up kernels and allocators
                seconds.append(time.perf_counter() - start)
                passages.append(len({d for q in batch for d in trainer.state['targets'][q.qid][0]}))
        return {'seconds per step': float(np.mean(seconds)), 'passages a step': float(np.mean(passages)),
                'trainable parameters': sum(p.numel() for p in params), 'steps a round': len(batches),
                'rounds': s['rounds']}


def time_encoding(collection: Collection, n: int = 512) -> float:
    """Passages a second, no-grad encoding by the start model at its inference precision."""
    from pyterrier_selfsup.models.dual_encoder import DualEncoder
    encoder = DualEncoder.from_pretrained(trained.MINILM)
    docnos = [d['docno'] for _, d in zip(range(n), collection.corpus_iter())]
    texts = collection.texts(docnos)
    encoder.encode_docs(texts[:64])  # warm-up
    start = time.perf_counter()
    encoder.encode_docs(texts)
    return n / (time.perf_counter() - start)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--collection', default='beir/scifact/train')
    parser.add_argument('--steps', type=int, default=3, help='steps timed (1 for both towers at depth 30)')
    args = parser.parse_args(argv)
    collection = Collection(args.collection)
    started = time.time()
    # (settings, steps timed), cheapest first (peak memory is the process's so far). Both towers
    # at the shipped depth 30 (up to 960 passages a step, with gradients) is not attempted on a CPU, nor
    # at depth 8 since fp32 is shipped (killed for memory on 24 GiB, 2026-11-25; 60 s a step in bf16 before)
    variants = {
        'query tower + passage offsets (shipped), depth 30': ({}, args.steps),
        'query tower alone, depth 30': ({'passage_offsets': None}, args.steps),
        'both towers, depth 4': ({'train_passages': True, 'passage_offsets': None, 'depth': 4}, args.steps),
        # (the passage tower's top layer alone, passage_layers=1, was timed at commit 4400990: its rows in the
        # results file are from there; the setting has left the package since)
    }
    rows = {}
    for name, (settings, steps) in variants.items():
        rows[name] = dict(settings=settings, steps_timed=steps, **time_steps(collection, settings, steps),
                          peak_rss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
        print(name, rows[name], flush=True)
    per_second = time_encoding(collection)
    docs = collection.docs_count
    for name, row in rows.items():
        moves = row['settings'].get('train_passages')
        refresh = docs / per_second if moves else 0.0
        row['refresh seconds (projected)'] = refresh
        # round 0 searches the start encoder's cached index; each later round re-encodes the corpus
        row['schedule seconds (projected)'] = (row['rounds'] * row['steps a round'] * row['seconds per step']
                                               + (row['rounds'] - 1) * refresh)
    lines = ['# Distillation step cost: query tower only against both towers', '',
             *(f'- {k}: {v}' for k, v in provenance.header().items()),
             f'- model: {provenance.model_revision(trained.MINILM)}',
             f'- data: {args.collection} ({docs} passages), the `distill` pipeline\'s cached sampled queries '
             f'(the shipped settings but for those in each row)',
             f'- timing: loss + backward + AdamW step, mean of the steps in the table after a warm-up step on two '
             f'queries; '
             f'corpus encoding (no grad, inference precision): {per_second:.1f} passages/s',
             '- projected: the shipped schedule (steps a round × rounds, no early stop), plus for both towers '
             'one re-encoding of the corpus in each round after the first (the top layer too); the teacher\'s ranking of the '
             'training queries each round (the same for every variant) is left out', '',
             '| variant | trainable params | passages a step | steps timed | s / step | steps a round × rounds | '
             'refresh s | schedule (projected) | peak RSS GiB |',
             '|---|---|---|---|---|---|---|---|---|']
    for name, r in rows.items():
        lines.append(f'| {name} | {r["trainable parameters"] / 1e6:.1f}M | {r["passages a step"]:.0f} | '
                     f'{r["steps_timed"]} | '
                     f'{r["seconds per step"]:.2f} | {r["steps a round"]} × {r["rounds"]} | '
                     f'{r["refresh seconds (projected)"]:.0f} | {r["schedule seconds (projected)"] / 60:.0f} min | '
                     f'{r["peak_rss_gib"]:.1f} |')
    lines += ['', f'Wall time: {time.time() - started:.0f} s.', '']
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / 'distill_step_cost.md').write_text('\n'.join(lines))
    (RESULTS / 'distill_step_cost.json').write_text(json.dumps(
        {'header': provenance.header(), 'passages per second': per_second, 'rows': rows}, indent=1))
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
