"""Can a document's tokens be pooled to prune the token index's search? (issue 5, item 2)

A probe of one idea for reaching the issue's speed target, written down because it fails:
each document's retrieval-head keys are clustered into at most M centroids (k-means, 8
iterations, within the document), and the centroids stand in for the keys. That gives
  - an upper bound on r(q, d): per query token, max over the centroids c_j of
    q·c_j + |q| rho_j, with rho_j the largest distance of a key of cluster j to c_j; a
    search that scores documents exactly in decreasing bound order may stop once the k-th
    best exact score reaches the next bound, and returns the exact top k;
  - an approximate r(q, d) (the same without the radius term) to rank candidates, of which
    the best R would be scored exactly.
Reported per M, on the first 100 scifact train queries (choices are never made on test):
the mean cluster radius against the mean key norm, the mean share of the corpus that the
safe search must score exactly for its top 10, and the recall of the exhaustive top 10
within the approximate top R.

    python experiments/probes/reatt_pooling_probe.py
writes experiments/results/reatt_pooling_probe.md.
"""
from pathlib import Path

import numpy as np

from pyterrier_selfsup import MINILM, Collection
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.models.reatt import ReAtt
from pyterrier_selfsup.retrieval.token_index import reatt_index

RESULTS = Path(__file__).resolve().parents[1] / 'results'
POOLS = (8, 32)
DEPTHS = (100, 500)
QUERIES = 100


def pool(keys: np.ndarray, offsets: np.ndarray, m: int, seed: int = 0):
    """(centroids (N, m, e), radii (N, m), valid (N, m)): each document's keys in m clusters."""
    rng = np.random.default_rng(seed)
    n_docs = len(offsets) - 1
    centroids = np.zeros((n_docs, m, keys.shape[1]), np.float32)
    radii = np.zeros((n_docs, m), np.float32)
    valid = np.zeros((n_docs, m), bool)
    for d in range(n_docs):
        x = keys[offsets[d]:offsets[d + 1]]
        if len(x) == 0:
            continue
        c = x[rng.choice(len(x), min(m, len(x)), replace=False)].copy()
        for _ in range(8):
            assign = ((x * x).sum(1)[:, None] - 2 * x @ c.T + (c * c).sum(1)[None]).argmin(1)
            for j in range(len(c)):
                if (assign == j).any():
                    c[j] = x[assign == j].mean(0)
        distance = np.sqrt(np.maximum((x * x).sum(1)[:, None] - 2 * x @ c.T + (c * c).sum(1)[None], 0))
        assign = distance.argmin(1)
        for j in range(len(c)):
            if (assign == j).any():
                centroids[d, j], radii[d, j], valid[d, j] = c[j], distance[assign == j, j].max(), True
    return centroids, radii, valid


def main():
    reatt = ReAtt.from_pretrained(MINILM, retrieval_layer=1, head=1, special_tokens=False)
    index = reatt_index('beir/scifact/test', reatt)  # the corpus is scifact's, whichever split
    keys, n_docs = index.keys32, len(index)
    topics = Collection('beir/scifact/train').topics().head(QUERIES)
    vectors = [q for q in index.query_vectors(reatt, topics['query'].tolist()) if len(q)]
    exact = [index.exact_scores(q, np.arange(n_docs)) for q in vectors]
    settings = {'model': provenance.model_revision(MINILM), 'threads': 'as the environment sets them (timings '
                'are not reported)'}
    lines = (['# Pooling a document\'s keys to prune ReAtt\'s search (a probe)', '']
             + [f'- {k}: {v}' for k, v in {**provenance.header(), **settings}.items()] + [''] + [
             f'all-MiniLM-L6-v2, layer 1 head 1, scifact corpus ({n_docs} documents, {len(keys)} tokens); '
             f'the first {QUERIES} scifact train queries. Mean key norm {np.linalg.norm(keys, axis=1).mean():.3f}.', '',
             '| M (centroids per document) | mean radius | share scored by the safe top-10 search | '
             + ' | '.join(f'recall@10 in approximate top {r}' for r in DEPTHS) + ' |',
             '|---|---|---|' + '---|' * len(DEPTHS)])
    for m in POOLS:
        centroids, radii, valid = pool(keys, index.offsets, m)
        flat = centroids.reshape(n_docs * m, -1)
        scored, recall = [], {r: [] for r in DEPTHS}
        for q, ex in zip(vectors, exact):
            s = np.where(valid[None], (q @ flat.T).reshape(len(q), n_docs, m), -np.inf)
            bound = (s + np.linalg.norm(q, axis=1)[:, None, None] * radii[None]).max(2).mean(0)
            assert (bound >= ex - 1e-3).all()  # it is a bound
            scored.append(float((bound >= np.sort(ex)[-10]).mean()))
            top10 = set(np.argsort(-ex)[:10])
            approximate = s.max(2).mean(0)
            for r in DEPTHS:
                recall[r].append(len(top10 & set(np.argsort(-approximate)[:r])) / 10)
        lines.append(f'| {m} | {radii[valid].mean():.3f} | {np.mean(scored):.4f} | '
                     + ' | '.join(f'{np.mean(recall[r]):.3f}' for r in DEPTHS) + ' |')
        print(lines[-1], flush=True)
    (RESULTS / 'reatt_pooling_probe.md').write_text('\n'.join(lines) + '\n')


if __name__ == '__main__':
    main()
