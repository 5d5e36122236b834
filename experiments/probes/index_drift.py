"""How far RUMBArt moves the candidates, and how stale an index it never refreshes gets.

A refresh can only matter as much as the index has gone stale: if the final query encoder
finds nearly the same top k in the start's index as in its own, a stale index hands
RUMBArt nearly the candidates a fresh one would. For each trained run (both towers
trained, so that the passage side moves) and the 809 training queries it was trained on:

- ``stale overlap at end``: the share of the final query encoder's top k from the start's
  index (never refreshed) that its top k from its own final index also holds. A run
  refreshed every N steps searches an index at most N steps old, so the staleness it
  meets is bounded by the whole run's (an assumption of drift that accumulates, not a
  measurement of each refresh: runs since the logging was added record that as
  ``stale overlap`` in their training logs).
- ``candidates kept``: the share of the start model's top k (start query and passage
  encoders) that the final model's top k still holds: how much training changed what is
  retrieved at all.

Reads the cached models and their cached indexes (run ``reconstruction_training.py
rumbart_refresh rumbart_start`` first); writes experiments/results/index_drift.md.

    python experiments/probes/index_drift.py
"""
from pathlib import Path

import numpy as np

from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.data.queries.logs import given_topics
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.harness.pipelines import get_pipeline
from pyterrier_selfsup.harness.trained import start_model
from pyterrier_selfsup.models.dual_encoder import DualEncoder
from pyterrier_selfsup.retrieval.dense import flex_index

RESULTS = Path(__file__).resolve().parents[1] / 'results'
COLLECTION = 'beir/scifact/train'
TRAIN = 'queries=beir/scifact/train'
RUNS = [f'rumbart:{TRAIN},teacher_temperature=4,refresh_every={r}' for r in (10, 25, 0)] + [
    f'rumbart:{TRAIN},teacher_temperature=4,start=ds']


def top_k(queries: np.ndarray, passages: np.ndarray, k: int) -> np.ndarray:
    scores = queries @ passages.T
    return np.argpartition(-scores, k, axis=1)[:, :k]


def overlap(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean([len(set(x) & set(y)) / len(x) for x, y in zip(a, b)]))


def main():
    collection = Collection(COLLECTION)
    texts = given_topics(collection.topics())['query'].tolist()  # the training queries (labels unused)
    rows = []
    for name in RUNS:
        spec = get_pipeline(name)
        model_dir = spec.model_dir(collection)
        if not (model_dir / 'final').is_dir():
            raise SystemExit(f'{name} is not trained: run reconstruction_training.py first ({model_dir})')
        start = DualEncoder.from_pretrained(start_model(collection, spec.settings))
        final = DualEncoder.from_pretrained(str(model_dir / 'final'))
        start_docs = flex_index(collection, start).payload()[1].astype(np.float32)
        final_docs = flex_index(collection, final).payload()[1].astype(np.float32)
        k = spec.settings['k']
        q_final = final.encode_queries(texts)
        stale = top_k(q_final, start_docs, k)
        fresh = top_k(q_final, final_docs, k)
        before = top_k(start.encode_queries(texts), start_docs, k)
        rows.append((name, k, overlap(stale, fresh), overlap(before, fresh)))
        print(rows[-1], flush=True)

    header = provenance.header()
    settings = {'data': f'the {len(texts)} beir/scifact/train query texts the runs were trained on (labels unused); '
                        'corpus beir/scifact', 'models': 'the runs\' cached final models and their cached indexes'}
    lines = ['# Index drift of RUMBArt runs', ''] + [f'- {k}: {v}' for k, v in {**header, **settings}.items()]
    lines += ['', 'See the script\'s docstring for what each column is.', '',
              '| run | k | stale overlap at end | candidates kept |', '|---|---|---|---|']
    lines += [f'| `{name}` | {k} | {s:.3f} | {c:.3f} |' for name, k, s, c in rows]
    (RESULTS / 'index_drift.md').write_text('\n'.join(lines) + '\n')
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
