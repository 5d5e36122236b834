"""What re-ranking BM25's top 100 with MiniLM costs, the two ways the README shows (issue 21):

- ``bm25 % 100 >> minilm.scorer()``: each query encoded once, its candidates' vectors read
  from the FlexIndex that dense retrieval already built;
- ``bm25 % 100 >> collection.text_loader() >> minilm.encoder.scorer()``: every candidate's
  text encoded again (100 passages a query).

On scifact test's first ``--queries`` queries (the whole 300 take the second form most of
an hour on 2 cores): the wall time of each run over those queries, per query, once the
indexes exist (built before timing), and the largest difference between the two forms'
scores for the same (query, document). Timings are ratios within one run.

    python experiments/benchmarks/rerank_cost.py [--queries 30]
writes experiments/results/rerank_cost.{md,json}.
"""
import argparse
import json
import time
from pathlib import Path

import numpy as np

import pyterrier_selfsup as selfsup
from pyterrier_selfsup.harness import provenance

RESULTS = Path(__file__).resolve().parents[1] / 'results'


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--collection', default='beir/scifact/test')
    parser.add_argument('--queries', type=int, default=30)
    args = parser.parse_args()
    header = provenance.header()
    collection = selfsup.Collection(args.collection)
    bm25 = selfsup.BM25.from_collection(collection)
    minilm = selfsup.DenseRetriever.from_collection(collection)  # (the index is built here, untimed)
    topics = collection.topics().head(args.queries)
    forms = {'stored vectors: bm25 % 100 >> minilm.scorer()': bm25 % 100 >> minilm.scorer(),
             're-encoded: bm25 % 100 >> text_loader() >> minilm.encoder.scorer()':
                 bm25 % 100 >> collection.text_loader() >> minilm.encoder.scorer()}
    forms[next(iter(forms))](topics.head(2))  # (warm-up: models loaded, caches touched)
    runs, rows = {}, []
    for name, pipeline in forms.items():
        started = time.perf_counter()
        runs[name] = pipeline(topics)
        seconds = time.perf_counter() - started
        rows.append({'form': name, 'seconds': seconds, 'ms a query': 1000 * seconds / len(topics),
                     'results': len(runs[name])})
    stored, encoded = runs.values()
    both = stored.merge(encoded, on=['qid', 'docno'])
    difference = float(np.abs(both['score_x'] - both['score_y']).max())
    ratio = rows[1]['seconds'] / rows[0]['seconds']
    settings = {'collection': f'{collection.name}, its first {len(topics)} queries, BM25 top 100 each',
                'model': provenance.model_revision(selfsup.MINILM), 'largest score difference': f'{difference:.2e}',
                'pairs compared': len(both)}
    (RESULTS / 'rerank_cost.json').write_text(json.dumps({'header': header, 'settings': settings, 'rows': rows,
                                                           'ratio': ratio}, indent=1))
    md = ['# Re-ranking BM25 with MiniLM: stored vectors against re-encoding', '',
          *(f'- {k}: {v}' for k, v in {**header, **settings}.items()), '',
          '| form | seconds | ms a query |', '|---|---|---|',
          *(f'| `{r["form"]}` | {r["seconds"]:.1f} | {r["ms a query"]:.1f} |' for r in rows), '',
          f'Re-encoding takes {ratio:.0f}x as long as reading the stored vectors, for the same scores '
          f'(largest difference {difference:.1e}).', '']
    (RESULTS / 'rerank_cost.md').write_text('\n'.join(md))
    print('\n'.join(md))


if __name__ == '__main__':
    main()
