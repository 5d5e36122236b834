import math

import numpy as np
import pandas as pd
import pytest
import torch
from huggingface_hub import snapshot_download
from sentence_transformers import SentenceTransformer

from pyterrier_selfsup import MINILM, Collection, DenseRetriever, DualEncoder, flex_index
from pyterrier_selfsup.models import _base
from tests.helpers import OperationCount

TEXTS = ['Dense retrieval with a dual encoder.', 'BM25 is a strong baseline', 'short',
         'Cells respond to the rapamycin treatment by slowing their growth rate.' * 3]


@pytest.fixture(scope='module')
def minilm():
    return DualEncoder.from_pretrained(MINILM, precision='fp32', device='cpu')


@pytest.mark.parametrize('source', ['hub name', 'local directory'])
def test_sentence_transformers_model_reproduced(source):
    name = MINILM if source == 'hub name' else snapshot_download(MINILM)
    ours = DualEncoder.from_pretrained(name, precision='fp32', device='cpu')
    assert (ours.config()['pooling'] == 'mean' and ours.config()['normalize'] and
            ours.max_length == 256)
    reference = SentenceTransformer(name, device='cpu').encode(TEXTS, normalize_embeddings=True)
    np.testing.assert_allclose(ours.encode_docs(TEXTS), reference, atol=1e-5)
    np.testing.assert_allclose(ours.encode_queries(TEXTS), reference, atol=1e-5)


@pytest.mark.parametrize('slice_size', [1024, 3])
def test_fast_path_equals_gradient_path(minilm, monkeypatch, slice_size):
    # length-sorted, dynamically padded batches come back in input order, equal to one batch;
    # with slices of 3 texts, all but the first are tokenized on threads
    monkeypatch.setattr(_base, 'TOKENIZE_SLICE', slice_size)
    fast = minilm.encode_docs(TEXTS * 5, batch_size=1)
    batches = sum(1 for _ in minilm._batches(TEXTS * 5, 'passage', 1))
    assert batches == (2 if slice_size > 20 else 7)
    with torch.no_grad():
        slow = minilm.encode(TEXTS * 5, 'passage').numpy()
    np.testing.assert_allclose(fast, slow, atol=1e-5)


def test_padding_in_numpy_matches_the_tokenizer(minilm):
    ids = minilm.tokenize(TEXTS, 'passage', padding=False)['input_ids']
    for side in ('right', 'left'):
        minilm.tokenizer.padding_side = side
        try:
            expected = minilm.tokenizer.pad({'input_ids': ids}, return_tensors='pt')
        finally:
            minilm.tokenizer.padding_side = 'right'
        input_ids, mask = _base.pad(ids, minilm.tokenizer.pad_token_id, left=side == 'left')
        assert torch.equal(input_ids, expected['input_ids'])
        assert torch.equal(mask, expected['attention_mask'])
    assert [(s.start, s.stop) for s in _base.budget_batches(np.array([9, 4, 4, 2, 2, 2, 1]), 8)] \
        == [(0, 1), (1, 3), (3, 7)]


# operations an inference batch of MiniLM dispatches, as counted here (in bf16, 24 casts of
# activations more): the weights cast again at every forward and the pooler computed for nothing
# made 273 in bf16 and 174 in fp32
OPERATIONS_A_BATCH = {'fp32': 171, 'bf16': 195}


@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_an_inference_batch_dispatches_a_fixed_number_of_operations(precision):
    encoder = DualEncoder.from_pretrained(MINILM, precision=precision, device='cpu',
                                          max_length=8, batch_size=2)
    texts = [f'passage {i} is longer than eight tokens, every one of them' for i in range(12)]

    # 1 batch against 6 (2 texts a batch): what one more batch dispatches
    per_batch = (OperationCount.of(lambda: encoder.encode_docs(texts))
                 - OperationCount.of(lambda: encoder.encode_docs(texts[:2]))) / 5
    assert per_batch == OPERATIONS_A_BATCH[precision]


def test_plain_encoder_defaults_to_thesis_settings(tiny_dir):
    enc = DualEncoder.from_pretrained(str(tiny_dir), device='cpu', precision='fp32')
    assert enc.config() | {'name': None} == {'name': None, 'pooling': 'cls', 'dim': None,
                                             'normalize': False, 'max_length': 128,
                                             'query_max_length': 128, 'temperature': 1.0}
    batch = enc.tokenize(TEXTS, 'passage')
    with torch.no_grad():
        cls = enc.model.encoder(**batch).last_hidden_state[:, 0]
    np.testing.assert_allclose(enc.encode_docs(TEXTS), cls.numpy(), atol=1e-5)


def test_projections_start_equal_and_preserve_dot_products(tiny_dir):
    plain = DualEncoder.from_pretrained(str(tiny_dir), device='cpu', precision='fp32')
    projected = DualEncoder.from_pretrained(str(tiny_dir), dim=64, device='cpu', precision='fp32')
    assert torch.equal(projected.model.query_proj.weight, projected.model.passage_proj.weight)
    q, d = projected.encode_queries(TEXTS), projected.encode_docs(TEXTS)
    assert q.shape == (4, 64)
    np.testing.assert_allclose(q @ d.T, plain.encode_queries(TEXTS) @ plain.encode_docs(TEXTS).T,
                               rtol=1e-4, atol=1e-4)


def test_save_load_round_trip(tiny_dir, tmp_path):
    enc = DualEncoder.from_pretrained(str(tiny_dir), dim=16, pooling='mean', device='cpu',
                                      precision='fp32')
    with torch.no_grad():  # make the projections differ, as training would
        enc.model.query_proj.weight.add_(0.1)
    enc.save_pretrained(tmp_path / 'saved')
    loaded = DualEncoder.from_pretrained(str(tmp_path / 'saved'), device='cpu', precision='fp32')
    assert loaded.config() == enc.config()
    assert loaded.fingerprint() == enc.fingerprint()
    for side in ('query', 'passage'):
        np.testing.assert_array_equal(loaded._encode_fast(TEXTS, side, 2),
                                      enc._encode_fast(TEXTS, side, 2))


def test_awkward_texts(minilm):
    texts = ['', '   \n\t', float('nan'), None, 'x ' * 50_000, 'ordinary text']
    vecs = minilm.encode_docs(texts)
    assert vecs.shape == (6, 384) and np.isfinite(vecs).all()
    # NaN/None are empty text
    np.testing.assert_allclose(vecs[0], minilm.encode_docs([''])[0], atol=1e-6)
    np.testing.assert_allclose(vecs[2], vecs[0], atol=1e-6)
    np.testing.assert_allclose(vecs[3], vecs[0], atol=1e-6)
    long_ids = minilm.tokenize(['x ' * 50_000], 'passage', padding=False)['input_ids'][0]
    assert len(long_ids) == 256  # truncated, not crashed
    assert math.isclose(float(np.linalg.norm(vecs[4])), 1.0, rel_tol=1e-5)


def test_flex_index_top1_is_the_planted_document(minilm, cache_dir):
    coll = Collection('classic/adi')
    retriever = DenseRetriever(minilm, flex_index(coll, minilm, cache_dir=cache_dir))
    planted = {d['docno']: d['text'] for d in coll.corpus_iter()}
    topics = pd.DataFrame({'qid': list(planted)[:10], 'query': list(planted.values())[:10]})
    top1 = retriever(topics).query('rank == 0')
    assert (top1['qid'] == top1['docno']).all()
    assert (top1['score'] > 0.99).all()


def test_duplicate_docnos_are_indexed_once(tmp_path, caplog):
    import pyterrier_selfsup
    (tmp_path / 'DUP.ALL').write_text('.I 1\n.W\nfirst\n.I 2\n.W\nsecond\n.I 1\n.W\nfirst again\n')
    (tmp_path / 'DUP.QRY').write_text('.I 1\n.W\nfirst\n')
    (tmp_path / 'DUP.REL').write_text('1 1\n')
    pyterrier_selfsup.register_classic(tmp_path)
    docs = list(Collection('classic/dup').corpus_iter())
    assert docs == [{'docno': '1', 'text': 'first'}, {'docno': '2', 'text': 'second'}]
    assert 'skipped 1 documents' in caplog.text
