"""Does coverage pay? nDCG@10 against training queries a passage, corpus only (issue 50 item 1).

Reads results groups that trained `distill` on corpus-only queries of several sizes (by
default the coverage groups of `label_free.py` at the shipped training: SmolLM2's queries,
the default's 2,000 against every passage given 1 and 3 of them on scifact, and 1, 3 and
the default's up to 10 a passage on ADI; the same sizes written by SmolLM2's chat prompt shown
another collection's (passage, query) pairs, the `coverage_pairs_*` groups;
`corpus_only_levers`, at the training of its day, draws SmolLM2 chat queries and titles),
measures nothing itself, and draws each family's
nDCG@10 against queries a passage of the corpus (queries kept / passages), beside the
zero-shot start, BM25 and the teacher. Each point carries the 95% paired bootstrap interval of
its change from the start (per-query nDCG@10 from the groups' .perquery.csv, 10,000
resamples, seed 0); the queries written and the passages covered come from the groups'
Training lines. Choices are read on scifact train; test is drawn beside it, never used to
choose.

    python experiments/probes/coverage_curve.py [group ...]
writes experiments/results/coverage_curve.{md,png}.
"""
import re
import sys
from pathlib import Path
from typing import NamedTuple

import matplotlib
import numpy as np
import pandas as pd

from pyterrier_selfsup import Collection
from pyterrier_selfsup.harness import provenance

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'tools'))
from change_table import RESAMPLES, interval  # noqa: E402  (the same bootstrap as its tables)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / 'scripts'))
from docs_sections import wall_seconds  # noqa: E402  (the same reading of the Wall time lines)

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402

RESULTS = Path(__file__).resolve().parents[1] / 'results'
START, REFERENCES = 'dual', ('bm25', 'teacher')
# a family: the pipelines of one query source at growing sizes (name -> queries written, where the group's
# Training line does not say)
FAMILIES = {
    'SmolLM2 plain': {'distill:n_queries=82,per_passage=1': 82, 'distill:n_queries=246,per_passage=3': 246,
                      'distill:n_queries=1400,per_passage=1': 1400, 'distill': 2000,
                      'distill:n_queries=4200,per_passage=3': 4200, 'distill:n_queries=5183,per_passage=1': 5183,
                      'distill:n_queries=15549,per_passage=3': 15549},
    'SmolLM2 chat, 3 a passage': {'distill:query_style=chat,n_queries=1000': 1000,
                                  'distill:query_style=chat': 2000,
                                  'distill:query_style=chat,n_queries=5183': 5183},
    # shown another collection's (passage, query) pairs: cranfield's, and CISI's on cranfield itself,
    # at any size (a pattern: every size that a group trained)
    'SmolLM2 chat shown pairs': re.compile(r'distill:query_style=chat,example_pairs=(cranfield|classic/cisi)'
                                           r'(,n_queries=\d+,per_passage=\d+)?'),
    'titles, 1 a document': {'distill:queries=titles': 2000, 'distill:queries=titles,n_queries=5183': 5183},
}
# (distill is the default of the group's day: pass groups of one training at a time)
COVERAGE = ['coverage_scifact_1', 'coverage_scifact_3', 'coverage_adi', 'coverage_cranfield',
            'coverage_pairs_scifact_1', 'coverage_pairs_adi', 'coverage_pairs_cranfield_1',
            'coverage_pairs_cranfield_3', 'coverage_pairs_cisi_1', 'coverage_pairs_cisi_3',
            'coverage_pairs_vaswani_1']
# points whose queries were written by more than one process (a write stopped and resumed from its
# checkpoint): their group's Wall time line counts the last process only
RESUMED = {('vaswani', 'distill:query_style=chat,example_pairs=cranfield,n_queries=11429,per_passage=1'):
           'the last of 3 processes: the third resumed the second\'s write'}


class Point(NamedTuple):
    """One point of a family's curve: queries a passage, nDCG@10 and its interval, its table row
    before and after the rise column, and its per-query nDCG@10 (for the rise's bootstrap)."""
    x: float
    y: float
    low: float
    high: float
    head: str
    tail: str
    scores: np.ndarray


def change_interval(model: np.ndarray, start: np.ndarray, seed: int = 0):
    """Mean of model - start over queries, with its 95% paired bootstrap interval."""
    return interval(model - start, seed)


def covered(md: str, name: str, corpus: str):
    """(passages covered, passages, queries written, queries kept) from a results file's
    Training line for ``name`` on ``corpus`` (written and kept: None where the line does
    not say)."""
    for line in md.splitlines():
        if line.startswith(f'- {name} on {corpus}:'):
            found = re.search(r'covering (\d+) of (\d+) passages', line)
            written = re.search(r'(\d+) (?:distinct|kept) of (\d+) written', line)
            if found:
                return (int(found.group(1)), int(found.group(2)), *(
                    (int(written.group(2)), int(written.group(1))) if written else (None, None)))
    return None


def seconds_of(md: str, name: str, corpus: str):
    """The most seconds of set-up and training that a Wall time line gives ``name`` on either
    split of ``corpus`` (None where every group found its model in the cache)."""
    spent = [s for collection, each, s in wall_seconds(md)
             if each == name and Collection(collection).corpus_id == corpus]
    return max(spent) if spent and max(spent) > 1 else None


def read(groups):
    """The groups' summary tables, per-query scores and Markdown, one of each: a pipeline that
    two groups share on a collection (the references, the default) is read from the first."""
    tables = [pd.read_csv(RESULTS / f'{g}.csv', comment='#') for g in groups]
    pers = [pd.read_csv(RESULTS / f'{g}.perquery.csv', dtype={'qid': str}) for g in groups]
    table = pd.concat(tables).drop_duplicates(['collection', 'name'])
    per = pd.concat(pers).drop_duplicates(['collection', 'name', 'qid'])
    return table, per, '\n'.join((RESULTS / f'{g}.md').read_text() for g in groups)


def main(*groups):
    groups = [g for g in (groups or COVERAGE) if (RESULTS / f'{g}.csv').exists()]
    group = ', '.join(groups)
    table, per, md_text = read(groups)
    collections = list(dict.fromkeys(table['collection']))
    header = provenance.header()
    md = ['# Coverage: nDCG@10 against corpus-only training queries a passage', '']
    md += [f'- {k}: {v}' for k, v in header.items()]
    md += [f'- read from: experiments/results/{{{group}}}.{{md,csv,perquery.csv}} (each one\'s own header names the '
           'machine, code and settings that trained its models); nothing trained or measured here',
           '- writing and training: the seconds a group spent writing the queries and training the model (from its '
           'Wall time lines; cached: every group read here found the model trained before)',
           '- rise from the point before: nDCG@10 minus that of the same family\'s point with the next fewer '
           'queries a passage, with the same paired bootstrap (the issue\'s rule stops a curve at the first point '
           'that does not rise beyond its noise; on CISI and cranfield the 2,000-query point covers about half the '
           'passages, so the rise there also compares coverage)',
           '- kept: the distinct queries written, at most n_queries (where a short corpus wrote more, n_queries '
           'spread over its passages; a tenth of them held out for the verdict); queries a passage: queries kept / '
           'passages of the corpus; change: '
           'nDCG@10 minus the start\'s '
           f'(all-MiniLM-L6-v2 zero-shot), 95% paired bootstrap over queries ({RESAMPLES:,} resamples, seed 0)', '']
    fig, axes = plt.subplots(1, len(collections), figsize=(5.2 * len(collections), 4), squeeze=False)
    for ax, collection in zip(axes[0], collections):
        rows = table[table['collection'] == collection].set_index('name')
        scores = per[per['collection'] == collection].pivot(index='qid', columns='name', values='nDCG@10')
        start = scores[START].to_numpy()
        passages = None
        md += [f'## {collection}', '', '| queries | written | kept | queries a passage | passages covered | '
               'nDCG@10 | change from the start [95% CI] | rise from the point before [95% CI] | '
               'writing and training (s) |', '|---|---|---|---|---|---|---|---|---|']
        for family, members in FAMILIES.items():
            if isinstance(members, re.Pattern):
                members = {name: None for name in rows.index if members.fullmatch(name)}
            points = []
            for name, written in members.items():
                if name not in rows.index:
                    continue
                cover = covered(md_text, name, Collection(collection).corpus_id)
                passages = cover[1] if cover else passages
                written = cover[2] if cover and cover[2] else written
                kept = cover[3] if cover and cover[3] else written
                per_passage = kept / passages if passages else float('nan')
                mean, low, high = change_interval(scores[name].to_numpy(), start)
                value = rows.loc[name, 'nDCG@10']
                share = f'{cover[0]:,} ({cover[0] / cover[1]:.2f})' if cover else '-'
                spent = seconds_of(md_text, name, Collection(collection).corpus_id)
                spent = f'{spent} ({RESUMED[collection, name]})' if (collection, name) in RESUMED else spent
                points.append(Point(per_passage, value, value - mean + low, value - mean + high,
                                    f'| {family} | {written:,} | {kept:,} | {per_passage:.2f} | {share} | '
                                    f'{value:.4f} | {mean:+.4f} [{low:+.4f}, {high:+.4f}] |',
                                    f' {spent if spent else "cached"} |', scores[name].to_numpy()))
            points.sort(key=lambda point: point.x)  # by queries a passage
            for before, point in zip([None] + points[:-1], points):
                rise = '-' if before is None else '{:+.4f} [{:+.4f}, {:+.4f}]'.format(
                    *change_interval(point.scores, before.scores))
                md.append(f'{point.head} {rise} |{point.tail}')
            if points:
                ys = np.array([p.y for p in points])
                ax.errorbar([p.x for p in points], ys, marker='o', capsize=3, label=family,
                            yerr=[ys - [p.low for p in points], [p.high for p in points] - ys])
        for name, style in zip((START,) + REFERENCES, (':', '--', '-.')):
            if name in rows.index:
                ax.axhline(rows.loc[name, 'nDCG@10'], color='grey', linestyle=style, linewidth=1)
                ax.annotate({'dual': 'start (MiniLM)', 'bm25': 'BM25', 'teacher': 'teacher'}[name],
                            (1.0, rows.loc[name, 'nDCG@10']), xycoords=('axes fraction', 'data'),
                            ha='right', va='bottom', fontsize=8, color='grey')
        md.append(f'\nReferences: start {rows.loc[START, "nDCG@10"]:.4f}, '
                  + ', '.join(f'{n} {rows.loc[n, "nDCG@10"]:.4f}' for n in REFERENCES if n in rows.index) + '.\n')
        ax.set_xscale('log')
        ax.set_xlabel('training queries a passage (kept / passages)')
        ax.set_ylabel('nDCG@10')
        ax.set_title(collection + (' (choices read here)' if collection.endswith('train') else ''), fontsize=10)
    axes[0][0].legend(fontsize=8, loc='lower left')
    fig.suptitle(f'corpus-only distill: coverage ({group})', fontsize=11)
    fig.tight_layout()
    fig.savefig(RESULTS / 'coverage_curve.png', dpi=120)
    (RESULTS / 'coverage_curve.md').write_text('\n'.join(md) + '\n')
    print('\n'.join(md))


if __name__ == '__main__':
    main(*sys.argv[1:])
