import math

import numpy as np
import pytest
import torch

from pyterrier_selfsup import Collection
from pyterrier_selfsup.data.queries.cut import corpus_sentences
from pyterrier_selfsup.harness.plots import plot_training_curve
from pyterrier_selfsup.training.distant import DistantSupervision, in_batch_loss


class Untouchable:
    """Qrels that fail on any use: training must never read labels."""
    def __getattr__(self, name):
        raise AssertionError(f'qrels were read ({name})')

    def __len__(self):
        raise AssertionError('qrels were read (len)')




def test_in_batch_loss_by_hand():
    q = torch.tensor([[1., 0.], [0., 1.]])
    p = torch.tensor([[1., 0.], [.5, .5], [0., 2.]])  # two positives, then one shared negative
    expected = (-math.log(math.e ** 2 / (math.e ** 2 + math.e + 1))
                - math.log(math.e / (1 + math.e + math.e ** 4))) / 2
    assert in_batch_loss(q, p, 0.5).item() == pytest.approx(expected, rel=1e-6)
    excluded = torch.tensor([[False, False, False], [False, False, True]])
    expected = (-math.log(math.e ** 2 / (math.e ** 2 + math.e + 1))
                - math.log(math.e / (1 + math.e))) / 2
    assert in_batch_loss(q, p, 0.5, excluded).item() == pytest.approx(expected, rel=1e-6)


def test_without_its_mask_and_other_processes_rows_the_in_batch_loss_is_the_librarys():
    """in_batch_loss adds to sentence-transformers' MultipleNegativesRankingLoss (dot product,
    scale 1 / temperature) only an exclusion mask and the rows of other processes: without them
    the two are equal, with hard negatives after the positives as the library lays them out."""
    from sentence_transformers.losses import MultipleNegativesRankingLoss
    from sentence_transformers.util import dot_score
    torch.manual_seed(0)
    queries, positives, negatives = (torch.randn(4, 8, dtype=torch.float64) for _ in range(3))
    library = MultipleNegativesRankingLoss(None, scale=1 / 0.05, similarity_fct=dot_score)
    expected = library.compute_loss_from_embeddings([queries, positives, negatives], None)
    ours = in_batch_loss(queries, torch.cat([positives, negatives]), 0.05)
    assert ours.item() == pytest.approx(expected.item(), rel=1e-12)
    # (the addition: query 0's highest-scored other passage taken out of its softmax)
    scores = queries[0] @ torch.cat([positives, negatives]).T
    excluded = torch.zeros(4, 8, dtype=torch.bool)
    excluded[0, 1 + int(scores[1:].argmax())] = True
    masked = in_batch_loss(queries, torch.cat([positives, negatives]), 0.05, excluded)
    assert ours.item() - masked.item() > 0.1


def test_positives_are_bm25_top1_never_the_source(cache_dir):
    coll = Collection('classic/adi')
    trainer = DistantSupervision(None, coll, cache_dir=cache_dir)
    topics = coll.topics()
    examples = trainer.examples(topics)
    from pyterrier_selfsup import BM25
    top1 = (BM25.from_collection(coll, cache_dir=cache_dir)(topics).query('rank == 0')
            .set_index('qid')['docno'])
    assert {e.qid: trainer.positive(e) for e in examples} == top1.to_dict()
    sents = corpus_sentences(coll, 30, seed=0)
    for e, source in zip(trainer.examples(sents), sents['source_docno']):
        assert trainer.positive(e) != source and source in e.excluded


def test_duplicate_positives_are_not_negatives(tiny_encoder, cache_dir):
    coll = Collection('classic/adi')
    trainer = DistantSupervision(tiny_encoder(max_length=64), coll, cache_dir=cache_dir)
    e = trainer.examples(coll.topics().head(1))[0]
    # The same query twice: each one's positive also fills the other's column. Masked,
    # each softmax holds its own positive alone: no negative to learn from, so no loss
    # (unmasked it would be log 2)
    with torch.no_grad():
        assert trainer.loss([e, e], np.random.default_rng(0)) is None


@pytest.mark.parametrize('negatives', ['none', 'random', 'bm25', 'retriever'])
def test_loss_falls_on_a_toy_corpus(tiny_encoder, cache_dir, tmp_path, negatives):
    coll = Collection('classic/adi')
    trainer = DistantSupervision(tiny_encoder(max_length=64), coll, negatives=negatives,
                                 batch_size=7, epochs=8, lr=3e-3, output_dir=tmp_path,
                                 cache_dir=cache_dir, verbose=False, draw_curve=plot_training_curve)
    trainer.fit(coll.topics(), Untouchable())
    losses = [r['loss'] for r in trainer.log if 'loss' in r]
    assert len(losses) == 8 * 35 // 7
    assert np.mean(losses[:5]) > 0.9 * math.log(7)  # chance level at the start
    # the current retriever's own top hits stay hard to separate (thesis Table 6.1)
    assert np.mean(losses[-5:]) < (0.7 if negatives == 'retriever' else 0.5) * np.mean(losses[:5])
    assert (tmp_path / 'final' / 'dual_encoder.json').exists()
    assert (tmp_path / 'training_curve.png').read_bytes().startswith(b'\x89PNG')
    results = trainer(coll.topics().head(2))  # an estimator that, once fitted, retrieves
    assert results.groupby('qid').size().tolist() == [82, 82]


def test_accumulation_steps(tiny_encoder, cache_dir):
    coll = Collection('classic/adi')
    trainer = DistantSupervision(tiny_encoder(max_length=64), coll, batch_size=4, accumulation=3,
                                 epochs=1, cache_dir=cache_dir, verbose=False)
    trainer.fit(coll.topics())
    assert len(trainer.log) == math.ceil(math.ceil(35 / 4) / 3)  # 9 batches, 3 optimiser steps


def test_resumed_run_continues_with_the_same_losses(tiny_encoder, cache_dir, tmp_path):
    coll = Collection('classic/adi')
    settings = dict(negatives='bm25', batch_size=8, epochs=3, lr=3e-4, accumulation=2,
                    cache_dir=cache_dir, verbose=False, checkpoint_every=3)
    full = DistantSupervision(tiny_encoder(max_length=64), coll, output_dir=tmp_path / 'full',
                              **settings).fit(coll.topics())
    resumed = DistantSupervision(tiny_encoder(max_length=64), coll, output_dir=tmp_path / 'resumed',
                                 **settings)
    resumed.fit(coll.topics(), resume_from=tmp_path / 'full' / 'checkpoint-3')
    assert [r['step'] for r in resumed.log] == [r['step'] for r in full.log]
    np.testing.assert_allclose([r['loss'] for r in resumed.log], [r['loss'] for r in full.log],
                               rtol=1e-5)
    for a, b in zip(full.encoder.model.parameters(), resumed.encoder.model.parameters()):
        torch.testing.assert_close(a, b)


def test_validation_is_logged_and_leaves_no_index(tiny_encoder, tmp_path):
    coll = Collection('classic/adi')
    cache = tmp_path / 'cache'
    trainer = DistantSupervision(tiny_encoder(max_length=64), coll, batch_size=7, epochs=2, lr=3e-3,
                                 output_dir=tmp_path / 'out', cache_dir=cache, verbose=True)
    trainer.fit(coll.topics(), None, coll.topics(), coll.qrels())
    validation = [r['validation nDCG@10'] for r in trainer.log if 'validation nDCG@10' in r]
    assert len(validation) == 2 and all(0 < v < 1 for v in validation)
    assert [r['step'] for r in trainer.log if 'validation nDCG@10' in r] == [5, 10]
    assert not (cache / 'flex').exists()  # validation indexes are temporary
