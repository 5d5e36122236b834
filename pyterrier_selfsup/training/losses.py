"""Distillation's targets and losses, as pure functions of tensors.

:func:`candidate_table` lays a batch's teacher rankings out as one table of candidates,
:func:`distillation_loss` scores the student against it, with :func:`listwise_kl` or
:func:`margin_mse`; :func:`top_overlap` compares two rounds' rankings.

    table = candidate_table([(['d1', 'd2'], np.array([2.0, 1.0]))], [frozenset()], temperature=1.0,
                            own_only=False)
    loss = distillation_loss(student_logits, table.teacher, table.own, table.shut, 'kl', counted=1)
"""
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F


def listwise_kl(student_logits: torch.Tensor, teacher_probs: torch.Tensor,
                excluded: torch.Tensor | None = None, *, per_row: bool = False) -> torch.Tensor:
    """Mean over queries of KL(teacher ‖ softmax(student_logits)), each row's softmax over its
    entries not ``excluded`` (default: none is); ``teacher_probs`` rows sum to 1 and are 0 where
    excluded. ``per_row``: each query's KL. (sentence-transformers' ``DistillKLDivLoss`` at
    temperature 1, with the ``excluded`` mask added.)"""
    if excluded is None:
        log_q = torch.log_softmax(student_logits, dim=-1)
    else:
        log_q = (torch.log_softmax(student_logits.masked_fill(excluded, float('-inf')), dim=-1)
                 .masked_fill(excluded, 0.0))
    rows = F.kl_div(log_q, teacher_probs, reduction='none').sum(-1)
    return rows if per_row else rows.mean()


def margin_mse(student_scores: torch.Tensor, teacher_scores: torch.Tensor, valid: torch.Tensor, *,
               per_row: bool = False) -> torch.Tensor:
    """Margin-MSE (Hofstätter et al.; GPL) over every ordered pair (i, j), i ≠ j, of each row's
    ``valid`` entries: mean of ((s_i - s_j) - (t_i - t_j))², per row, then over rows that have a
    pair. ``per_row``: each row's mean (0 without a pair). On GPL's triples it equals
    sentence-transformers' ``MarginMSELoss``."""
    d = student_scores - teacher_scores
    diff = d.unsqueeze(2) - d.unsqueeze(1)
    pairs = (valid.unsqueeze(2) & valid.unsqueeze(1)
             & ~torch.eye(d.shape[1], dtype=torch.bool, device=d.device))
    counts = pairs.sum((1, 2))
    rows = (diff.pow(2) * pairs).sum((1, 2)) / counts.clamp(min=1)
    return rows if per_row else rows[counts > 0].mean()


def triple(ranked: tuple[list[str], np.ndarray], source: str | None, negatives: int,
           rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    """GPL's training example from a query's ``ranked`` candidates (docnos, the teacher's
    scores): its positive (``source`` where the teacher scored it, else the teacher's top) and
    ``negatives`` others drawn at random, with their scores.

        triple((['a', 'b', 'c'], np.array([3., 2., 1.])), 'b', 1, rng)   # (['b', 'a'], [2., 3.]) or
                                                                          # (['b', 'c'], [2., 1.])
    """
    docnos, scores = ranked
    positive = docnos.index(source) if source in docnos else 0
    others = [i for i in range(len(docnos)) if i != positive]
    drawn = rng.choice(others, size=min(negatives, len(others)), replace=False)
    rows = [positive, *sorted(int(i) for i in drawn)]
    return [docnos[i] for i in rows], scores[rows]


@dataclass
class CandidateTable:
    """A batch's candidates, one column each (the union of the queries' teacher rankings).

    Attributes:
        docnos: the column's passages.
        own: (b, n) whether a column is among the row's own candidates.
        teacher: (b, n) the teacher's score / temperature where ``own`` (float64), else 0.
        shut: (b, n) the columns outside the row's student distribution: its excluded passages
            and, where the student's softmax spans only its own candidates, every other column.
    """
    docnos: list[str]
    own: torch.Tensor
    teacher: torch.Tensor
    shut: torch.Tensor

    def rows(self, local: Sequence[int], device) -> 'CandidateTable':
        """The table of rows ``local`` only, on ``device``."""
        return CandidateTable(self.docnos, self.own[local].to(device),
                              self.teacher[local].to(device), self.shut[local].to(device))


def candidate_table(rankings: Sequence[tuple[list[str], np.ndarray]],
                    excluded: Sequence[frozenset[str]],
                    temperature: float, *, own_only: bool) -> CandidateTable:
    """The table of ``rankings`` (each row's teacher docnos and scores), the scores divided by
    ``temperature``; ``excluded``: each row's passages its student may not rank; ``own_only``:
    each row's student distribution spans its own candidates only."""
    docnos = list(dict.fromkeys(d for ranked, _ in rankings for d in ranked))
    column = {d: j for j, d in enumerate(docnos)}
    own = torch.zeros(len(rankings), len(docnos), dtype=torch.bool)
    teacher = torch.zeros(len(rankings), len(docnos), dtype=torch.float64)
    for i, (ranked, scores) in enumerate(rankings):
        cols = [column[d] for d in ranked]
        own[i, cols] = True
        teacher[i, cols] = torch.from_numpy(np.asarray(scores, dtype=np.float64)) / temperature
    shut = torch.tensor([[d in row for d in docnos] for row in excluded], dtype=torch.bool)
    return CandidateTable(docnos, own, teacher, shut | ~own if own_only else shut)


def distillation_loss(student: torch.Tensor, teacher: torch.Tensor, own: torch.Tensor,
                      shut: torch.Tensor, loss: str, counted: int) -> torch.Tensor:
    """The sum over rows of ``loss`` (``kl`` or ``margin_mse``) between the student's scores and
    the teacher's, divided by ``counted`` (the global batch's rows that count). KL's target is
    the softmax of the teacher's scores over each row's ``own`` columns, its student softmax
    over the columns not ``shut``; Margin-MSE compares each row's own candidates only."""
    if loss == 'margin_mse':  # each row's own candidates, gathered to (b, depth)
        width = int(own.sum(1).max())
        columns = torch.argsort((~own).to(torch.int8), dim=1, stable=True)[:, :width]
        valid = own.gather(1, columns)
        return margin_mse(student.gather(1, columns), teacher.gather(1, columns).float(), valid,
                          per_row=True).sum() / counted
    probs = torch.softmax(teacher.masked_fill(~own, float('-inf')), dim=-1).float()
    return listwise_kl(student, probs, shut, per_row=True).sum() / counted


def top1_agreement(student: torch.Tensor, teacher: torch.Tensor, own: torch.Tensor) -> float:
    """The share of rows whose top own candidate is the same for the student and the teacher."""
    with torch.no_grad():
        hidden = float('-inf')
        return (student.detach().masked_fill(~own, hidden).argmax(1)
                == teacher.masked_fill(~own, hidden).argmax(1)).float().mean().item()


def top_overlap(a: dict[str, list[str]], b: dict[str, list[str]], k: int = 10) -> float:
    """Mean over the queries of ``a`` that have results of |top k in a ∩ top k in b| divided by
    the shorter of the two top lists."""
    shares = [len(set(docnos[:k]) & set(b.get(qid, [])[:k]))
              / max(1, min(k, len(docnos), len(b.get(qid, [])[:k])))
              for qid, docnos in a.items() if docnos]
    return float(np.mean(shares)) if shares else 0.0


def marginal_nll(retriever_logits: torch.Tensor, teacher_logp: torch.Tensor,
                 per_row: bool = False) -> torch.Tensor:
    """Mean over queries of -log Σ_z softmax(retriever_logits)_z · exp(teacher_logp_z):
    RUMBArt's loss (thesis Eq. 4.8-4.9) in log space, as RAG's ``get_nll`` computes it.
    ``per_row``: each query's term instead of their mean."""
    rows = -torch.logsumexp(torch.log_softmax(retriever_logits, dim=-1) + teacher_logp, dim=-1)
    return rows if per_row else rows.mean()


def reconstruction_kl(retriever_logits: torch.Tensor, teacher_logp: torch.Tensor,
                      per_row: bool = False) -> torch.Tensor:
    """Mean over queries of KL(q ‖ p_η), where q = softmax(teacher_logp) is the generator's
    reconstruction distribution (no gradient into the teacher) and p_η = softmax(retriever_logits):
    ART's loss (Sachan et al.). Unlike :func:`marginal_nll`, its target does not carry the
    retriever's own prior. ``per_row``: each query's term.

        reconstruction_kl(torch.zeros(1, 3), torch.zeros(1, 3))   # tensor(0.): the same
    """
    rows = F.kl_div(torch.log_softmax(retriever_logits, dim=-1),
                    torch.log_softmax(teacher_logp.detach(), dim=-1), reduction='none',
                    log_target=True).sum(-1)
    return rows if per_row else rows.mean()
