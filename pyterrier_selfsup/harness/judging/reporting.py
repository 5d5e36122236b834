"""The verdict of a judging campaign: ``pt.Experiment`` on the queries the user judged in full,
each pipeline against the first by a paired t-test, the interval of the difference, and in
words whether the difference is clear of the noise and how many more queries would settle it.
"""
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyterrier as pt
from ir_measures import P, nDCG
from scipy import stats

from pyterrier_selfsup.harness.judging.campaign import Campaign

MEASURES = [nDCG @ 10, P @ 5]
HEADLINE = str(MEASURES[0])
ALPHA = 0.05
# the chance a test of the estimated number of queries has of showing a difference of the size
# seen ("how many more"), and the most queries the estimate looks as far as
POWER, FARTHEST = 0.8, 10_000


@dataclass
class Comparison:
    """One pipeline against the baseline on the headline measure, over the judged queries."""
    name: str
    baseline: str
    queries: int
    difference: float  # mean over queries, the pipeline's less the baseline's
    low: float  # the 95% t-interval of the mean difference (not corrected across pipelines)
    high: float
    p: float  # the paired t-test's p-value, Holm-corrected across pipelines where several
    more: int | None  # about how many more judged queries would show it (POWER), if real

    @property
    def clear(self) -> bool:
        return bool(self.p < ALPHA)

    def sentence(self) -> str:
        """The comparison in words, with its strength."""
        d = f'{self.difference:+.3f} {HEADLINE} [{self.low:+.3f}, {self.high:+.3f}]'
        if self.queries < 2:
            return (f'{self.name} against {self.baseline}: {self.queries} judged query, too few '
                    'for a test; judge more')
        if np.isnan(self.p):
            return (f'{self.name} and {self.baseline} score every judged query alike '
                    f'({self.queries} queries): nothing tells them apart yet')
        if self.clear:
            better = 'better' if self.difference > 0 else 'worse'
            return (f'{self.name} is {better} than {self.baseline}: {d} over {self.queries} '
                    f'judged queries, clear of the noise (paired t-test, p={self.p:.3g})')
        if self.more is None:
            more = 'no number of queries in reach would show a difference this small'
        elif not self.more:
            more = ('as many queries usually show a difference of this size, so the real one '
                    'may be smaller')
        else:
            more = (f'if a difference of this size is real, about {self.more} more judged '
                    f'queries would give the test a {POWER:.0%} chance of showing it (a rough '
                    'estimate from the spread so far)')
        return (f'{self.name} against {self.baseline}: {d} over {self.queries} judged queries, '
                f'within the noise (paired t-test, p={self.p:.3g}); {more}')


@dataclass
class JudgingReport:
    """What a campaign's grades say: the table, each comparison, and the queries left out."""
    table: pd.DataFrame  # pt.Experiment's, one row per pipeline
    per_query: pd.DataFrame  # name, qid and each measure
    comparisons: list[Comparison]
    judged: int  # queries judged in full (the ones measured)
    partial: int  # queries with some grades but not all (left out)

    def lines(self) -> list[str]:
        """The report as lines of text: the table, then each comparison in words."""
        head = ['pipeline'] + [str(m) for m in MEASURES]
        lines = [f'{self.judged} queries judged in full' +
                 (f' ({self.partial} judged in part are left out)' if self.partial else ''),
                 '', '| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
        for _, row in self.table.iterrows():
            lines.append('| ' + ' | '.join([str(row['name'])] +
                                           [f'{row[str(m)]:.4f}' for m in MEASURES]) + ' |')
        lines.append('')
        lines += [c.sentence() for c in self.comparisons]
        lines.append(f'(grades: 2 relevant, 1 partly, 0 not; {HEADLINE} gains are the grades, '
                     'P@5 counts a partly relevant passage as relevant)')
        return lines


def report(campaign: Campaign) -> JudgingReport:
    """The campaign's verdict from its grades (the queries judged in full).

        print('\\n'.join(report(Campaign('judged')).lines()))"""
    complete = campaign.complete()
    graded = set(campaign.qrels()['qid'])
    names = campaign.pipelines
    if not complete:
        empty = pd.DataFrame({'name': names, **{str(m): np.nan for m in MEASURES}})
        return JudgingReport(empty, pd.DataFrame(columns=['name', 'qid']),
                             [Comparison(n, names[0], 0, np.nan, np.nan, np.nan, np.nan, None)
                              for n in names[1:]], 0, len(graded))
    topics = campaign.queries[campaign.queries['qid'].isin(complete)].reset_index(drop=True)
    qrels = campaign.qrels()
    qrels = qrels[qrels['qid'].isin(complete)]
    runs = [run[run['qid'].isin(complete)] for run in campaign.runs()]
    several = len(names) > 2
    table = pt.Experiment(runs, topics, qrels, MEASURES, names=names, baseline=0, test='t',
                          correction='holm' if several else None, correction_alpha=ALPHA)
    per_query = (pt.Experiment(runs, topics, qrels, MEASURES, names=names, perquery=True)
                 .pivot_table(index=['name', 'qid'], columns='measure', values='value')
                 .reset_index())
    base = per_query[per_query['name'] == names[0]].set_index('qid')[HEADLINE]
    comparisons = []
    for i, name in enumerate(names[1:], start=1):
        diffs = (per_query[per_query['name'] == name].set_index('qid')[HEADLINE]
                 - base).reindex(complete).to_numpy()
        row = table.iloc[i]
        p = row[f'{HEADLINE} p-value corrected' if several else f'{HEADLINE} p-value']
        low, high = _interval(diffs)
        comparisons.append(Comparison(name, names[0], len(diffs), float(diffs.mean()), low, high,
                                      float(p), more_needed(diffs, len(names) - 1)))
    return JudgingReport(table, per_query, comparisons, len(complete),
                         len(graded - set(complete)))


def _interval(diffs: np.ndarray):
    n = len(diffs)
    if n < 2:
        return float('nan'), float('nan')
    half = stats.t.ppf(1 - ALPHA / 2, n - 1) * diffs.std(ddof=1) / math.sqrt(n)
    return float(diffs.mean() - half), float(diffs.mean() + half)


def more_needed(diffs: np.ndarray, comparisons: int = 1) -> int | None:
    """About how many more queries a paired t-test needs to show, with probability
    :data:`POWER`, a mean difference of the size seen in ``diffs`` with the spread seen, at
    ALPHA shared among ``comparisons`` (Bonferroni: a bound on Holm's). None: more than
    FARTHEST, or nothing to go on (fewer than two queries, no spread or no difference).

        more_needed(np.array([0.1, -0.05, 0.2, 0.0]))   # 23 more, 27 in all"""
    n, mean = len(diffs), abs(float(diffs.mean()))
    spread = float(diffs.std(ddof=1)) if n > 1 else 0.0
    if n < 2 or not spread or not mean:
        return None
    totals = np.arange(max(n, 2), FARTHEST + 1)
    alpha = ALPHA / comparisons
    reach = ((stats.t.ppf(1 - alpha / 2, totals - 1) + stats.t.ppf(POWER, totals - 1))
             * spread / np.sqrt(totals))
    enough = reach <= mean
    return int(totals[enough.argmax()] - n) if enough.any() else None
