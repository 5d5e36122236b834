"""One table of a results group's trained pipelines against their start, BM25 and the teacher.

Reads a group that `experiments/reproduce/label_free.py` wrote (`<group>.csv`,
`<group>.perquery.csv` and `<group>.md`) and trains nothing. For each collection and each
`distill` or `gpl` pipeline: nDCG@10, its change from the zero-shot start (`dual`) with a 95% paired
bootstrap interval over the queries (10,000 resamples, seed 0), its change from BM25 and from
the teacher, and from the group's Training lines the label-free facts about its queries
(distinct queries written, words a query, passages covered, how often the teacher ranks a query's
source passage in its top 10) and the round the verdict kept. A star marks an interval clear of
0.

With several groups, a pipeline that two of them hold on one collection is read from the first.
`--versus NAME` adds each pipeline's difference from the pipeline NAME (for example `distill`,
the default) with its own paired interval.

    python experiments/tools/change_table.py GROUP [GROUP ...] [--title TITLE] [--versus NAME]
                                             [--out NAME]
writes experiments/results/OUT_table.md (OUT: the first group, unless --out names another).
"""
import argparse
import re
from pathlib import Path

import numpy as np
import pandas as pd

from pyterrier_selfsup.harness import provenance

RESULTS = Path(__file__).resolve().parents[1] / 'results'
RESAMPLES = 10_000
# the pipelines whose rows the table holds: distillation's, GPL's recipe among them
TRAINED = ('distill', 'gpl')


def interval(diff: np.ndarray, seed: int = 0):
    """Mean of ``diff`` with its 95% bootstrap interval."""
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), (RESAMPLES, len(diff)))].mean(1)
    return float(diff.mean()), float(np.quantile(means, .025)), float(np.quantile(means, .975))


def training_facts(md: str, name: str, corpus: str) -> dict:
    """What the group's Training line for ``name`` on ``corpus`` says of its queries."""
    for line in md.splitlines():
        if line.startswith(f'- {name} on {corpus}:') or line.startswith(f'- {name} on {corpus} '):
            facts = {}
            for key, pattern in (('distinct', r'(\d+) distinct of (\d+) written'),
                                 ('words', r'([\d.]+) words on average'),
                                 ('covered', r'covering \d+ of \d+ passages \(([\d.]+)\)'),
                                 ('specific', r'top 10 for ([\d.]+) of them'),
                                 ('kept', r'round (\d+) kept'),
                                 ('kept', r'(start model is kept)')):
                found = re.search(pattern, line)
                if found and key not in facts:
                    facts[key] = '/'.join(found.groups())
            return facts
    return {}


def mean_over_collections(table: pd.DataFrame, per: pd.DataFrame, seed: int = 0) -> list:
    """Where the table spans several collections: each pipeline's mean change from the start
    over the collections that hold it and its start, each collection weighing the same, with a
    95% bootstrap interval that resamples each collection's queries on its own (10,000 times)."""
    collections = list(dict.fromkeys(table['collection']))
    if len(collections) < 2:
        return []
    names = [n for n in dict.fromkeys(table['name']) if n.split(':')[0] in TRAINED]
    lines = ['## Mean over the collections', '',
             'Each collection weighs the same; the interval resamples each one\'s queries apart '
             f'({RESAMPLES:,} resamples, seed {seed}); * where it is clear of 0.', '',
             '| pipeline | collections | mean change from the start [95% CI] |', '|---|---|---|']
    for name in names:
        diffs = []
        for collection in collections:
            scores = per[per['collection'] == collection].pivot(index='qid', columns='name',
                                                                values='nDCG@10')
            if name in scores and 'dual' in scores:
                diffs.append((scores[name] - scores['dual']).to_numpy())
        if len(diffs) < 2:
            continue
        rng = np.random.default_rng(seed)
        means = np.mean([d[rng.integers(0, len(d), (RESAMPLES, len(d)))].mean(1) for d in diffs],
                        axis=0)
        mean = float(np.mean([d.mean() for d in diffs]))
        low, high = np.quantile(means, [.025, .975])
        star = '*' if low > 0 or high < 0 else ''
        lines.append(f'| {name} | {len(diffs)} | {mean:+.4f} [{low:+.4f}, {high:+.4f}]{star} |')
    return lines + ['']


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('groups', nargs='+', metavar='group')
    parser.add_argument('--title', default=None)
    parser.add_argument('--versus', default=None, help='a pipeline each is also compared with')
    parser.add_argument('--out', default=None, help='the table\'s name (default: the first group)')
    args = parser.parse_args(argv)
    out_name = args.out or args.groups[0]
    table = pd.concat([pd.read_csv(RESULTS / f'{g}.csv', comment='#') for g in args.groups])
    table = table.drop_duplicates(['collection', 'name'])
    per = pd.concat([pd.read_csv(RESULTS / f'{g}.perquery.csv', dtype={'qid': str}) for g in args.groups])
    per = per.drop_duplicates(['collection', 'name', 'qid'])
    # the start: the zero-shot DualEncoder, named dual in the older groups, dual_encoder since
    table['name'] = table['name'].replace('dual_encoder', 'dual')
    per['name'] = per['name'].replace('dual_encoder', 'dual')
    md_text = '\n'.join((RESULTS / f'{g}.md').read_text() for g in args.groups)
    read_from = args.groups[0] if len(args.groups) == 1 else '{' + ', '.join(args.groups) + '}'
    versus = args.versus
    md = [f'# {args.title or out_name}', '', *(f'- {k}: {v}' for k, v in provenance.header().items()),
          f'- read from: experiments/results/{read_from}.{{md,csv,perquery.csv}} (their header names the '
          'machine, code and settings that trained the models); nothing trained or measured here',
          f'- change: nDCG@10 minus the start\'s (dual: all-MiniLM-L6-v2 zero-shot), 95% paired bootstrap over '
          f'queries ({RESAMPLES:,} resamples, seed 0), * where the interval is clear of 0; vs BM25 and vs '
          'teacher: the same difference from BM25 and from the teacher',
          '- queries: distinct of written; words a query; share of passages covered; specificity: the share '
          'of queries whose source passage the teacher ranks in its top 10; kept: the round that shipped']
    if versus:
        md.append(f'- vs {versus}: nDCG@10 minus {versus}\'s on the same queries, with its own 95% paired '
                  'bootstrap interval')
    md.append('')
    for collection in dict.fromkeys(table['collection']):
        rows = table[table['collection'] == collection].set_index('name')
        scores = per[per['collection'] == collection].pivot(index='qid', columns='name', values='nDCG@10')
        corpus = collection.rsplit('/', 1)[0] if collection.startswith('beir/') else collection
        refs = {n: rows.loc[n, 'nDCG@10'] for n in ('dual', 'bm25', 'teacher') if n in rows.index}
        md += [f'## {collection}', '', 'References: ' + ', '.join(f'{n} {v:.4f}' for n, v in refs.items()) + '.', '',
               '| pipeline | nDCG@10 | change [95% CI] | vs BM25 | vs teacher | '
               + (f'vs {versus} [95% CI] | ' if versus else '')
               + 'queries | words | covered | specificity | kept |',
               '|---|---|---|---|---|' + ('---|' if versus else '') + '---|---|---|---|---|']
        for name in rows.index:
            if name.split(':')[0] not in TRAINED or 'dual' not in scores:
                continue
            value = rows.loc[name, 'nDCG@10']
            mean, low, high = interval((scores[name] - scores['dual']).to_numpy())
            star = '*' if low > 0 or high < 0 else ''
            against = []
            for ref in ('bm25', 'teacher'):
                if ref in scores:
                    m, lo, hi = interval((scores[name] - scores[ref]).to_numpy())
                    against.append(f'{m:+.4f}{"*" if lo > 0 or hi < 0 else ""}')
                else:
                    against.append('')
            if versus:
                if versus in scores and name != versus:
                    m, lo, hi = interval((scores[name] - scores[versus]).to_numpy())
                    against.append(f'{m:+.4f} [{lo:+.4f}, {hi:+.4f}]{"*" if lo > 0 or hi < 0 else ""}')
                else:
                    against.append('')
            facts = training_facts(md_text, name, corpus)
            md.append(f'| {name} | {value:.4f} | {mean:+.4f} [{low:+.4f}, {high:+.4f}]{star} | '
                      + ' | '.join(against) + ' | '
                      + ' | '.join(facts.get(k, '') for k in ('distinct', 'words', 'covered', 'specific', 'kept'))
                      + ' |')
        md.append('')
    md += mean_over_collections(table, per)
    out = RESULTS / f'{out_name}_table.md'
    out.write_text('\n'.join(md))
    print('\n'.join(md))


if __name__ == '__main__':
    main()
