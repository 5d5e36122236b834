import numpy as np
import pandas as pd
import pytest
import torch

from pyterrier_selfsup import BM25, Collection
from pyterrier_selfsup.models.generator import SMOLLM2, SMOLLM2_GGUF, Generator
from tests.helpers import OperationCount

PASSAGES = ['Scurvy is caused by a lack of vitamin C in the diet; sailors on long voyages suffered '
            'from it.',
            'The Eiffel tower is in Paris.', 'Short.']
TARGETS = ['what causes scurvy', 'where is the eiffel tower', 'vitamin deficiency disease']




def manual_log_likelihood(gen: Generator, target: str, passage: str) -> float:
    """Σ_j log p(y_j | passage, y_<j) from one unbatched forward and the full logits."""
    prefix, tokens = gen.passage_ids([passage])[0], gen.target_ids([target])[0]
    with torch.no_grad():
        if gen.is_seq2seq:
            labels = torch.tensor([tokens])
            logits = gen.model(input_ids=torch.tensor([prefix]),
                               decoder_input_ids=gen.model.prepare_decoder_input_ids_from_labels(
                                   labels=labels)).logits[0]
            logp = torch.log_softmax(logits.double(), -1)
            return sum(logp[j, t].item() for j, t in enumerate(tokens))
        logp = torch.log_softmax(gen.model(torch.tensor([prefix + tokens])).logits[0].double(), -1)
        return sum(logp[len(prefix) - 1 + j, t].item() for j, t in enumerate(tokens))


@pytest.mark.parametrize('kind', ['bart', 't5', 'llama'])
def test_log_likelihood_equals_a_manual_per_token_sum(tiny_generator, kind):
    gen = tiny_generator(kind, batch_size=2)  # several batches, and passages shared by targets
    targets = [t for t in TARGETS for _ in PASSAGES]
    passages = [p for _ in TARGETS for p in PASSAGES]
    expected = [manual_log_likelihood(gen, t, p) for t, p in zip(targets, passages)]
    # the pairs really differ: by more than the comparison's tolerance allows (rounded to a
    # grid, two scores near one of its lines could fall apart or together by the CPU)
    gaps = np.diff(np.sort(expected))
    assert gaps.min() > 2 * 1e-4 * np.abs(expected).max()
    np.testing.assert_allclose(gen.log_likelihoods(targets, passages), expected, rtol=1e-4)
    with torch.no_grad():  # the differentiable path: one sequence per pair, no shared prefix
        np.testing.assert_allclose(gen.log_likelihood(targets, passages).numpy(), expected,
                                   rtol=1e-4)


@pytest.mark.parametrize('kind', ['t5', 'llama'])
def test_target_chunks_keep_to_the_logits_budget_and_score_the_same(tiny_generator, kind,
                                                                    monkeypatch):
    from pyterrier_selfsup.models import batched_scoring
    gen = tiny_generator(kind, batch_size=2)  # at most 8 targets a chunk
    targets = [t for t in TARGETS for _ in PASSAGES]
    passages = [p for _ in TARGETS for p in PASSAGES]
    # (a tiny vocabulary: the budget does not bind)
    unbounded = gen.log_likelihoods(targets, passages)
    row_bytes = 4 * gen.model.get_output_embeddings().weight.shape[0]
    # 15 target positions' logits
    monkeypatch.setattr(batched_scoring, 'LOGITS_BUDGET', 15 * row_bytes)
    lengths = [1, 2, 3, 3, 5, 5, 5, 8, 20]  # (sorted, as log_likelihoods passes them)
    assert (list(gen._target_chunks([(i, [0] * n) for i, n in enumerate(lengths)]))
            == [(0, 4), (4, 7), (7, 8), (8, 9)])
    assert list(gen._target_chunks([(i, [0]) for i in range(20)])) == [(0, 8), (8, 16), (16, 20)]
    monkeypatch.setattr(batched_scoring, 'LOGITS_BUDGET', 1)  # one target a chunk
    np.testing.assert_allclose(gen.log_likelihoods(targets, passages), unbounded, rtol=1e-5)


def test_targets_read_their_prefixes_a_layer_at_a_time_and_score_what_copies_score(tiny_generator,
                                                                                   monkeypatch):
    """A chunk of targets reads its prefixes through a PrefixCache (each layer's selected and
    joined at its turn, nothing stored) rather than a DynamicCache built from copies of them
    (every layer's held through the forward): the same tensors reach attention, so the same
    scores, bit for bit."""
    from pyterrier_selfsup.models import kv_cache
    gen = tiny_generator('llama', batch_size=2)
    targets = [t for t in TARGETS for _ in PASSAGES]
    passages = [p for _ in TARGETS for p in PASSAGES]
    reads = []
    update = kv_cache.PrefixLayer.update
    monkeypatch.setattr(kv_cache.PrefixLayer, 'update',
                        lambda self, *a, **k: reads.append(len(self.rows)) or update(self, *a, **k))
    assert gen._prefix_cache_fits
    shared = gen.log_likelihoods(targets, passages)
    layers = gen.model.config.num_hidden_layers
    # every target, at every layer
    assert len(reads) % layers == 0 and sum(reads) == layers * len(targets)
    before = len(reads)
    monkeypatch.setattr(gen, '_prefix_cache_fits', False)  # (DynamicCache, as before)
    assert np.array_equal(gen.log_likelihoods(targets, passages), shared)
    assert len(reads) == before  # (that path reads no PrefixLayer)


def test_only_models_whose_layers_attend_to_every_position_read_prefixes_from_a_cache():
    """A PrefixLayer is a full-attention layer: a model with sliding-window layers keeps
    DynamicCache's kinds."""
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    from pyterrier_selfsup.models.kv_cache import full_attention_layers
    small = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 vocab_size=100)
    assert full_attention_layers(LlamaConfig(**small)) == 2
    assert full_attention_layers(Qwen2Config(**small)) == 2
    # (its second layer slides)
    assert full_attention_layers(Qwen2Config(use_sliding_window=True, sliding_window=16,
                                             max_window_layers=1, **small)) is None
    assert full_attention_layers(MistralConfig(sliding_window=16, **small)) is None


def test_prefix_cache_scores_equal_uncached_ones_on_real_smollm2(cache_dir):
    gen = Generator.from_pretrained(SMOLLM2, gguf_file=SMOLLM2_GGUF, cache_dir=cache_dir,
                                    device='cpu', precision='fp32', batch_size=2)
    targets = [t for t in TARGETS for _ in PASSAGES]
    passages = [p for _ in TARGETS for p in PASSAGES]
    cached = gen.log_likelihoods(targets, passages)
    np.testing.assert_allclose(cached, [manual_log_likelihood(gen, t, p)
                                        for t, p in zip(targets, passages)], rtol=1e-4)
    # a real model puts its passage to use: each question is likeliest after its own passage
    assert cached.reshape(3, 3)[0].argmax() == 0 and cached.reshape(3, 3)[1].argmax() == 1


def test_a_gguf_conversion_runs_in_a_process_of_its_own_and_says_why_it_failed(tmp_path):
    import resource

    from pyterrier_selfsup.models.gguf_conversion import dequantised
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    with pytest.raises(RuntimeError,
                       match=r'(?s)conversion of .*no-such\.gguf failed in its own process \(exit '
                             r'1\): OSError: '):
        dequantised(SMOLLM2, 'no-such.gguf', cache_dir=tmp_path)
    # (a child did the work)
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime > children.ru_utime
    # nothing left as if converted
    assert not [p for p in (tmp_path / 'generators').glob('*no-such*') if p.is_dir()]


@pytest.mark.parametrize('kind', ['bart', 't5', 'llama'])
def test_a_frozen_generator_keeps_its_matrices_in_its_compute_dtype_and_scores_the_same(
        tiny_generator_dir, kind, tmp_path):
    """Under bf16 a frozen generator's Linear weights are held in bf16 (the cast autocast made at
    every forward, made once): scores, the differentiable log-likelihood, ACROBArT's biased one
    and its gradient towards the bias, and the writer's queries equal, bit for bit, those of the
    same model held in fp32; a tied output layer stays with its fp32 embedding."""
    import shutil

    from pyterrier_selfsup.models.precision import matrices_in_compute_dtype
    from pyterrier_selfsup.models.reading import biased_log_likelihood
    # (a copy no other test maps)
    path = str(shutil.copytree(tiny_generator_dir[kind], tmp_path / kind))

    def mapped():  # the checkpoint file mapped into this process (transformers maps safetensors)
        with open('/proc/self/maps') as maps:
            return any(path in line for line in maps)
    narrowed = Generator.from_pretrained(path, device='cpu', precision='bf16')
    # nothing left a view of the mapped checkpoint, which would keep its pages resident (in BART,
    # something outside the model's parameters and buffers holds a view of its final_logits_bias)
    assert mapped() == (kind == 'bart')
    # (not narrowed)
    held = Generator.from_pretrained(path, device='cpu', precision='bf16', trainable=True)
    assert mapped()
    held.model.requires_grad_(False)
    held.trainable = False
    linears = [m for m in narrowed.model.modules() if isinstance(m, torch.nn.Linear)]
    embedding = narrowed.model.get_input_embeddings().weight
    assert embedding.dtype == torch.float32
    assert {m.weight.dtype for m in linears if m.weight is not embedding} == {torch.bfloat16}
    assert all(m.weight.dtype == torch.float32 for m in linears if m.weight is embedding)
    # (the three tiny models tie their output layers)
    assert any(m.weight is embedding for m in linears)
    assert narrowed._held_in == torch.bfloat16 and held._held_in is None
    with pytest.raises(ValueError, match='holds its matrices in torch.bfloat16'):
        narrowed.precision = 'fp32'  # (its fp32 weights are gone)
    narrowed.precision = 'bf16'
    assert matrices_in_compute_dtype(held.model, torch.float32) == 0  # (fp32: nothing converted)
    assert Generator.from_pretrained(path, device='cpu',
                                     precision='fp32').model.get_decoder().dtype == torch.float32

    targets = [t for t in TARGETS for _ in PASSAGES]
    passages = [p for _ in TARGETS for p in PASSAGES]
    scores = narrowed.log_likelihoods(targets, passages)
    assert np.diff(np.sort(scores)).min() > 0  # (distinct: the equalities below say something)
    assert np.array_equal(scores, held.log_likelihoods(targets, passages))
    with torch.no_grad():
        assert torch.equal(narrowed.log_likelihood(targets, passages),
                           held.log_likelihood(targets, passages))
    outputs = []
    for gen in (narrowed, held):
        weights = torch.tensor([[0.3, 1.2, -0.4], [2.0, 0.1, 0.0]], requires_grad=True)
        logp = biased_log_likelihood(gen, TARGETS[:2], [PASSAGES, PASSAGES[::-1]], weights)
        logp.sum().backward()
        outputs.append((logp.detach(), weights.grad))
    assert torch.equal(outputs[0][0], outputs[1][0]) and torch.equal(outputs[0][1], outputs[1][1])
    assert outputs[0][1].abs().sum() > 0  # (a gradient to compare)
    if kind == 'llama':
        assert narrowed.writer().write(PASSAGES, 2) == held.writer().write(PASSAGES, 2)
        seqs = [p + t for p, t in zip(narrowed.passage_ids(PASSAGES), narrowed.target_ids(TARGETS))]
        # (called outside any autocast of the caller's: it enters the generator's own)
        with torch.no_grad():
            assert torch.equal(narrowed.sequence_logp(seqs, narrowed.target_ids(TARGETS)),
                               held.sequence_logp(seqs, held.target_ids(TARGETS)))


def test_truncation_keeps_the_prompt_whole(tiny_generator):
    gen = tiny_generator('llama', max_passage_length=4)
    long, short = gen.passage_ids(['one two three four five six seven', 'one two three four'])
    assert long == short
    assert (gen.tokenizer.decode(long)
            == 'passage : one two three four a question this passage answers :')


def test_frozen_generator_has_no_gradients(tiny_generator):
    gen = tiny_generator('llama')
    assert not any(p.requires_grad for p in gen.model.parameters())
    trainable = tiny_generator('llama', trainable=True)
    trainable.log_likelihood(TARGETS, PASSAGES).sum().backward()
    assert all(p.grad is not None for p in trainable.model.parameters() if p.requires_grad)


def test_generate_returns_one_line_per_passage(tiny_generator):
    for kind in ('bart', 'llama'):
        out = tiny_generator(kind).generate(PASSAGES, max_new_tokens=5)
        assert len(out) == 3 and all(isinstance(t, str) and '\n' not in t for t in out)


def test_reconstruction_scorer_reranks_and_caches(tiny_generator, tmp_path):
    gen = tiny_generator('llama')
    frame = pd.DataFrame({'qid': ['1'] * 3 + ['2'] * 3,
                          'query': [TARGETS[0]] * 3 + [TARGETS[1]] * 3,
                          'docno': ['a', 'b', 'c'] * 2, 'text': PASSAGES * 2,
                          'score': 0.0, 'rank': 0})
    out = gen.scorer(normalise='sum')(frame).sort_values(['qid', 'docno'])
    np.testing.assert_allclose(out['score'],
                               gen.log_likelihoods(frame['query'].tolist(), PASSAGES * 2),
                               rtol=1e-6)
    assert (out.groupby('qid')['rank'].apply(sorted).tolist() == [[0, 1, 2]] * 2)
    mean = gen.scorer(normalise='mean')(frame).sort_values(['qid', 'docno'])
    lengths = gen.target_lengths(frame['query'].tolist())
    np.testing.assert_allclose(mean['score'].to_numpy() * lengths, out['score'], rtol=1e-6)

    # the same query text under two qids (scifact's train topics have such pairs): each
    # (query, docno) is scored and stored once, and both qids get its score
    twice = pd.concat([frame, frame.assign(qid=frame['qid'] + 'b')])
    both = (gen.scorer(normalise='sum', cache=tmp_path / 'scores-twice')(twice)
            .sort_values(['qid', 'docno']))
    np.testing.assert_allclose(
        both['score'], np.repeat(out['score'].to_numpy().reshape(2, 3), 2, axis=0).reshape(-1),
        rtol=1e-6)

    cached = gen.scorer(normalise='sum', cache=tmp_path / 'scores')
    first = cached(frame).sort_values(['qid', 'docno'])
    np.testing.assert_allclose(first['score'], out['score'], rtol=1e-6)
    gen.log_likelihoods = lambda *a: pytest.fail('a cached pair was scored again')
    again = cached(frame).sort_values(['qid', 'docno'])
    np.testing.assert_allclose(again['score'], out['score'], rtol=1e-6)
    empty = cached(frame.head(0))
    assert len(empty) == 0 and {'score', 'rank'} <= set(empty.columns)


def test_reconstruction_scorer_needs_text(tiny_generator):
    gen = tiny_generator('llama')
    with pytest.raises(Exception, match='text'):
        gen.scorer()(pd.DataFrame({'qid': ['1'], 'query': ['q'], 'docno': ['a'], 'score': [0.],
                                   'rank': [0]}))


@pytest.mark.slow
def test_smollm2_reranks_adi(cache_dir):
    """A regression test on real data: SmolLM2's query likelihood over BM25's top 10 on ADI."""
    coll = Collection('classic/adi')
    gen = Generator.from_pretrained(SMOLLM2, gguf_file=SMOLLM2_GGUF, cache_dir=cache_dir,
                                    device='cpu', precision='fp32')
    topics = coll.topics().head(2)
    pipe = (BM25.from_collection(coll, num_results=10, cache_dir=cache_dir) >> coll.text_loader()
            >> gen.scorer())
    out = pipe(topics)
    assert out.groupby('qid').size().tolist() == [10] * 2
    top = out[out['rank'] == 0].set_index('qid')
    # pinned from a run of this code (fp32): the generator's first choice and its score per query
    assert top['docno'].to_dict() == {'1': '69', '2': '69'}
    np.testing.assert_allclose(top['score'].to_numpy(), [-4.0709, -4.3629], atol=2e-3)
    assert out['score'].between(-15, 0).all()


def test_cached_scoring_goes_by_passage_and_commits_each_chunk(tiny_generator, tmp_path):
    gen = tiny_generator('llama')
    frame = pd.DataFrame({'qid': ['1'] * 3 + ['2'] * 3,
                          'query': [TARGETS[0]] * 3 + [TARGETS[1]] * 3,
                          'docno': ['a', 'b', 'c'] * 2, 'text': PASSAGES * 2})
    expected = gen.scorer(normalise='sum')(frame).sort_values(['qid', 'docno'])['score'].to_numpy()
    calls = []
    score = gen.log_likelihoods
    gen.log_likelihoods = lambda targets, passages, **kwargs: (
        calls.append(sorted(set(passages))) or score(targets, passages, **kwargs))
    scorer = gen.scorer(normalise='sum', cache=tmp_path / 'scores')
    scorer.CHUNK = 2
    np.testing.assert_allclose(scorer(frame).sort_values(['qid', 'docno'])['score'], expected,
                               rtol=1e-6)
    assert calls == [sorted(PASSAGES[:2]), [PASSAGES[2]]]  # both queries of a passage in one call
    import sqlite3
    with sqlite3.connect(tmp_path / 'scores' / 'db.sqlite3') as db:
        assert db.execute('SELECT COUNT(*) FROM cache').fetchone()[0] == 6


# operations a scoring batch of the tiny Llama dispatches, as counted here, by precision and
# targets a passage (the prompt's forward, then its targets' from its cache). A copy to the
# host a chunk and padding by torch's pad_sequence, a tensor a row, made 390 and 423 with one
# target a passage and 398 and 431 with three.
OPERATIONS_A_BATCH = {('fp32', 1): 369, ('bf16', 1): 402, ('fp32', 3): 369, ('bf16', 3): 402}


@pytest.mark.parametrize('targets', [1, 3])
@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_a_scoring_batch_dispatches_a_fixed_number_of_operations(tiny_generator_dir, precision,
                                                                 targets):
    gen = Generator.from_pretrained(str(tiny_generator_dir['llama']), device='cpu',
                                    precision=precision, batch_size=2)
    passages = [f'passage {i} tells of {i} things' for i in range(6)]

    def operations(n: int) -> int:
        pairs = [(f'query {j} of passage {i}', p) for i, p in enumerate(passages[:n])
                 for j in range(targets)]
        return OperationCount.of(
            lambda: gen.log_likelihoods([q for q, _ in pairs], [p for _, p in pairs]))
    # 1 batch of 2 passages against 3: what one more batch dispatches
    per_batch = (operations(6) - operations(2)) / 2
    assert per_batch == OPERATIONS_A_BATCH[precision, targets]
