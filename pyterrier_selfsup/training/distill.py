"""Distillation of a teacher stronger than the student, with no labels.

The teacher is any PyTerrier retriever or re-ranking pipeline: for each training query
it ranks its top ``depth`` candidates, and softmax(score / ``teacher_temperature``) over
them is the distribution the student (a :class:`DualEncoder`) learns. The default
teacher fuses BM25 with the student itself (:class:`~pyterrier_selfsup.retrieval.fusion.Fusion`:
per-query z-scores summed over the union of their top lists), optionally with the
generator's query likelihood on the fused top few. The thesis' methods are special
cases: distant supervision is the teacher "BM25's top 1", RUMBArt's posterior the
teacher "student × generator over the student's top k".

- **Loss** over each query's candidates: listwise KL(teacher ‖ student), the student's
  softmax also spanning the other queries' candidates in the batch, where the teacher's
  probability is 0 (in-batch negatives, as ReAtt's random documents); or Margin-MSE
  (GPL) over every pair of a query's candidates.
- **Rounds of self-training**: each epoch is a round; when the teacher is a function of
  the student (``teacher=lambda student: Fusion({'bm25': bm25, 'student': student})``),
  the improved student re-enters the teacher and its candidates at the start of every
  round, as ReAtt iterates and REALM refreshes. With ``stop_overlap``, training stops
  early when the teacher's top 10 hardly changes from one round to the next: a rule that
  reads no labels (off by default: the verdict keeps the best round).
- **A label-free verdict** (``verdict_share``): that share of the training queries never
  trains; the student is scored on it at its start and after every round against pseudo-
  judgements (:mod:`~pyterrier_selfsup.training.verdict`; by default a tenth), the best round is kept (the start
  itself, if no round beats it), and the log says whether adaptation helped, with an interval.
- **Round-trip filtering** (GPL/InPars/Promptagator): a query that was written for a
  passage (``source_docno``) is kept only when the round-0 teacher ranks that passage
  in its top ``filter_depth``; the survival rate is logged.
- ``train_passages=False`` (the default) trains the query tower only, against the
  start encoder's passage vectors (RAG): a step encodes only the batch's queries, the
  index never goes stale, and a round's re-retrieval is a search of the same index.
- ``passage_offsets`` (with ``train_passages=False``; on by default): the passage side moves too, at the
  cost of a query step: each candidate passage's vector is v₀ + δ (normalised again), δ a
  free vector trained by lazy Adam (``offset_lr``) and pulled to 0 by an L2 term of this
  weight (:mod:`~pyterrier_selfsup.models.offsets`). The offsets are saved with the model
  and applied where its index is built; a passage training never met, or one added to the
  corpus later, keeps the start encoder's vector.
- ``passage_layers=K``: the passage tower's top K layers train, over the states its
  frozen lower layers give each candidate passage, computed once a passage and kept in
  memory (a step runs K layers over the batch's candidates rather than the whole tower;
  each round searches a freshly encoded index). Memory grows with the passages met:
  tokens × hidden size × 4 bytes each (scifact whole, MiniLM: about 1.7 GB).

    bm25 = BM25.from_collection(scifact, num_results=100)
    trainer = Distillation(DualEncoder.from_pretrained(MINILM), scifact,
                           teacher=lambda student: Fusion({'bm25': bm25, 'student': student}),
                           output_dir='runs/distill', epochs=2)
    trainer.fit(corpus_queries)          # qrels are never read
    pt.Experiment([bm25, trainer], ...)  # after fit it retrieves with the student alone
"""
import logging
import math
import time
from typing import Callable, Dict, List, Optional, Tuple, Union

import numpy as np
import pandas as pd
import pyterrier as pt
import torch

from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.data.queries import Query, training_queries
from pyterrier_selfsup.models.dual_encoder import DualEncoder
from pyterrier_selfsup.models.offsets import PassageOffsets
from pyterrier_selfsup.retrieval.base import ranked_excluding
from pyterrier_selfsup.retrieval.dense import flex_index
from pyterrier_selfsup.training.loop import DualEncoderTrainer
from pyterrier_selfsup.training.offsets import OffsetAdam
from pyterrier_selfsup.training.settings import DistillationSettings as _D
from pyterrier_selfsup.training.verdict import FEWEST, Verdict, held_out, ndcg_at, pseudo_relevant, verdict
from pyterrier_selfsup.progress import progress

logger = logging.getLogger(__name__)

LOSSES = ('kl', 'margin_mse')
Teacher = Union[pt.Transformer, Callable[[pt.Transformer], pt.Transformer]]
TEACHER_CHUNK = 1024  # training queries the teacher ranks per call: bounded memory on any query set


def listwise_kl(student_logits: torch.Tensor, teacher_probs: torch.Tensor, excluded: torch.Tensor, *,
                per_row: bool = False) -> torch.Tensor:
    """Mean over queries of KL(teacher ‖ softmax(student_logits)), each row's softmax over
    its entries not ``excluded``; ``teacher_probs`` rows sum to 1 and are 0 where excluded.
    ``per_row``: each query's KL instead of their mean."""
    log_q = torch.log_softmax(student_logits.masked_fill(excluded, float('-inf')), dim=-1).masked_fill(excluded, 0.0)
    rows = (torch.xlogy(teacher_probs, teacher_probs) - teacher_probs * log_q).sum(-1)
    return rows if per_row else rows.mean()


def margin_mse(student_scores: torch.Tensor, teacher_scores: torch.Tensor, valid: torch.Tensor, *,
               per_row: bool = False) -> torch.Tensor:
    """Margin-MSE (Hofstätter et al.; GPL) over every ordered pair (i, j), i ≠ j, of each
    row's ``valid`` entries: mean of ((s_i - s_j) - (t_i - t_j))², averaged per row, then
    over rows that have a pair. ``per_row``: each row's mean (0 for a row without a pair)."""
    d = student_scores - teacher_scores
    diff = d.unsqueeze(2) - d.unsqueeze(1)
    pairs = valid.unsqueeze(2) & valid.unsqueeze(1) & ~torch.eye(d.shape[1], dtype=torch.bool, device=d.device)
    counts = pairs.sum((1, 2))
    rows = (diff.pow(2) * pairs).sum((1, 2)) / counts.clamp(min=1)
    return rows if per_row else rows[counts > 0].mean()


def top_overlap(a: Dict[str, List[str]], b: Dict[str, List[str]], k: int = 10) -> float:
    """Mean over the queries of ``a`` that have results of |top k in a ∩ top k in b| divided
    by the shorter of the two top lists (b's missing queries: 0)."""
    shares = [len(set(docnos[:k]) & set(b.get(qid, [])[:k])) / max(1, min(k, len(docnos), len(b.get(qid, [])[:k])))
              for qid, docnos in a.items() if docnos]
    return float(np.mean(shares)) if shares else 0.0


class Distillation(DualEncoderTrainer):
    """Trains ``encoder`` in place towards ``teacher``'s distribution over its candidates.

    Args:
        teacher: a retriever (query frame in, scored result frame out), or a function of
            the student's current retriever returning one (rebuilt every round).
        depth: the teacher's top ``depth`` are each query's candidates.
        teacher_temperature: the teacher's distribution is softmax(score / this).
        loss: ``kl`` (listwise, with in-batch negatives if ``in_batch``) or ``margin_mse``.
        train_passages: also train the passage tower (candidates re-encoded every step;
            each round then searches a freshly built index). False: the query tower only.
        exclude_sources: a query cut from a passage (corpus sentences, spans) may not
            have it among its candidates (REALM's trivial retrieval). False for queries
            written for a passage, whose source is a genuine answer.
        filter_depth: keep a query with a ``source_docno`` only if the round-0 teacher
            ranks that passage in its top ``filter_depth`` (None: keep all).
        stop_overlap: end training at the start of a round whose teacher shares at least
            this fraction of its top 10 with the previous round's (None: all ``epochs``).
        passage_offsets: the weight of the L2 pull on learned passage offsets (None: no
            offsets; only with ``train_passages=False``); ``offset_lr``: their Adam's rate.
        passage_layers: train the passage tower's top this many layers only, over cached
            lower-layer states (None: as ``train_passages`` says; not with it, nor with offsets).
        source_share: for a query written for a passage (``source_docno``, not excluded), the
            share of its target put on that passage (GPL's and InPars' pseudo-positive), the
            rest the teacher's distribution (0: the teacher's alone; ``loss='kl'`` only).
        verdict_share: the share of the training queries held out for the label-free verdict
            (0: none; then the last round is kept).
        min_round_steps: a round passes over the training queries as many times as it takes
            to make this many steps (a small query log; 0: once).
        The rest as for :class:`~pyterrier_selfsup.training.Trainer`; ``epochs`` = rounds.
    """
    description = 'distillation'
    marker = 'round'
    data_parallel = True
    verdict_fewest = FEWEST  # the fewest held-out queries a verdict is drawn from (training/verdict.py)

    def __init__(self, encoder: DualEncoder, collection: Union[str, Collection], teacher: Teacher, *,
                 depth: int = _D.depth, teacher_temperature: float = _D.teacher_temperature, loss: str = _D.loss,
                 in_batch: bool = _D.in_batch, train_passages: bool = _D.train_passages, exclude_sources: bool = True,
                 filter_depth: Optional[int] = _D.filter_depth, stop_overlap: Optional[float] = _D.stop_overlap,
                 passage_offsets: Optional[float] = _D.passage_offsets, offset_lr: float = _D.offset_lr,
                 passage_layers: Optional[int] = _D.passage_layers, source_share: float = _D.source_share,
                 verdict_share: float = _D.verdict_share, min_round_steps: int = _D.min_round_steps,
                 epochs: int = _D.rounds, batch_size: int = _D.batch_size, lr: float = _D.lr,
                 seed: int = _D.seed, **kwargs):
        if loss not in LOSSES:
            raise ValueError(f'loss must be one of {LOSSES}, not {loss!r}')
        if passage_offsets is not None and train_passages:
            raise ValueError('passage_offsets move the vectors of a frozen passage tower: not with train_passages')
        if source_share and loss != 'kl':
            raise ValueError('source_share mixes a pseudo-positive into the teacher\'s distribution: loss=kl only')
        if not 0.0 <= source_share <= 1.0:
            raise ValueError(f'source_share is a share of the target, in [0, 1], not {source_share}')
        if passage_layers is not None and (train_passages or passage_offsets is not None):
            raise ValueError('passage_layers trains the passage tower\'s top layers: not with train_passages (all of '
                             'it) or passage_offsets (a frozen tower)')
        super().__init__(encoder, collection, epochs=epochs, batch_size=batch_size, lr=lr, seed=seed, **kwargs)
        self.teacher = teacher
        self.depth = depth
        self.teacher_temperature = teacher_temperature
        self.loss_name = loss
        self.in_batch = in_batch
        self.train_passages = train_passages
        self.exclude_sources = exclude_sources
        self.filter_depth = filter_depth
        self.stop_overlap = stop_overlap
        self.passage_offsets = passage_offsets
        self.offset_lr = offset_lr
        self._offsets: Optional[OffsetAdam] = None
        self.passage_layers = passage_layers
        self._states: Dict[str, torch.Tensor] = {}  # passage_layers: docno -> the lower layers' states
        self.source_share = source_share
        self._sources: Dict[str, str] = {}  # qid -> the passage a query was written for
        self.verdict_share = verdict_share
        self.min_round_steps = min_round_steps
        self.verdict: Optional[Verdict] = None
        self._held: List[Query] = []  # the verdict's queries: never in a batch
        self._pseudo: Dict[str, str] = {}
        self._best: Optional[Tuple[int, dict, Optional[PassageOffsets]]] = None  # (round, weights, offsets)
        self._round0: Optional[Dict[str, Tuple[List[str], np.ndarray]]] = None
        self._index = None  # the frozen passage tower's index (train_passages=False)
        self.query_stats: Dict[str, float] = {}

    def checkpoints_by_default(self) -> bool:
        """Off with the passage tower frozen (the shipped settings): only the batch's queries are
        encoded with gradients, too little for a second forward pass to pay; on where passages
        train too (``train_passages``, ``passage_layers``)."""
        return self.train_passages or self.passage_layers is not None

    def title(self) -> str:
        return f'distillation on {self.collection.corpus_id} ({self.loss_name})'

    def on_fit_start(self):
        if not self.train_passages:  # RAG: passages keep a frozen copy of the start encoder
            self.encoder.model.freeze_passage_tower()
            self._index = flex_index(self.collection, self.encoder, cache_dir=self.cache_dir, offsets=False,
                                     verbose=self.shows)
        if self.passage_layers is not None:  # ... but for its top layers
            for p in self.encoder.model.top_passage_layers(self.passage_layers).parameters():
                p.requires_grad_(True)
        if self.passage_offsets is not None:  # (a resumed run's come back with its checkpoint)
            self.encoder.passage_offsets = PassageOffsets(self.encoder.model.out_dim, self.encoder.model.normalize)
            self._offsets = OffsetAdam(self.encoder.passage_offsets, lr=self.offset_lr, weight=self.passage_offsets)

    @property
    def passages_move(self) -> bool:
        """Whether the passage tower trains (whole or its top layers): its index goes stale."""
        return self.train_passages or self.passage_layers is not None

    def on_optimizer_step(self):
        if self._offsets is not None:
            self._offsets.step(self.world_size)

    # -- the teacher ------------------------------------------------------------------

    @property
    def fixed_teacher(self) -> bool:
        """Whether the teacher is one pipeline for every round (not a function of the student)."""
        return isinstance(self.teacher, pt.Transformer)

    def round_teacher(self, fresh: bool = False, student: Optional[pt.Transformer] = None) -> pt.Transformer:
        """The teacher of a round: the fixed one, or the teacher of the student as it is now
        (``fresh``: searching an index built from its current passage tower; ``student``: that
        retriever, already made)."""
        if self.fixed_teacher:
            return self.teacher
        return self.teacher(student if student is not None else self._student(fresh=fresh))

    def rank(self, teacher: pt.Transformer, queries: List[Query], *, exclude: bool = True,
             depth: Optional[int] = None) -> Dict[str, Tuple[List[str], np.ndarray]]:
        """The teacher's top ``depth`` (docnos, scores) for each query, in chunks; on several
        processes each ranks its share of the queries and every process gets them all."""
        mine = self.local_batch(queries)
        ranked = {}
        chunks = progress(range(0, len(mine), TEACHER_CHUNK), total=len(mine), desc='teacher rankings', unit='query',
                          count=lambda start: len(mine[start:start + TEACHER_CHUNK]),
                          enabled=self.shows)
        for start in chunks:
            ranked.update(ranked_excluding(teacher, mine[start:start + TEACHER_CHUNK], depth or self.depth,
                                           exclude=exclude and self.exclude_sources))
        self.train_mode(True)
        return self.gather(ranked)

    def _student(self, fresh: bool) -> pt.Transformer:
        student = self.retriever(fresh=fresh)
        self.train_mode(True)
        return student

    # -- data -------------------------------------------------------------------------

    def examples(self, topics: pd.DataFrame) -> List[Query]:
        """The training queries, round-trip filtered if ``filter_depth`` is set (the start
        encoder's teacher ranks them here, once: it is round 0's teacher as well), less the
        verdict's held-out slice."""
        sources = dict(zip(topics['qid'].astype(str), topics['source_docno'])) if 'source_docno' in topics else {}
        self._sources = {q: d for q, d in sources.items() if isinstance(d, str)}
        queries = self._filtered(topics, sources)
        held = set(held_out([q.qid for q in queries], self.verdict_share, seed=self.seed, fewest=self.verdict_fewest))
        self._held = [q for q in queries if q.qid in held]
        if self._held:
            judged_by_teacher = [q for q in self._held if not isinstance(sources.get(q.qid), str)
                                 or sources[q.qid] in q.excluded]
            top = self.rank(self.round_teacher(), judged_by_teacher, depth=1) if judged_by_teacher else {}
            self._pseudo = pseudo_relevant(self._held, top, sources)
            self._held = [q for q in self._held if q.qid in self._pseudo]
            if not any('verdict queries' in r for r in self.log):
                by_teacher = sum(q.qid in self._pseudo for q in judged_by_teacher)
                self.log.append({'step': 0, 'verdict queries': len(self._held),
                                 'verdict judged by': f'{len(self._held) - by_teacher} sources, '
                                                      f'{by_teacher} teacher top 1'})
        train = [q for q in queries if q.qid not in held]
        # a small query log: each round passes over its queries several times, to make min_round_steps
        passes = math.ceil(self.min_round_steps * self.batch_size / len(train)) if self.min_round_steps and train else 1
        if passes > 1 and not any('passes a round' in r for r in self.log):
            self.log.append({'step': 0, 'passes a round': passes})
        return train * passes

    def _filtered(self, topics: pd.DataFrame, sources: Dict[str, str]) -> List[Query]:
        """The training queries, round-trip filtered by their ``sources`` (qid -> source_docno)."""
        queries = training_queries(topics)
        if not self.exclude_sources:
            queries = [Query(q.qid, q.query, frozenset(), q.answer) for q in queries]
        if self.filter_depth is None or not sources:
            self._round0 = None
            return queries
        ranked = self.rank(self.round_teacher(), queries, exclude=False, depth=max(self.depth, self.filter_depth))
        kept = [q for q in queries if sources.get(q.qid) in ranked[q.qid][0][:self.filter_depth]]
        self.query_stats = {'queries': len(queries), 'kept': len(kept),
                            'survival': len(kept) / max(1, len(queries))}
        logger.info('round-trip filter (teacher top %d): %d of %d queries kept', self.filter_depth, len(kept),
                    len(queries))
        self.log.append({'step': 0, **{f'round-trip {k}': v for k, v in self.query_stats.items()}})
        # round 0's candidates, when nothing is excluded from them: the same ranking, cut at depth
        self._round0 = None if self.exclude_sources else {
            q.qid: (ranked[q.qid][0][:self.depth], ranked[q.qid][1][:self.depth]) for q in kept}
        return kept

    # -- the verdict ------------------------------------------------------------------

    def judge(self, after_round: int, student: Optional[Callable[[], pt.Transformer]] = None):
        """Scores the student as it is (after ``after_round`` rounds; 0: the start) on the held-out
        slice, once a round (a resumed run finds the score in its log), and keeps its weights
        while it is the best. ``student``: gives the retriever of the student as it is now."""
        if not self._held or any(r.get('verdict round') == after_round for r in self.log):
            return
        ranked = self.rank(student() if student else self._student(fresh=self.passages_move), self._held, depth=10)
        scores = ndcg_at({q: d for q, (d, _) in ranked.items()}, self._pseudo)
        self.log.append({'step': self.state.get('step', 0), 'verdict round': after_round,
                         'verdict nDCG@10': float(scores.mean()), 'verdict scores': scores.round(6).tolist()})
        earlier = [r['verdict nDCG@10'] for r in self.log[:-1] if 'verdict round' in r]
        if not earlier or scores.mean() > max(earlier):
            offsets = self.encoder.passage_offsets
            self._best = (after_round, {k: v.detach().clone() for k, v in self.encoder.model.state_dict().items()},
                          None if offsets is None else PassageOffsets(offsets.dim, offsets.normalize, offsets.docnos,
                                                                      offsets.delta))
            if self.output_dir is not None and self.process_rank == 0:  # (for a resumed run)
                self.encoder.save_pretrained(self.output_dir / 'best-round')

    def on_fit_end(self):
        """The verdict: the best round is put back (the start, if no round beat it) and the
        log says whether adaptation helped by the held-out signal."""
        if not self._held:
            return
        self.judge(self.state['epoch'])
        rounds = {r['verdict round']: np.asarray(r['verdict scores']) for r in self.log if 'verdict round' in r}
        self.verdict = verdict(rounds, seed=self.seed)
        last = max(rounds)
        if self.verdict.best_round != last:
            if self._best is not None and self._best[0] == self.verdict.best_round:
                self.encoder.model.load_state_dict(self._best[1])
                self.encoder.passage_offsets = self._best[2]
            else:  # (a resumed run: the best round was saved before it stopped)
                self.encoder.load_weights(self.output_dir / 'best-round')
        logger.info('verdict: %s', self.verdict.sentence())
        self.log.append({'step': self.state.get('step', 0), 'verdict': self.verdict.sentence(),
                         'verdict kept round': self.verdict.best_round, 'verdict start': self.verdict.start,
                         'verdict best': self.verdict.best, 'verdict low': self.verdict.low,
                         'verdict high': self.verdict.high, 'verdict helped': self.verdict.helped})

    def on_epoch_start(self, examples: List[Query], epoch: int, resumed: bool):
        made = []

        def student():  # the student as the round starts, made once for the verdict and the teacher: a moving
            if not made:  # passage tower is encoded afresh once a round
                made.append(self._student(fresh=self.passages_move and epoch > 0))
            return made[0]
        self.judge(epoch, student)
        if resumed and self.state.get('targets round') == epoch:
            return  # the round's targets came back with the checkpoint
        t0 = time.time()
        if epoch == 0 and self._round0 is not None:
            targets = self._round0
        elif self.state.get('targets') is not None and self.fixed_teacher:
            return  # a teacher that does not read the student ranks as it did in round 0
        else:
            targets = self.rank(self.round_teacher(student=None if self.fixed_teacher else student()),
                                list({q.qid: q for q in examples}.values()))  # (a query passed over twice: ranked once)
        self._round0 = None
        previous = self.state.get('targets')
        record = {'step': self.state.get('step', 0), 'round': epoch, 'teacher seconds': time.time() - t0}
        if previous is not None:
            record['teacher overlap'] = top_overlap({q: d for q, (d, _) in targets.items()},
                                                    {q: d for q, (d, _) in previous.items()})
        self.log.append(record)
        self.state.update({'targets': targets, 'targets round': epoch})
        if (self.stop_overlap is not None and 'teacher overlap' in record
                and record['teacher overlap'] >= self.stop_overlap):
            self.stop(f'round {epoch}: the teacher shares {record["teacher overlap"]:.3f} of its top 10 with '
                      f'round {epoch - 1} (stop_overlap {self.stop_overlap})')

    # -- the loss ---------------------------------------------------------------------

    def loss(self, batch: List[Query], rng: np.random.Generator) -> Optional[torch.Tensor]:
        targets = self.state['targets']
        batch = [q for q in batch if len(targets.get(q.qid, ([],))[0]) > 0]
        if not batch:
            return None
        rows = [targets[q.qid] for q in batch]
        # source_share: the passage a query was written for is one of its candidates, if the teacher's top lacks it
        written_for = [self._sources.get(q.qid) if self.source_share and not q.excluded else None for q in batch]
        union = list(dict.fromkeys([d for docnos, _ in rows for d in docnos] + [d for d in written_for if d]))
        column = {d: j for j, d in enumerate(union)}
        b, n = len(batch), len(union)
        own = torch.zeros(b, n, dtype=torch.bool)
        teacher = torch.zeros(b, n, dtype=torch.float64)
        for i, (docnos, scores) in enumerate(rows):
            cols = [column[d] for d in docnos]
            own[i, cols] = True
            teacher[i, cols] = torch.from_numpy(np.asarray(scores, dtype=np.float64)) / self.teacher_temperature
        excluded = torch.tensor([[d in q.excluded for d in union] for q in batch], dtype=torch.bool)
        positive = torch.zeros(b, n, dtype=torch.bool)
        for i, docno in enumerate(written_for):
            if docno:
                positive[i, column[docno]] = True
        # what each query's student distribution spans: its own candidates (margin_mse, or
        # kl without in_batch), or every candidate of the batch but its excluded passages
        shut = excluded | ~(own | positive) if self.loss_name == 'margin_mse' or not self.in_batch else excluded
        if int((~shut).sum(1).max()) < 2:  # one candidate a query and no other in the batch
            return None
        # the rows of the loss: under data parallelism (Trainer.local_rows) this process's share
        # of the global batch, each against every candidate of the global batch, and the loss
        # their sum over the global batch's count, so that the ranks' gradients sum to one
        # process's gradient of the whole batch
        counted = b if self.loss_name == 'kl' else int((own.sum(1) >= 2).sum())
        local = list(self.local_rows(b))
        if not local:  # (the batch lost queries without targets: fewer left than processes)
            # offsets: every process holds the batch's rows, whose gradients OffsetAdam sums over them
            pull = self._passage_vectors(union)[1] if self._offsets is not None else 0.0
            return torch.zeros((), requires_grad=True) + 0.0 * pull
        passages, pull = self._passage_vectors(union)
        own, shut, teacher, positive = own[local], shut[local], teacher[local], positive[local]
        student = self._student_logits([batch[i] for i in local], passages)
        device = student.device
        own, shut, teacher, positive = own.to(device), shut.to(device), teacher.to(device), positive.to(device)
        if self.loss_name == 'margin_mse':  # each query's own candidates only, gathered to (b, depth)
            width = int(own.sum(1).max())
            columns = torch.argsort((~own).to(torch.int8), dim=1, stable=True)[:, :width]
            valid = own.gather(1, columns)
            loss = margin_mse(student.gather(1, columns), teacher.gather(1, columns).float(), valid,
                              per_row=True).sum() / counted
        else:
            probs = torch.softmax(teacher.masked_fill(~own, float('-inf')), dim=-1).float()
            if self.source_share:
                written = positive.any(1, keepdim=True)
                probs = torch.where(written, (1 - self.source_share) * probs + self.source_share * positive.float(),
                                    probs)
            loss = listwise_kl(student, probs, shut, per_row=True).sum() / counted
        with torch.no_grad():  # label-free diagnostics: does the student agree with the teacher?
            s_own = student.detach().masked_fill(~own, float('-inf'))
            t_own = teacher.masked_fill(~own, float('-inf'))
            self.record('top-1 agreement', (s_own.argmax(1) == t_own.argmax(1)).float().mean().item(), len(local))
        if self._offsets is not None:
            self.record('offset norm', float(self.encoder.passage_offsets.norms().mean()))
            # the ranks' gradients sum: each adds its share of the pull
            return loss + pull / self.world_size
        return loss

    def save_extra(self, path):
        """The final model goes out in the sentence-transformers layout as well (no projections,
        no passage offsets: those live in ``passage_offsets.pt`` and the index); a checkpoint
        keeps the offsets' Adam moments, for an exact resume."""
        if path.name == 'final' and self.encoder.model.dim is None:
            self.encoder.save_sentence_transformers(path)
        if self._offsets is not None and path.name != 'final':
            self._offsets.save(path)

    def load_extra(self, path):
        if self._offsets is not None:  # (load_weights has put the checkpoint's offsets on the encoder)
            self._offsets.offsets = self.encoder.passage_offsets
            if not self._offsets.load(path):
                raise ValueError(f'{path} has no state of the passage offsets to resume from')

    def _passage_vectors(self, docnos: List[str]) -> Tuple[torch.Tensor, torch.Tensor]:
        """The vectors of ``docnos`` (with gradients to the passage tower if it trains, or to
        their offsets), and the offsets' L2 pull (0 without offsets)."""
        if self.train_passages:
            return self.encoder.encode(self.collection.texts(docnos), 'passage'), torch.zeros(())
        if self.passage_layers is not None:
            return self._top_layer_vectors(docnos), torch.zeros(())
        index_docnos, vectors, _ = self._index.payload()
        passages = torch.from_numpy(np.asarray(vectors[index_docnos.inv[docnos]], dtype=np.float32))
        passages = passages.to(self.encoder.device)
        if self._offsets is None:
            return passages, torch.zeros((), device=passages.device)
        return self._offsets.adjusted(docnos, passages)

    def _top_layer_vectors(self, docnos: List[str]) -> torch.Tensor:
        """The vectors of ``docnos`` from the passage tower's top ``passage_layers`` layers (with
        gradients to them) over their lower layers' states, computed for a passage the first
        time it is a candidate and kept (the lower layers are frozen: they never change)."""
        model, device, k = self.encoder.model, self.encoder.device, self.passage_layers
        missing = [d for d in dict.fromkeys(docnos) if d not in self._states]
        for start in range(0, len(missing), self.encoder.batch_size):
            chunk = missing[start:start + self.encoder.batch_size]
            batch = self.encoder.tokenize(self.collection.texts(chunk), 'passage')
            mask = batch['attention_mask'].to(device)
            with self.encoder.autocast():
                states = model.passage_states(batch['input_ids'].to(device), mask, k)
            for docno, state, length in zip(chunk, states, mask.sum(1).tolist()):
                self._states[docno] = state[:length].detach().to('cpu', torch.float32)
        rows = [self._states[d] for d in docnos]
        states = torch.zeros(len(rows), max(len(r) for r in rows), rows[0].shape[-1])
        mask = torch.zeros(states.shape[:2], dtype=torch.long)
        for i, row in enumerate(rows):
            states[i, :len(row)], mask[i, :len(row)] = row, 1
        with self.encoder.autocast():
            vectors = model.passage_from_states(states.to(device), mask.to(device), k)
        return vectors.float()

    def _student_logits(self, batch: List[Query], passages: torch.Tensor) -> torch.Tensor:
        """q · p / temperature for every query of the batch and every passage vector, with
        gradients to the query tower."""
        queries = self.encoder.encode([q.query for q in batch], 'query')
        return queries @ passages.T / self.encoder.temperature
