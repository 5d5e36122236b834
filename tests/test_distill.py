"""Distillation of a fused teacher (issue 16): the teacher's distribution, the losses, the
rounds, exact resume, and the exported model."""
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
import torch

from pyterrier_selfsup import BM25, MINILM, Collection, DualEncoder
from pyterrier_selfsup._distributed import distributed
from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.data.queries.cut import corpus_sentences, cropped_spans
from pyterrier_selfsup.data.queries.source import Query
from pyterrier_selfsup.retrieval.fusion import FusedScores, Fusion, fuse, softmax_by_query, zscores
from pyterrier_selfsup.training.distill import Distillation
from pyterrier_selfsup.training.losses import (
    candidate_table,
    distillation_loss,
    listwise_kl,
    margin_mse,
    top1_agreement,
    top_overlap,
)
from tests.helpers import (
    central_difference,
    free_port,
    start_ranks,
    stopped_at_step,
    tiny_dual_encoder,
)

# these tests pin the trainer as it was before passage offsets became its default (the shipped
# settings, pyterrier_selfsup.training.settings): their numbers were measured without them
BEFORE_OFFSETS = dict(passages='frozen')


def side(train_passages: bool) -> str:
    """The passage side of a distillation whose passage tower trains or not."""
    return 'trained' if train_passages else 'frozen'


class Frame(pt.Transformer):
    """A first stage that returns a fixed result frame for the queries asked."""

    def __init__(self, results: pd.DataFrame):
        self.results = results

    def transform(self, topics):
        return self.results[self.results['qid'].isin(topics['qid'])].merge(topics, on='qid')


class Scores(pt.Transformer):
    """A re-ranker that gives each document its fixed score and notes the documents it was
    asked to score (``seen``)."""

    def __init__(self, scores: dict):
        self.scores, self.seen = scores, []

    def transform(self, inp):
        self.seen.extend(inp['docno'])
        return inp.assign(score=[self.scores[d] for d in inp['docno']])


def _run(qid, docnos, scores):
    return pd.DataFrame({'qid': qid, 'docno': docnos, 'score': scores, 'rank': range(len(docnos))})


def test_fused_distribution_equals_a_hand_computed_one():
    bm25 = _run('q', ['a', 'b', 'c'], [30.0, 20.0, 10.0])       # z: 1.2247, 0, -1.2247
    dense = _run('q', ['b', 'd'], [0.9, 0.5])                     # z: 1, -1
    fused = Fusion({'bm25': Frame(bm25), 'dense': Frame(dense)}, weights={'dense': 2.0})(
        pd.DataFrame({'qid': ['q'], 'query': ['x']}))
    z = math.sqrt(1.5)
    # a document missing from one list takes that list's lowest z for the query
    expected = {'a': z + 2 * -1, 'b': 0 + 2 * 1, 'c': -z + 2 * -1, 'd': -z + 2 * -1}
    assert fused['docno'].tolist() == ['b', 'a', 'c', 'd']  # ties broken by docno
    assert dict(zip(fused['docno'], fused['score'])) == pytest.approx(expected)
    assert fused['rank'].tolist() == [0, 1, 2, 3]
    probs = softmax_by_query(fused, temperature=0.5)
    e = {d: math.exp(s / 0.5) for d, s in expected.items()}
    assert probs.tolist() == pytest.approx([e[d] / sum(e.values()) for d in fused['docno']])


def test_zscores_are_per_query_and_constant_scores_give_zeros():
    frame = pd.concat([_run('1', ['a', 'b'], [1.0, 3.0]), _run('2', ['a', 'b'], [5.0, 5.0])])
    assert zscores(frame).tolist() == pytest.approx([-1, 1, 0, 0])
    assert fuse({'x': frame}, {'x': 3.0})['score'].tolist() == pytest.approx([-3, 3, 0, 0])


def test_reranker_scores_only_the_fused_top():
    bm25 = _run('q', ['a', 'b', 'c', 'd'], [4.0, 3.0, 2.0, 1.0])
    reranker = Scores({'a': 0.0, 'b': 10.0})
    fused = Fusion({'bm25': Frame(bm25)}, rerankers={'gen': reranker}, rerank_depth=2)(
        pd.DataFrame({'qid': ['q'], 'query': ['x']}))
    assert sorted(reranker.seen) == ['a', 'b']
    # the re-ranker's preference turned the top two
    assert fused['docno'].tolist()[:2] == ['b', 'a']
    assert fused.set_index('docno')['z_gen'].to_dict() == pytest.approx(
        {'a': -1, 'b': 1, 'c': -1, 'd': -1})


def test_stages_weighted_zero_mine_the_candidates_that_the_rerankers_alone_score():
    # the student's order is d, c, b, a; docno order would hand the re-ranker a and b
    student = _run('q', ['d', 'c', 'b', 'a'], [4.0, 3.0, 2.0, 1.0])
    labeller = Scores({'c': 5.0, 'd': 1.0})
    frame = pd.DataFrame({'qid': ['q'], 'query': ['x']})
    fused = Fusion({'student': Frame(student)}, weights={'student': 0.0},
                   rerankers={'ce': labeller}, rerank_depth=2)(frame)
    assert sorted(labeller.seen) == ['c', 'd']
    # the labeller's z-scores alone (the student's weight is 0), over what it scored alone
    assert fused['docno'].tolist() == ['c', 'd']
    assert fused.set_index('docno')['score'].to_dict() == pytest.approx({'c': 1, 'd': -1})
    # with raw_labels (Margin-MSE: GPL's margins are of raw scores), its own scores
    raw = Fusion({'student': Frame(student)}, weights={'student': 0.0},
                 rerankers={'ce': labeller}, rerank_depth=2, raw_labels=True)(frame)
    assert raw.set_index('docno')['score'].to_dict() == {'c': 5.0, 'd': 1.0}
    assert raw.set_index('docno')['z_ce'].to_dict() == pytest.approx({'c': 1, 'd': -1})


def test_fused_scores_rescore_another_retrievers_candidates_lowest_where_unreturned():
    bm25 = _run('q', ['a', 'b', 'c'], [30.0, 20.0, 10.0])       # z: 1.2247, 0, -1.2247
    dense = _run('q', ['b', 'd'], [0.9, 0.5])                     # z: 1, -1
    fusion = Fusion({'bm25': Frame(bm25), 'dense': Frame(dense)})
    z = math.sqrt(1.5)
    candidates = pd.DataFrame({'qid': 'q', 'query': 'x', 'docno': ['d', 'b', 'e'],
                               'score': [3.0, 2.0, 1.0], 'rank': [0, 1, 2]})
    scored = FusedScores(fusion)(candidates)
    # b: 0 + 1; d: -z (bm25's lowest) - 1; e, returned by neither: the fusion's lowest
    assert dict(zip(scored['docno'], scored['score'])) == pytest.approx(
        {'b': 1, 'd': -z - 1, 'e': -z - 1})
    assert scored['docno'].tolist() == ['b', 'd', 'e'] and scored['rank'].tolist() == [0, 1, 2]


def test_listwise_kl_against_brute_force_with_gradients():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    excluded = torch.tensor([[0, 0, 0, 1, 0], [0, 0, 0, 0, 0], [1, 0, 0, 0, 1]], dtype=torch.bool)
    target = torch.rand(3, 5, dtype=torch.float64).masked_fill(excluded, 0)
    target[0, 4] = 0  # a document the teacher gives nothing (an in-batch negative)
    target = target / target.sum(1, keepdim=True)

    def brute():
        total = 0.0
        for i in range(3):
            keep = [j for j in range(5) if not excluded[i, j]]
            z = sum(math.exp(logits[i, j].item()) for j in keep)
            total += sum(target[i, j].item()
                         * math.log(target[i, j].item() / (math.exp(logits[i, j].item()) / z))
                         for j in keep if target[i, j] > 0)
        return total / 3

    loss = listwise_kl(logits, target, excluded)
    assert loss.item() == pytest.approx(brute(), rel=1e-10)
    loss.backward()
    for index in [(0, 0), (0, 4), (1, 2), (2, 3)]:
        numeric = central_difference(lambda: listwise_kl(logits, target, excluded), logits,
                                     index, 1e-6)
        assert logits.grad[index].item() == pytest.approx(numeric, rel=1e-6, abs=1e-9)
    assert logits.grad[0, 3].item() == 0 and logits.grad[2, 0].item() == 0  # excluded: no gradient
    assert torch.autograd.gradcheck(lambda x: listwise_kl(x, target, excluded),
                                    (logits.detach().requires_grad_(),))


def test_margin_mse_against_brute_force_with_gradients():
    torch.manual_seed(1)
    s = torch.randn(2, 4, dtype=torch.float64, requires_grad=True)
    t = torch.randn(2, 4, dtype=torch.float64)
    valid = torch.tensor([[1, 1, 1, 0], [1, 0, 1, 1]], dtype=torch.bool)

    def brute():
        rows = []
        for i in range(2):
            idx = [j for j in range(4) if valid[i, j]]
            pairs = [((s[i, a] - s[i, b]) - (t[i, a] - t[i, b])).item() ** 2
                     for a in idx for b in idx if a != b]
            rows.append(sum(pairs) / len(pairs))
        return sum(rows) / 2

    assert margin_mse(s, t, valid).item() == pytest.approx(brute(), rel=1e-10)
    assert torch.autograd.gradcheck(lambda x: margin_mse(x, t, valid),
                                    (s.detach().requires_grad_(),))


def test_on_triples_margin_mse_is_the_librarys():
    """margin_mse adds to sentence-transformers' MarginMSELoss every pair of a row's candidates
    and a mask of the valid ones: on GPL's triples (a positive and one negative, all valid) the
    two are equal; with two negatives ours also compares the negatives with each other."""
    from sentence_transformers.losses import MarginMSELoss
    from sentence_transformers.util import pairwise_dot_score
    torch.manual_seed(2)
    query, positive, negative, other = (torch.randn(5, 8, dtype=torch.float64) for _ in range(4))
    teacher = torch.randn(5, 3, dtype=torch.float64)
    library = MarginMSELoss(None, similarity_fct=pairwise_dot_score)
    student = torch.stack([pairwise_dot_score(query, p) for p in (positive, negative, other)], 1)
    expected = library.compute_loss_from_embeddings([query, positive, negative], teacher[:, :2])
    valid = torch.ones(5, 2, dtype=torch.bool)
    assert margin_mse(student[:, :2], teacher[:, :2], valid).item() == pytest.approx(
        expected.item(), rel=1e-12)
    two = library.compute_loss_from_embeddings([query, positive, negative, other], teacher)
    assert margin_mse(student, teacher, torch.ones(5, 3, dtype=torch.bool)).item() != (
        pytest.approx(two.item()))


def test_over_every_candidate_listwise_kl_is_the_librarys():
    """listwise_kl adds to sentence-transformers' DistillKLDivLoss only the mask of each row's
    excluded candidates: with none excluded the two are equal (temperature 1, dot product)."""
    from sentence_transformers.losses import DistillKLDivLoss
    from sentence_transformers.util import pairwise_dot_score
    torch.manual_seed(3)
    query, *candidates = (torch.randn(4, 8, dtype=torch.float64) for _ in range(4))
    teacher = torch.randn(4, 3, dtype=torch.float64)
    library = DistillKLDivLoss(None, similarity_fct=pairwise_dot_score)
    expected = library.compute_loss_from_embeddings([query, *candidates], teacher)
    student = torch.stack([pairwise_dot_score(query, c) for c in candidates], 1)
    none = torch.zeros(4, 3, dtype=torch.bool)
    ours = listwise_kl(student, torch.softmax(teacher, 1), none)
    assert ours.item() == pytest.approx(expected.item(), rel=1e-12)


def test_the_candidate_table_lays_out_each_querys_teacher_scores_and_what_it_may_not_rank():
    rankings = [(['a', 'b'], np.array([2.0, 0.0])), (['b', 'c'], np.array([1.0, 3.0]))]
    table = candidate_table(rankings, [frozenset({'c'}), frozenset()], 2.0, own_only=False)
    assert table.docnos == ['a', 'b', 'c']
    assert table.own.tolist() == [[True, True, False], [False, True, True]]
    assert table.teacher.tolist() == [[1.0, 0.0, 0.0], [0.0, 0.5, 1.5]]
    # in-batch: the rest is open
    assert table.shut.tolist() == [[False, False, True], [False, False, False]]
    own_only = candidate_table(rankings, [frozenset({'c'}), frozenset()], 2.0, own_only=True)
    assert own_only.shut.tolist() == [[False, False, True], [True, False, False]]
    assert own_only.rows([1], 'cpu').own.tolist() == [[False, True, True]]


def test_the_distillation_loss_is_the_kl_or_margin_mse_of_the_tables_rows_over_the_count():
    table = candidate_table([(['a', 'b'], np.array([2.0, 0.0])),
                             (['b', 'c'], np.array([1.0, 3.0]))],
                            [frozenset(), frozenset()], 1.0, own_only=False)
    student = torch.tensor([[0.5, -0.5, 0.0], [1.0, 3.0, 2.0]])
    teacher = torch.softmax(table.teacher.masked_fill(~table.own, float('-inf')), -1).float()
    kl = distillation_loss(student, table.teacher, table.own, table.shut, 'kl', counted=4)
    torch.testing.assert_close(kl, listwise_kl(student, teacher, table.shut) * 2 / 4)
    mse = distillation_loss(student, table.teacher, table.own, table.shut, 'margin_mse', counted=2)
    # row 0: (0.5 - -0.5) - (2 - 0) = -1; row 1: (3 - 2) - (1 - 3) = 3:
    # each squared, summed over 2 rows
    assert mse.item() == pytest.approx((1.0 + 9.0) / 2)
    # row 0 agrees on a; row 1: b against c
    assert top1_agreement(student, table.teacher, table.own) == 0.5


def test_top_overlap():
    assert top_overlap({'q': list('abcdefghij')}, {'q': list('abcde') + list('vwxyz')}) == 0.5
    assert top_overlap({'q': ['a'], 'r': ['b']}, {'q': ['a']}, k=1) == 0.5


def _teacher(coll, cache_dir):
    bm25 = BM25.from_collection(coll, num_results=100, cache_dir=cache_dir)
    return lambda student: Fusion({'bm25': bm25, 'student': student}, depth=100)


def _distill(encoder, coll, cache_dir, **kwargs):
    settings = dict(depth=10, batch_size=8, lr=3e-4, rounds=3, seed=0, **BEFORE_OFFSETS,
                    cache_dir=cache_dir, verbose=False)
    return Distillation(encoder, coll, _teacher(coll, cache_dir), **{**settings, **kwargs})


def test_rounds_move_the_student_towards_its_teacher_and_resume_exactly(tiny_encoder, cache_dir,
                                                                        tmp_path, monkeypatch):
    coll = Collection('classic/adi')
    topics = coll.topics()
    full = _distill(tiny_encoder(max_length=64), coll, cache_dir, output_dir=tmp_path / 'full',
                    checkpoint_every='epoch').fit(topics)
    rounds = [r for r in full.log if 'round' in r]
    assert [r['round'] for r in rounds] == [0, 1, 2]
    # the student re-entered its teacher
    assert all(0 < r['teacher overlap'] < 1 for r in rounds[1:])
    assert len([r for r in full.log if 'loss' in r]) == 3 * math.ceil(35 / 8)
    # the passage tower stayed as it was: the student searches the start's index
    start = tiny_encoder(max_length=64)
    assert full.encoder.passage_fingerprint() == start.passage_fingerprint()
    assert full.encoder.fingerprint() != start.fingerprint()

    # interrupted in round 2, resumed from the checkpoint at round 1's end: the same weights
    with stopped_at_step(monkeypatch, Distillation, 2 * math.ceil(35 / 8) + 2):
        _distill(tiny_encoder(max_length=64), coll, cache_dir, output_dir=tmp_path / 'cut',
                 checkpoint_every='epoch').fit(topics)
    resumed = _distill(tiny_encoder(max_length=64), coll, cache_dir, output_dir=tmp_path / 'cut',
                       checkpoint_every='epoch')
    resumed.fit(topics, resume_from=tmp_path / 'cut' / f'checkpoint-{2 * math.ceil(35 / 8)}')
    assert ([r['step'] for r in resumed.log if 'loss' in r]
            == [r['step'] for r in full.log if 'loss' in r])
    for a, b in zip(full.encoder.model.parameters(), resumed.encoder.model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize('loss, train_passages', [('kl', False), ('margin_mse', True)])
def test_the_student_learns_a_fixed_teacher(tiny_encoder, cache_dir, loss, train_passages):
    coll = Collection('classic/adi')
    bm25 = Fusion({'bm25': BM25.from_collection(coll, num_results=100, cache_dir=cache_dir)})
    trainer = Distillation(tiny_encoder(max_length=64), coll, bm25, depth=10, batch_size=7, lr=1e-2,
                           rounds=6, loss=loss,
                           **dict(BEFORE_OFFSETS, passages=side(train_passages)),
                           cache_dir=cache_dir, verbose=False)
    start = tiny_encoder(max_length=64)
    trainer.fit(coll.topics())
    # both towers train (tied), or the passage tower stays the start's
    assert trainer.encoder.model.tied == train_passages
    assert (trainer.encoder.passage_fingerprint() == start.passage_fingerprint()) != train_passages
    losses = [r['loss'] for r in trainer.log if 'loss' in r]
    agreement = [r['top-1 agreement'] for r in trainer.log if 'top-1 agreement' in r]
    assert np.mean(losses[-5:]) < 0.85 * np.mean(losses[:5])
    assert np.mean(agreement[-5:]) > np.mean(agreement[:5]) + 0.3
    assert [r['round'] for r in trainer.log if 'round' in r] == [0]  # a fixed teacher ranks once


def test_a_batch_without_negatives_takes_no_step(tiny_encoder, cache_dir):
    coll = Collection('classic/adi')
    trainer = _distill(tiny_encoder(max_length=64), coll, cache_dir, depth=1, in_batch=False,
                       rounds=1)
    q = Query('x', 'automatic indexing', frozenset())
    trainer.state['targets'] = {'x': (['1'], np.array([1.0]))}
    assert trainer.loss([q], np.random.default_rng(0)) is None
    before = [(p, p.detach().clone()) for p in trainer.encoder.model.parameters()]
    # every batch has one candidate a query and no in-batch negative
    trainer.fit(coll.topics().head(9))
    assert not [r for r in trainer.log if 'loss' in r]
    for p, start in before:
        torch.testing.assert_close(p, start, rtol=0, atol=0)


def test_the_last_batch_is_never_a_single_query(tiny_encoder, cache_dir):
    coll = Collection('classic/adi')
    trainer = _distill(tiny_encoder(max_length=64), coll, cache_dir, batch_size=17, rounds=1)
    assert [len(b) for b in trainer.batches(35, 0)] == [17, 18]
    assert sorted(np.concatenate(trainer.batches(35, 0)).tolist()) == list(range(35))
    assert [len(b) for b in trainer.batches(36, 0)] == [17, 17, 2]


def test_small_corpora_give_several_queries_a_document_and_say_so(caplog):
    coll = Collection('classic/adi')  # 82 short documents
    sentences = corpus_sentences(coll, 200, seed=0)
    assert len(sentences) == 200 and sentences['query'].is_unique
    assert sentences['source_docno'].value_counts().max() > 1
    spans = cropped_spans(coll, 300, seed=0)
    assert len(spans) == 300
    with caplog.at_level('WARNING'):
        every = corpus_sentences(coll, 100000, seed=0)
    assert len(every) < 100000 and 'asked for' in caplog.text
    assert corpus_sentences(coll, 50, seed=0).equals(corpus_sentences(coll, 50, seed=0))


def test_exported_model_loads_in_sentence_transformers(tmp_path, cache_dir):
    from sentence_transformers import SentenceTransformer
    coll = Collection('classic/adi')
    encoder = DualEncoder.from_pretrained(MINILM, precision='fp32')
    trainer = Distillation(encoder, coll, _teacher(coll, cache_dir), depth=10, batch_size=16,
                           lr=1e-4, rounds=1, **BEFORE_OFFSETS, output_dir=tmp_path / 'run',
                           cache_dir=cache_dir, verbose=False)
    trainer.fit(coll.topics())
    final = tmp_path / 'run' / 'final'
    model = SentenceTransformer(str(final), device='cpu')
    queries, docs = coll.topics()['query'].tolist()[:4], coll.texts(['1', '2', '3'])
    np.testing.assert_allclose(model.encode_query(queries), encoder.encode_queries(queries),
                               atol=1e-5)
    np.testing.assert_allclose(model.encode_document(docs), encoder.encode_docs(docs), atol=1e-5)
    # the query tower moved, the document tower did not
    assert np.abs(model.encode_query(queries) - model.encode_document(queries)).max() > 1e-3
    assert DualEncoder.from_pretrained(str(final)).passage_fingerprint() == \
        DualEncoder.from_pretrained(MINILM).passage_fingerprint()
    # each tower's weights are saved once
    assert sorted(str(p.relative_to(final)) for p in final.rglob('*.safetensors')) == [
        'document_0_Transformer/model.safetensors', 'query_0_Transformer/model.safetensors']


def test_teacher_with_the_generator_scores_only_its_fused_top_and_caches(tiny_generator, cache_dir,
                                                                         tmp_path):
    from pyterrier_selfsup.harness.methods import teacher_pipeline
    from pyterrier_selfsup.training.teacher_parts import parse_teacher
    assert parse_teacher('2*bm25+student+gen') == {'bm25': 2.0, 'student': 1.0, 'gen': 1.0}
    with pytest.raises(ValueError, match='not one of'):
        parse_teacher('bm25+colbert')
    coll = Collection('classic/adi')
    gen = tiny_generator('llama')
    teacher = teacher_pipeline(coll, 'bm25+gen', generator=gen, run=RunContext(cache_dir=tmp_path))
    topics = coll.topics().head(3)
    fused = teacher(topics)
    bm25 = BM25.from_collection(coll, num_results=100, cache_dir=tmp_path)(topics)
    for qid, group in fused.groupby('qid'):
        top10 = set(bm25[bm25['qid'] == qid].nsmallest(10, 'rank')['docno'])
        scored = group[group['docno'].isin(top10)]
        # the generator judged BM25's top 10 (z spread over them); the rest sit at its lowest z
        assert scored['z_gen'].std() > 0
        assert (group[~group['docno'].isin(top10)]['z_gen'] == scored['z_gen'].min()).all()
        assert group['score'].to_numpy() == pytest.approx(
            (group['z_bm25'] + group['z_gen']).to_numpy())
    # its scores are cached for the next round
    assert any((tmp_path / 'generator-scores').rglob('*'))


def _fit_fixed_teacher(tiny_dir: str, cache_dir: str, output_dir: str, loss: str,
                       train_passages: bool, rank: int = 0, world_size: int = 1, store: str = '',
                       stop_at: int = 0):
    """Distillation of BM25 into the tiny encoder on ADI (:func:`_distil_fixed_teacher`), in one
    process or as ``rank`` of ``world_size`` (gloo)."""
    import torch.distributed as dist
    if world_size > 1:
        torch.set_num_threads(1)
        dist.init_process_group('gloo', init_method=f'file://{store}', rank=rank,
                                world_size=world_size)
    try:
        return _distil_fixed_teacher(tiny_dir, cache_dir, output_dir, loss, train_passages, stop_at)
    finally:
        if world_size > 1:
            dist.destroy_process_group()


def _distil_fixed_teacher(tiny_dir: str, cache_dir: str, output_dir: str, loss: str,
                          train_passages: bool, stop_at: int = 0, kill_at: int = 0,
                          killed: str = ''):
    """Distillation of BM25 into the tiny encoder on ADI, in this process (or as its rank of
    the process group it is in), resuming from the last checkpoint in ``output_dir`` if there
    is one; dropout off, so that one process and several can agree exactly. ``stop_at``: every
    process is interrupted in its ``stop_at``-th loss (torchrun stops the whole group when
    one process fails). ``kill_at``: the process of rank 1 kills itself (SIGKILL) in its
    ``kill_at``-th loss, having written the time to the file ``killed``."""
    from pyterrier_selfsup.training.checkpoints import fit_resumably
    encoder = tiny_dual_encoder(tiny_dir, max_length=64)
    coll = Collection('classic/adi')
    common = dict(batch_size=7, lr=1e-2, output_dir=output_dir, checkpoint_every='epoch',
                  cache_dir=cache_dir, verbose=False)
    if loss == 'ds':  # distant supervision: BM25's top 1 the positive, the batch's the negatives
        from pyterrier_selfsup.training.distant import DistantSupervision
        trainer = DistantSupervision(encoder, coll, epochs=2, **common)
    else:
        bm25 = Fusion({'bm25': BM25.from_collection(coll, num_results=100, cache_dir=cache_dir)})
        trainer = Distillation(encoder, coll, bm25, depth=10, loss=loss, rounds=2,
                               **dict(BEFORE_OFFSETS, passages=side(train_passages)), **common)
    # no dropout: the masks differ with the split
    trainer.train_mode = lambda on: encoder.train_mode(False)
    if kill_at and distributed()[0] == 1:
        loss_of, calls = trainer.loss, []

        def killed_in(batch, rng):
            calls.append(1)
            if len(calls) == kill_at:
                Path(killed).write_text(str(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
            return loss_of(batch, rng)
        trainer.loss = killed_in
    if stop_at:
        loss_of, calls = trainer.loss, []

        def interrupted(batch, rng):
            calls.append(1)
            if len(calls) == stop_at:
                raise KeyboardInterrupt
            return loss_of(batch, rng)
        trainer.loss = interrupted
        try:
            fit_resumably(trainer, coll.topics())
        except KeyboardInterrupt:
            return None
    return fit_resumably(trainer, coll.topics())


TWO_PROCESS_RUNS = [('kl', False), ('margin_mse', True), ('ds', True)]


def _spawned_runs(rank, tiny_dir, cache_dir, base, store):
    """Every run of TWO_PROCESS_RUNS as ``rank`` of one process group, one after another (one
    group's start-up for the three)."""
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method=f'file://{store}', rank=rank, world_size=2)
    try:
        for loss, train_passages in TWO_PROCESS_RUNS:
            _distil_fixed_teacher(tiny_dir, cache_dir, f'{base}/two-{loss}', loss, train_passages)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope='module')
def two_process_runs(tiny_dir, cache_dir, tmp_path_factory):
    """Where each of TWO_PROCESS_RUNS trained on two processes put its model and log."""
    base = tmp_path_factory.mktemp('two-processes')
    # 35 queries in batches of 7: rank 0 computes rows 0, 2, 4, 6 of each batch, rank 1 rows 1, 3, 5
    start_ranks(_spawned_runs, (str(tiny_dir), str(cache_dir), str(base), str(base / 'store')))
    return base


@pytest.mark.slow
@pytest.mark.parametrize('loss, train_passages', TWO_PROCESS_RUNS)
def test_two_processes_train_as_one(tiny_dir, cache_dir, tmp_path, two_process_runs, loss,
                                    train_passages):
    import json

    one = _fit_fixed_teacher(str(tiny_dir), str(cache_dir), str(tmp_path / 'one'), loss,
                             train_passages)
    one_encoder = one.encoder if loss != 'ds' else one.model
    ran = two_process_runs / f'two-{loss}'
    two = DualEncoder.from_pretrained(str(ran / 'final'), device='cpu', precision='fp32')
    twos = two.model.state_dict()
    for name, a in one_encoder.model.state_dict().items():
        b = twos[name]
        # Adam scales a near-zero gradient component up to a step of about lr (1e-2), so the
        # floating-point noise of 1 against 2 threads shows as up to ~1e-4 after 10 steps; a
        # lost or doubled row would move weights by the order of the steps themselves
        torch.testing.assert_close(a, b, rtol=1e-3, atol=5e-4)
    start = tiny_dual_encoder(tiny_dir, max_length=64)  # the student did move from its start
    assert max((a - b).abs().max().item() for a, b in
               zip(one_encoder.model.encoder.parameters(), start.model.encoder.parameters())) > 1e-3
    # the log (rank 0's, with the summed loss) matches one process's, step by step
    logged = [json.loads(line) for line in (ran / 'training_log.jsonl').read_text().splitlines()]
    np.testing.assert_allclose([r['loss'] for r in logged if 'loss' in r],
                               [r['loss'] for r in one.log if 'loss' in r], rtol=1e-4)
    assert not list(ran.glob('*.tmp'))


def _torchrun(tiny_dir, cache_dir, out, kill_at=0, killed=''):
    """tests/lost_process.py on two gloo processes under torchrun (rank 1 killed in its
    ``kill_at``-th loss): what it printed and its exit status."""
    return subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '2',
                           '--master_port', str(free_port()), '-m', 'tests.lost_process',
                           tiny_dir, cache_dir, out, str(kill_at), killed],
                          capture_output=True, text=True, cwd=Path(__file__).parent.parent)


@pytest.mark.slow
def test_a_lost_process_stops_the_other_naming_it_and_a_relaunch_resumes_to_the_same_weights(
        tiny_dir, cache_dir, tmp_path):
    """One of two processes killed (SIGKILL, as the kernel kills one out of memory) mid-round: the
    other stops at once, saying which process was lost, rather than waiting in its next
    all-reduce for gloo's timeout; the same command again resumes from the last checkpoint and
    ends where an uninterrupted run ends."""
    import json
    one = _fit_fixed_teacher(str(tiny_dir), str(cache_dir), str(tmp_path / 'one'), 'kl', False)
    # 35 queries in batches of 7: 5 steps a round; rank 1 is killed in step 7, round 1
    out, killed = str(tmp_path / 'two'), tmp_path / 'killed'
    ran = _torchrun(str(tiny_dir), str(cache_dir), out, kill_at=7, killed=str(killed))
    ended = time.time()
    assert ran.returncode != 0
    said = [line for line in ran.stderr.splitlines() if line.startswith('selfsup: ')]
    assert said and all(
        line.startswith('selfsup: process 1 (rank 1 of 2) is lost: its process ') and
        'Process 0 ' in line and
        'run the same command again to resume from the last checkpoint' in line
        for line in said if 'is lost' in line), ran.stderr[-3000:]
    assert any('is lost' in line for line in said), ran.stderr[-3000:]
    assert (re.search(r'exitcode\s*: 75 ', ran.stderr) and
            re.search(r'exitcode\s*: -9 ', ran.stderr))  # (torchrun's summary)
    # the survivor and torchrun gone well within a minute of the kill (gloo's own timeout: 30)
    assert ended - float(killed.read_text()) < 20
    assert sorted(p.name for p in (tmp_path / 'two').iterdir()
                  if p.name.startswith('checkpoint')) == ['checkpoint-5']
    assert not (tmp_path / 'two' / 'final').exists()
    restarted = time.time()
    again = _torchrun(str(tiny_dir), str(cache_dir), out)
    assert again.returncode == 0, again.stderr[-3000:]
    resumed = DualEncoder.from_pretrained(str(tmp_path / 'two' / 'final'), device='cpu',
                                          precision='fp32')
    for a, b in zip(one.encoder.model.parameters(), resumed.model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=5e-4)
    logged = [json.loads(line)
              for line in (tmp_path / 'two' / 'training_log.jsonl').read_text().splitlines()]
    assert [r['step'] for r in logged if 'loss' in r] == list(range(1, 11))
    # steps 1-5 came back with the checkpoint; only 6-10 were taken after the restart
    assert [r['time'] < restarted for r in logged if 'loss' in r] == [True] * 5 + [False] * 5
    np.testing.assert_allclose([r['loss'] for r in logged if 'loss' in r],
                               [r['loss'] for r in one.log if 'loss' in r], rtol=1e-4)


def test_the_frame_given_to_fit_says_what_the_queries_are(tiny_encoder, cache_dir):
    """Distillation(encoder, collection, teacher).fit(queries), the README's call: a query log
    (no source_docno) trains the query-log setting behind the README's query-log figures
    (distill:queries=beir/scifact/train), and corpus queries the corpus-only one."""
    from pyterrier_selfsup.harness.trained import typed_settings
    from pyterrier_selfsup.training.settings import DistillationSettings
    readme = typed_settings('distill', {'queries': 'beir/scifact/train'})
    shipped = DistillationSettings()
    log = shipped.given(35, 0)
    assert (log.passages, log.rounds) == (readme.passages, readme.rounds) == ('offsets', 5)
    assert shipped.given(35, 35) == shipped and (shipped.passages, shipped.rounds) == ('frozen', 1)
    assert DistillationSettings(rounds=2).given(35, 0).rounds == 2  # (named: kept)
    with pytest.raises(ValueError, match='3 of 35 training queries name the passage'):
        shipped.given(35, 3)
    with pytest.raises(ValueError, match="pass queries='sampled'"):
        DistillationSettings(queries='crossfold').given(35, 35)
    coll = Collection('classic/adi')
    trainer = Distillation(tiny_encoder(max_length=64), coll, _teacher(coll, cache_dir), depth=10,
                           batch_size=16, cache_dir=cache_dir, verbose=False)
    trainer.fit(coll.topics())
    assert (trainer.settings.passages, trainer.settings.rounds) == ('offsets', 5)
    assert trainer.encoder.passage_offsets is not None and trainer.state['epoch'] == 5


@pytest.fixture(scope='module')
def tiny_cross_encoder(tiny_dir, tmp_path_factory):
    """A tiny random cross-encoder (the tiny BERT with a one-label head), saved as
    sentence-transformers' CrossEncoder loads it."""
    from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer
    config = AutoConfig.from_pretrained(tiny_dir)
    config.num_labels = 1
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp('tiny-cross-encoder')
    AutoModelForSequenceClassification.from_config(config).save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_dir).save_pretrained(out)
    return out


def test_a_cross_encoder_scores_the_teachers_candidates(tiny_cross_encoder, tiny_dir, cache_dir,
                                                        tmp_path):
    from sentence_transformers import CrossEncoder

    from pyterrier_selfsup.context import RunContext
    from pyterrier_selfsup.harness import store, trained
    from pyterrier_selfsup.harness.methods import teacher_pipeline
    from pyterrier_selfsup.models.cross_encoder import CrossEncoderScorer
    coll = Collection('classic/adi')
    topics = coll.topics().head(2)
    bm25 = BM25.from_collection(coll, num_results=5, cache_dir=cache_dir)
    scored = (bm25 >> coll.text_loader() >> CrossEncoderScorer(str(tiny_cross_encoder)))(topics)
    expected = CrossEncoder(str(tiny_cross_encoder), device='cpu').predict(
        list(zip(scored['query'], scored['text'])))
    np.testing.assert_allclose(scored['score'], expected, rtol=1e-5)
    for _, ranked in scored.groupby('qid'):  # (ranked by the new score)
        assert ranked.sort_values('rank')['score'].is_monotonic_decreasing
    # as a part of the teacher: every fused candidate it ranks (the top depth) gets its score
    teacher = teacher_pipeline(coll, 'bm25+ce', depth=20, rerank_depth=20,
                               cross_encoder=str(tiny_cross_encoder),
                               run=RunContext(cache_dir=cache_dir))
    ranked = teacher(topics)
    assert ranked['z_ce'].notna().all() and len(ranked) == 40
    # and distillation trains from it, its record naming the cross-encoder
    settings = {'teacher': 'bm25+ce', 'cross_encoder': str(tiny_cross_encoder), 'depth': 10,
                'model_name': str(tiny_dir), 'queries': 'sentences', 'n_queries': 16,
}
    final = trained.train(coll, 'distill', settings, RunContext(cache_dir=tmp_path))
    assert store.read_settings(final).cross_encoder == str(tiny_cross_encoder)


def test_gpl_trains_its_recipe_with_a_doc2query_writer_and_a_cross_encoder(
        tiny_cross_encoder, tiny_dir, tiny_generator_dir, tmp_path, monkeypatch, caplog):
    """The gpl pipeline with a user's models, where GPL's miners are not on the machine: a tiny
    T5 is asked for 3 queries a passage, all-MiniLM-L6-v2 mines each query's top 50 in the
    miners' place (said, and named in the model's record), the tiny cross-encoder scores them
    and the query's own passage, and Margin-MSE trains both towers on (query, own passage,
    drawn negative) triples; what ran is read back from the model's record. (How many of the
    queries a random T5 writes are distinct depends on the CPU's arithmetic: the test counts
    those asked for.)"""
    import logging

    from pyterrier_selfsup.harness import store
    from pyterrier_selfsup.harness.pipelines import get_pipeline
    from pyterrier_selfsup.models.doc2query import Doc2QueryWriter
    from pyterrier_selfsup.models.names import GPL_MINERS
    from pyterrier_selfsup.training.settings import GPL
    asked, write = [], Doc2QueryWriter.write

    def counted(self, passages, n=1, **kwargs):
        written = write(self, passages, n, **kwargs)
        asked.append((len(passages), n, kwargs['top_k'], kwargs['max_new_tokens'],
                      [len(each) for each in written]))
        return written

    monkeypatch.setattr(Doc2QueryWriter, 'write', counted)
    # GPL's miners are not on this machine, whatever its cache or network hold
    from pyterrier_selfsup.models import hub
    on_this_machine = hub.on_this_machine
    monkeypatch.setattr(hub, 'on_this_machine',
                        lambda name: name not in GPL_MINERS and on_this_machine(name))
    monkeypatch.setattr(hub, '_SAID', set())
    spec = get_pipeline(f'gpl:generator={tiny_generator_dir["t5"]},cross_encoder='
                        f'{tiny_cross_encoder},model_name={tiny_dir},n_queries=12')
    with caplog.at_level(logging.WARNING, logger='pyterrier_selfsup'):
        final = spec.train(Collection('classic/adi'), RunContext(cache_dir=tmp_path))
    # ⌈12 / 3⌉ passages drawn, 3 queries asked of each, sampled as BEIR's writer samples
    assert asked == [(4, 3, 25, 64, [3, 3, 3, 3])]
    ran = store.read_settings(final)
    assert {k: getattr(ran, k) for k in GPL if k not in ('generator', 'cross_encoder')} == {
        k: v for k, v in GPL.items() if k not in ('generator', 'cross_encoder')}
    assert (ran.generator, ran.cross_encoder) == (str(tiny_generator_dir['t5']),
                                                   str(tiny_cross_encoder))
    assert (ran.teacher, ran.loss, ran.passages, ran.rounds, ran.negatives, ran.depth,
            ran.normalize, ran.max_length, ran.precision) == (
        '0*miners+ce', 'margin_mse', 'trained', 1, 1, 50, False, 350, 'fp32')
    assert store.read_record(final)['miners'] == [f'{MINILM} (in place of {", ".join(GPL_MINERS)})']
    for miner in GPL_MINERS:
        assert f'{miner} is not on this machine and the hub cannot be reached: {MINILM} stands in'\
            in caplog.text
    written = pd.read_json(next((tmp_path / 'queries').glob('classic_adi.sampled-*/topics*')),
                           lines=True)
    # (repeats dropped: at most 3 a passage, from the passages drawn)
    assert written['source_docno'].nunique() <= 4
    assert written.groupby('source_docno').size().max() <= 3
    start = DualEncoder.from_pretrained(str(tiny_dir), precision='fp32', device='cpu')
    adapted = DualEncoder.from_pretrained(str(final), precision='fp32', device='cpu')
    # (dot products; 350 tokens, or as many as the tiny BERT's 128 positions hold)
    assert (adapted.model.normalize, adapted.max_length) == (False, 128)
    text = Collection('classic/adi').texts(['1'])
    assert not np.allclose(start.encode_docs(text), adapted.encode_docs(text), atol=1e-4)


def test_selfsup_train_gpl_runs_with_replicas_of_gpls_own_models(gpl_on_the_hub, tiny_dir,
                                                                 tmp_path):
    """``selfsup train gpl`` with GPL's writer, cross-encoder and two miners by their hub
    names (replicas of their published layouts, random weights: tests/hub_replicas.py): the
    miners mine by cosine, the record names them, and the student trains and is exported."""
    from pyterrier_selfsup.harness import store
    from pyterrier_selfsup.models.names import GPL_MINERS
    from tests.test_cli import selfsup
    cache = tmp_path / 'cache'
    # (6 queries of 16 tokens, each miner's top 10, not 2,000 of 64 and 50: the suite's time)
    ran = selfsup('train', f'gpl:model_name={tiny_dir},n_queries=6,depth=10,query_tokens=16',
                  '-c',
                  'classic/adi', '--cache-dir', str(cache), '--output', str(tmp_path / 'out'),
                  cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    final, = [p / 'final' for p in (cache / 'models').glob('classic_adi.distill-*') if p.is_dir()]
    assert store.read_record(final)['miners'] == list(GPL_MINERS)
    # each miner's index, of its vectors L2-normalised (a search by cosine), beside the student's
    indexes = {p.name.split('.', 1)[1].rsplit('-', 1)[0] for p in (cache / 'flex').iterdir()
               if p.is_dir()}
    assert {'msmarco-distilbert-base-v3', 'msmarco-MiniLM-L-6-v3'} <= indexes
    from pyterrier_selfsup.retrieval.dense import DenseRetriever
    miner = DenseRetriever.from_collection('classic/adi', GPL_MINERS[1], normalize=True,
                                           cache_dir=cache)
    _, vectors, _ = miner.index.payload()
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert (tmp_path / 'out' / 'modules.json').is_file()  # (exported, as trained)


def test_a_teacher_of_two_miners_gives_every_candidate_it_labelled_and_the_own_passage(
        tiny_encoder):
    """GPL's two miners each give their top 2 (depth=2): the cross-encoder labels the union of
    4 and the passage the query was written for, and the trainer ranks all 5, not depth + 1."""
    from pyterrier_selfsup.data.queries.source import Query
    from pyterrier_selfsup.training.settings import DistillationSettings
    first, second = _run('q', ['a', 'b'], [2.0, 1.0]), _run('q', ['c', 'd'], [2.0, 1.0])
    teacher = Fusion({'miner one': Frame(first), 'miner two': Frame(second)},
                     weights={'miner one': 0.0, 'miner two': 0.0}, depth=2,
                     rerankers={'ce': Scores({'a': 1.0, 'b': 2.0, 'c': 3.0, 'd': 4.0, 'e': 5.0})},
                     rerank_depth=4, raw_labels=True)
    trainer = Distillation(tiny_encoder(), 'classic/adi', teacher, DistillationSettings(
        loss='margin_mse', negatives=1, depth=2, teacher='0*miners+ce'))
    ranked = trainer.rank(teacher, [Query('q', 'x', frozenset(), source='e')])
    docnos, scores = ranked['q']
    assert docnos == ['e', 'd', 'c', 'b', 'a'] and scores.tolist() == [5.0, 4.0, 3.0, 2.0, 1.0]


def test_a_mining_teacher_labels_each_querys_own_passage_and_nothing_it_did_not_score():
    # the student mines a, b, c; the query was written for e, which the student did not return
    student = _run('q', ['a', 'b', 'c'], [3.0, 2.0, 1.0])
    labeller = Scores({'a': 1.0, 'b': 2.0, 'e': 4.0})
    teacher = Fusion({'student': Frame(student)}, weights={'student': 0.0},
                     rerankers={'ce': labeller}, rerank_depth=2)
    ranked = teacher(pd.DataFrame({'qid': ['q'], 'query': ['x'], 'source_docno': ['e']}))
    assert sorted(labeller.seen) == ['a', 'b', 'e']
    # the labeller's order over what it scored; c, mined below the depth, is no candidate
    assert ranked['docno'].tolist() == ['e', 'b', 'a']
    assert 'source_docno' not in ranked.columns


def test_gpls_triples_pair_each_querys_own_passage_with_drawn_negatives(tiny_encoder):
    from pyterrier_selfsup.training.losses import triple
    ranked = (['1', '2', '3', '4', '5'], np.array([5.0, 4.0, 3.0, 2.0, 1.0]))
    rng = np.random.default_rng(0)
    for source, positive in (('3', '3'), ('9', '1'), (None, '1')):
        docnos, scores = triple(ranked, source, 2, rng)
        assert docnos[0] == positive and len(docnos) == 3 and len(set(docnos)) == 3
        assert scores.tolist() == [6.0 - int(d) for d in docnos]  # each one's own score
    with pytest.raises(ValueError, match='loss=margin_mse'):
        Distillation(tiny_encoder(), 'classic/adi', teacher=None, negatives=1)
    # from the settings' teacher spec, the harness builds a teacher that labels the candidates
    from pyterrier_selfsup.harness.methods import METHODS
    from pyterrier_selfsup.training.settings import DistillationSettings
    with pytest.raises(ValueError, match='teacher=0\\*miners\\+ce'):
        METHODS['distill'](Collection('classic/adi'), DistillationSettings(
            loss='margin_mse', negatives=1, teacher='bm25+student+ce'), RunContext())


def test_with_negatives_a_querys_own_passage_is_among_its_targets_below_the_depth(tiny_encoder):
    # the student mines d, c, b, a; the query was written for a, fourth: below depth 2
    student = _run('q', ['d', 'c', 'b', 'a'], [4.0, 3.0, 2.0, 1.0])
    teacher = Fusion({'student': Frame(student)}, weights={'student': 0.0},
                     rerankers={'ce': Scores({'a': 0.0, 'c': 1.0, 'd': 2.0})}, rerank_depth=2)
    trainer = Distillation(tiny_encoder(), 'classic/adi', teacher, loss='margin_mse',
                           negatives=1, depth=2, verbose=False)
    targets = trainer.rank(teacher, [Query('q', 'x', frozenset(), source='a')])
    assert targets['q'][0] == ['d', 'c', 'a']  # the labeller's order, the own passage last
    from pyterrier_selfsup.training.losses import triple
    assert triple(targets['q'], 'a', 1, np.random.default_rng(0))[0][0] == 'a'
