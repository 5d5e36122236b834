"""How dense search cost grows with the corpus: exact against FAISS IVF and HNSW (issue 17).

Real collections here top out at 11k passages, so larger corpora are synthetic, drawn from
a model of the real embedding space: all-MiniLM-L6-v2's vectors of the five collections'
passages (about 19.5k) clustered by k-means (256 clusters), then sampled as a Gaussian
mixture (a cluster by its share, its centroid plus per-dimension Gaussian noise with the
cluster's own spread, L2-normalised). The queries are real: MiniLM's vectors of the
collections' query texts. The real passages are searched as well, and a synthetic corpus
of their size, so that synthetic and real recall can be compared where both exist.

For each size: every vector goes into a pyterrier-dr FlexIndex (the code path of
`DenseRetriever`), then
- exact: FlexIndex's numpy retriever (what `search='exact'` uses);
- IVF: FlexIndex's FAISS IVF-flat (n_list ≈ √N rounded to a power of 2), n_probe swept;
- HNSW: FlexIndex's FAISS HNSW-flat (32 neighbours, ef_construction 40), ef_search swept;
timing the build and the search of every query (one call, top 1000, as every dense
pipeline searches), and recall@10, @100 and @1000 of each approximate search against exact
search's top lists.

    python experiments/benchmarks/search_scaling.py [--sizes 10000 100000 1000000] [--hnsw-max 1000000]
    python experiments/benchmarks/search_scaling.py --plot-only    # the PNG again from the JSON

Writes experiments/results/search_scaling.{md,json,png}.
"""
import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.retrieval.ann import (
    APPROXIMATE_FROM,
    HNSW_NEIGHBOURS,
    IVF_PROBE_SHARE,
    ivf_n_list,
    ivf_n_probe,
    prebuild_ann,
)
from pyterrier_selfsup.retrieval.dense import MINILM, DenseRetriever

RESULTS = Path(__file__).resolve().parents[1] / 'results'
COLLECTIONS = ['beir/scifact/test', 'vaswani', 'cranfield', 'classic/cisi', 'classic/adi']
QUERY_SETS = ['beir/scifact/train', 'beir/scifact/test', 'vaswani', 'cranfield', 'classic/cisi', 'classic/adi']
N_PROBES = (1, 4, 16, 64, 256)
EF_SEARCHES = (1000, 2000)  # FAISS searches HNSW with a beam of max(ef_search, k)
K = 1000  # num_results of every dense pipeline and of the trainers' candidate search
CLUSTERS = 256


def real_vectors():
    """MiniLM's passage vectors of the collections (their cached indexes) and its query vectors."""
    passages, queries = [], []
    for name in COLLECTIONS:
        retriever = DenseRetriever.from_collection(name, MINILM)
        _, vectors, _ = retriever.index.payload()
        passages.append(np.asarray(vectors, dtype=np.float32))
    encoder = retriever.encoder
    for name in QUERY_SETS:
        texts = Collection(name).topics()['query'].tolist()
        queries.append(np.asarray(encoder.encode_queries(texts), dtype=np.float32))
    return np.concatenate(passages), np.concatenate(queries)


def mixture(real: np.ndarray, seed: int = 0):
    """A Gaussian mixture of ``real``'s k-means clusters: weights, centroids, per-dimension spreads."""
    import faiss
    kmeans = faiss.Kmeans(real.shape[1], CLUSTERS, niter=20, seed=seed, verbose=False)
    kmeans.train(real)
    _, assign = kmeans.index.search(real, 1)
    assign = assign[:, 0]
    weights = np.bincount(assign, minlength=CLUSTERS) / len(real)
    spreads = np.stack([real[assign == c].std(0) if (assign == c).sum() > 1 else real.std(0)
                        for c in range(CLUSTERS)])
    return weights, kmeans.centroids, spreads


def sample(model, n: int, seed: int, chunk: int = 100_000):
    """``n`` unit vectors from the mixture, in chunks (bounded memory)."""
    weights, centroids, spreads = model
    rng = np.random.default_rng(seed)
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        c = rng.choice(len(weights), size=m, p=weights)
        v = centroids[c] + rng.standard_normal((m, centroids.shape[1]), dtype=np.float32) * spreads[c]
        yield (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def build_flex(path: Path, chunks):
    from pyterrier_dr import FlexIndex
    index = FlexIndex(str(path), verbose=False)

    def docs():
        i = 0
        for chunk in chunks:
            for v in chunk:
                yield {'docno': str(i), 'doc_vec': v}
                i += 1
    start = time.perf_counter()
    index.index(docs())
    return index, time.perf_counter() - start


def recall(approx: pd.DataFrame, exact_frame: pd.DataFrame, k: int) -> float:
    a = {q: g.nsmallest(k, 'rank')['docid'] for q, g in approx.groupby('qid')}
    e = {q: g.nsmallest(k, 'rank')['docid'] for q, g in exact_frame.groupby('qid')}
    return float(np.mean([len(set(a.get(q, [])) & set(d)) / len(d) for q, d in e.items()]))


def timed(retriever, queries: pd.DataFrame):
    start = time.perf_counter()
    frame = retriever(queries)
    return frame, (time.perf_counter() - start) * 1000 / len(queries)


def measure(index, queries: pd.DataFrame, n: int, hnsw: bool, label: str) -> list:
    rows = []
    exact, ms = timed(index.np_retriever(num_results=K), queries)
    vectors_mib = (index.index_path / 'vecs.f4').stat().st_size / 2**20
    rows.append(dict(size=n, data=label, search='exact', shipped=False, param='', build_s=0.0, ms_per_query=ms,
                     recall10=1.0, recall100=1.0, recall1000=1.0, file_mib=0.0, vectors_mib=vectors_mib))
    print(rows[-1], flush=True)
    shipped_probe = ivf_n_probe(n)  # what search='ivf' (and 'auto' from APPROXIMATE_FROM on) probes
    ivf_probes = sorted(set(N_PROBES) | {shipped_probe})
    for search, params in [('ivf', ivf_probes)] + ([('hnsw', EF_SEARCHES)] if hnsw else []):
        start = time.perf_counter()
        path = prebuild_ann(index, search)  # the package's own build (what search='ivf'/'hnsw' run)
        build = time.perf_counter() - start
        for p in params:
            retriever = (index.faiss_ivf_retriever(num_results=K, n_probe=p) if search == 'ivf' else
                         index.faiss_hnsw_retriever(HNSW_NEIGHBOURS, num_results=K, ef_search=p))
            frame, ms = timed(retriever, queries)
            rows.append(dict(size=n, data=label, search=search, shipped=search == 'ivf' and p == shipped_probe,
                             param=f'n_probe={p}' if search == 'ivf' else f'ef_search={p}', build_s=build,
                             ms_per_query=ms, recall10=recall(frame, exact, 10), recall100=recall(frame, exact, 100),
                             recall1000=recall(frame, exact, K), file_mib=path.stat().st_size / 2**20,
                             vectors_mib=vectors_mib))
            print(rows[-1], flush=True)
    return rows


def torch_threads() -> int:
    import torch
    return torch.get_num_threads()


def faiss_threads() -> int:
    import faiss
    return faiss.omp_get_max_threads()


def plot(rows: pd.DataFrame, path: Path, header: dict):
    """Search cost and recall@100 against corpus size, one line per search setting: exact
    (black), the shipped IVF n_probe (red), the IVF sweep in blues (darker: more lists
    probed), HNSW dotted; the legend beside both panels, provenance under them."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    from matplotlib.transforms import blended_transform_factory
    syn = rows[rows['data'] == 'synthetic'].sort_values('size')
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5), layout='constrained')
    lines = [('exact', syn[syn['search'] == 'exact'], dict(color='black', lw=2.4, zorder=4)),
             (f'IVF, shipped n_probe (n_list/{round(1 / IVF_PROBE_SHARE)})', syn[syn['shipped']],
              dict(color='tab:red', lw=2.4, zorder=4))]
    blues = matplotlib.colormaps['Blues']
    for i, n_probe in enumerate(N_PROBES):
        g = syn[(syn['search'] == 'ivf') & (syn['param'] == f'n_probe={n_probe}')]
        lines.append((f'IVF n_probe={n_probe}', g, dict(color=blues(0.35 + 0.65 * i / (len(N_PROBES) - 1)),
                                                        lw=1.2, ls='--')))
    for ef, colour in zip(EF_SEARCHES, ('tab:orange', 'tab:brown')):
        g = syn[(syn['search'] == 'hnsw') & (syn['param'] == f'ef_search={ef}')]
        lines.append((f'HNSW ef_search={ef}', g, dict(color=colour, lw=1.2, ls=':')))
    for label, g, style in lines:
        ax1.plot(g['size'], g['ms_per_query'], marker='o', ms=4, label=label, **style)
        ax2.plot(g['size'], g['recall100'], marker='o', ms=4, **style)
    for ax in (ax1, ax2):
        ax.axvline(APPROXIMATE_FROM, color='grey', lw=0.8)
        ax.text(APPROXIMATE_FROM, 0.02, 'search=\'auto\': IVF from here ', rotation=90, va='bottom', ha='right',
                fontsize=7, color='grey', transform=blended_transform_factory(ax.transData, ax.transAxes))
        ax.grid(alpha=0.3)
    ax1.set(xscale='log', yscale='log', xlabel='passages (synthetic)', ylabel=f'search ms a query (top {K}, batched)',
            title='search cost')
    ax2.set(xscale='log', xlabel='passages (synthetic)', ylabel='recall@100 against exact search',
            title='what approximate search keeps (axis: the data\'s range)')
    fig.legend(loc='outside right center', fontsize=8, frameon=False)
    fig.suptitle('Dense search cost against corpus size: exact, FAISS IVF and HNSW (pyterrier-dr FlexIndex)', fontsize=10)
    footer = [f'{k}: {header[k]}' for k in ('date', 'code', 'machine') if k in header]
    fig.supxlabel('\n'.join(footer), fontsize=6, family='monospace', ha='left', x=0.005)
    fig.savefig(path, dpi=120, metadata={'Description': '\n'.join(f'{k}: {v}' for k, v in header.items())})
    plt.close(fig)
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--sizes', type=int, nargs='+', default=[10_000, 100_000, 1_000_000])
    parser.add_argument('--hnsw-max', type=int, default=1_000_000, help='largest size to build HNSW for')
    parser.add_argument('--workdir', default=None, help='where the synthetic indexes go (removed after each size)')
    parser.add_argument('--plot-only', action='store_true', help='redraw the PNG from the JSON, measure nothing')
    args = parser.parse_args(argv)
    if args.plot_only:
        data = json.loads((RESULTS / 'search_scaling.json').read_text())
        return plot(pd.DataFrame(data['rows']), RESULTS / 'search_scaling.png', data['header'])
    started = time.time()
    real, query_vecs = real_vectors()
    queries = pd.DataFrame({'qid': [str(i) for i in range(len(query_vecs))], 'query': '',
                            'query_vec': list(query_vecs)})
    model = mixture(real)
    work = Path(tempfile.mkdtemp(prefix='search-scaling-', dir=args.workdir))
    rows = []
    try:
        index, _ = build_flex(work / 'real.flex', [real])
        rows += measure(index, queries, len(real), True, 'real')
        for n in [len(real)] + args.sizes:  # the first: synthetic against real at the same size
            index, _ = build_flex(work / f'{n}.flex', sample(model, n, seed=n))
            rows += measure(index, queries, n, n <= args.hnsw_max, 'synthetic')
            shutil.rmtree(work / f'{n}.flex')
    finally:
        shutil.rmtree(work, ignore_errors=True)
    frame = pd.DataFrame(rows)
    header = provenance.header()
    lines = ['# Dense search scaling: exact against FAISS IVF and HNSW', '',
             *(f'- {k}: {v}' for k, v in header.items()),
             f'- model: {provenance.model_revision(MINILM)} (384 dimensions, unit vectors, dot product)',
             f'- passages: "real" = MiniLM vectors of {", ".join(COLLECTIONS)} ({len(real)}); "synthetic" = '
             f'a {CLUSTERS}-cluster Gaussian mixture fitted to them (see the script)',
             f'- queries: MiniLM vectors of the query texts of {", ".join(QUERY_SETS)} ({len(query_vecs)}), '
             f'searched in one call, top {K}',
             '- build: `prebuild_ann` (the package\'s own): IVF-flat = k-means on a sample of 39 a list + adding '
             '(its file holds a second copy of the vectors); HNSW-flat = graph construction (32 neighbours, '
             'ef_construction 40; its file holds the graph and a copy of the vectors)',
             f'- threads: torch {torch_threads()}, faiss {faiss_threads()}',
             '- recall@k: the share of exact search\'s top k that the approximate search returns in its top k',
             f'- shipped (**bold**): `search=\'auto\'` is exact below {APPROXIMATE_FROM:,} passages and IVF from '
             f'there, probing {IVF_PROBE_SHARE:g} of the n_list posting lists (n_list = {ivf_n_list(10**6)} at 1M)',
             '',
             '| passages | data | search | setting | build s | ms / query | recall@10 | recall@100 | recall@1000 | '
             'vectors MiB | ANN file MiB |', '|---|---|---|---|---|---|---|---|---|---|---|']
    for r in rows:
        setting = f'**{r["param"]}**' if r['shipped'] else r['param']
        lines.append(f'| {r["size"]:,} | {r["data"]} | {r["search"]} | {setting} | {r["build_s"]:.1f} | '
                     f'{r["ms_per_query"]:.3f} | {r["recall10"]:.3f} | {r["recall100"]:.3f} | '
                     f'{r["recall1000"]:.3f} | {r["vectors_mib"]:.0f} | {r["file_mib"]:.0f} |')
    lines += ['', f'Wall time: {time.time() - started:.0f} s.', '']
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / 'search_scaling.md').write_text('\n'.join(lines))
    (RESULTS / 'search_scaling.json').write_text(json.dumps({'header': header, 'rows': rows}, indent=1))
    plot(frame, RESULTS / 'search_scaling.png', header)
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
