"""Corpus encoding on one process against several (issue 17): `encode_sharded` over gloo.

A refresh re-encodes the corpus; with N processes (one a GPU, or here CPU processes) each
encodes every N-th chunk and rank 0 interleaves the shards into one FlexIndex. This times
the same corpus encoded by `encode_into` in one process with all the cores, and by
`encode_sharded` on 2 processes with the cores split between them, and checks that both
indexes hold the same vectors. On a CPU the processes share the same cores, so the
interest is the overhead (shard files, merge, barriers), not a speed-up; on GPUs each
process has its own device.

    python experiments/benchmarks/sharded_encoding.py [--collection beir/scifact/test] [--docs 2048] [--chunk 256]

Writes experiments/results/sharded_encoding.{md,json}.
"""
import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parents[1] / 'results'


class Head:
    """The first ``docs`` documents of a collection, as a Collection-like for the encoders."""

    def __init__(self, name: str, docs: int):
        from pyterrier_selfsup.data.collections import Collection
        self.collection = Collection(name)
        self.name = name
        self.docs = docs

    def corpus_iter(self, verbose=False, desc=None):
        return (d for _, d in zip(range(self.docs), self.collection.corpus_iter()))


def _rank(rank: int, world_size: int, store: str, path: str, args, threads: int, out: str):
    import torch
    import torch.distributed as dist

    from pyterrier_selfsup.models.dual_encoder import DualEncoder
    from pyterrier_selfsup.retrieval.dense import encode_sharded
    torch.set_num_threads(threads)
    dist.init_process_group('gloo', init_method=f'file://{store}', rank=rank, world_size=world_size)
    try:
        encoder = DualEncoder.from_pretrained(args.model)
        encoder.encode_docs(['warm-up'] * 8)
        dist.barrier()
        start = time.perf_counter()
        encode_sharded(path, Head(args.collection, args.docs), encoder, rank=rank, world_size=world_size,
                       chunk=args.chunk)
        if rank == 0:
            Path(out).write_text(json.dumps({'seconds': time.perf_counter() - start}))
    finally:
        dist.destroy_process_group()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--collection', default='beir/scifact/test')
    parser.add_argument('--docs', type=int, default=2048)
    parser.add_argument('--chunk', type=int, default=256)
    parser.add_argument('--model', default='sentence-transformers/all-MiniLM-L6-v2')
    args = parser.parse_args(argv)
    import torch
    import torch.multiprocessing as mp
    from pyterrier_dr import FlexIndex

    from pyterrier_selfsup.harness import provenance
    from pyterrier_selfsup.models.dual_encoder import DualEncoder
    from pyterrier_selfsup.retrieval.dense import encode_into
    cores = len(os.sched_getaffinity(0))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        encoder = DualEncoder.from_pretrained(args.model)
        encoder.encode_docs(['warm-up'] * 8)
        start = time.perf_counter()
        encode_into(tmp / 'one.flex', Head(args.collection, args.docs), encoder, chunk=args.chunk)
        seconds = time.perf_counter() - start
        rows.append({'processes': 1, 'threads a process': torch.get_num_threads(), 'seconds': seconds})
        print(rows[-1], flush=True)
        world = 2
        threads = max(1, cores // world)
        mp.spawn(_rank, args=(world, str(tmp / 'store'), str(tmp / 'sharded.flex'), args, threads,
                              str(tmp / 'time.json')), nprocs=world)
        seconds = json.loads((tmp / 'time.json').read_text())['seconds']
        rows.append({'processes': world, 'threads a process': threads, 'seconds': seconds})
        print(rows[-1], flush=True)
        one_docnos, one, _ = FlexIndex(str(tmp / 'one.flex')).payload()
        two_docnos, two, _ = FlexIndex(str(tmp / 'sharded.flex')).payload()
        same_order = list(one_docnos) == list(two_docnos)
        max_diff = float(np.abs(np.asarray(one) - np.asarray(two)).max())
        dtype = str(encoder.compute_dtype())
    for r in rows:
        r['passages a second'] = args.docs / r['seconds']
    header = provenance.header()
    lines = ['# Corpus encoding: one process against two (`encode_sharded`, gloo)', '',
             *(f'- {k}: {v}' for k, v in header.items()),
             f'- model: {provenance.model_revision(args.model)} ({dtype})',
             f'- data: the first {args.docs} documents of {args.collection}, chunks of {args.chunk}',
             f'- the same index: docnos in the same order {same_order}; max |difference| of the vectors {max_diff:.2e}',
             '- timed: from the first chunk to the index written (models loaded and warmed up before)', '',
             '| processes | threads a process | seconds | passages a second |', '|---|---|---|---|']
    lines += [f'| {r["processes"]} | {r["threads a process"]} | {r["seconds"]:.1f} | {r["passages a second"]:.1f} |'
              for r in rows]
    lines += ['']
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / 'sharded_encoding.md').write_text('\n'.join(lines))
    (RESULTS / 'sharded_encoding.json').write_text(json.dumps(
        {'header': header, 'same order': same_order, 'max difference': max_diff, 'rows': rows}, indent=1))
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
