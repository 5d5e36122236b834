"""A corpus of a million passages encoded and searched on one device (issue 49 item 5).

No corpus here has a million passages, so one is made from real text: each passage joins 2 to
6 sentences drawn at random (seed 0) from the sentences of scifact's and cranfield's documents
(the data the GPU bundle carries). It is written as a JSON lines file and read back through
`Collection.from_files`, so that the index is built by the package's own path
(`flex_index`: the docstore read, `DualEncoder` encoding in chunks, a pyterrier-dr FlexIndex).
scifact's 300 test queries are then searched over it (top 1,000, `DenseRetriever` with
`search='auto'`: exact below a million passages, FAISS IVF from a million where FAISS is
installed, exact on the GPU through torch where it is not).

Reports the passages encoded a second, the index's size, the search's queries a second, and,
on CUDA, the GPU memory torch allocated at its peak.

    python experiments/benchmarks/million_passages.py [--passages 1000000] [--results-dir DIR]

Writes million_passages.{md,json} to the results directory (experiments/results by default;
scripts/gpu/run.sh million writes them where the device tool brings them back).
"""
import argparse
import json
import re
import tempfile
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parents[1] / 'results'
SOURCES = ('beir/scifact/test', 'cranfield')


def sentences() -> list:
    from pyterrier_selfsup import Collection
    found = []
    for name in SOURCES:
        for doc in Collection(name).corpus_iter():
            found += [s for s in re.split(r'(?<=[.!?])\s+', doc['text']) if len(s.split()) >= 4]
    return found


def write_corpus(path: Path, n: int, pool: list, seed: int = 0) -> float:
    """``n`` passages of 2 to 6 sentences of ``pool`` into a JSON lines file; mean characters."""
    rng = np.random.default_rng(seed)
    chars = 0
    with open(path, 'w') as fh:
        for start in range(0, n, 100_000):
            size = min(100_000, n - start)
            counts = rng.integers(2, 7, size)
            picks = rng.integers(0, len(pool), counts.sum())
            ends = np.cumsum(counts)
            for i, (lo, hi) in enumerate(zip(ends - counts, ends)):
                text = ' '.join(pool[j] for j in picks[lo:hi])
                chars += len(text)
                fh.write(json.dumps({'docno': f'm{start + i}', 'text': text}) + '\n')
    return chars / n


def synchronise():
    import torch
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--passages', type=int, default=1_000_000)
    parser.add_argument('--results-dir', type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    import torch

    from pyterrier_selfsup import MINILM, Collection, DenseRetriever, DualEncoder
    from pyterrier_selfsup.harness import provenance
    from pyterrier_selfsup.retrieval.dense import flex_index

    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        pool = sentences()
        mean_chars = write_corpus(Path(tmp) / 'docs.jsonl', args.passages, pool)
        corpus = Collection.from_files(Path(tmp) / 'docs.jsonl')
        made = time.perf_counter() - started

        encoder = DualEncoder.from_pretrained(MINILM)
        encoder.encode_docs([t for t in pool[:512]])  # warm-up: kernels, allocator
        synchronise()
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        index = flex_index(corpus, encoder, cache_dir=Path(tmp) / 'cache')
        synchronise()
        encoding = time.perf_counter() - started
        peak = torch.cuda.max_memory_allocated() / 2 ** 30 if torch.cuda.is_available() else None
        index_bytes = sum(f.stat().st_size for f in Path(index.index_path).rglob('*') if f.is_file())

        topics = Collection('beir/scifact/test').topics()[['qid', 'query']]
        retriever = DenseRetriever(encoder, index)
        retriever(topics.head(8))  # warm-up (and, for IVF, the index's build)
        synchronise()
        started = time.perf_counter()
        run = retriever(topics)
        synchronise()
        searching = time.perf_counter() - started

    row = {'passages': args.passages, 'mean characters': mean_chars,
           'corpus written (s)': made, 'encoding and indexing (s)': encoding,
           'passages / s': args.passages / encoding, 'index bytes': index_bytes,
           'GPU peak GiB': peak, 'queries': len(topics), 'search (s)': searching,
           'queries / s': len(topics) / searching, 'search': retriever.search_method,
           'results a query': float(run.groupby('qid').size().mean()),
           'device': str(encoder.device),
           'dtype': str(encoder.compute_dtype()).replace('torch.', '')}
    header = provenance.header()
    lines = ['# A million passages encoded and searched on one device', '',
             *(f'- {k}: {v}' for k, v in header.items()),
             f'- model: {provenance.model_revision(MINILM)} (`DualEncoder`, precision auto)',
             f'- corpus: {args.passages:,} passages of 2 to 6 sentences drawn (seed 0) from '
             f'{len(pool):,} sentences of {" and ".join(SOURCES)}; {mean_chars:.0f} characters on '
             'average', '',
             '| what | on | precision | measured | rate |', '|---|---|---|---|---|',
             f'| encoding into a FlexIndex (`flex_index`) | {row["device"]} | {row["dtype"]} | '
             f'{args.passages:,} passages in {encoding:.1f} s | **{row["passages / s"]:,.0f} passages '
             f'/ s** |',
             f'| search (`{row["search"]}`, top 1,000) | {row["device"]} | {row["dtype"]} | '
             f'{len(topics)} scifact test queries in {searching:.2f} s | '
             f'**{row["queries / s"]:,.1f} queries / s** |', '',
             f'The index holds {index_bytes / 2 ** 20:,.0f} MiB; writing the corpus took {made:.0f} s; '
             + (f'GPU peak while encoding {peak:.2f} GiB.' if peak is not None else 'no GPU.'), '']
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / 'million_passages.md').write_text('\n'.join(lines))
    (args.results_dir / 'million_passages.json').write_text(
        json.dumps({'header': header, 'row': row}, indent=1))
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
