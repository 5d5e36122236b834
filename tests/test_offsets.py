"""Learned passage offsets (issue 30): their optimiser, training with them, saving them with the
model and searching the index they move, resuming exactly."""
import math

import numpy as np
import pytest
import torch

from pyterrier_selfsup import BM25, Collection
from pyterrier_selfsup.models.offsets import PASSAGE_OFFSETS_FILE, OffsetAdam, PassageOffsets
from pyterrier_selfsup.retrieval.dense import DenseRetriever, flex_index
from pyterrier_selfsup.retrieval.fusion import Fusion
from pyterrier_selfsup.training.distill import Distillation
from tests.helpers import stopped_at_step


def test_offset_adam_is_adam_on_the_rows_it_touches_and_leaves_the_others():
    torch.manual_seed(0)
    base = torch.randn(5, 4)
    target = torch.randn(5, 4)
    offsets = PassageOffsets(4, normalize=False)
    opt = OffsetAdam(offsets, lr=0.1, weight=0.5)
    reference = torch.zeros(3, 4, requires_grad=True)  # rows a, b, c as torch's Adam moves them
    adam = torch.optim.Adam([reference], lr=0.1)
    for _ in range(3):
        moved, pull = opt.adjusted(['a', 'b', 'c'], base[:3])
        (((moved - target[:3]) ** 2).sum() + pull).backward()
        opt.step()
        adam.zero_grad()
        (((base[:3] + reference - target[:3]) ** 2).sum()
         + 0.5 * reference.pow(2).sum(-1).mean()).backward()
        adam.step()
    torch.testing.assert_close(offsets.delta, reference.detach(), rtol=1e-5, atol=1e-6)
    # a row met later starts from zero and moves alone; the others keep their values
    before = offsets.delta.clone()
    moved, pull = opt.adjusted(['d'], base[3:4])
    ((moved - target[3:4]) ** 2).sum().backward()
    opt.step()
    torch.testing.assert_close(offsets.delta[:3], before)
    assert offsets.docnos == ['a', 'b', 'c', 'd'] and offsets.delta[3].abs().sum() > 0


def test_apply_moves_only_passages_with_an_offset_and_renormalises():
    offsets = PassageOffsets(2, normalize=True, docnos=['b'], delta=torch.tensor([[0.0, 1.0]]))
    vectors = np.array([[1.0, 0.0], [1.0, 0.0]], dtype=np.float32)
    out = offsets.apply(['a', 'b'], vectors)
    np.testing.assert_allclose(out, [[1.0, 0.0], [math.sqrt(.5), math.sqrt(.5)]], rtol=1e-6)
    np.testing.assert_array_equal(vectors, [[1.0, 0.0], [1.0, 0.0]])  # the input is left as it was


def _trainer(encoder, coll, cache_dir, **kwargs):
    bm25 = Fusion({'bm25': BM25.from_collection(coll, num_results=100, cache_dir=cache_dir)})
    settings = dict(depth=10, batch_size=8, lr=3e-4, rounds=3, passages='offsets',
                    offset_weight=0.1, offset_lr=1e-2,
                    seed=0, cache_dir=cache_dir, verbose=False)
    return Distillation(encoder, coll, bm25, **{**settings, **kwargs})


def test_offsets_train_save_with_the_model_and_move_its_index(tiny_encoder, cache_dir, tmp_path):
    coll = Collection('classic/adi')
    trainer = _trainer(tiny_encoder(max_length=64), coll, cache_dir, output_dir=tmp_path / 'run')
    trainer.fit(coll.topics())
    offsets = trainer.encoder.passage_offsets
    assert 0 < len(offsets) <= 82 and float(offsets.norms().mean()) > 1e-3
    assert all('offset norm' in r for r in trainer.log if 'loss' in r)
    final = tmp_path / 'run' / 'final'
    assert (final / PASSAGE_OFFSETS_FILE).is_file()

    # reloaded from the model directory: the index holds v0 + delta for every passage that has one
    retriever = DenseRetriever.from_dual_encoder(coll, str(final), precision='fp32',
                                                 cache_dir=cache_dir)
    assert retriever.encoder.passage_offsets.fingerprint() == offsets.fingerprint()
    base = flex_index(coll, retriever.encoder, cache_dir=cache_dir, offsets=False)
    assert retriever.index.index_path != base.index_path
    docnos, moved, _ = retriever.index.payload()
    base_docnos, start, _ = base.payload()
    names = [str(d) for d in docnos.fwd[np.arange(len(moved))]]
    has = np.array([d in offsets.row for d in names])
    assert has.sum() == len(offsets)
    # a passage training never met keeps its vector
    np.testing.assert_array_equal(moved[~has], start[~has])
    np.testing.assert_allclose(
        moved[has], offsets.apply([d for d, h in zip(names, has) if h], start[has]), rtol=1e-6)
    assert not np.allclose(moved[has], start[has])

    # searched through a PyTerrier pipeline: scores are the query vector's dot products with
    # the moved vectors
    topics = coll.topics().head(3)
    results = (retriever % 5)(topics)
    assert results.groupby('qid').size().tolist() == [5, 5, 5]
    q = retriever.encoder.encode_queries(topics['query'].tolist())
    row = {d: i for i, d in enumerate(names)}
    for qi, qid in enumerate(topics['qid']):
        got = results[results['qid'] == qid]
        expected = moved[[row[d] for d in got['docno']]] @ q[qi]
        np.testing.assert_allclose(got['score'].to_numpy(), expected, rtol=1e-4, atol=1e-5)
        assert got['score'].iloc[0] == pytest.approx(float((moved @ q[qi]).max()), rel=1e-4)


def test_a_run_with_offsets_resumes_exactly(tiny_encoder, cache_dir, tmp_path, monkeypatch):
    coll = Collection('classic/adi')
    topics = coll.topics()
    full = _trainer(tiny_encoder(max_length=64), coll, cache_dir, output_dir=tmp_path / 'full',
                    checkpoint_every='epoch').fit(topics)
    steps_a_round = math.ceil(35 / 8)
    with stopped_at_step(monkeypatch, Distillation, steps_a_round + 2):
        _trainer(tiny_encoder(max_length=64), coll, cache_dir, output_dir=tmp_path / 'cut',
                 checkpoint_every='epoch').fit(topics)
    resumed = _trainer(tiny_encoder(max_length=64), coll, cache_dir, output_dir=tmp_path / 'cut',
                       checkpoint_every='epoch')
    resumed.fit(topics, resume_from=tmp_path / 'cut' / f'checkpoint-{steps_a_round}')
    a, b = full.encoder.passage_offsets, resumed.encoder.passage_offsets
    assert a.docnos == b.docnos
    torch.testing.assert_close(a.delta, b.delta, rtol=0, atol=0)
    for x, y in zip(full.encoder.model.parameters(), resumed.encoder.model.parameters()):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
