"""The dual encoder's vectors and speed against an earlier commit's, and sentence-transformers'.

For each local collection (scifact test, cranfield, vaswani, CISI and ADI) it encodes the first
1,000 passages and the first 100 queries with three encoders built from all-MiniLM-L6-v2, each
in fp32 with torch on the CPU:

- ``minilm``: the model as it is published (mean pooling, normalised);
- ``thesis``: ``cls`` pooling, 128-dimensional projections set from a seeded generator (the
  query's and the passage's differ), no normalisation, and e5's prompts;
- ``untied``: ``thesis`` with its passage tower untied and every passage-side weight moved by
  seeded noise, as a query-tower training leaves a model with a passage tower of its own.

It runs this checkout's package and the one at ``--old`` (a git worktree in a temporary
directory), each in a process of its own, one after the other, and writes the largest
difference between their vectors. In the same run it times the passages of the ``minilm``
encoder (after one warm-up pass) in both, and sentence-transformers' ``encode_document`` on
the same texts.

    python scripts/encoder_equivalence.py [--old af17d79] [--docs 1000]

writes experiments/results/encoder_equivalence.{md,json}. ``dump OUT`` writes one package's
vectors and timings (what each process runs). The suite checks a sample: the first 16 passages
and 8 queries of ADI, against the vectors at af17d79 in ``tests/data/af17d79_adi_vectors.npz``
(tests/test_dual_encoder.py).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / 'experiments' / 'results'
COLLECTIONS = ['beir/scifact/test', 'cranfield', 'vaswani', 'classic/cisi', 'classic/adi']
MINILM = 'sentence-transformers/all-MiniLM-L6-v2'
QUERIES = 100
DIM = 128
E5 = {'query': 'query: ', 'passage': 'passage: '}


def texts(name: str, docs: int) -> tuple[list[str], list[str]]:
    from pyterrier_selfsup import Collection
    collection = Collection(name)
    passages = []
    for doc in collection.corpus_iter():
        passages.append(doc['text'])
        if len(passages) == docs:
            break
    return passages, list(collection.topics()['query'][:QUERIES])


def projections(encoder):
    """The query and the passage projection's weights, wherever the package keeps them."""
    model = encoder.model
    if hasattr(model, 'query_proj'):  # (a DualEncoderModel of its own, before 2026-12-02)
        return model.query_proj.weight, model.passage_proj.weight
    return model.projection_weights()


def encoders():
    import torch

    from pyterrier_selfsup.models.dual_encoder import DualEncoder

    def load(**kwargs):
        return DualEncoder.from_pretrained(MINILM, device='cpu', precision='fp32',
                                           backend='torch', **kwargs)
    yield 'minilm', load()

    def thesis():
        encoder = load(pooling='cls', dim=DIM, normalize=False)
        encoder.prompts = dict(E5)
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for weight in projections(encoder):
                weight.copy_(torch.randn(weight.shape, generator=generator) / weight.shape[1] ** .5)
        return encoder
    yield 'thesis', thesis()
    untied = thesis()
    untied.model.untie()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in untied.model.passage_parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.01 * p.std().nan_to_num(0.0))
    yield 'untied', untied


def dump(out: Path, docs: int):
    """Writes the vectors of every encoder and collection, and the ``minilm`` timings."""
    import torch
    torch.manual_seed(0)
    vectors, timings = {}, {}
    corpora = {name: texts(name, docs) for name in COLLECTIONS}
    for config, encoder in encoders():
        for name, (passages, queries) in corpora.items():
            vectors[f'{config}|{name}|passage'] = encoder.encode_docs(passages)
            vectors[f'{config}|{name}|query'] = encoder.encode_queries(queries)
        if config == 'minilm':
            passages = corpora['beir/scifact/test'][0]
            encoder.encode_docs(passages)  # (a warm-up)
            start = time.perf_counter()
            encoder.encode_docs(passages)
            timings['package'] = len(passages) / (time.perf_counter() - start)
            if '--library' in sys.argv:
                timings['sentence-transformers'] = library_speed(passages)
    np.savez(out, **{k.replace('/', '~'): v for k, v in vectors.items()})
    out.with_suffix('.json').write_text(json.dumps(timings))


def library_speed(passages: list[str]) -> float:
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(MINILM, device='cpu')
    model.max_seq_length = 256
    model.encode_document(passages, batch_size=32)
    start = time.perf_counter()
    model.encode_document(passages, batch_size=32)
    return len(passages) / (time.perf_counter() - start)


def run_dump(checkout: Path, out: Path, docs: int, library: bool = False):
    env = dict(os.environ, PYTHONPATH=str(checkout))
    subprocess.run([sys.executable, str(Path(__file__).resolve()), 'dump', str(out),
                    '--docs', str(docs)] + (['--library'] if library else []),
                   cwd=checkout, env=env, check=True)
    return np.load(out), json.loads(out.with_suffix('.json').read_text())


def compare(old: str, docs: int):
    from pyterrier_selfsup.harness import provenance
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / 'old'
        subprocess.run(['git', 'worktree', 'add', '--detach', str(tree), old], cwd=ROOT,
                       check=True, capture_output=True)
        try:
            before, old_speed = run_dump(tree, Path(tmp) / 'old.npz', docs)
        finally:
            subprocess.run(['git', 'worktree', 'remove', '--force', str(tree)], cwd=ROOT,
                           check=True)
        after, new_speed = run_dump(ROOT, Path(tmp) / 'new.npz', docs, library=True)
        rows = []
        for key in before.files:
            config, name, side = key.replace('~', '/').split('|')
            rows.append({'encoder': config, 'collection': name, 'side': side,
                         'texts': len(before[key]),
                         'max_abs_difference': float(np.abs(before[key] - after[key]).max())})
    worst = max(r['max_abs_difference'] for r in rows)
    speeds = {f'package at {old}': old_speed['package'], 'package now': new_speed['package'],
              'sentence-transformers': new_speed['sentence-transformers']}
    RESULTS.joinpath('encoder_equivalence.json').write_text(
        json.dumps({'old': old, 'rows': rows, 'passages_per_second': speeds}, indent=2))
    lines = [f'# The dual encoder at {old} and now: vectors and speed', '',
             *(f'- {k}: {v}' for k, v in provenance.header(
                 f'python scripts/encoder_equivalence.py --old {old} --docs {docs}').items()), '',
             f'The first {docs} passages and {QUERIES} queries of each collection, in fp32 with '
             'torch on the CPU (all-MiniLM-L6-v2; the encoders are named in the script\'s '
             f'docstring). The largest difference between a vector element at {old} and now is '
             f'**{worst:.2e}**.', '',
             '| encoder | collection | side | texts | largest difference |',
             '|---|---|---|---|---|']
    lines += [f'| {r["encoder"]} | {r["collection"]} | {r["side"]} | {r["texts"]} | '
              f'{r["max_abs_difference"]:.2e} |' for r in rows]
    lines += ['', f'Passages a second, the first {docs} of scifact at 256 tokens, batches of 32, '
              'after a warm-up pass, each in a process of its own on this machine:', '',
              '| encoder | passages/s |', '|---|---|']
    lines += [f'| {k} | {v:.1f} |' for k, v in speeds.items()]
    RESULTS.joinpath('encoder_equivalence.md').write_text('\n'.join(lines) + '\n')
    print('\n'.join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('command', nargs='?', default='compare', choices=['compare', 'dump'])
    parser.add_argument('out', nargs='?')
    parser.add_argument('--old', default='af17d79')
    parser.add_argument('--docs', type=int, default=1000)
    parser.add_argument('--library', action='store_true')
    args = parser.parse_args()
    if args.command == 'dump':
        dump(Path(args.out), args.docs)
    else:
        compare(args.old, args.docs)


if __name__ == '__main__':
    main()
