"""Does the label-free verdict agree with the truth? (issue 30, item 6)

For every distill model trained by the results groups named (each collection, setting and
seed; each fold of a two-fold run), the verdict its training log holds (pseudo-nDCG@10 of the
kept round against the start, on held-out training queries, and whether it says adaptation
helped) beside the real change: nDCG@10 with the relevance labels, of the pipeline against
its zero-shot start (the ``dual`` or ``minilm`` row of the same table), measured afterwards.
A two-fold run's real change is its own fold's queries' (each fold's model answers them).

Everything but the topics (for the folds, from ir_datasets) can be read from committed files,
so that a fresh clone reruns it without training:
the verdict from the training log's copy that `label_free.py` committed under
`results/distill_curves/<corpus>/<pipeline>/` (``fold-<k>/`` for a two-fold run: the newest
training of that pipeline on that corpus; logs hold a verdict only since issue 30's settings
were fixed), or where there is none, from the model cache's log, and the real change from the
group's per-query nDCG@10 (`<group>.perquery.csv`) for a fold, its summary table otherwise.

A model read by several groups (the same pipeline and settings on the same collection: one
cache key, even where two machines trained it) is one row, its first group's. Reported: each
row, how often the verdict's sign (helped, or kept the start / not clear of 0) agrees with the
sign of the real change, and the Spearman correlation of the verdict's change with the real
one; the same for the models trained on a query log's texts and for those trained on queries
from the corpus.

    python experiments/probes/verdict_agreement.py [results group ...]   (default: the label_free groups of issue 30)
writes experiments/results/verdict_agreement.{md,csv}.
"""
import sys
from pathlib import Path

import pandas as pd
from scipy.stats import spearmanr

from pyterrier_selfsup import Collection
from pyterrier_selfsup.data.queries.logs import folds
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.harness.experiment import curves_folder, read_training_log
from pyterrier_selfsup.harness.pipelines import UnknownPipelineError, get_pipeline

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'tools'))
from results_names import as_written, results_code  # noqa: E402

NOT_CACHED = Path('not cached')  # (a pipeline whose setting was removed since)
RESULTS = Path(__file__).resolve().parents[1] / 'results'
CURVES = RESULTS / 'distill_curves'
GROUPS = ['label_free_log', 'label_free_log_scifact', 'query_log_shipped', 'corpus_only_qwen', 'corpus_only_levers',
          'label_free', 'label_free_seeds', 'corpus_only_seeds', 'query_log_verdict', 'query_log_layers_small',
          'writer_realism', 'corpus_only_generalise', 'corpus_only_generalise_vaswani', 'corpus_only_one_round',
          'corpus_only_training', 'writer_pairs', 'writer_pairs_seeds', 'writer_pairs_qwen', 'coverage_adi',
          'coverage_cranfield', 'coverage_scifact_1', 'coverage_scifact_3', 'writer_pairs_collections',
          'writer_pairs_cisi', 'coverage_pairs_scifact_1', 'coverage_pairs_adi', 'coverage_pairs_cranfield_1',
          'coverage_pairs_cranfield_3', 'coverage_pairs_cisi_1', 'coverage_pairs_cisi_3', 'coverage_pairs_vaswani_1']


def table(group: str) -> pd.DataFrame:
    path = RESULTS / f'{group}.csv'
    return pd.read_csv(path, comment='#') if path.exists() else pd.DataFrame()


def rows_of(group: str) -> list:
    frame = table(group)
    path = RESULTS / f'{group}.perquery.csv'
    per_query_all = pd.read_csv(path, dtype={'qid': str}) if path.exists() else pd.DataFrame()
    out = []
    for collection, results in frame.groupby('collection') if len(frame) else []:
        start = results[results['name'].isin(['dual', 'minilm'])]
        if start.empty:
            continue
        start_ndcg = float(start['nDCG@10'].iloc[0])
        code = results_code(RESULTS / f'{group}.csv')  # (what its pipeline names meant then)
        coll = Collection(collection)
        per_query = per_query_all[per_query_all['collection'] == collection] if len(per_query_all) else per_query_all
        for name in results['name']:
            if not name.startswith('distill'):  # (hybrid reads distill's model)
                continue
            written = as_written(name, code)
            try:
                spec = get_pipeline(written)
                dirs = spec.model_dirs(coll)
            except UnknownPipelineError:  # (a setting removed since: its committed log alone)
                dirs = [NOT_CACHED] * (2 if 'crossfold' in name else 1)
            for fold, directory in enumerate(dirs):
                log = training_log(coll, name, written, fold, len(dirs), directory)
                said = next((r for r in log if 'verdict' in r), None)
                if said is None:
                    continue
                real = float(results.loc[results['name'] == name, 'nDCG@10'].iloc[0]) - start_ndcg
                if len(dirs) > 1:  # a fold's own queries: its model against the start, with labels
                    real = fold_change(coll, per_query, name, start['name'].iloc[0], fold, len(dirs))
                # (the model's cache key, whether or not this machine holds it, so that one model read by
                # several groups is one row on every machine)
                model = written if directory == NOT_CACHED else directory.name
                out.append({'group': group, 'collection': collection, 'pipeline': name, 'model': model,
                            'fold': fold if len(dirs) > 1 else '', 'verdict change': said.get('verdict kept', said.get('verdict best')) -
                            said['verdict start'], 'verdict low': said['verdict low'],
                            'verdict helped': said['verdict helped'], 'kept round': said['verdict kept round'],
                            'real change': real})
    return out


def training_log(coll: Collection, name: str, written: str, fold: int, n: int, directory: Path) -> list:
    """The training log of pipeline ``name``'s model (fold ``fold`` of ``n``): the copy committed under
    ``distill_curves/`` by the run that measured it, else the model cache's where this machine holds the
    model (or none). The committed copy comes first so that every machine reads the same logs: a model
    trained again elsewhere (another CPU writes other queries) holds another verdict.
    ``written`` is the name as its results file meant it (``as_written``): a copy made before
    distill's defaults moved was moved to that name's folder where a later run's copy took the
    folder of ``name``."""
    copies = [curves_folder(CURVES / coll.corpus_id.replace('/', '-'), each, fold, n) for each in (written, name)]
    return next((log for c in copies if (log := read_training_log(c))), []) or read_training_log(directory)


def fold_change(coll: Collection, per_query: pd.DataFrame, name: str, start: str, fold: int, n: int) -> float:
    """nDCG@10 of ``name`` minus the start's over the queries of ``fold`` (the fold its model answers), from the
    group's per-query results."""
    if per_query.empty or not {name, start} <= set(per_query['name']):
        raise SystemExit(f'{coll.name}: the two-fold {name} needs its group\'s .perquery.csv with {name} '
                         f'and {start}')
    mine = set(q for q, f in folds(coll.topics()['qid'], n).items() if f == fold)
    scores = per_query[per_query['qid'].isin(mine)].pivot(index='qid', columns='name', values='nDCG@10')
    return float((scores[name] - scores[start]).mean())


def agreement(frame: pd.DataFrame):
    """How often the verdict's sign agrees with the real change's, and their changes' Spearman correlation."""
    agree = (frame['verdict helped'] == (frame['real change'] > 0)).mean()
    rho = spearmanr(frame['verdict change'], frame['real change'])[0] if len(frame) > 2 else float('nan')
    return agree, rho


def main(groups):
    rows = [r for g in groups for r in rows_of(g)]
    if not rows:
        raise SystemExit(f'no trained distill model with a verdict in {groups}')
    # a model in several groups (the same pipeline and settings on the same collection) counts once: its first group's
    frame = pd.DataFrame(rows).drop_duplicates(subset=['collection', 'model', 'fold'])
    rows = frame.to_dict('records')
    agree, rho = agreement(frame)
    header = provenance.header()
    RESULTS.mkdir(exist_ok=True)
    frame.to_csv(RESULTS / 'verdict_agreement.csv', index=False)
    md = ['# The label-free verdict against the real change', ''] + [f'- {k}: {v}' for k, v in header.items()]
    md += ['- verdict: pseudo-nDCG@10 on the held-out tenth of the training queries, the round that shipped (the '
           'last, or with keep=verdict the best by this signal) against the start; '
           '"helped": kept round > 0 and its 95% paired bootstrap interval clear of 0',
           '- real change: nDCG@10 with the labels, the pipeline against the zero-shot start on the same queries', '']
    cols = ['group', 'collection', 'pipeline', 'fold', 'kept round', 'verdict change', 'verdict low', 'verdict helped',
            'real change']
    md += ['| ' + ' | '.join(cols) + ' |', '|' + '---|' * len(cols)]
    for r in rows:
        md.append('| ' + ' | '.join(f'{r[c]:+.4f}' if isinstance(r[c], float) else str(r[c]) for c in cols) + ' |')
    md += ['', f'Sign agreement (helped vs real change > 0): {agree:.2f} of {len(frame)} models; Spearman correlation '
               f'of the verdict change with the real change: {rho:.2f}.', '']
    # by where the training queries came from: a query log's texts, or written from the corpus (the held-out slice
    # then comes from the same generator)
    frame['queries'] = ['query log' if 'crossfold' in p or 'queries=beir/' in p else 'corpus only'
                        for p in frame['pipeline']]
    for kind, part in frame.groupby('queries'):
        part_agree, part_rho = agreement(part)
        md.append(f'- {kind}: {len(part)} models; the verdict says helped for {int(part["verdict helped"].sum())}, '
                  f'the real change is positive for {int((part["real change"] > 0).sum())}; sign agreement '
                  f'{part_agree:.2f}, Spearman {part_rho:.2f}')
    (RESULTS / 'verdict_agreement.md').write_text('\n'.join(md) + '\n')
    print('\n'.join(md))


if __name__ == '__main__':
    main(sys.argv[1:] or GROUPS)
