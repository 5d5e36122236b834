"""Writing queries (issue 30): one prefill a passage shared by its samples gives what prefilling
each sample alone gives; greedy writing agrees with transformers' generate; the nucleus
sampler draws from the distribution it should; a query ends at its first line."""
import contextlib

import numpy as np
import pytest
import torch

from pyterrier_selfsup import Collection
from pyterrier_selfsup.models.generator import load_generator
from pyterrier_selfsup.models.prompts import PASSAGE_QUESTION
from pyterrier_selfsup.models.writer_cache import WriterCache, WriterLayer
from pyterrier_selfsup.models.writing import QueryWriter, next_tokens

PASSAGES = ['automatic indexing of scientific documents by their citations',
            'the retrieval of legal text',
            'a thesaurus for information retrieval built from co-occurrence statistics']


def test_shared_prefill_writes_what_separate_prefills_write(tiny_generator):
    writer = QueryWriter(tiny_generator('llama'), batch_size=2)
    assert writer.style == 'plain'  # (the tiny model's tokenizer has no chat template)
    greedy = writer.write(PASSAGES, 3)
    assert greedy == writer.write(PASSAGES, 3, shared=False)
    assert all(len(set(qs)) == 1 for qs in greedy)  # greedy: n copies of one query
    # sampling: the same random stream draws the same tokens from the same distributions,
    # row for row
    sampled = writer.write(PASSAGES, 4, do_sample=True, top_p=0.9,
                           generator=torch.Generator().manual_seed(3))
    alone = writer.write(PASSAGES, 4, do_sample=True, top_p=0.9, shared=False,
                         generator=torch.Generator().manual_seed(3))
    assert sampled == alone
    assert len({q for qs in sampled for q in qs}) > 6  # and they are samples, not copies
    other = writer.write(PASSAGES, 4, do_sample=True, top_p=0.9,
                         generator=torch.Generator().manual_seed(4))
    assert other != sampled


def test_the_shared_prompt_cache_writes_what_the_dynamic_cache_writes(tiny_generator, monkeypatch):
    """The writer's own cache (each prompt held once and read by all its samples, prompts
    prefilled in separate forwards and joined, their attention in chunks of 4 positions,
    finished samples and then their prompts dropped, the new tokens' buffers grown as samples
    pass their room) against transformers' DynamicCache (each
    prompt copied to its samples, attention in one call): in fp32 the same queries, sampled and
    greedy, with rows leaving the batch as their queries end."""
    from pyterrier_selfsup.models import writer_cache, writer_prefill
    monkeypatch.setattr(writer_cache, 'PREFILL_CHUNK', 4)
    # the new tokens' buffers: room for 3, then grown
    monkeypatch.setattr(writer_prefill, 'NEW_TOKENS_RESERVED', 3)
    gen = tiny_generator('llama')
    shortest = min(len(x) for x in QueryWriter(gen).prompt_ids(PASSAGES))
    assert shortest > 3 * writer_cache.PREFILL_CHUNK
    # every 7th token ends a query (a random tiny model seldom writes its real end tokens): rows
    # leave at different steps, and their prompts with them
    kinds = QueryWriter(gen).token_kinds.clone()
    kinds[::7] |= 1
    selections, sizes = [], set()
    select, update = WriterCache.batch_select_indices, WriterLayer.update
    monkeypatch.setattr(WriterCache, 'batch_select_indices',
                        lambda self, indices: (selections.append(len(indices))
                                               or select(self, indices)))

    def watched(self, *args, **kwargs):
        out = update(self, *args, **kwargs)
        if self._keys is not None:
            sizes.add(self._keys.shape[-2])  # (the new tokens' buffer: its room)
        return out
    monkeypatch.setattr(WriterLayer, 'update', watched)
    written = {}
    for preallocated in (True, False):
        # prefill_tokens=1: one prompt a prefill forward, three forwards of different lengths joined
        writer = QueryWriter(gen, batch_size=3, prefill_tokens=1, preallocated_cache=preallocated)
        writer.__dict__['token_kinds'] = kinds
        written[preallocated] = (writer.write(PASSAGES, 4, do_sample=True, top_p=0.9,
                                              max_new_tokens=12,
                                              generator=torch.Generator().manual_seed(5)),
                                 writer.write(PASSAGES, 2))
        if preallocated:
            # the writer's own cache dropped finished rows, and grew its buffers past their room
            assert selections and len(sizes) >= 3, (selections, sizes)
    assert written[True] == written[False]
    sampled = [q for qs in written[True][0] for q in qs]
    # queries ended at different steps
    assert len({len(writer.tokenizer(q)['input_ids']) for q in sampled}) > 2


def test_a_shared_prefix_writes_what_whole_prompts_write(tiny_generator, monkeypatch):
    """Example pairs make a long head that every prompt begins with: prefilled once a call, and
    each prompt from its passage on (in parts: prefill_tokens=1), it writes in fp32 the queries
    that whole prompts write, sampled and greedy; the prefill forwards run fewer tokens."""
    from pyterrier_selfsup.models import writing
    gen = tiny_generator('llama')
    pairs = [('rockets and their flight through the upper atmosphere, their fuel, their stages '
              'and the heat of their return ' * 3, 'how do rockets fly'),
             ('the cultivation of rice in flooded fields, its seasons, its yields and the water '
              'it needs ' * 3, 'rice farming')]
    widths = []
    prefill = writing.QueryWriter._prefill

    def watched(self, prompts, cache):
        out = prefill(self, prompts, cache)
        widths.append(out[2].shape[1] - (cache.prefix.length if cache and cache.prefix else 0))
        return out
    monkeypatch.setattr(writing.QueryWriter, '_prefill', watched)
    written, ran = {}, {}
    for share in (True, False):
        writer = QueryWriter(gen, style='plain', pairs=pairs, batch_size=2, prefill_tokens=1,
                             share_prefix=share)
        assert len(writer.head_ids) >= writing.MIN_SHARED_PREFIX
        assert (writer.config()['prefix'] == 'shared') == share  # (it keys the queries written)
        widths.clear()
        written[share] = (writer.write(PASSAGES, 3, do_sample=True, top_p=0.9,
                                       generator=torch.Generator().manual_seed(7)),
                          writer.write(PASSAGES, 2))
        ran[share] = sum(widths)
    assert written[True] == written[False]
    assert len({q for qs in written[True][0] for q in qs}) > 4
    # the head prefilled once a call (2 calls), not once a prompt (3 passages a call)
    head = len(QueryWriter(gen, style='plain', pairs=pairs).head_ids)
    assert ran[False] - ran[True] > 3 * head, ran


def _prompts(rows, length, dtype, padded):
    """A prefill's keys (fp32, as rotary leaves them) and values, and its left-padded mask."""
    keys, values = torch.randn(rows, 2, length, 8), torch.randn(rows, 2, length, 8).to(dtype)
    mask = torch.ones(rows, length, dtype=torch.bool)
    mask[0, :padded] = False
    return keys, values, mask


@pytest.mark.parametrize('keys_dtype, values_dtype, tolerance', [
    (torch.float32, torch.float32, 1e-5),  # fp32
    (torch.float32, torch.bfloat16, 2e-2),  # bf16 autocast: keys fp32, values bf16
    (torch.bfloat16, torch.bfloat16, 4e-2)])  # a bf16 model run as it is
def test_shared_prompt_attention_attends_to_each_samples_prompt_and_its_own_tokens(
        keys_dtype, values_dtype, tolerance):
    """Attention of one new token a sample over a WriterCache against attention written out in
    fp64 over that sample's prompt (its real positions) and the tokens it wrote: two prefills of
    different lengths joined, 3 samples a prompt, samples leaving after the first step and with
    them two prompts (the cache then drops them)."""
    torch.manual_seed(0)
    n, heads, scale = 3, 6, 8 ** -0.5
    parts = [_prompts(3, 5, values_dtype, padded=2), _prompts(1, 3, values_dtype, padded=0)]
    caches = []
    for keys, values, _ in parts:
        caches.append(WriterCache(1, reserve=1))
        caches[-1].layers[0].update(keys.to(keys_dtype), values)
    cache = WriterCache.empty_like(caches[0], 4, 5)  # (as QueryWriter.prefill copies its parts in)
    cache.place(caches[0], 0)
    cache.place(caches[1], 3)
    mask = torch.cat([parts[0][2], torch.nn.functional.pad(parts[1][2], (0, 2))])
    assert not cache.layers[0].prompt_keys[3, ..., 3:].any()  # the shorter part padded with zeros
    cache.fork(n, mask)
    # the reference's view of each prompt: its real positions' keys and values
    prompts = [(k[i][:, m[i]], v[i][:, m[i]]) for k, v, m in parts for i in range(len(m))]
    # (prompt, tokens written) a row
    rows = [(p, []) for p in range(len(prompts)) for _ in range(n)]
    layer = cache.layers[0]
    for step in range(3):  # (3 steps: the new tokens' part grows past its reserve of 1)
        new_keys, new_values = (torch.randn(len(rows), 2, 1, 8),
                                torch.randn(len(rows), 2, 1, 8).to(values_dtype))
        layer.update(new_keys.to(keys_dtype), new_values)
        for i, (_, written) in enumerate(rows):
            written.append((new_keys[i].to(keys_dtype), new_values[i]))
        query = torch.randn(len(rows), heads, 1, 8).to(keys_dtype)
        out = cache.attend(layer, query, scale)
        assert out.shape == (len(rows), 1, heads, 8) and out.dtype == values_dtype
        for i, (p, written) in enumerate(rows):
            keys = torch.cat([prompts[p][0].to(keys_dtype)] + [k for k, _ in written], 1).double()
            values = torch.cat([prompts[p][1]] + [v for _, v in written], 1).double()
            q = query[i, :, 0].double().view(2, 3, 8)  # (query head h reads key/value head h // 3)
            weights = torch.softmax(torch.einsum('hgd,hld->hgl', q, keys) * scale, -1)
            expected = torch.einsum('hgl,hld->hgd', weights, values).reshape(heads, 8)
            assert torch.allclose(out[i, 0].double(), expected, atol=tolerance,
                                  rtol=tolerance), (step, i)
        if step == 0:
            # every sample of prompts 1 and 2 and one of prompt 0 end: 2 of 4 prompts held
            keep = [i for i, (p, _) in enumerate(rows) if p in (0, 3) and i != 1]
            cache.batch_select_indices(torch.tensor(keep))
            rows = [rows[i] for i in keep]
            assert layer.prompt_keys.shape[0] == 2 and cache.slots.tolist() == [0, 2, 3, 4, 5]


def test_a_writer_layer_holds_its_prompts_once_and_grows_past_its_reserve():
    layer = WriterLayer(reserve=1)
    # (fp32 keys, as rotary leaves them)
    k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4, 8, dtype=torch.bfloat16)
    layer.update(k, v)  # the prefill: the prompts, keys held transposed
    assert torch.equal(layer.prompt_keys, k.transpose(-1, -2)) and layer.prompt_keys.is_contiguous()
    layer.update(k[:, :, :1], v[:, :, :1])
    keys, values = layer.update(k[:, :, 1:2], v[:, :, 1:2])  # past the reserve: a larger buffer
    assert (torch.equal(keys, k[:, :, :2]) and torch.equal(values, v[:, :, :2])
            and layer.get_seq_length() == 6)
    layer.select_samples(torch.tensor([1]))
    assert (torch.equal(layer.keys, k[1:, :, :2])
            and torch.equal(layer.prompt_keys[1], k[1].transpose(-1, -2)))


def test_bf16_weights_write_with_the_shared_prompt_cache(tiny_generator):
    """A model whose weights are bf16 (a hub checkpoint stored so), run without autocast: the
    cache holds the model's own dtype; greedy, it writes what DynamicCache writes."""
    gen = tiny_generator('llama')
    gen.model.to(torch.bfloat16)
    writer = QueryWriter(gen, batch_size=2)
    written = [QueryWriter(gen, batch_size=2, preallocated_cache=pre)
               .write(PASSAGES, 2, max_new_tokens=8) for pre in (True, False)]
    assert written[0] == written[1]
    ids = writer.prompt_ids(PASSAGES[:1])
    with gen.inference():
        cache, _, _ = writer.prefill(ids, 2)
    assert (cache.layers[0].prompt_keys.dtype == cache.layers[0].prompt_values.dtype
            == torch.bfloat16)


def test_weights_are_unmarked_after_a_write_and_after_a_failed_one(tiny_generator):
    from pyterrier_selfsup.models.writing import casts_kept
    gen = tiny_generator('llama')
    gen.precision = 'bf16'
    QueryWriter(gen).write(PASSAGES[:1], 1, max_new_tokens=2)
    assert not any(p.requires_grad for p in gen.model.parameters())
    with pytest.raises(RuntimeError, match='inside'):
        with casts_kept(gen.model):
            assert all(p.requires_grad for p in gen.model.parameters())
            raise RuntimeError('inside')
    assert not any(p.requires_grad for p in gen.model.parameters())


def test_each_weight_is_cast_once_a_write_even_under_inference_mode(tiny_generator):
    """Under ``Generator.inference`` (inference mode and bf16 autocast) a frozen weight was cast
    again at every forward; within ``casts_kept`` it is cast once for the region."""
    from torch.profiler import profile

    from pyterrier_selfsup.models.writing import casts_kept
    gen = tiny_generator('llama')
    gen.precision = 'bf16'
    x = torch.tensor([[5, 6, 7]])
    shape = list(gen.model.model.layers[0].mlp.down_proj.weight.shape)

    def casts(kept: bool) -> int:
        with (gen.inference(), (casts_kept(gen.model) if kept else contextlib.nullcontext()),
              profile(record_shapes=True) as prof):
            for _ in range(3):
                gen.model(input_ids=x)
        return sum(e.count for e in prof.key_averages(group_by_input_shape=True)
                   if e.key == 'aten::copy_' and e.input_shapes[:1] == [shape])
    assert casts(kept=False) == 3 * 2  # (two layers' down projections, at each of three forwards)
    assert casts(kept=True) == 2


def test_the_writer_samples_from_the_top_k_that_generate_falls_back_on():
    from transformers import GenerationConfig

    from pyterrier_selfsup.models.writing import GENERATE_TOP_K
    assert GenerationConfig._get_default_generation_params()['top_k'] == GENERATE_TOP_K


def test_nucleus_sampling_draws_from_the_renormalised_top():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).repeat(20000, 1)
    drawn = next_tokens(logits, True, 1.0, 0.8, torch.Generator().manual_seed(0))
    counts = np.bincount(drawn.numpy(), minlength=4) / len(drawn)
    # the smallest set whose mass reaches 0.8 is {0, 1}: renormalised 0.625 / 0.375, never 2 or 3
    assert counts[2] == counts[3] == 0
    assert counts[:2] == pytest.approx([0.625, 0.375], abs=0.015)
    # top k (as generate applies it before the nucleus): the top 3 renormalised, then their nucleus
    top3 = next_tokens(logits, True, 1.0, 0.9, torch.Generator().manual_seed(0), top_k=3)
    counts = np.bincount(top3.numpy(), minlength=4) / len(top3)
    # top 3 renormalised: .526, .316, .158; nucleus 0.9 keeps all three (.842 < .9)
    assert (counts[3] == 0
            and counts[:3] == pytest.approx([0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95], abs=0.015))
    hot = next_tokens(logits, True, 2.0, 1.0, torch.Generator().manual_seed(0))
    expected = torch.softmax(logits[0] / 2.0, -1).numpy()
    assert np.bincount(hot.numpy(), minlength=4) / len(hot) == pytest.approx(expected, abs=0.015)


def test_a_stopped_write_resumes_from_its_checkpoint_to_the_same_queries(tiny_generator,
                                                                         tmp_path, monkeypatch,
                                                                         caplog):
    writer = QueryWriter(tiny_generator('llama'), batch_size=1)

    def sampled(seed=5):
        return dict(do_sample=True, top_p=0.9, generator=torch.Generator().manual_seed(seed))
    whole = writer.write(PASSAGES, 2, **sampled())
    checkpoint, calls, sample = tmp_path / 'writing.pt', [], QueryWriter._sample

    def stopped_at_the_third(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return sample(self, *args, **kwargs)
    monkeypatch.setattr(QueryWriter, '_sample', stopped_at_the_third)
    with pytest.raises(KeyboardInterrupt):
        writer.write(PASSAGES, 2, checkpoint=checkpoint, **sampled())
    calls.append('resumed')
    assert writer.write(PASSAGES, 2, checkpoint=checkpoint, **sampled()) == whole
    assert calls.count(1) == 4  # two batches, then only the one left
    # a write whose generator has drawn since it was seeded does not take the finished
    # checkpoint of this one, nor does a write with another seed
    drawn = sampled()
    torch.rand(1, generator=drawn['generator'])
    assert writer.write(PASSAGES, 2, checkpoint=checkpoint, **drawn) != whole
    assert calls.count(1) == 7
    other = writer.write(PASSAGES, 2, checkpoint=checkpoint, **sampled(6))
    assert calls.count(1) == 10 and other != whole
    assert 'holds queries of another write' in caplog.text
    with pytest.raises(ValueError, match='generator of its own'):
        writer.write(PASSAGES, 2, do_sample=True, checkpoint=checkpoint)


@pytest.mark.slow
def test_greedy_writing_agrees_with_generate_and_stops_at_the_first_line(cache_dir):
    """Real SmolLM2, the project's former completion prompt: the first line that transformers'
    generate writes (32 tokens, cut afterwards) is the query the writer stops at."""
    gen = load_generator('smollm2', cache_dir=cache_dir, precision='fp32')
    assert gen.prompt == PASSAGE_QUESTION  # (the scorer's prompt is the plain writer's)
    docs = [d['text'] for _, d in zip(range(2), Collection('classic/adi').corpus_iter())]
    writer = QueryWriter(gen, style='plain', max_passage_length=gen.max_passage_length)
    written = [qs[0] for qs in writer.write(docs, 1)]
    assert written == gen.generate(docs)
    assert all(q and '\n' not in q for q in written)
    # the chat template: the model's own turn, stopped at its end or at the end of a line
    chat = QueryWriter(gen, style='chat')
    assert chat.style == 'chat' and '<|im_start|>assistant' in chat.prompt('a passage')
    assert all(q and '\n' not in q for qs in chat.write(docs, 2, do_sample=True) for q in qs)


def test_the_prompt_shows_example_queries_and_passages_with_their_queries(tiny_generator):
    from pyterrier_selfsup.models.prompts import EXAMPLES_INTRO, PAIR_PASSAGE_CHARS
    gen = tiny_generator('llama')
    pairs = [('rockets   and their\nflight.', 'how do rockets fly'), ('word ' * 200, 'words')]
    plain = QueryWriter(gen, style='plain', pairs=pairs)  # (no chat template: InPars' prompt)
    shot = (PASSAGE_QUESTION.replace('{passage}', 'rockets and their flight.')
            + ' how do rockets fly\n\n')
    assert plain.prompt('the passage').startswith(shot)
    assert plain.prompt('the passage').endswith(
        PASSAGE_QUESTION.replace('{passage}', 'the passage'))
    assert len(plain.pairs[1][0]) <= PAIR_PASSAGE_CHARS < len(pairs[1][0])  # cut at a word's end
    gen.tokenizer.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}|{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}")
    chat = QueryWriter(gen, style='chat', examples=['a query'], pairs=pairs[:1])
    turns = chat.prompt('the passage').split('|')
    assert [t.split('>')[0] for t in turns] == ['<system', '<user', '<assistant', '<user',
                                               '<assistant']
    assert turns[1].endswith('Passage: rockets and their flight.')
    assert turns[2] == '<assistant>how do rockets fly'
    assert turns[3].startswith(f'<user>{EXAMPLES_INTRO}\n- a query\n')
    assert turns[3].endswith('Passage: the passage')
    # what the queries depend on keys them
    assert chat.config()['pairs'] == [['rockets and their flight.', 'how do rockets fly']]
    assert QueryWriter(gen, style='chat').config()['pairs'] == []


def test_example_pairs_are_another_collections_judged_topics():
    from pyterrier_selfsup.data.queries.written import example_pairs
    cranfield = Collection('cranfield')
    pairs = example_pairs('cranfield', seed=0)
    assert len(pairs) == 3 and pairs == example_pairs('cranfield', seed=0) != example_pairs(
        'cranfield', seed=1)
    topics = cranfield.topics().set_index('query')['qid']
    qrels = cranfield.qrels()
    for passage, query in pairs:
        judged = qrels[(qrels['qid'] == topics[query]) & (qrels['label'] > 0)]['docno']
        assert passage in cranfield.texts(sorted(judged))


def test_a_change_to_the_writers_prompts_raises_the_writer_version():
    """The written queries' and the models' keys name the writer by WRITER_VERSION (the data
    layer cannot read the prompts): a prompt changed without raising it would find the models
    trained on the former prompt's queries."""
    import hashlib
    import json

    from pyterrier_selfsup.data.queries.source import WRITER_VERSION
    from pyterrier_selfsup.models import prompts
    text = json.dumps([prompts.PASSAGE_QUESTION, prompts.SYSTEM_PROMPT, prompts.INSTRUCTION,
                       prompts.EXAMPLES_INTRO, prompts.PAIR_PASSAGE_CHARS])
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    assert {2: '08a9175e7cbd'}.get(WRITER_VERSION) == digest, \
        "the writer's prompts changed: raise WRITER_VERSION and record the new digest here"


def test_a_doc2query_model_writes_sampled_queries_reading_the_passage_alone(tiny_generator,
                                                                             tmp_path, monkeypatch):
    """GPL's kind of writer (a seq2seq model, passage in, query out), as a tiny random T5: the
    pipelines' sampled source writes through it, the same queries from the same seed, and a
    stopped write resumes to them."""
    from pyterrier_selfsup import Collection
    from pyterrier_selfsup.context import RunContext
    from pyterrier_selfsup.data.queries.source import QuerySource
    from pyterrier_selfsup.harness.methods import source_topics
    from pyterrier_selfsup.models.doc2query import Doc2QueryWriter
    gen = tiny_generator('t5', max_passage_length=32)
    writer = gen.writer()
    assert isinstance(writer, Doc2QueryWriter) and writer.config()['kind'] == 'doc2query'
    with pytest.raises(ValueError, match='reads the passage alone'):
        gen.writer(style='chat')
    coll = Collection('classic/adi')
    topics = source_topics(coll, QuerySource('sampled', 12),
                           generator=gen, run=RunContext(cache_dir=tmp_path / 'a'))
    again = source_topics(coll, QuerySource('sampled', 12),
                          generator=gen, run=RunContext(cache_dir=tmp_path / 'b'))
    assert 0 < len(topics) <= 12 and topics.equals(again)
    docnos = {d['docno'] for d in coll.corpus_iter()}
    assert set(topics['source_docno']) <= docnos
    # three samples a passage, drawn per batch from the writer's stream: a write stopped after
    # its first batch resumes to what one never stopped writes
    from pyterrier_selfsup.models import writer_checkpoint
    passages = coll.texts(sorted(docnos)[:5])
    writer.batch_size = 2
    whole = writer.write(passages, 3, do_sample=True, top_p=0.9,
                         generator=torch.Generator().manual_seed(1))
    assert all(len(q) == 3 for q in whole)
    checkpoint, save = tmp_path / 'writing.pt', writer_checkpoint.save_checkpoint

    def stopped(*args, **kwargs):
        save(*args, **kwargs)
        raise KeyboardInterrupt
    monkeypatch.setattr(writer_checkpoint, 'save_checkpoint', stopped)
    with pytest.raises(KeyboardInterrupt):
        writer.write(passages, 3, do_sample=True, top_p=0.9,
                     generator=torch.Generator().manual_seed(1), checkpoint=checkpoint)
    monkeypatch.setattr(writer_checkpoint, 'save_checkpoint', save)
    assert writer.write(passages, 3, do_sample=True, top_p=0.9,
                        generator=torch.Generator().manual_seed(1),
                        checkpoint=checkpoint) == whole
