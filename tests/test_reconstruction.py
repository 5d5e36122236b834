import json
import math
import threading
import time

import numpy as np
import pytest
import torch

from pyterrier_selfsup import Collection, DualEncoder
from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.data.queries.cut import cropped_spans
from pyterrier_selfsup.harness.pipelines import trained_dense_retriever
from pyterrier_selfsup.harness.plots import plot_training_curve
from pyterrier_selfsup.models.generator import Generator
from pyterrier_selfsup.models.reading import biased_log_likelihood
from pyterrier_selfsup.retrieval.dense import flex_index, fresh_index
from pyterrier_selfsup.training.acrobart import Acrobart
from pyterrier_selfsup.training.checkpoints import TRAINER_STATE_FILE, checkpoints
from pyterrier_selfsup.training.losses import marginal_nll, reconstruction_kl
from pyterrier_selfsup.training.rumbart import Rumbart
from tests.helpers import central_difference, stopped_at_step


def test_marginal_nll_equals_the_brute_force_formula():
    logits = torch.tensor([[2.0, 0.5, -1.0], [0.0, 0.0, 3.0]], dtype=torch.float64)
    teacher = torch.tensor([[-20.0, -18.0, -25.0], [-7.0, -9.0, -30.0]], dtype=torch.float64)
    expected = np.mean([-math.log(sum(math.exp(x) / sum(math.exp(m) for m in row_l) * math.exp(t)
                                      for x, t in zip(row_l, row_t)))
                        for row_l, row_t in zip(logits.tolist(), teacher.tolist())])
    assert marginal_nll(logits, teacher).item() == pytest.approx(expected, rel=1e-12)


def test_arts_kl_equals_the_brute_force_formula_and_leaves_the_teacher_alone():
    logits = torch.tensor([[2.0, 0.5, -1.0], [0.0, 0.0, 3.0]], dtype=torch.float64,
                          requires_grad=True)
    teacher = torch.tensor([[-20.0, -18.0, -25.0], [-7.0, -9.0, -30.0]], dtype=torch.float64,
                           requires_grad=True)

    def softmax(row):
        return [math.exp(v) / sum(math.exp(w) for w in row) for v in row]
    expected = np.mean([sum(q * math.log(q / p) for q, p in zip(softmax(row_t), softmax(row_l)))
                        for row_l, row_t in zip(logits.tolist(), teacher.tolist())])
    loss = reconstruction_kl(logits, teacher)
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    loss.backward()
    assert teacher.grad is None and logits.grad.abs().sum() > 0  # no gradient into the teacher
    # the retriever's own prior is not in the target: a retriever that already agrees with the
    # teacher is at the minimum, 0, where the marginal likelihood would still pull it on
    agreeing = teacher.detach() + 5.0
    assert reconstruction_kl(agreeing, teacher.detach()).item() == pytest.approx(0, abs=1e-12)


def test_rumbart_trains_towards_arts_target_when_asked(tiny_encoder, tiny_generator, tmp_path):
    coll = Collection('classic/adi')
    enc, gen = tiny_encoder(), tiny_generator(max_passage_length=32)
    trainer = Rumbart(enc, gen, coll, k=4, target='art', cache_dir=tmp_path, verbose=False)
    batch = trainer.examples(coll.topics().head(3))
    trainer.refresh(batch, initial=True)
    enc.model.eval()  # no dropout, so that the parts can be recomputed
    with torch.no_grad():
        loss = trainer.loss(batch, np.random.default_rng(0)).item()
        docnos, texts, logits = trainer.candidates(trainer.local_batch(batch))
        teacher = trainer.teacher_logp(batch, docnos, texts)
    assert loss == pytest.approx(reconstruction_kl(logits, teacher).item(), rel=1e-5)
    assert loss != pytest.approx(marginal_nll(logits, teacher).item(), rel=1e-3)


def test_rumbart_loss_equals_the_formula_from_its_parts(tiny_encoder, tiny_generator, tmp_path):
    coll = Collection('classic/adi')
    enc, gen = tiny_encoder(), tiny_generator(max_passage_length=32)
    trainer = Rumbart(enc, gen, coll, k=4, cache_dir=tmp_path, verbose=False)
    batch = trainer.examples(coll.topics().head(3))
    trainer.refresh(batch, initial=True)
    enc.model.eval()  # no dropout, so that the parts can be recomputed
    with torch.no_grad():
        loss = trainer.loss(batch, np.random.default_rng(0)).item()
        q = enc.encode([e.query for e in batch], 'query')
        docnos = trainer.retrieve(q.numpy(), batch)
        # the stale index is the start encoder's: its top 4 are the encoder's own top 4
        all_docnos = [d['docno'] for d in coll.corpus_iter()]
        scores = q @ enc.encode(coll.texts(all_docnos), 'passage').T
        for row, s in zip(docnos, scores.numpy()):
            chosen = np.isin(all_docnos, row)
            assert chosen.sum() == 4 and s[chosen].min() >= s[~chosen].max() - 1e-5
        expected = []
        for e, row in zip(batch, docnos):
            texts = coll.texts(row)
            p_eta = torch.softmax(enc.encode([e.query], 'query') @ enc.encode(texts, 'passage').T
                                  / enc.temperature, -1)[0].double()
            p_theta = torch.tensor(gen.log_likelihoods([e.query] * len(row), texts)).exp()
            expected.append(-torch.log((p_eta * p_theta).sum()).item())
    assert loss == pytest.approx(np.mean(expected), rel=1e-4)


@pytest.mark.parametrize('kind', ['llama', 'bart', 't5'])
def test_acrobart_gradient_reaches_the_retriever_and_matches_finite_differences(
        tiny_encoder, tiny_generator, kind):
    enc, gen = tiny_encoder(), tiny_generator(kind, max_passage_length=32)
    enc.model.double()
    gen.model.double()
    queries = ['what is information retrieval', 'indexing of documents']
    passages = [['retrieval of information from documents', 'a library of books', 'indexing terms'],
                ['automatic indexing', 'documents and their terms', 'the weather today']]
    weight = enc.model.passage_proj.weight

    def loss():
        q = enc.encode(queries, 'query')
        p = enc.encode([t for row in passages for t in row], 'passage').view(2, 3, -1)
        weights = 4.0 * torch.softmax(torch.einsum('bd,bkd->bk', q, p) / enc.temperature, -1)
        return -biased_log_likelihood(gen, queries, passages, weights).sum()

    value = loss()
    value.backward()
    grad = weight.grad.clone()
    assert grad.abs().max() > 1e-6  # the reconstruction loss reaches the retriever
    # the models' attention softmax runs in fp32 even in an fp64 model, so the loss (about
    # 3e3 for T5) is exact to ~1e-7 relative only, and a difference quotient at a step of 1e-2
    # carries ~1e-3 of noise, which each CPU's vectorised exp rounds its own way: the check is
    # made at the three largest entries (0.1 to 0.6), where that noise is well under 1%
    eps = 1e-2
    for flat in grad.abs().flatten().topk(3).indices.tolist():
        i, j = divmod(flat, grad.shape[1])
        assert grad[i, j].item() == pytest.approx(central_difference(loss, weight, (i, j), eps),
                                                  rel=2e-2, abs=1e-4)


def test_acrobart_with_zero_bias_is_the_plain_likelihood_of_the_concatenation(tiny_generator):
    gen = tiny_generator('llama', max_passage_length=32)
    with torch.no_grad():
        biased = biased_log_likelihood(gen, ['a query'], [['first passage', 'second']],
                                       torch.zeros(1, 2))
        gen_plain = tiny_generator(
            'llama', prompt='Passage: {passage}\nA question this passage answers:',
            max_passage_length=32)
        plain = gen_plain.log_likelihoods(['a query'], ['first passage\n\nsecond'])
    assert biased.item() == pytest.approx(plain[0], rel=1e-4)
    with torch.no_grad():
        moved = biased_log_likelihood(gen, ['a query'], [['first passage', 'second']],
                                      torch.tensor([[5.0, 0.0]]))
    assert abs(moved.item() - biased.item()) > 1e-3  # the bias changes what the generator reads


def test_refresh_rebuilds_the_index_from_the_updated_encoder(tiny_encoder, tiny_generator,
                                                             tmp_path):
    coll = Collection('classic/adi')
    enc = tiny_encoder()
    trainer = Rumbart(enc, tiny_generator(max_passage_length=32), coll, cache_dir=tmp_path,
                      verbose=False)
    examples = trainer.examples(coll.topics().head(2))
    trainer.refresh(examples, initial=True)

    queries = enc.encode_queries([q.query for q in examples])
    stale = trainer.retrieve(queries, examples)
    trainer.refresh(examples)
    assert trainer.retrieve(queries, examples) == stale  # the encoder did not change
    before = np.array(trainer._index.payload()[1][:5])
    with torch.no_grad():
        enc.model.passage_proj.weight.mul_(-2.0)
    trainer.refresh(examples)
    docnos, after, _ = trainer._index.payload()
    in_order = list(docnos.fwd[np.arange(len(after))])
    np.testing.assert_allclose(after, enc.encode_docs(coll.texts(in_order)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(after[:5], -2 * before, rtol=1e-4, atol=1e-6)
    # every score negated: the fresh top 5 are the stale index's bottom 5 of 82
    assert all(not set(a) & set(b) for a, b in zip(trainer.retrieve(queries, examples), stale))
    assert [r['step'] for r in trainer.log if 'refresh seconds' in r] == [0, 0, 0]


def test_refreshes_tokenize_the_corpus_once_and_let_its_ids_go_after(tiny_encoder, tiny_generator,
                                                                       tmp_path, monkeypatch):
    coll = Collection('classic/adi')
    enc = tiny_encoder()
    tokenized = []
    token_ids = enc._token_ids

    def counted(texts, side):
        tokenized.append((side, len(texts)))
        return token_ids(texts, side)
    monkeypatch.setattr(enc, '_token_ids', counted)
    trainer = Rumbart(enc, tiny_generator(max_passage_length=32), coll, k=3, refresh_every=2,
                      batch_size=5, lr=1e-2, cache_dir=tmp_path, verbose=False)
    trainer.fit(coll.topics().head(30))  # 6 steps: the index built, then refreshed twice

    assert [r['step'] for r in trainer.log if 'refresh seconds' in r] == [0, 2, 4]
    assert [n for side, n in tokenized if side == 'passage'] == [82]  # ADI's 82 passages, once
    assert enc._kept_ids is None


def test_an_asynchronous_refresh_swaps_in_the_index_of_its_step_and_logs_its_staleness(
        tiny_encoder, tiny_generator, tmp_path, monkeypatch):
    """refresh='async': the index built from the weights of step 2 is in use at step 4 while
    the encoder has moved on. Each build here waits until training is two steps past its copy
    (or the run no longer needs it), so the swap's step is the same on every machine."""
    from pyterrier_selfsup.training import reconstruction
    coll = Collection('classic/adi')
    enc = tiny_encoder()
    trainer = Rumbart(enc, tiny_generator(max_passage_length=32), coll, k=3, refresh_every=2,
                      refresh='async', batch_size=5, lr=1e-2, cache_dir=tmp_path, verbose=False)
    copies, ending, on_fit_end = [], threading.Event(), trainer.on_fit_end

    def slow_fresh_index(collection, encoder, **kwargs):
        step = trainer.state['step']
        copies.append((step, encoder))
        while trainer.state['step'] < step + 2 and not ending.is_set():
            time.sleep(0.01)
        return fresh_index(collection, encoder, **kwargs)

    def on_fit_end_releasing_the_build():
        ending.set()
        on_fit_end()
    monkeypatch.setattr(reconstruction, 'fresh_index', slow_fresh_index)
    monkeypatch.setattr(trainer, 'on_fit_end', on_fit_end_releasing_the_build)
    # 6 steps: copies at steps 2 and 4 (none after the last step, 6); the copy of step 4 is
    # still being built when the run ends, and is discarded
    trainer.fit(coll.topics().head(30))

    assert [step for step, _ in copies] == [2, 4]
    assert [(r['step'], r['staleness']) for r in trainer.log if 'staleness' in r] == [(4, 2)]
    assert [r['step'] for r in trainer.log if 'refresh seconds' in r] == [0, 4]
    step_2 = copies[0][1]  # the index in use at the end encodes the copy of step 2
    assert step_2.passage_fingerprint() != enc.passage_fingerprint()  # (training went on)
    docnos, vectors, _ = trainer._index.payload()
    in_order = list(docnos.fwd[np.arange(len(vectors))])
    np.testing.assert_allclose(vectors, step_2.encode_docs(coll.texts(in_order)), rtol=1e-5,
                               atol=1e-6)
    assert not np.allclose(vectors, enc.encode_docs(coll.texts(in_order)), atol=1e-4)


def test_rumbart_reuses_cached_teacher_scores_and_leaves_a_frozen_generator_alone(
        tiny_encoder, tiny_generator, tmp_path):
    coll = Collection('classic/adi')
    gen = tiny_generator(max_passage_length=32)
    weights = {k: v.clone() for k, v in gen.model.state_dict().items()}
    calls = []
    score = gen.log_likelihoods
    gen.log_likelihoods = lambda targets, passages, **kwargs: \
        calls.append(list(zip(targets, passages))) or score(targets, passages, **kwargs)
    trainer = Rumbart(tiny_encoder(), gen, coll, k=3, refresh_every=None, batch_size=7, epochs=2,
                      lr=1e-3, cache_dir=tmp_path, output_dir=tmp_path / 'out', verbose=False,
                      draw_curve=plot_training_curve)
    trainer.fit(coll.topics())
    # one bulk pass after the index was built scored the pairs of all 35 queries at once;
    # batches then score only pairs that the changing query encoder newly retrieves
    assert len(calls[0]) == 35 * 3  # (at most 105 passages: one chunk)
    scored = [pair for call in calls for pair in call]
    assert len(scored) == len(set(scored))  # no pair is ever scored twice
    batch = trainer.examples(coll.topics().head(7))
    docnos, texts, _ = trainer.candidates(batch)
    trainer.teacher_logp(batch, docnos, texts)
    n_calls = len(calls)
    again = trainer.teacher_logp(batch, docnos, texts)
    assert len(calls) == n_calls and again.shape == (7, 3)
    for k, v in gen.model.state_dict().items():
        torch.testing.assert_close(v, weights[k])
    steps = [r for r in trainer.log if 'loss' in r]
    assert len(steps) == 10
    # -log sum_z p(z|x) p(x|z) >= -max_z log p(x|z): the logged excess is never negative
    assert (all(r['excess loss'] >= -1e-5 for r in steps) and
            any(r['excess loss'] > 1e-3 for r in steps))
    assert (tmp_path / 'out' / 'training_curve.png').read_bytes().startswith(b'\x89PNG')


def test_corpus_queries_never_retrieve_their_source(tiny_encoder, tiny_generator, tmp_path):
    coll = Collection('classic/adi')
    enc = tiny_encoder()
    trainer = Rumbart(enc, tiny_generator(max_passage_length=32), coll, k=3,
                      cache_dir=tmp_path, verbose=False)
    sents = cropped_spans(coll, 20, seed=0)
    examples = trainer.examples(sents)
    trainer.refresh(examples, initial=True)
    docnos, texts, logits = trainer.candidates(examples)
    assert logits.shape == (20, 3)
    for row, row_texts, source in zip(docnos, texts, sents['source_docno']):
        assert source not in row and len(set(row)) == 3 and all(row_texts)
    # a sentence's own passage is what a similarity search would find first without the rule
    with torch.no_grad():
        own = trainer.retrieve(enc.encode(sents['query'].tolist(), 'query').numpy(),
                               trainer.examples(sents[['qid', 'query']]))
    assert sum(s in row for s, row in zip(sents['source_docno'], own)) > 0


def test_trainable_generator_is_trained_and_checkpointed(tiny_encoder, tiny_generator, tmp_path):
    coll = Collection('classic/adi')
    gen = tiny_generator(trainable=True, max_passage_length=32)
    before = gen.model.lm_head.weight.detach().clone()
    trainer = Acrobart(tiny_encoder(), gen, coll, k=2, batch_size=12, epochs=1, lr=1e-3,
                       cache_dir=tmp_path, output_dir=tmp_path / 'out', verbose=False,
                       generator_batch=4)
    # a generator that trains takes the whole batch at once, whatever generator_batch says
    rows = []
    gen.model.register_forward_hook(
        lambda m, args, kwargs, out: rows.append(kwargs['input_ids'].shape[0]), with_kwargs=True)
    beta = trainer.beta.item()
    trainer.fit(coll.topics())
    assert max(rows) == 12
    assert not torch.equal(before, gen.model.lm_head.weight)
    assert trainer.beta.item() != beta
    logged = [entry['beta'] for entry in trainer.log if 'beta' in entry]
    assert logged[0] == pytest.approx(beta) and logged[-1] != pytest.approx(beta)
    assert (tmp_path / 'out' / 'final' / 'generator' / 'model.safetensors').exists()
    assert (torch.load(tmp_path / 'out' / 'final' / 'acrobart.pt')['beta'].item()
            == pytest.approx(trainer.beta.item()))


@pytest.mark.parametrize('method', [Rumbart, Acrobart])
def test_frozen_passages_train_the_query_tower_only_and_never_re_encode(
        tiny_encoder, tiny_generator, tmp_path, method):
    coll = Collection('classic/adi')
    enc = tiny_encoder()
    start = {k: v.clone() for k, v in enc.model.encoder.state_dict().items()}
    start_projections = [w.detach().clone() for w in enc.model.projection_weights()]
    start_fingerprint, start_passages = enc.fingerprint(), enc.passage_fingerprint()
    docnos = [d['docno'] for d in coll.corpus_iter()]
    start_vectors = enc.encode_docs(coll.texts(docnos))

    def trainer(enc, out):
        return method(enc, tiny_generator(max_passage_length=32), coll, k=3, refresh_every=2,
                      train_passages=False, batch_size=7, epochs=1, lr=1e-2, checkpoint_every=2,
                      cache_dir=tmp_path, output_dir=out, verbose=False)

    run = trainer(enc, tmp_path / 'out')
    run.fit(coll.topics())
    assert not enc.model.tied
    for name, value in enc.model.passage_encoder.state_dict().items():
        torch.testing.assert_close(value, start[name])
    torch.testing.assert_close(enc.model.passage_proj.weight, start_projections[1])
    assert not torch.equal(enc.model.query_proj.weight, start_projections[0])
    assert any(not torch.equal(v, start[k]) for k, v in enc.model.encoder.state_dict().items())
    # 5 steps: the index built at the start, re-retrieved (not re-encoded) at steps 2 and 4
    assert [r['step'] for r in run.log if 'refresh seconds' in r] == [0, 2, 4]
    np.testing.assert_allclose(np.asarray(run._index.payload()[1]), start_vectors, rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(enc.encode_docs(coll.texts(docnos)), start_vectors, rtol=1e-5,
                               atol=1e-6)
    # the retriever's logits: the query tower against the index's vectors
    batch = run.examples(coll.topics().head(4))
    with torch.no_grad():
        cand, texts, logits = run.candidates(batch)
        q = enc.encode([e.query for e in batch], 'query')
        p = enc.encode([t for row in texts for t in row], 'passage').view(4, 3, -1)
    torch.testing.assert_close(logits, torch.einsum('bd,bkd->bk', q, p) / enc.temperature,
                               rtol=1e-4, atol=1e-5)

    # saved untied, reloaded untied
    loaded = DualEncoder.from_pretrained(str(tmp_path / 'out' / 'final'), device='cpu',
                                         precision='fp32')
    assert not loaded.model.tied and loaded.fingerprint() == enc.fingerprint() != start_fingerprint
    # indexes are keyed by the passage side: the frozen tower's is the start's, so the
    # trained model is evaluated on the start's index; a changed passage tower is not
    assert loaded.passage_fingerprint() == start_passages
    assert (flex_index(coll, loaded, cache_dir=tmp_path).index_path
            == flex_index(coll, tiny_encoder(), cache_dir=tmp_path).index_path)
    with torch.no_grad():
        loaded.model.passage_proj.weight.mul_(2)
    assert loaded.passage_fingerprint() != start_passages
    assert tiny_encoder().config()['tied'] and not loaded.config()['tied']

    # resuming (on a refresh boundary) from a fresh, tied start gives the same model
    resumed_enc = tiny_encoder()
    trainer(resumed_enc, tmp_path / 'resumed').fit(coll.topics(),
                                                   resume_from=tmp_path / 'out' / 'checkpoint-4')
    for name, value in resumed_enc.model.state_dict().items():
        torch.testing.assert_close(value, enc.model.state_dict()[name], rtol=1e-4, atol=1e-6)


def test_an_interrupted_cached_run_resumes_from_its_last_checkpoint(tiny_dir, tiny_generator_dir,
                                                                    tmp_path, monkeypatch):
    coll = Collection('classic/adi')
    settings = dict(method='rumbart', start=str(tiny_dir), queries='classic/adi', k=3,
                    refresh_every=2, batch_size=7, lr=1e-2,
                    generator=str(tiny_generator_dir['llama']), max_passage_length=32)
    whole = trained_dense_retriever(coll, RunContext(cache_dir=tmp_path / 'whole'),
                                    **settings).encoder

    # 35 topics, 7 a batch: 5 steps; stopped in the 5th
    with stopped_at_step(monkeypatch, Rumbart, 5):
        trained_dense_retriever(coll, run=RunContext(cache_dir=tmp_path / 'cut'), **settings)
    staging, = (tmp_path / 'cut' / 'models').glob('*.partial')
    # taken after refreshes; the last kept
    assert [c.name for c in checkpoints(staging)] == ['checkpoint-4']

    resumed = trained_dense_retriever(coll, run=RunContext(cache_dir=tmp_path / 'cut'), **settings)
    model_dir = staging.with_name(staging.name[:-len('.partial')])
    assert not staging.exists() and not checkpoints(model_dir)
    # a finished model keeps no optimiser state
    assert not (model_dir / 'final' / TRAINER_STATE_FILE).exists()
    log = [json.loads(line) for line in (model_dir / 'training_log.jsonl').read_text().splitlines()]
    assert [r['step'] for r in log if 'loss' in r] == [1, 2, 3, 4, 5]
    # step 4's index rebuilt on resuming
    assert [r['step'] for r in log if 'refresh seconds' in r] == [0, 2, 4, 4]
    for name, value in resumed.encoder.model.state_dict().items():  # bit for bit
        assert torch.equal(value, whole.model.state_dict()[name]), name


def test_generated_queries_do_not_depend_on_the_trainers_passage_length(
        tiny_dir, tiny_generator_dir, tmp_path, monkeypatch):
    from pyterrier_selfsup.data.queries.source import QuerySource
    from pyterrier_selfsup.harness import trained
    from pyterrier_selfsup.harness.methods import source_topics
    coll = Collection('classic/adi')

    class Trained(Exception):
        pass

    def fit(trainer, topics):
        raise Trained(trainer.generator.max_passage_length, topics)
    monkeypatch.setattr(trained, 'fit_resumably', fit)
    seen = []
    for length in (32, 256):  # ACROBArT's shorter passages, and the default
        with pytest.raises(Trained) as raised:
            trained.train(coll, 'acrobart',
                          dict(start=str(tiny_dir), queries='generated', n_queries=6,
                               generator=str(tiny_generator_dir['llama']),
                               max_passage_length=length), run=RunContext(cache_dir=tmp_path))
        assert raised.value.args[0] == length
        seen.append(raised.value.args[1])
    writer = Generator.from_pretrained(str(tiny_generator_dir['llama']))  # its default settings
    assert seen[0].equals(seen[1])
    assert seen[0].equals(source_topics(coll, QuerySource('generated', 6),
                                        generator=writer,
                                        run=RunContext(cache_dir=tmp_path / 'fresh')))


@pytest.mark.parametrize('method,kind', [('rumbart', 'llama'), ('acrobart', 'llama'),
                                         ('acrobart', 'bart'), ('ds', None)])
def test_gradient_checkpointing_trains_the_same_weights_and_is_off_after(method, kind, tiny_encoder,
                                                                         tiny_generator, tmp_path):
    """The encoder's activations (and ACROBArT's generator's, the attention bias set again for
    the recompute) recomputed in the backward pass, dropout's random state kept: the same
    weights, bit for bit, as keeping them (the results file memory_probe.md: the memory it
    saves). A recompute without the bias would move no gradient to the retriever or β."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    from pyterrier_selfsup import DistantSupervision
    coll = Collection('classic/adi')
    weights, passes = {}, {True: {}, False: {}}
    for on in (True, False):
        enc, seen = tiny_encoder(), []
        settings = dict(batch_size=7, epochs=1, lr=1e-2, gradient_checkpointing=on,
                        cache_dir=tmp_path / str(on), verbose=False)
        if method == 'ds':
            trainer, generator = DistantSupervision(enc, coll, **settings), None
        else:
            generator = tiny_generator(kind, max_passage_length=32)
            trainer = {'rumbart': Rumbart, 'acrobart': Acrobart}[method](enc, generator, coll, k=3,
                                                                         refresh_every=None,
                                                                         **settings)
        layers = ([m for m in generator.model.modules()
                   if isinstance(m, GradientCheckpointingLayer)] if generator else [])
        # each pass with gradients through a watched module:
        # twice a step where its layer is recomputed
        watched = ([enc.model.encoder.encoder.layer[0].attention]
                   + ([next(layers[-1].children())] if layers else []))
        for i, module in enumerate(watched):
            module.register_forward_hook(lambda m, args, out, i=i: passes[on].__setitem__(
                i, passes[on].get(i, 0) + torch.is_grad_enabled()))
        loss_of = trainer.loss

        def spy(batch, rng):
            seen.append(((enc.model.encoder.is_activation_checkpointing and
                          enc.model.encoder.training),
                         [('forward' in m.__dict__) for m in layers]))
            return loss_of(batch, rng)
        trainer.loss = spy
        trainer.fit(coll.topics().head(14))
        wrapped = on and method == 'acrobart'
        assert seen == [(on, [wrapped] * len(layers))] * 2
        assert (not enc.model.encoder.is_activation_checkpointing and
                not any('forward' in m.__dict__ for m in layers))
        weights[on] = {name: value.clone() for name, value in enc.model.state_dict().items()}
        if method == 'acrobart':
            weights[on]['beta'] = trainer.beta.detach().clone()
    recomputed = {i: 2 * n if i == 0 or method == 'acrobart' else n
                  for i, n in passes[False].items()}
    # (RUMBArt's generator scores without gradients)
    assert passes[False][0] > 0 and passes[True] == recomputed
    start = tiny_encoder().model.state_dict()
    assert any(not torch.equal(value, start[name])
               for name, value in weights[True].items() if name != 'beta')
    if method == 'acrobart':
        assert weights[True]['beta'] != 1.0  # (β's only gradient comes through the bias)
    for name, value in weights[True].items():
        assert torch.equal(value, weights[False][name]), name


@pytest.mark.parametrize('kind,precision,accumulation',
                         [('llama', 'bf16', 1), ('bart', 'fp32', 1), ('llama', 'bf16', 2)])
def test_acrobart_a_few_queries_at_a_time_through_the_generator_trains_the_same_weights(
        kind, precision, accumulation, tiny_encoder, tiny_generator_dir, tmp_path):
    """``generator_batch``: the generator's activations of 3 queries at a time, not 7, and the
    same losses and weights as the whole batch's pass, bit for bit (each row padded as the
    whole batch pads it; in bf16 too; two batches a step, 1/2 being exact)."""
    coll = Collection('classic/adi')
    runs = {}
    for generator_batch in (None, 3):
        enc = tiny_encoder()
        generator = Generator.from_pretrained(str(tiny_generator_dir[kind]), device='cpu',
                                              precision=precision, max_passage_length=32)
        rows = []  # the rows of each pass through the generator (seq2seq: its decoder's)
        generator.model.register_forward_hook(lambda m, args, kwargs, out: rows.append(
            next(v for v in [*args, *kwargs.values()] if torch.is_tensor(v)).shape[0]),
            with_kwargs=True)
        trainer = Acrobart(enc, generator, coll, k=3, refresh_every=None, batch_size=7,
                           accumulation=accumulation, epochs=1, lr=1e-2,
                           generator_batch=generator_batch,
                           cache_dir=tmp_path / str(generator_batch), verbose=False)
        trainer.fit(coll.topics().head(14))
        runs[generator_batch] = ({n: v.clone() for n, v in enc.model.state_dict().items()},
                                 trainer.beta.item(),
                                 [r['loss'] for r in trainer.log if 'loss' in r], rows)
    (whole, beta_whole, loss_whole, rows_whole), (parts, beta_parts, loss_parts, rows_parts) = \
        runs[None], runs[3]
    assert max(rows_whole) == 7 and max(rows_parts) == 3
    start = tiny_encoder().model.state_dict()
    assert any(not torch.equal(start[n], whole[n]) for n in whole)  # it trained
    assert loss_parts == loss_whole and beta_parts == beta_whole
    assert all(torch.equal(whole[n], parts[n]) for n in whole)
