import numpy as np
import torch

from pyterrier_selfsup.models.reatt import retrieval_attention
from pyterrier_selfsup.models.reatt_t5 import ReAttT5
from tests.helpers import DOCS, QUERIES


def reatt_t5(tiny_generator_dir, layer=1, **kwargs):
    torch.manual_seed(0)
    out = ReAttT5.from_pretrained(str(tiny_generator_dir['t5']), retrieval_layer=layer,
                                  device='cpu', precision='fp32', **kwargs)
    out.model.eval()
    return out


def test_with_no_bi_encoder_layer_the_pair_encoding_is_t5s_own_encoding_of_the_concatenation(
        tiny_generator_dir):
    m = reatt_t5(tiny_generator_dir, layer=0)
    with torch.no_grad():
        joint, mask, _ = m.encode_pairs([QUERIES[0]], [DOCS[0]])
        ids = m.tokenizer([QUERIES[0]])['input_ids'][0] + m.tokenizer([DOCS[0]])['input_ids'][0]
        own = m.model.encoder(input_ids=torch.tensor([ids])).last_hidden_state
    assert mask.sum().item() == len(ids)
    torch.testing.assert_close(joint[0, :len(ids)], own[0], rtol=1e-4,
                               atol=1e-4 * own.abs().max().item())


def test_the_first_b_layers_keep_query_and_document_apart(tiny_generator_dir):
    m = reatt_t5(tiny_generator_dir, layer=1)
    n_q = len(m.tokenizer([QUERIES[0]])['input_ids'][0])
    with torch.no_grad():
        joint_a, _, bi_a = m.encode_pairs([QUERIES[0]], [DOCS[0]])
        joint_b, _, bi_b = m.encode_pairs([QUERIES[0]], [DOCS[2]])
    # changing the document leaves the query's layer-B states as they were ...
    torch.testing.assert_close(bi_a[0, :n_q], bi_b[0, :n_q])
    # ... while the cross-encoder above them reads it
    assert (joint_a[0, :n_q] - joint_b[0, :n_q]).abs().max() > 1e-3


def test_the_retrievers_scores_are_the_readers_own_layer_b_attention(tiny_generator_dir):
    m = reatt_t5(tiny_generator_dir, layer=1)
    att = retrieval_attention(m.model.encoder, 1)
    seen = {}
    hooks = [att.query.register_forward_hook(lambda mod, i, o: seen.setdefault('q', o)),
             att.key.register_forward_hook(lambda mod, i, o: seen.setdefault('k', o))]
    n_q = len(m.tokenizer([QUERIES[1]])['input_ids'][0])
    n_d = len(m.tokenizer([DOCS[3]])['input_ids'][0])
    try:
        with torch.no_grad():
            m.encode_pairs([QUERIES[1]], [DOCS[3]])  # the joint pass through layer B
    finally:
        for h in hooks:
            h.remove()
    q = seen['q'][0, :n_q].view(n_q, att.heads, att.head_dim)
    k = seen['k'][0, n_q:n_q + n_d].view(n_d, att.heads, att.head_dim)
    expected = torch.einsum('qhe,dhe->hqd', q, k).max(2).values.mean(1).numpy()
    got = m.retriever.score_texts([QUERIES[1]], [DOCS[3]], per_head=True)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6 * np.abs(expected).max())


def test_reading_gives_the_likelihood_with_gradients_and_the_target_attention(tiny_generator_dir,
                                                                              tmp_path):
    m = reatt_t5(tiny_generator_dir, layer=1)
    docs = [DOCS[:3], [DOCS[3], DOCS[1], DOCS[0]]]
    logp, target = m.read(QUERIES, docs, ['retrieval', 'indexing'])
    assert logp.shape == (2,) and (logp < 0).all() and target.shape == (2, 3)
    torch.testing.assert_close(target.sum(1), torch.ones(2))
    (-logp.sum()).backward()
    bi_encoder = m.model.encoder.block[0].layer[0].SelfAttention.q.weight
    cross_encoder = m.model.encoder.block[1].layer[1].DenseReluDense.wi.weight
    assert bi_encoder.grad.abs().max() > 0 and cross_encoder.grad.abs().max() > 0
    # FiD: the documents' order only permutes the target attention
    with torch.no_grad():
        _, flipped = m.read(QUERIES[:1], [docs[0][::-1]], ['retrieval'])
    torch.testing.assert_close(flipped[0], target[0].flip(0), rtol=1e-4, atol=1e-5)
    m.retriever.model.select_head(1)
    m.save_pretrained(tmp_path / 'saved')
    import json
    config = json.loads((tmp_path / 'saved' / 'config.json').read_text())
    assert config['retrieval_layer'] == 1 and config['retrieval_head'] == 1
    again = ReAttT5.from_pretrained(str(tmp_path / 'saved'), device='cpu', precision='fp32')
    assert again.retrieval_layer == 1 and again.retriever.model.retrieval_head == 1
    np.testing.assert_allclose(again.retriever.score_texts(QUERIES, DOCS[:2]),
                               m.retriever.score_texts(QUERIES, DOCS[:2]), rtol=1e-6)
