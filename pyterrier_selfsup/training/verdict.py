"""A label-free verdict: how a signal that reads no relevance label moved with adaptation.

A slice of the training queries is held out: it never trains. Each held-out query gets a
pseudo-relevant passage: the passage it was written for (a generated query), or else the
start's teacher's top passage (a query log, a corpus sentence: its own passage excluded).
The student is scored on the slice (nDCG@10 against those pseudo-judgements) at its start
and after every round. The trainer keeps the best round by this signal (``keep='verdict'``) or
the last (``keep='last'``), and the verdict is the kept round's score against the start's, with
a paired bootstrap interval over the held-out queries.

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
    """nDCG@k of each query of ``relevant`` (one pseudo-relevant passage a query: 1 / log2(rank + 2)
    where it is in the top k, else 0), in ``relevant``'s order."""
    out = []
    for qid, docno in relevant.items():
        top = ranked.get(qid, [])[:k]
        out.append(1 / math.log2(top.index(docno) + 2) if docno in top else 0.0)
    return np.asarray(out)


@dataclass
class Verdict:
    start: float          # the start's mean score on the slice
    best: float           # the kept round's
    best_round: int       # the kept round (keep='verdict': the best; 0: the start, no round
    #                       beat it by this signal; keep='last': the last)
    low: float            # 95% paired bootstrap interval of best - start
    high: float
    queries: int

    @property
    def helped(self) -> bool:
        """Whether the kept round is above the start, its interval clear of 0."""
        return self.best_round > 0 and self.low > 0

    def sentence(self) -> str:
        """What the verdict measured, in words a user reads as they are: the held-out signal's
        change and its interval, and that the signal is a proxy whose sign has not been shown to
        predict the real change in nDCG (``experiments/probes/verdict_agreement.py`` measures
        how often it agrees)."""
        if self.queries == 0:
            return 'no verdict: too few training queries to hold any out'
        caveat = ('a proxy read without labels, not known to predict the change in real '
                  'retrieval quality')
        if self.best_round == 0:
            return ('the held-out signal did not rise: no round beat the start '
                    f'({self.start:.4f} pseudo-nDCG@10 on {self.queries} held-out queries), '
                    f'so the start model is kept; {caveat}')
        change = f'{self.best - self.start:+.4f} [{self.low:+.4f}, {self.high:+.4f}]'
        if self.best > self.start:
            moved = 'rose, its interval clear of 0' if self.helped else 'rose within its noise'
        elif self.best < self.start:
            moved = 'fell, its interval clear of 0' if self.high < 0 else 'fell within its noise'
        else:
            moved = 'did not move'
        return (f'the held-out signal {moved}: round {self.best_round} kept, pseudo-nDCG@10 '
                f'{self.start:.4f} -> {self.best:.4f}, {change} (95% paired bootstrap, '
                f'{self.queries} held-out queries); {caveat}')


def verdict(scores: Dict[int, np.ndarray], *, seed: int = 0, resamples: int = 2000,
            kept: Optional[int] = None) -> Verdict:
    """The verdict from each round's per-query scores (round 0: the start): the kept round
    (``kept``, or else the best, the earliest of equals), its mean against the start's, and a
    paired bootstrap interval."""
    start = scores[0]
    if len(start) == 0:
        return Verdict(0.0, 0.0, 0, 0.0, 0.0, 0)
    best_round = (kept if kept is not None
                  else max(sorted(scores), key=lambda r: (scores[r].mean(), -r)))
    diff = scores[best_round] - start
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), (resamples, len(diff)))].mean(1)
    low, high = np.quantile(means, [0.025, 0.975])
    return Verdict(float(start.mean()), float(scores[best_round].mean()), best_round, float(low),
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
    """The verdict of one distillation run: its held-out slice, each round's scores on it
    (kept in the trainer's checkpointed state, under ``'verdict scores'``), and the best round.

    Args:
        share: the share of the training queries held out (0: no verdict; the last round is kept).
        seed: draws the slice and the bootstrap.
        keep: ``'verdict'``: the best round by the held-out signal is put back at the end;
            ``'last'``: the last round is kept, and the verdict compares it with the start.

    Attributes:
        held: the held-out queries that have a pseudo-relevant passage.
        pseudo: qid -> that passage.
        result: the :class:`Verdict`, once the run is over (None before, or without a slice).
        fewest: the fewest queries a slice is drawn from (:data:`FEWEST`).

    A trainer calls :meth:`split` on its training queries, :meth:`judge` at the start of each
    round, and :meth:`finish` after the last step.
    """

    def __init__(self, share: float, seed: int = 0, keep: str = 'verdict'):
        if keep not in ('verdict', 'last'):
            raise ValueError(f"keep must be 'verdict' or 'last', not {keep!r}")
        self.share, self.seed, self.fewest, self.keep = share, seed, FEWEST, keep
        self.held: list = []
        self.pseudo: Dict[str, str] = {}
        self.result: Optional[Verdict] = None
        # (round, the encoder's weights, its passage side's snapshot)
        self._best: Optional[tuple] = None

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
        once a round, and keeps its weights while it is the best. ``student``: makes the
        student's retriever as it is now."""
        if 'verdict scores' not in trainer.state:
            # a checkpoint written before the scores were kept in the state: its log has them
            logged = {r['verdict round']: r for r in trainer.log if 'verdict round' in r}
            trainer.state['verdict scores'] = {k: r['verdict scores'] for k, r in logged.items()}
            trainer.state['verdict means'] = {k: r['verdict nDCG@10'] for k, r in logged.items()}
        scores_by_round, means = trainer.state['verdict scores'], trainer.state['verdict means']
        if not self.held or after_round in scores_by_round:
            return
        ranked = trainer.rank(student() if student else trainer.student(), self.held, depth=DEPTH)
        scores = ndcg_at({q: d for q, (d, _) in ranked.items()}, self.pseudo)
        trainer.log.append({'step': trainer.state.get('step', 0), 'verdict round': after_round,
                            'verdict nDCG@10': float(scores.mean()),
                            'verdict scores': scores.round(6).tolist()})
        earlier = list(means.values())
        scores_by_round[after_round], means[after_round] = (scores.round(6).tolist(),
                                                            float(scores.mean()))
        if self.keep == 'verdict' and (not earlier or scores.mean() > max(earlier)):
            encoder = trainer.encoder
            self._best = (after_round,
                          {k: v.detach().clone() for k, v in encoder.model.state_dict().items()},
                          trainer.passages.snapshot(encoder))
            if trainer.output_dir is not None and trainer.process_rank == 0:  # (for a resumed run)
                encoder.save_pretrained(trainer.output_dir / 'best-round')

    def finish(self, trainer):
        """The verdict: with ``keep='verdict'`` the best round is put back (the start, if no
        round beat it); the log says how the held-out signal moved to the kept round."""
        if not self.held:
            return
        self.judge(trainer, trainer.state['epoch'])
        rounds = {r: np.asarray(s) for r, s in trainer.state['verdict scores'].items()}
        self.result = verdict(rounds, seed=self.seed,
                              kept=max(rounds) if self.keep == 'last' else None)
        if self.result.best_round != max(rounds):
            if self._best is not None and self._best[0] == self.result.best_round:
                trainer.encoder.model.load_state_dict(self._best[1])
                trainer.encoder.passage_offsets = self._best[2]
            else:  # (a resumed run: the best round was saved before it stopped)
                trainer.encoder.load_weights(trainer.output_dir / 'best-round')
        v = self.result
        logger.info('verdict: %s', v.sentence())
        trainer.log.append({'step': trainer.state.get('step', 0), 'verdict': v.sentence(),
                            'verdict kept round': v.best_round, 'verdict start': v.start,
                            'verdict best': v.best, 'verdict low': v.low, 'verdict high': v.high,
                            'verdict helped': v.helped})
