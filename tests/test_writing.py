"""Writing queries (issue 30): one prefill a passage shared by its samples gives what prefilling
each sample alone gives; greedy writing agrees with transformers' generate; the nucleus
sampler draws from the distribution it should; a query ends at its first line."""
import numpy as np
import pytest
import torch

from pyterrier_selfsup import Collection
from pyterrier_selfsup.models.generator import CAUSAL_PROMPT, load_generator
from pyterrier_selfsup.models.writing import PLAIN_PROMPT, QueryWriter, WriterLayer

PASSAGES = ['automatic indexing of scientific documents by their citations', 'the retrieval of legal text',
            'a thesaurus for information retrieval built from co-occurrence statistics']


def test_shared_prefill_writes_what_separate_prefills_write(tiny_generator):
    writer = QueryWriter(tiny_generator('llama'), batch_size=2)
    assert writer.style == 'plain'  # (the tiny model's tokenizer has no chat template)
    greedy = writer.write(PASSAGES, 3)
    assert greedy == writer.write(PASSAGES, 3, shared=False)
    assert all(len(set(qs)) == 1 for qs in greedy)  # greedy: n copies of one query
    # sampling: the same random stream draws the same tokens from the same distributions, row for row
    sampled = writer.write(PASSAGES, 4, do_sample=True, top_p=0.9, generator=torch.Generator().manual_seed(3))
    alone = writer.write(PASSAGES, 4, do_sample=True, top_p=0.9, shared=False,
                         generator=torch.Generator().manual_seed(3))
    assert sampled == alone
    assert len({q for qs in sampled for q in qs}) > 6  # and they are samples, not copies
    other = writer.write(PASSAGES, 4, do_sample=True, top_p=0.9, generator=torch.Generator().manual_seed(4))
    assert other != sampled


@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_the_preallocated_cache_writes_what_the_dynamic_cache_writes(tiny_generator, precision):
    """The writer's own key/value cache (room reserved, held in the dtype attention reads) against
    transformers' DynamicCache: the same queries, sampled and greedy, with rows leaving the batch
    as their queries end (bf16: the keys the rotary embedding leaves in fp32 are cast on the way in,
    where attention cast them before)."""
    gen = tiny_generator('llama')
    gen.precision = precision
    written = {}
    for preallocated in (True, False):
        writer = QueryWriter(gen, batch_size=2, preallocated_cache=preallocated)
        written[preallocated] = (writer.write(PASSAGES, 4, do_sample=True, top_p=0.9, max_new_tokens=12,
                                              generator=torch.Generator().manual_seed(5)), writer.write(PASSAGES, 2))
    assert written[True] == written[False]
    sampled = [q for qs in written[True][0] for q in qs]
    assert len({len(writer.tokenizer(q)['input_ids']) for q in sampled}) > 2  # queries ended at different steps


def test_a_writer_layer_grows_past_its_reserve_and_keeps_what_it_holds():
    layer = WriterLayer(reserve=1)
    k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4, 8, dtype=torch.bfloat16)  # (fp32 keys, as rotary leaves them)
    layer.update(k, v)
    layer.update(k[:, :, :1], v[:, :, :1])
    keys, values = layer.update(k[:, :, :2], v[:, :, :2])  # past the reserve: a larger buffer
    expected = torch.cat([k, k[:, :, :1], k[:, :, :2]], -2).to(torch.bfloat16)  # held in the values' dtype
    assert keys.dtype == torch.bfloat16 and torch.equal(keys, expected) and layer.get_seq_length() == 7
    assert torch.equal(values, torch.cat([v, v[:, :, :1], v[:, :, :2]], -2))
    layer.batch_repeat_interleave(2)
    layer.batch_select_indices(torch.tensor([1, 2]))
    assert torch.equal(layer.keys, expected.repeat_interleave(2, 0)[[1, 2]])


def test_bf16_weights_write_at_fp32_precision(tiny_generator):
    """A model whose weights are bf16 (a hub checkpoint stored so), run without autocast: the
    cache holds the model's own dtype, and writes what DynamicCache writes."""
    gen = tiny_generator('llama')
    gen.model.to(torch.bfloat16)
    written = [QueryWriter(gen, batch_size=2, preallocated_cache=pre).write(
        PASSAGES, 2, do_sample=True, max_new_tokens=8, generator=torch.Generator().manual_seed(1))
        for pre in (True, False)]
    assert written[0] == written[1]


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


def test_the_writer_samples_from_the_top_k_that_generate_falls_back_on():
    from transformers import GenerationConfig

    from pyterrier_selfsup.models.writing import GENERATE_TOP_K
    assert GenerationConfig._get_default_generation_params()['top_k'] == GENERATE_TOP_K


def test_nucleus_sampling_draws_from_the_renormalised_top():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).repeat(20000, 1)
    drawn = QueryWriter._next(logits, True, 1.0, 0.8, torch.Generator().manual_seed(0))
    counts = np.bincount(drawn.numpy(), minlength=4) / len(drawn)
    # the smallest set whose mass reaches 0.8 is {0, 1}: renormalised 0.625 / 0.375, never 2 or 3
    assert counts[2] == counts[3] == 0
    assert counts[:2] == pytest.approx([0.625, 0.375], abs=0.015)
    # top k (as generate applies it before the nucleus): the top 3 renormalised, then their nucleus
    top3 = QueryWriter._next(logits, True, 1.0, 0.9, torch.Generator().manual_seed(0), top_k=3)
    counts = np.bincount(top3.numpy(), minlength=4) / len(top3)
    # top 3 renormalised: .526, .316, .158; nucleus 0.9 keeps all three (.842 < .9)
    assert counts[3] == 0 and counts[:3] == pytest.approx([0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95], abs=0.015)
    hot = QueryWriter._next(logits, True, 2.0, 1.0, torch.Generator().manual_seed(0))
    expected = torch.softmax(logits[0] / 2.0, -1).numpy()
    assert np.bincount(hot.numpy(), minlength=4) / len(hot) == pytest.approx(expected, abs=0.015)


def test_greedy_writing_agrees_with_generate_and_stops_at_the_first_line(cache_dir):
    """Real SmolLM2, the project's former completion prompt: the first line that transformers'
    generate writes (32 tokens, cut afterwards) is the query the writer stops at."""
    gen = load_generator('smollm2', cache_dir=cache_dir, precision='fp32')
    assert PLAIN_PROMPT == CAUSAL_PROMPT
    docs = [d['text'] for _, d in zip(range(4), Collection('classic/adi').corpus_iter())]
    writer = QueryWriter(gen, style='plain', max_passage_length=gen.max_passage_length)
    written = [qs[0] for qs in writer.write(docs, 1)]
    assert written == gen.generate(docs)
    assert all(q and '\n' not in q for q in written)
    # the chat template: the model's own turn, stopped at its end or at the end of a line
    chat = QueryWriter(gen, style='chat')
    assert chat.style == 'chat' and '<|im_start|>assistant' in chat.prompt('a passage')
    assert all(q and '\n' not in q for qs in chat.write(docs[:2], 2, do_sample=True) for q in qs)
