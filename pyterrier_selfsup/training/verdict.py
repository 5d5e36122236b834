"""A label-free verdict: how a signal that reads no relevance label moved with adaptation.

A slice of the training queries is held out: it never trains. Each held-out query gets a
pseudo-relevant passage: the passage it was written for (a generated query), or else the
start's teacher's top passage (a query log, a corpus sentence: its own passage excluded).
The student is scored on the slice (nDCG@10 against those pseudo-judgements) at its start
and after every round. The last round ships, and the verdict is its score against the start's,
with a paired bootstrap interval over the held-out queries: it is reported, and chooses
nothing.

It is a proxy: a slice written by the same generator as the training queries may flatter a
student trained on them, and agreement with the teacher is what the student is trained
towards. How often its sign agrees with the real change (measured with labels, afterwards)
is reported by ``experiments/probes/verdict_agreement.py``.
"""
import logging
import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
from ir_measures import nDCG

logger = logging.getLogger(__name__)

DEPTH = 10
# the fewest held-out queries a verdict is drawn from: fewer say nothing (a round's pseudo-nDCG@10
# on 2-5 queries picked the start by chance on the small collections), and the queries train instead
FEWEST = 20


def held_out(qids: Sequence[str], share: float, *, seed: int = 0,
             fewest: int = FEWEST) -> List[str]:
    """``share`` of ``qids``, or ``fewest`` if that is more, drawn with ``seed`` from their sorted
    order (the same qids give the same slice); none where that would leave fewer than twice as
    many to train on (no verdict: every query trains)."""
    qids = sorted(set(qids))
    n = max(math.ceil(share * len(qids)), fewest) if share > 0 else 0
    if n == 0 or len(qids) - n < 2 * n:
        return []
    return sorted(np.random.default_rng(seed).choice(qids, n, replace=False).tolist())


def ndcg_at(ranked: Dict[str, List[str]], relevant: Dict[str, str], k: int = DEPTH) -> np.ndarray:
    """nDCG@k of each query of ``relevant`` (one pseudo-relevant passage a query), computed by
    ir_measures over each query's ranked docnos, in ``relevant``'s order (0 for a query with no
    ranking).

        ndcg_at({'q': ['a', 'b']}, {'q': 'b'})   # [1 / log2(3)]
    """
    qrels = pd.DataFrame({'query_id': list(relevant), 'doc_id': list(relevant.values()),
                          'relevance': 1})
    run = pd.DataFrame([(qid, docno, -rank) for qid, docnos in ranked.items() if qid in relevant
                        for rank, docno in enumerate(docnos)],
                       columns=['query_id', 'doc_id', 'score'])
    measure = nDCG @ k
    scores = {m.query_id: m.value for m in measure.iter_calc(qrels, run)} if len(run) else {}
    return np.asarray([scores.get(qid, 0.0) for qid in relevant], dtype=float)


@dataclass
class Verdict:
    start: float          # the start's mean score on the slice
    kept: float           # the kept round's (the last)
    kept_round: int       # the kept round (the last; 0 where no round ran)
    low: float            # 95% paired bootstrap interval of kept - start
    high: float
    queries: int

    @property
    def helped(self) -> bool:
        """Whether the kept round is above the start, its interval clear of 0."""
        return self.kept_round > 0 and self.low > 0

    def sentence(self) -> str:
        """What the verdict measured, in words a user reads as they are: the held-out signal's
        change and its interval, and that the signal is a proxy whose sign has not been shown to
        predict the real change in nDCG (``experiments/probes/verdict_agreement.py`` measures
        how often it agrees)."""
        if self.queries == 0:
            return 'no verdict: too few training queries to hold any out'
        caveat = ('a proxy read without labels, not known to predict the change in real '
                  'retrieval quality')
        change = f'{self.kept - self.start:+.4f} [{self.low:+.4f}, {self.high:+.4f}]'
        if self.kept > self.start:
            moved = 'rose, its interval clear of 0' if self.helped else 'rose within its noise'
        elif self.kept < self.start:
            moved = 'fell, its interval clear of 0' if self.high < 0 else 'fell within its noise'
        else:
            moved = 'did not move'
        return (f'the held-out signal {moved}: round {self.kept_round} kept, pseudo-nDCG@10 '
                f'{self.start:.4f} -> {self.kept:.4f}, {change} (95% paired bootstrap, '
                f'{self.queries} held-out queries); {caveat}')


def verdict(scores: Dict[int, np.ndarray], *, seed: int = 0, resamples: int = 2000) -> Verdict:
    """The verdict from each round's per-query scores (round 0: the start): the last round's
    mean against the start's, and a paired bootstrap interval of the difference."""
    start = scores[0]
    if len(start) == 0:
        return Verdict(0.0, 0.0, 0, 0.0, 0.0, 0)
    last = max(scores)
    diff = scores[last] - start
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), (resamples, len(diff)))].mean(1)
    low, high = np.quantile(means, [0.025, 0.975])
    return Verdict(float(start.mean()), float(scores[last].mean()), last, float(low),
                   float(high), len(start))


def pseudo_relevant(queries, teacher_top: Dict[str, Tuple[List[str], np.ndarray]],
                    sources: Dict[str, str]) -> Dict[str, str]:
    """Each held-out query's pseudo-relevant passage: its source (a passage it was written for
    and may retrieve), else the teacher's top passage; queries with neither are left out."""
    out = {}
    for q in queries:
        source = sources.get(q.qid)
        if isinstance(source, str) and source not in q.excluded:
            out[q.qid] = source
        elif teacher_top.get(q.qid, ([],))[0]:
            out[q.qid] = teacher_top[q.qid][0][0]
    return out


class HeldOutVerdict:
    """The verdict of one distillation run: its held-out slice, and each round's scores on it
    (kept in the trainer's checkpointed state, under ``'verdict scores'``).

    Args:
        share: the share of the training queries held out (0: no verdict).
        seed: draws the slice and the bootstrap.

    Attributes:
        held: the held-out queries that have a pseudo-relevant passage.
        pseudo: qid -> that passage.
        result: the :class:`Verdict`, once the run is over (None before, or without a slice).
        fewest: the fewest queries a slice is drawn from (:data:`FEWEST`).

    A trainer calls :meth:`split` on its training queries, :meth:`judge` at the start of each
    round, and :meth:`finish` after the last step.
    """

    def __init__(self, share: float, seed: int = 0):
        self.share, self.seed, self.fewest = share, seed, FEWEST
        self.held: list = []
        self.pseudo: Dict[str, str] = {}
        self.result: Optional[Verdict] = None

    def split(self, trainer, queries: list, sources: Dict[str, str]) -> list:
        """The queries that train; the rest, pseudo-judged (by their source, else by the start
        teacher's top passage), become :attr:`held`."""
        held = set(held_out([q.qid for q in queries], self.share, seed=self.seed,
                            fewest=self.fewest))
        self.held = [q for q in queries if q.qid in held]
        if self.held:
            by_teacher = [q for q in self.held if not isinstance(sources.get(q.qid), str)
                          or sources[q.qid] in q.excluded]
            top = trainer.rank(trainer.round_teacher(), by_teacher, depth=1) if by_teacher else {}
            self.pseudo = pseudo_relevant(self.held, top, sources)
            self.held = [q for q in self.held if q.qid in self.pseudo]
            judged = sum(q.qid in self.pseudo for q in by_teacher)
            trainer.log.append({'step': 0, 'verdict queries': len(self.held),
                                'verdict judged by': f'{len(self.held) - judged} sources, {judged} '
                                                     'teacher top 1'})
        return [q for q in queries if q.qid not in held]

    def judge(self, trainer, after_round: int, student=None):
        """Scores the student as it is after ``after_round`` rounds (0: the start) on the slice,
        once a round. ``student``: makes the student's retriever as it is now."""
        trainer.state.setdefault('verdict scores', {})
        trainer.state.setdefault('verdict means', {})
        scores_by_round, means = trainer.state['verdict scores'], trainer.state['verdict means']
        if not self.held or after_round in scores_by_round:
            return
        ranked = trainer.rank(student() if student else trainer.student(), self.held, depth=DEPTH)
        scores = ndcg_at({q: d for q, (d, _) in ranked.items()}, self.pseudo)
        trainer.log.append({'step': trainer.state.get('step', 0), 'verdict round': after_round,
                            'verdict nDCG@10': float(scores.mean()),
                            'verdict scores': scores.round(6).tolist()})
        scores_by_round[after_round], means[after_round] = (scores.round(6).tolist(),
                                                            float(scores.mean()))

    def finish(self, trainer):
        """The verdict: the log says how the held-out signal moved from the start to the last
        round."""
        if not self.held:
            return
        self.judge(trainer, trainer.state['epoch'])
        rounds = {r: np.asarray(s) for r, s in trainer.state['verdict scores'].items()}
        self.result = verdict(rounds, seed=self.seed)
        v = self.result
        logger.info('verdict: %s', v.sentence())
        trainer.log.append({'step': trainer.state.get('step', 0), 'verdict': v.sentence(),
                            'verdict kept round': v.kept_round, 'verdict start': v.start,
                            'verdict kept': v.kept, 'verdict low': v.low, 'verdict high': v.high,
                            'verdict helped': v.helped})
