"""Candidate label-free signals against the real change (issue 50 item 4).

The shipped verdict scores the student on held-out training queries, which come from the same
generator as the queries it trained on. This probe tries held-out queries of another source,
read from the corpus alone, on every distill model the named results groups trained (the models
must be in this machine's cache: it trains nothing):

- sentences: 500 corpus sentences (5 to 40 words, one a document, seed 1234: not the training
  seed), each pseudo-relevant to the document it was cut from;
- titles: 500 document titles (3 words or more, seed 1234), each pseudo-relevant to its
  document (collections without titles have none);
- bm25: the same sentences, their own documents left out, judged by BM25: each passage of
  BM25's top 10 relevant (agreement with the teacher's lexical half on queries it never saw).

The sentences are held out only for models trained on generated queries or a query log: a model
trained on corpus sentences may have trained on some of them (no such model is in the groups
named here so far).

Each signal is the final model's pseudo-nDCG@10 minus the zero-shot start's (the `dual` row) on
the same queries, beside the shipped verdict's change (from the training log) and the real
change (nDCG@10 with the relevance labels, from the group's results table). For each signal:
how often its sign agrees with the real change's, and its Spearman correlation with it. The bar
of issue 50: sign agreement of at least .80 and Spearman of at least .6.

    python experiments/probes/verdict_signals.py GROUP [GROUP ...]
writes experiments/results/verdict_signals.{md,csv}.
"""
import sys
from pathlib import Path

import pandas as pd
from scipy.stats import spearmanr

from pyterrier_selfsup import Collection
from pyterrier_selfsup.data.queries.cut import corpus_sentences, document_titles
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.harness.experiment import read_training_log
from pyterrier_selfsup.harness.pipelines import get_pipeline
from pyterrier_selfsup.training.verdict import ndcg_at

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'tools'))
from results_names import as_written, results_code  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / 'results'
N, SEED = 500, 1234
START = 'dual'


def signal_queries(collection: Collection) -> dict:
    """Each signal's queries (qid, query) and pseudo-relevant passages (qid -> docno)."""
    out = {'sentences': corpus_sentences(collection, N, seed=SEED)}
    try:
        out['titles'] = document_titles(collection, N, seed=SEED)
    except ValueError:  # (no titles)
        pass
    return {name: (frame[['qid', 'query']], dict(zip(frame['qid'], frame['source_docno'])))
            for name, frame in out.items()}


def ranked(retriever, topics: pd.DataFrame) -> dict:
    run = retriever(topics)
    return run.sort_values(['qid', 'rank']).groupby('qid')['docno'].apply(list).to_dict()


def pseudo_ndcg(retriever, topics: pd.DataFrame, relevant: dict) -> float:
    return float(ndcg_at(ranked(retriever, topics), relevant).mean())


def agreement_ndcg(retriever, topics: pd.DataFrame, judged: dict, sources: dict,
                   k: int = 10) -> float:
    """nDCG@k of ``retriever``'s ranking (each query's source left out) against ``judged``:
    qid -> the passages counted relevant (binary)."""
    import math
    top = ranked(retriever, topics)
    scores = []
    for qid, relevant in judged.items():
        mine = [d for d in top.get(qid, []) if d != sources[qid]][:k]
        dcg = sum(1 / math.log2(i + 2) for i, d in enumerate(mine) if d in relevant)
        ideal = sum(1 / math.log2(i + 2) for i in range(min(k, len(relevant))))
        scores.append(dcg / ideal if ideal else 0.0)
    return float(sum(scores) / len(scores))


def rows_of(group: str) -> list:
    table = pd.read_csv(RESULTS / f'{group}.csv', comment='#')
    code = results_code(RESULTS / f'{group}.csv')  # (what its pipeline names meant then)
    rows = []
    for name, results in table.groupby('collection', sort=False):
        coll = Collection(name)
        if START not in set(results['name']):
            continue
        real = results.set_index('name')['nDCG@10']
        # each distill pipeline's spec as the results file meant its name
        specs = {p: get_pipeline(as_written(p, code)) for p in results['name'] if p.startswith('distill')}
        cached = [p for p, spec in specs.items() if (d := spec.model_dir(coll)) is not None
                  and d.exists() and read_training_log(d)]
        if not cached:
            print(f'{group} {name}: no cached model, skipped')
            continue
        queries = signal_queries(coll)
        sentences, sources = queries['sentences']
        judged = {q: set([d for d in docs if d != sources[q]][:10])
                  for q, docs in ranked(get_pipeline('bm25').build(coll), sentences).items()}
        start = get_pipeline(START).build(coll)
        base = {s: pseudo_ndcg(start, t, rel) for s, (t, rel) in queries.items()}
        base['bm25'] = agreement_ndcg(start, sentences, judged, sources)
        for p in cached:
            log = read_training_log(specs[p].model_dir(coll))
            said = next((r for r in log if 'verdict' in r), None)
            model = specs[p].build(coll)
            row = {'group': group, 'collection': name, 'pipeline': p,
                   'real change': float(real[p] - real[START]),
                   'verdict change': (said.get('verdict kept', said.get('verdict best')) - said['verdict start']) if said else None,
                   'verdict kept round': said['verdict kept round'] if said else None}
            for s, (t, rel) in queries.items():
                row[f'{s} change'] = pseudo_ndcg(model, t, rel) - base[s]
            row['bm25 change'] = agreement_ndcg(model, sentences, judged, sources) - base['bm25']
            rows.append(row)
            print(row)
    return rows


def main(groups):
    frame = pd.DataFrame([r for g in groups for r in rows_of(g)])
    # a model read by both splits of one corpus (scifact train and test) is one model: each split's real
    # change is its own row, as the verdict and the signals are the same
    header = provenance.header()
    frame.to_csv(RESULTS / 'verdict_signals.csv', index=False)
    signals = [c for c in ('verdict change', 'sentences change', 'titles change', 'bm25 change')
               if c in frame]
    md = ['# Label-free signals against the real change', '', *(f'- {k}: {v}' for k, v in header.items()),
          f'- groups: {", ".join(groups)} (their models as cached on this machine)',
          f'- signals: the final model\'s pseudo-nDCG@10 minus the start\'s ({START}); sentences and titles: '
          f'{N} of each, seed {SEED}, each pseudo-relevant to its own document; verdict: the training log\'s '
          'held-out generated queries (kept round against the start)',
          '- real change: nDCG@10 with the labels, the model against the start on the same topics', '',
          '| collection | pipeline | real change | ' + ' | '.join(signals) + ' |',
          '|---|---|---|' + '---|' * len(signals)]
    for r in frame.to_dict('records'):
        md.append(f'| {r["collection"]} | {r["pipeline"]} | {r["real change"]:+.4f} | ' + ' | '.join(
            '' if pd.isna(r[s]) else f'{r[s]:+.4f}' for s in signals) + ' |')
    md += ['', '| signal | models | sign agreement | Spearman |', '|---|---|---|---|']
    for s in signals:
        part = frame.dropna(subset=[s])
        agree = ((part[s] > 0) == (part['real change'] > 0)).mean()
        rho = spearmanr(part[s], part['real change'])[0] if len(part) > 2 else float('nan')
        md.append(f'| {s[:-7]} | {len(part)} | {agree:.2f} | {rho:.2f} |')
    md += ['', 'The bar (issue 50 item 4): sign agreement of at least .80 and Spearman of at least .6. Rows of '
           'scifact train and test share one model, so they are not independent.', '']
    (RESULTS / 'verdict_signals.md').write_text('\n'.join(md))
    print('\n'.join(md))


if __name__ == '__main__':
    main(sys.argv[1:])
