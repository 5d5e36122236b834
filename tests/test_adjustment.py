import json
import math

import numpy as np
import pytest
import torch

from pyterrier_selfsup import Collection, RunContext
from pyterrier_selfsup.data.queries.cut import cropped_spans
from pyterrier_selfsup.training.adjustment import CrossDocumentAdjustment
from pyterrier_selfsup.training.losses import listwise_kl
from tests.helpers import DOCS, QUERIES, central_difference, stopped_at_step


def test_the_adjustment_loss_is_the_kl_divergence_with_zero_target_terms_left_out():
    logits = torch.tensor([[1.0, 0.5, -2.0, 3.0], [0.0, 2.0, 1.0, -1.0]], dtype=torch.float64)
    target = torch.tensor([[0.7, 0.3, 0.0, 0.0], [0.0, 0.0, 0.4, 0.6]], dtype=torch.float64)
    expected = []
    for row_l, row_t in zip(logits.tolist(), target.tolist()):
        z = sum(math.exp(v) for v in row_l)
        expected.append(sum(t * (math.log(t) - (logit - math.log(z)))
                            for logit, t in zip(row_l, row_t) if t > 0))
    assert listwise_kl(logits, target).item() == pytest.approx(np.mean(expected), rel=1e-12)
    assert (listwise_kl(torch.log(target + 1e-300), target).item()
            == pytest.approx(0.0, abs=1e-9))


def test_kl_gradient_reaches_the_bi_encoder_and_head_weights_and_matches_finite_differences(
        tiny_reatt):
    r = tiny_reatt()
    r.model.double()
    target = torch.tensor([[0.6, 0.4, 0.0, 0.0], [0.0, 0.0, 0.1, 0.9]], dtype=torch.float64)

    def loss():
        q, qm = r.encode(QUERIES, 'query')
        k, km = r.encode(DOCS, 'passage')
        return listwise_kl(r.model.scores(q, qm, k, km), target)

    r.model.zero_grad()
    value = loss()
    value.backward()
    # inside the bi-encoder (B=1)
    layer1 = r.model.encoder.encoder.layer[0].attention.self.query.weight
    key = r.model.attention.key.weight  # layer B+1's key projection
    assert (layer1.grad.abs().max() > 0 and key.grad.abs().max() > 0 and
            r.model.head_logits.grad.abs().max() > 0)
    # unused by retrieval
    assert r.model.encoder.encoder.layer[1].attention.self.value.weight.grad is None
    eps = 1e-6
    for weight, (i, j) in [(key, (0, 0)), (key, (7, 20)), (layer1, (3, 5))]:
        assert weight.grad[i, j].item() == pytest.approx(
            central_difference(loss, weight, (i, j), eps), rel=1e-4, abs=1e-9)


@pytest.fixture
def trainer(tiny_generator, tiny_reatt, tmp_path):
    coll = Collection('classic/adi')
    return CrossDocumentAdjustment(tiny_reatt(), tiny_generator(max_passage_length=32), coll, k=3,
                                   batch_size=4, epochs=2, lr=1e-3, teacher_temperature=2.0,
                                   cache_dir=tmp_path, output_dir=tmp_path / 'out', verbose=False)


def test_target_is_the_generators_softmax_over_close_documents_and_zero_elsewhere(tiny_generator,
                                                                                  trainer):
    coll = trainer.collection
    batch = trainer.examples(coll.topics().head(2))
    trainer.on_epoch_start(batch, 0, False)
    docnos = list(dict.fromkeys(d for q in batch for d in trainer.close[q.qid]))
    target = trainer.target_distribution(batch, docnos)
    gen = tiny_generator(max_passage_length=32)
    for i, q in enumerate(batch):
        close = trainer.close[q.qid]
        logp = gen.log_likelihoods([q.query] * len(close), coll.texts(close))
        expected = torch.softmax(torch.tensor(logp) / 2.0, 0)
        cols = [docnos.index(d) for d in close]
        torch.testing.assert_close(target[i, cols], expected.float(), rtol=1e-4, atol=1e-6)
        assert target[i].sum().item() == pytest.approx(1.0) and (target[i] > 0).sum() == len(close)


def test_close_documents_come_from_bm25_then_from_the_model_and_training_moves_it(trainer,
                                                                                  tmp_path):
    from pyterrier_selfsup.progress import stage_times
    from pyterrier_selfsup.retrieval.bm25 import BM25
    coll = trainer.collection
    topics = coll.topics().head(8)
    before = {k: v.clone() for k, v in trainer.reatt.model.state_dict().items()}
    trainer.run, stages = trainer.run.replace(verbose=True), stage_times()  # (its stages counted)
    trainer.fit(topics)
    bm25 = BM25.from_collection(coll, num_results=3, cache_dir=tmp_path)(topics)
    sources = [r['close documents'] for r in trainer.log if 'close documents' in r]
    assert sources == ['bm25', 'model']
    # the model's search, a stage a long run reports on
    assert stage_times(stages)['ReAtt search'].done == 8
    # the second iteration's close documents are the trained model's own top 3 at that point,
    # which differ from BM25's for some query
    bm25_close = bm25.sort_values(['qid', 'rank']).groupby('qid')['docno'].apply(list).to_dict()
    assert any(trainer.close[q] != bm25_close[q] for q in topics['qid'])
    steps = [r for r in trainer.log if 'loss' in r]
    assert len(steps) == 4 and all(0 < r['close mass'] <= 1 for r in steps)
    after = trainer.reatt.model.state_dict()
    assert not torch.equal(after['head_logits'], before['head_logits'])
    # past layer B+1's attention
    assert torch.equal(after['encoder.encoder.layer.1.output.dense.weight'],
                       before['encoder.encoder.layer.1.output.dense.weight'])
    assert (tmp_path / 'out' / 'final' / 'reatt.json').is_file()


def test_corpus_queries_never_have_their_source_among_close_documents(trainer):
    spans = cropped_spans(trainer.collection, 10, seed=0)
    examples = trainer.examples(spans)
    trainer.on_epoch_start(examples, 0, False)
    assert all(s not in trainer.close[q] and len(trainer.close[q]) == 3
               for q, s in zip(spans['qid'], spans['source_docno']))


def test_masked_queries_use_the_students_mask_token_which_bm25_does_not_read(trainer, monkeypatch):
    from pyterrier_selfsup.data.queries.cut import MASK, masked_spans
    from pyterrier_selfsup.retrieval.bm25 import BM25
    from pyterrier_selfsup.training.adjustment import mask_token
    mask = mask_token(trainer.reatt)
    assert mask == '[MASK]'  # BERT's own: one token, where T5's sentinel is seven word pieces
    assert trainer.reatt.tokenizer.tokenize(f'a {mask} b') == ['a', '[MASK]', 'b']
    # '<', 'extra', '_', 'id', '_', '0', '>'
    assert len(trainer.reatt.tokenizer.tokenize(MASK)) == 7
    topics = masked_spans(trainer.collection, 6, seed=0, mask=mask)
    assert topics['query'].str.contains(mask, regex=False).all()
    seen = []
    retrieve = BM25.retrieve
    monkeypatch.setattr(BM25, 'retrieve',
                        lambda self, t: seen.extend(t['query']) or retrieve(self, t))
    trainer.on_epoch_start(trainer.examples(topics), 0, False)
    assert seen == [q.replace(mask, ' ') for q in topics['query']]
    assert all(len(trainer.close[q]) == 3 for q in topics['qid'])


def test_a_separate_generator_is_needed_and_its_likelihood_is_the_only_target(tiny_reatt,
                                                                             tmp_path):
    coll = Collection('classic/adi')
    with pytest.raises(ValueError, match="no setting 'target'"):
        CrossDocumentAdjustment(tiny_reatt(), None, coll, target='attention', cache_dir=tmp_path)
    with pytest.raises(ValueError, match='needs a generator'):
        CrossDocumentAdjustment(tiny_reatt(), None, coll, cache_dir=tmp_path)


def test_a_single_t5_teaches_its_own_retrieval_from_masked_sentences(tiny_generator_dir, tmp_path):

    from pyterrier_selfsup.data.queries.cut import masked_spans
    from pyterrier_selfsup.models.reatt_t5 import ReAttT5
    torch.manual_seed(0)
    model = ReAttT5.from_pretrained(str(tiny_generator_dir['t5']), retrieval_layer=1, device='cpu',
                                    precision='fp32')
    coll = Collection('classic/cisi')
    topics = masked_spans(coll, 6, seed=0)
    decoder = model.model.decoder.block[0].layer[0].SelfAttention.q.weight.detach().clone()
    bi_encoder = model.model.encoder.block[0].layer[0].SelfAttention.k.weight.detach().clone()
    trainer = CrossDocumentAdjustment(model, None, coll, k=2, batch_size=3, epochs=2, lr=1e-3,
                                      alpha=8.0, cache_dir=tmp_path, output_dir=tmp_path / 'out',
                                      verbose=False)
    trainer.fit(topics)
    steps = [r for r in trainer.log if 'loss' in r]
    assert len(steps) == 4 and all(r['generation nll'] > 0 and 0 <= r['close mass'] <= 1
                                   for r in steps)
    assert ([r['close documents'] for r in trainer.log if 'close documents' in r]
            == ['bm25', 'model'])
    # the generation loss trains the reader, the KL term the retriever: both move
    assert not torch.equal(model.model.decoder.block[0].layer[0].SelfAttention.q.weight, decoder)
    assert not torch.equal(model.model.encoder.block[0].layer[0].SelfAttention.k.weight, bi_encoder)
    config = json.loads((tmp_path / 'out' / 'final' / 'config.json').read_text())
    assert config['retrieval_layer'] == 1 and 'retrieval_head' in config
    with pytest.raises(ValueError, match='answer'):
        trainer.examples(coll.topics().head(2))


def test_adjusted_retriever_trains_once_then_retrieves_from_its_token_index(
        tiny_dir, tiny_generator_dir, tmp_path, monkeypatch):
    from pyterrier_selfsup.harness import methods
    from pyterrier_selfsup.harness.pipelines import adjusted_reatt_retriever as adjusted_retriever
    settings = dict(model_name=str(tiny_dir), retrieval_layer=1, head=0, queries='classic/adi',
                    n_queries=10, k=2, epochs=1, batch_size=8,
                    generator=str(tiny_generator_dir['llama']), candidate_tokens=None,
                    num_results=5)
    run = RunContext(cache_dir=tmp_path)
    retriever = adjusted_retriever('classic/adi', run, **settings)
    topics = Collection('classic/adi').topics().head(3)
    results = retriever(topics)
    assert len(results) == 15 and set(results['qid']) == set(topics['qid'])
    model_dirs = [d for d in (tmp_path / 'models').glob('classic_adi.reatt-*') if d.is_dir()]
    assert len(model_dirs) == 1 and (model_dirs[0] / 'final' / 'reatt.json').is_file()
    assert not (model_dirs[0] / 'final' / 'trainer_state.pt').exists()
    monkeypatch.setattr(methods, 'CrossDocumentAdjustment', None)  # a second call must not train
    again = adjusted_retriever('classic/adi', run, **settings)(topics)
    np.testing.assert_allclose(again['score'], results['score'])


def test_an_interrupted_adjustment_resumes_from_its_last_iteration(tiny_dir, tiny_generator_dir,
                                                                   tmp_path, monkeypatch):
    from pyterrier_selfsup.harness.pipelines import adjusted_reatt_retriever as adjusted_retriever
    from pyterrier_selfsup.models.reatt import ReAtt
    from pyterrier_selfsup.training.checkpoints import checkpoints
    settings = dict(model_name=str(tiny_dir), retrieval_layer=1, head=0, queries='classic/adi', k=2,
                    epochs=2, batch_size=4, lr=1e-2, generator=str(tiny_generator_dir['llama']),
                    candidate_tokens=None, num_results=5)
    whole = adjusted_retriever('classic/adi', RunContext(cache_dir=tmp_path / 'whole'),
                               **settings).reatt

    # ADI's 35 topics, 4 a batch: 9 steps an iteration; stopped in the 12th
    with stopped_at_step(monkeypatch, CrossDocumentAdjustment, 12):
        adjusted_retriever('classic/adi', RunContext(cache_dir=tmp_path / 'cut'), **settings)
    staging, = (tmp_path / 'cut' / 'models').glob('*.partial')
    assert [c.name for c in checkpoints(staging)] == ['checkpoint-9']  # the first iteration's end

    cut = RunContext(cache_dir=tmp_path / 'cut')
    resumed = adjusted_retriever('classic/adi', cut, **settings).reatt
    model_dir = staging.with_name(staging.name[:-len('.partial')])
    assert not staging.exists() and not checkpoints(model_dir)
    log = [json.loads(line) for line in (model_dir / 'training_log.jsonl').read_text().splitlines()]
    assert [r['step'] for r in log if 'loss' in r] == list(range(1, 19))
    # resuming at the first iteration's end goes straight to the second: each iteration's
    # close documents are found once, as in the uninterrupted run
    assert [(r['step'], r['close documents']) for r in log if 'close documents' in r] == \
        [(0, 'bm25'), (9, 'model')]
    for name, value in resumed.model.state_dict().items():  # bit for bit
        assert torch.equal(value, whole.model.state_dict()[name]), name
    start = ReAtt.from_pretrained(str(tiny_dir), retrieval_layer=1, head=0).model.state_dict()
    assert any(not torch.equal(v, start[n])
               for n, v in whole.model.state_dict().items())  # and it trained
