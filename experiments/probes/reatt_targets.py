"""Which P_target should ReAtt's cross-document adjustment learn from, with a decoder-only
generator (issue 5, item 3)? Measured on beir/scifact train only (choices are made there).

For a sample of train queries, their close documents as the first iteration has them
(BM25's top K), and SmolLM2-135M-Instruct (frozen, passages cut at PASSAGE_TOKENS tokens):

- ``likelihood``: softmax_d log p(query | d) / T over the K documents, each read alone;
- ``attention``: the generator's last-layer attention from the positions that predict
  the query's tokens towards each document's tokens, all K read together;
- ``bm25``: the close documents' own order (what needs no generator).

For each: nDCG@10 of the K documents ordered by P_target (train qrels), how often its top
document is relevant (P@1), and the P_target mass on relevant documents (what the KL term
pulls P_retrieval towards), with the share of queries whose K documents hold a relevant
one at all (the ceiling).

    python experiments/probes/reatt_targets.py
writes experiments/results/reatt_targets.{md,json}.
"""
import json
import time
from pathlib import Path

import ir_measures
import numpy as np
import pandas as pd
import torch
from ir_measures import P, nDCG

from pyterrier_selfsup import BM25, Collection
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.models.reading import attention_target
from pyterrier_selfsup.models.generator import SMOLLM2, SMOLLM2_GGUF, load_generator
from pyterrier_selfsup.models.score_cache import score_cache_dir

RESULTS = Path(__file__).resolve().parents[1] / 'results'
N_QUERIES = 200
K = 8
PASSAGE_TOKENS = 128
TEMPERATURES = (1.0, 4.0)
CHUNK = 2


def main():
    header = provenance.header()
    train = Collection('beir/scifact/train')
    qrels = train.qrels()
    relevant = qrels[qrels['label'] > 0].groupby('qid')['docno'].apply(set).to_dict()
    topics = train.topics()
    topics = topics[topics['qid'].isin(relevant)].sample(n=N_QUERIES, random_state=0).reset_index(drop=True)
    bm25 = BM25.from_collection(train, num_results=K)
    close = (bm25 >> train.text_loader())(topics).sort_values(['qid', 'rank'])
    close = close[close.groupby('qid')['docno'].transform('size') == K]  # every query with K documents
    queries = close.drop_duplicates('qid')[['qid', 'query']]

    gen = load_generator('smollm2', max_passage_length=PASSAGE_TOKENS)
    t0 = time.time()
    scorer = gen.scorer(normalise='sum', cache=score_cache_dir(train.corpus_id, gen))
    logp = scorer(close[['qid', 'query', 'docno', 'text']]).set_index(['qid', 'docno'])['score']
    likelihood_seconds = time.time() - t0
    t0 = time.time()
    attention = {}
    rows = list(queries.itertuples(index=False))
    for start in range(0, len(rows), CHUNK):
        chunk = rows[start:start + CHUNK]
        passages = [close[close['qid'] == r.qid]['text'].tolist() for r in chunk]
        values = attention_target(gen, [r.query for r in chunk], passages)
        attention.update({r.qid: v.numpy() for r, v in zip(chunk, values)})
    attention_seconds = time.time() - t0

    targets = {'bm25': lambda qid, docs: np.linspace(1.0, 0.5, len(docs)) / np.linspace(1.0, 0.5, len(docs)).sum(),
               'attention': lambda qid, docs: attention[qid]}
    for t in TEMPERATURES:
        targets[f'likelihood, T={t:g}'] = (lambda t: lambda qid, docs: torch.softmax(
            torch.tensor([logp[(qid, d)] for d in docs]) / t, 0).numpy())(t)
    qrels_m = (qrels[qrels['qid'].isin(set(close['qid']))]  # the sampled queries only
               .rename(columns={'qid': 'query_id', 'docno': 'doc_id', 'label': 'relevance'}).astype({'relevance': int}))
    results = []
    for name, fn in targets.items():
        run, mass = [], []
        for qid, group in close.groupby('qid', sort=False):
            docs = group['docno'].tolist()
            p = fn(qid, docs)
            run += [{'query_id': qid, 'doc_id': d, 'score': float(v)} for d, v in zip(docs, p)]
            mass.append(float(sum(v for d, v in zip(docs, p) if d in relevant.get(qid, ()))))
        measured = ir_measures.calc_aggregate([nDCG @ 10, P @ 1], qrels_m, pd.DataFrame(run))
        results.append({'target': name, 'nDCG@10 of the K': measured[nDCG @ 10], 'P@1': measured[P @ 1],
                        'mass on relevant': float(np.mean(mass))})
    ceiling = float(np.mean([any(d in relevant[q] for d in g['docno']) for q, g in close.groupby('qid')]))

    settings = {'data': f'{len(queries)} beir/scifact/train queries with a relevant document (sample, seed 0); '
                        f'their BM25 top {K} (PISA, porter2, k1=0.9, b=0.4)',
                'generator': f'{SMOLLM2}/{SMOLLM2_GGUF}, frozen, default prompt, passages cut at {PASSAGE_TOKENS} tokens',
                'bm25 target': 'the BM25 order as a distribution (linearly decreasing weights): ranks only',
                'ceiling': f'{ceiling:.3f} of the queries have a relevant document among the {K}',
                'seconds': f'likelihood {likelihood_seconds:.0f} (pairs cached after the first run), '
                           f'attention {attention_seconds:.0f}'}
    md = ['# P_target for cross-document adjustment (scifact train)', '']
    md += [f'- {k}: {v}' for k, v in {**header, **settings}.items()]
    md += ['', '| target | nDCG@10 of the K | P@1 | mass on relevant |', '|---|---|---|---|']
    md += [f"| {r['target']} | {r['nDCG@10 of the K']:.4f} | {r['P@1']:.4f} | {r['mass on relevant']:.4f} |"
           for r in results]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / 'reatt_targets.md').write_text('\n'.join(md) + '\n')
    (RESULTS / 'reatt_targets.json').write_text(json.dumps({'header': header, 'settings': settings,
                                                            'results': results}, indent=2))
    print('\n'.join(md))


if __name__ == '__main__':
    main()
