"""How the ReAtt token index scales: build, size, exhaustive against two-stage search from
scifact's 1.2M keys to 3·10^7 (issue 17).

On scifact (1.2M keys) the two-stage search at its operating point (K'=2048, nprobe=64,
rescore=512: the fastest with recall@10 >= .99 on scifact train, reatt_index_benchmark.py)
is only 1.2x faster than scoring every document, whose cost grows with the number of
keys, while the two-stage search's grows with the posting lists it reads (FAISS'
default of about 4·sqrt(N) lists: sqrt(N) keys a list) and a fixed number of candidates.
This measures both from 1.2M keys to 3·10^7.

- real: scifact test's token index (all-MiniLM-L6-v2's retrieval head, as `reatt`);
- synthetic: larger corpora made of scifact's documents drawn with replacement, each key
  plus Gaussian noise (sd ``NOISE`` times the keys' own per-dimension sd), so that copies of
  a document are not identical; written in the index's format and its IVF built by the
  package's own `build_ivf` with its defaults.
- queries: scifact train's first ``--queries`` (their retrieval-head vectors), one at a
  time, 100 results; recall@10 against the exhaustive top 10 on the same corpus.

    python experiments/benchmarks/token_index_scaling.py [--workdir /tmp] [--queries 100] [--keys 3000000 10000000 30000000]
    python experiments/benchmarks/token_index_scaling.py --plot-only      # the PNG again from the JSON

Writes experiments/results/token_index_scaling.{md,json,png}.
"""
import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from pyterrier_selfsup import MINILM, Collection
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.models.reatt import ReAtt
from pyterrier_selfsup.retrieval.token_index import (
    DOCNOS_FILE,
    IVF_FILE,
    KEYS_FILE,
    META_FILE,
    OFFSETS_FILE,
    ReAttIndex,
    build_ivf,
    reatt_index,
)
from pyterrier_selfsup.training.settings import REATT_HEAD

RESULTS = Path(__file__).resolve().parents[1] / 'results'
SYNTHETIC_KEYS = (3_000_000, 10_000_000, 30_000_000)
OPERATING_POINT = {"K'": 2048, 'nprobe': 64, 'rescore': 512}
NOISE = 0.1


def synthetic(real: ReAttIndex, n_keys: int, path: Path, seed: int = 0) -> ReAttIndex:
    """About ``n_keys`` keys of scifact documents drawn with replacement, plus noise."""
    rng = np.random.default_rng(seed)
    lengths = np.diff(real.offsets)
    n_docs = int(n_keys / lengths.mean())
    source = rng.integers(0, len(real), n_docs)
    sd = real.keys[rng.choice(len(real.keys), 100_000, replace=False)].astype(np.float32).std(axis=0)
    path.mkdir(parents=True)
    offsets = np.concatenate([[0], np.cumsum(lengths[source])]).astype(np.int64)
    with open(path / KEYS_FILE, 'wb') as out:
        for start in range(0, n_docs, 10_000):
            block = source[start:start + 10_000]
            index = np.concatenate([np.arange(real.offsets[d], real.offsets[d + 1]) for d in block])
            keys = real.keys[index].astype(np.float32)
            keys += rng.standard_normal(keys.shape, dtype=np.float32) * (NOISE * sd)
            out.write(keys.astype(np.float16).tobytes())
    np.save(path / OFFSETS_FILE, offsets)
    (path / DOCNOS_FILE).write_text(json.dumps([f's{i}' for i in range(n_docs)]))
    meta = dict(real.meta, documents=n_docs, tokens=int(offsets[-1]), synthetic=True)
    t0 = time.perf_counter()
    meta['nlist'] = build_ivf(path, real.meta['dim'])
    meta['ivf_seconds'] = time.perf_counter() - t0
    (path / META_FILE).write_text(json.dumps(meta, indent=2))
    return ReAttIndex(path)


def measure(index: ReAttIndex, vectors, label: str) -> dict:
    """Exhaustive and two-stage search of every query, one at a time; recall@10 of the latter."""
    index.keys32  # (in memory for both, as reatt_index_benchmark.py times them)
    index.ivf
    exhaustive, two_stage, recall = [], [], []
    for q in vectors:
        t0 = time.perf_counter()
        reference, _ = index.search(q, 100, None, 0)
        exhaustive.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        found, _ = index.search(q, 100, OPERATING_POINT["K'"], OPERATING_POINT['nprobe'], OPERATING_POINT['rescore'])
        two_stage.append(time.perf_counter() - t0)
        recall.append(len(set(found[:10]) & set(reference[:10])) / max(1, min(10, len(reference))))
    files = {f: (index.path / f).stat().st_size for f in (KEYS_FILE, IVF_FILE)}
    row = {'data': label, 'documents': len(index), 'keys': int(index.offsets[-1]), 'nlist': index.meta['nlist'],
           'ivf build s': index.meta['ivf_seconds'], 'keys MiB': files[KEYS_FILE] / 2 ** 20,
           'ivf MiB': files[IVF_FILE] / 2 ** 20, 'exhaustive ms': 1000 * float(np.mean(exhaustive)),
           'two-stage ms': 1000 * float(np.mean(two_stage)), 'recall@10': float(np.mean(recall))}
    row['speed-up'] = row['exhaustive ms'] / row['two-stage ms']
    print(row, flush=True)
    return row


def title(rows) -> str:
    """The report's title, its range taken from the rows measured."""
    keys = [r['keys'] for r in rows]
    return (f'# ReAtt token index: exhaustive against two-stage search, {min(keys) / 1e6:.1f}M to '
            f'{max(keys) / 1e6:.0f}M keys')


def plot(rows, path: Path, header: dict):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    keys = [r['keys'] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.6), layout='constrained')
    ax.loglog(keys, [r['exhaustive ms'] for r in rows], 'o-', label='exhaustive (every document scored)')
    ax.loglog(keys, [r['two-stage ms'] for r in rows], 's-',
              label="two-stage (K'={K'}, nprobe={nprobe}, rescore={rescore})".format(**OPERATING_POINT))
    for r in rows:
        ax.annotate(f'recall@10\n{r["recall@10"]:.3f}', (r['keys'], r['two-stage ms']), textcoords='offset points',
                    xytext=(0, 8), fontsize=8, ha='center')
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())  # (decades only: no overlapping labels)
    ax.set_xlim(min(keys) / 1.6, max(keys) * 1.6)
    ax.set_ylim(min(r['two-stage ms'] for r in rows) / 2, max(r['exhaustive ms'] for r in rows) * 2)
    ax.set_xlabel('keys (document tokens) in the index')
    ax.set_ylabel('ms a query (one at a time, 2 cores)')
    ax.set_title('ReAtt token index: search cost against size')
    ax.legend(fontsize=8, loc='upper left')
    ax.grid(True, which='both', alpha=0.3)
    footer = [f'{k}: {header[k]}' for k in ('date', 'code', 'machine') if k in header]
    fig.supxlabel('\n'.join(footer), fontsize=5, family='monospace', ha='left', x=0.005)
    fig.savefig(path, dpi=110, metadata={'Description': '\n'.join(f'{k}: {v}' for k, v in header.items())})
    plt.close(fig)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--workdir', default=None, help='where the synthetic indexes are written (removed after)')
    parser.add_argument('--queries', type=int, default=100)
    parser.add_argument('--keys', type=int, nargs='+', default=list(SYNTHETIC_KEYS), help='synthetic corpus sizes')
    parser.add_argument('--results-dir', type=Path, default=RESULTS)
    parser.add_argument('--plot-only', action='store_true', help='redraw the PNG from the JSON, measure nothing')
    args = parser.parse_args(argv)
    if args.plot_only:
        data = json.loads((args.results_dir / 'token_index_scaling.json').read_text())
        report = args.results_dir / 'token_index_scaling.md'  # its title from the rows (once said 10M for 30M)
        report.write_text('\n'.join([title(data['rows'])] + report.read_text().split('\n')[1:]))
        return plot(data['rows'], args.results_dir / 'token_index_scaling.png', data['header'])
    reatt = ReAtt.from_pretrained(MINILM, **REATT_HEAD)
    t0 = time.perf_counter()
    real = reatt_index(Collection('beir/scifact/test'), reatt)
    real_build = time.perf_counter() - t0
    queries = Collection('beir/scifact/train').topics()['query'].head(args.queries).tolist()
    vectors = real.query_vectors(reatt, queries)
    rows = [measure(real, vectors, 'real (scifact test)')]
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        for n_keys in args.keys:
            index = synthetic(real, n_keys, Path(tmp) / f'synthetic-{n_keys}')
            rows.append(measure(index, vectors, 'synthetic'))
            del index
            shutil.rmtree(Path(tmp) / f'synthetic-{n_keys}')
    header = provenance.header()
    lines = [title(rows), '',
             *(f'- {k}: {v}' for k, v in header.items()),
             f'- model: {provenance.model_revision(MINILM)}, retrieval head {REATT_HEAD}',
             f'- real: scifact test\'s token index ({"reopened from the cache" if real_build < 5 else "built"}); '
             f'synthetic: scifact documents drawn with replacement, keys + N(0, ({NOISE} x their sd)^2) noise',
             f'- queries: scifact train\'s first {len(queries)}, one at a time, 100 results; timed: the search '
             '(candidates, approximate and exact scoring, keys in memory in fp32), not query encoding',
             "- two-stage: K'={K'}, nprobe={nprobe}, rescore={rescore} (the operating point chosen on scifact "
             "train by reatt_index_benchmark.py); recall@10 against the exhaustive top 10".format(**OPERATING_POINT),
             '- IVF: the package\'s `build_ivf` (about 4 sqrt(N) lists, 256 training keys a list)', '',
             '| data | documents | keys | IVF lists | IVF build s | keys MiB | IVF MiB | exhaustive ms | two-stage ms '
             '| speed-up | recall@10 |', '|---|---|---|---|---|---|---|---|---|---|---|']
    lines += [f'| {r["data"]} | {r["documents"]:,} | {r["keys"]:,} | {r["nlist"]} | {r["ivf build s"]:.0f} | '
              f'{r["keys MiB"]:.0f} | {r["ivf MiB"]:.0f} | {r["exhaustive ms"]:.1f} | {r["two-stage ms"]:.1f} | '
              f'{r["speed-up"]:.1f} | {r["recall@10"]:.3f} |' for r in rows]
    lines += ['']
    args.results_dir.mkdir(parents=True, exist_ok=True)
    (args.results_dir / 'token_index_scaling.md').write_text('\n'.join(lines))
    (args.results_dir / 'token_index_scaling.json').write_text(json.dumps({'header': header, 'rows': rows}, indent=1))
    plot(rows, args.results_dir / 'token_index_scaling.png', header)
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
