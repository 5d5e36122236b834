"""ReAtt token index on scifact (issue 5, item 2): latency, recall@10 and nDCG@10 of the
two-stage search against exhaustive exact scoring, and the index's size.

The model is all-MiniLM-L6-v2 with the retrieval head (layer, head, special tokens) that
`reatt_heads.py` chose on scifact train (read from results/reatt_heads.csv). For each
setting of K' (document tokens fetched per query token), nprobe (IVF lists searched) and
rescore (how many of the candidates, ranked by their approximate score from the retrieved
tokens, are scored exactly; all when empty):
per-query search latency (median and mean over the queries, one query at a time, one
process; query encoding, which both searches share, is timed apart), recall@10 against
the exhaustive top 10 (the share of its top 10 that the two-stage search also returns),
and nDCG@10. The operating point is the fastest setting
whose recall@10 is at least 0.99 on the *train* queries; the test figures are reported.

    python experiments/benchmarks/reatt_index_benchmark.py
writes experiments/results/reatt_index_benchmark.{md,json}.
"""
import json
import time
from pathlib import Path

import ir_measures
import numpy as np
import pandas as pd
from ir_measures import nDCG

from pyterrier_selfsup import MINILM, Collection
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.models.reatt import ReAtt
from pyterrier_selfsup.retrieval.token_index import reatt_index

RESULTS = Path(__file__).resolve().parents[1] / 'results'
SPLITS = {'train': 'beir/scifact/train', 'test': 'beir/scifact/test'}
GRID = ([(k, 16, None) for k in (8, 32, 128, 512)]
        + [(k, p, r) for k in (128, 512, 2048) for p in (16, 64) for r in (128, 256, 512)])
TARGET_RECALL = 0.99
KP = "K'"  # the column of K'



def size_bytes(index) -> dict:
    """Bytes of each of the token index's files."""
    from pyterrier_selfsup.retrieval.token_index import (
        DOCNOS_FILE,
        IVF_FILE,
        KEYS_FILE,
        OFFSETS_FILE,
    )
    return {f: (index.path / f).stat().st_size for f in (KEYS_FILE, OFFSETS_FILE, DOCNOS_FILE, IVF_FILE)
            if (index.path / f).is_file()}

def chosen_head():
    table = pd.read_csv(RESULTS / 'reatt_heads.csv')
    train = table[(table['collection'] == 'beir/scifact/train') & (table['head'] >= 0)]
    best = train.loc[train['nDCG@10'].idxmax()]
    return int(best['layer']), int(best['head']), bool(best['special_tokens'])


def timed_search(index, vectors, topics, candidate_tokens, nprobe, rescore=None):
    """Results and per-query search seconds (the index's work: candidates and exact
    scoring), one query at a time; the query vectors are encoded before, once for all."""
    frames, seconds = [], []
    for qid, q in zip(topics['qid'], vectors):
        t0 = time.perf_counter()
        docs, scores = index.search(q, 100, candidate_tokens, nprobe, rescore)
        seconds.append(time.perf_counter() - t0)
        frames.append(pd.DataFrame({'qid': qid, 'docno': index.docnos[docs], 'score': scores,
                                    'rank': np.arange(len(docs))}))
    return pd.concat(frames, ignore_index=True), np.array(seconds)


def recall_at_10(run: pd.DataFrame, reference: pd.DataFrame) -> float:
    top = lambda frame: frame[frame['rank'] < 10].groupby('qid')['docno'].apply(set)  # noqa: E731
    mine, ref = top(run), top(reference)
    return float(np.mean([len(mine.get(q, set()) & docs) / len(docs) for q, docs in ref.items()]))


def ndcg10(run: pd.DataFrame, collection: Collection) -> float:
    qrels = collection.qrels().rename(columns={'qid': 'query_id', 'docno': 'doc_id', 'label': 'relevance'})
    frame = run.rename(columns={'qid': 'query_id', 'docno': 'doc_id'})[['query_id', 'doc_id', 'score']]
    return float(ir_measures.calc_aggregate([nDCG @ 10], qrels.astype({'relevance': int}), frame)[nDCG @ 10])


def main():
    header = provenance.header()
    layer, head, special = chosen_head()
    reatt = ReAtt.from_pretrained(MINILM, retrieval_layer=layer, head=head, special_tokens=special, verbose=True)
    t0 = time.time()
    index = reatt_index(SPLITS['test'], reatt, verbose=True)
    open_seconds = time.time() - t0
    index.keys32  # noqa: B018  (loaded before timing: both searches read keys from memory)
    rows, encode_ms = [], {}
    for split, name in SPLITS.items():
        collection = Collection(name)
        topics = collection.topics()
        t0 = time.perf_counter()
        vectors = index.query_vectors(reatt, topics['query'].tolist())
        encode_ms[split] = 1e3 * (time.perf_counter() - t0) / len(topics)
        reference, ref_seconds = timed_search(index, vectors, topics, None, None)
        rows.append({'split': split, KP: 'exhaustive', 'nprobe': '', 'rescore': '',
                     'median ms': 1e3 * np.median(ref_seconds),
                     'mean ms': 1e3 * ref_seconds.mean(), 'speed-up (mean)': 1.0, 'recall@10': 1.0,
                     'nDCG@10': ndcg10(reference, collection)})
        print(rows[-1], flush=True)
        for k, p, r in GRID:
            run, seconds = timed_search(index, vectors, topics, k, p, r)
            rows.append({'split': split, KP: k, 'nprobe': p, 'rescore': r or 'all',
                         'median ms': 1e3 * np.median(seconds),
                         'mean ms': 1e3 * seconds.mean(), 'speed-up (mean)': ref_seconds.mean() / seconds.mean(),
                         'recall@10': recall_at_10(run, reference), 'nDCG@10': ndcg10(run, collection)})
            print(rows[-1], flush=True)
    table = pd.DataFrame(rows)
    train = table[(table['split'] == 'train') & (table[KP] != 'exhaustive') & (table['recall@10'] >= TARGET_RECALL)]
    point = train.loc[train['mean ms'].idxmin()] if len(train) else None
    chosen = (table[(table['split'] == 'test') & (table[KP] == point[KP]) & (table['nprobe'] == point['nprobe'])
                    & (table['rescore'] == point['rescore'])].iloc[0] if point is not None else None)

    sizes = size_bytes(index)
    settings = {'model': f'{provenance.model_revision(MINILM)}, layer {layer}, head {head}, '
                         f'special tokens {"in" if special else "out"} (chosen on scifact train by reatt_heads.py)',
                'index': f'{index.meta["documents"]} documents, {index.meta["tokens"]} tokens, {index.meta["dim"]} '
                         f'dimensions, FAISS IndexIVFFlat (inner product) with {index.meta["nlist"]} lists; built in '
                         f'{index.meta["encode_seconds"]:.0f} s encoding + {index.meta["ivf_seconds"]:.0f} s IVF '
                         f'(or reopened from the cache: {open_seconds:.0f} s this run)',
                'index size': ', '.join(f'{f}: {b / 2**20:.1f} MiB' for f, b in sizes.items())
                              + f'; total {sum(sizes.values()) / 2**20:.1f} MiB',
                'timing': 'search only (candidates, approximate and exact scoring; keys in memory, fp32, for both), '
                          'one query at a time, 100 results a query; query encoding, the same for both, is separate: '
                          + ', '.join(f'{k} {v:.1f} ms a query (batched)' for k, v in encode_ms.items()),
                'operating point': (f"K'={point[KP]}, nprobe={point['nprobe']}, rescore={point['rescore']}: "
                                    f'the fastest with recall@10 >= {TARGET_RECALL} on train' if point is not None else
                                    f'no setting reached recall@10 {TARGET_RECALL} on train')}
    md = ['# ReAtt token index on scifact', ''] + [f'- {k}: {v}' for k, v in {**header, **settings}.items()]
    if chosen is not None:
        md += ['', f"On test at the operating point: {chosen['speed-up (mean)']:.1f}x faster than exhaustive "
                   f"(mean {chosen['mean ms']:.1f} ms against "
                   f"{table[(table['split'] == 'test') & (table[KP] == 'exhaustive')]['mean ms'].iloc[0]:.1f}),"
                   f" recall@10 {chosen['recall@10']:.4f}, nDCG@10 {chosen['nDCG@10']:.4f}."]
    md += ['', '| ' + ' | '.join(table.columns) + ' |', '|---|' + '---|' * (len(table.columns) - 1)]
    for _, row in table.iterrows():
        md.append('| ' + ' | '.join(f'{v:.4f}' if isinstance(v, float) and c in ('recall@10', 'nDCG@10') else
                                    f'{v:.1f}' if isinstance(v, float) else str(v) for c, v in row.items()) + ' |')
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / 'reatt_index_benchmark.md').write_text('\n'.join(md) + '\n')
    (RESULTS / 'reatt_index_benchmark.json').write_text(json.dumps(
        {'header': header, 'settings': settings, 'rows': table.to_dict(orient='records')}, indent=2, default=str))
    print('\n'.join(md))


if __name__ == '__main__':
    main()
