"""What the training queries of `rumbart_queries` look like: the 809 scifact train-query
texts, 809 corpus sentences and 809 queries SmolLM2 wrote (the same files the trainers
read: `harness.topics.training_topics`, generated queries from the cache, written on first use).

Per source: how many queries, how many distinct, their mean length in words, the share of
the most frequent text, and the five most frequent texts. For the corpus-derived sources,
how specific a query is to the passage it came from: BM25's rank of that passage among its
results for the query (MRR@10 and share at rank 1, the passage itself not excluded). No
relevance label is read.

    python experiments/probes/query_sources.py
writes experiments/results/query_sources.md.
"""
from collections import Counter
from pathlib import Path

import numpy as np

from pyterrier_selfsup import BM25, Collection
from pyterrier_selfsup.data.queries.source import QuerySource
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.harness.methods import source_topics
from pyterrier_selfsup.models.generator import SMOLLM2, SMOLLM2_GGUF, load_generator

RESULTS = Path(__file__).resolve().parents[1] / 'results'
N = 809  # as many as scifact has train queries
SOURCES = ('beir/scifact/train', 'sentences', 'generated')


def source_ranks(bm25: BM25, topics) -> np.ndarray:
    """BM25's rank (1-based; 0 beyond 10) of each query's source passage."""
    run = bm25(topics[['qid', 'query']])
    top = run[run['rank'] < 10].groupby('qid')['docno'].apply(list).to_dict()
    return np.array([top.get(q, []).index(d) + 1 if d in top.get(q, []) else 0
                     for q, d in zip(topics['qid'], topics['source_docno'])])


def main():
    collection = Collection('beir/scifact/train')  # the corpus the trainers read
    generator = load_generator()  # at its default settings, as every pipeline writes queries
    bm25 = BM25.from_collection(collection)
    rows, frequent = [], {}
    for source in SOURCES:
        topics = source_topics(collection, QuerySource(source, N, seed=0), generator=generator)
        counts = Counter(topics['query'])
        row = {'source': source, 'queries': len(topics), 'distinct': len(counts),
               'mean words': float(topics['query'].str.split().str.len().mean()),
               'most frequent text': counts.most_common(1)[0][1] / len(topics)}
        if 'source_docno' in topics:
            ranks = source_ranks(bm25, topics)
            row.update({'source passage MRR@10 (BM25)': float(np.mean(np.where(ranks > 0, 1 / np.maximum(ranks, 1), 0))),
                        'source passage at rank 1': float(np.mean(ranks == 1))})
        rows.append(row)
        frequent[source] = counts.most_common(5)

    header = provenance.header()
    settings = {'data': f'beir/scifact ({N} queries a source, seed 0); the train split\'s query texts only',
                'generator': f'{SMOLLM2}/{SMOLLM2_GGUF}, default prompt and settings, greedy, 32 new tokens',
                'bm25': repr(bm25)}
    columns = ['source', 'queries', 'distinct', 'mean words', 'most frequent text',
               'source passage MRR@10 (BM25)', 'source passage at rank 1']
    md = ['# Training-query sources (scifact)', ''] + [f'- {k}: {v}' for k, v in {**header, **settings}.items()]
    md += ['', '| ' + ' | '.join(columns) + ' |', '|---|' + '---|' * (len(columns) - 1)]
    for row in rows:
        md.append('| ' + ' | '.join(f'{row[c]:.3f}' if isinstance(row.get(c), float) else str(row.get(c, ''))
                                    for c in columns) + ' |')
    for source, texts in frequent.items():
        md += ['', f'Most frequent `{source}` texts:', '']
        md += [f'- {count} × {text!r}' for text, count in texts]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / 'query_sources.md').write_text('\n'.join(md) + '\n')
    print('\n'.join(md))


if __name__ == '__main__':
    main()
