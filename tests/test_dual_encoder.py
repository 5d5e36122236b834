import math

import numpy as np
import pandas as pd
import pytest
import torch
from huggingface_hub import snapshot_download
from sentence_transformers import SentenceTransformer

from pyterrier_selfsup import MINILM, Collection, DenseRetriever, DualEncoder, flex_index
from pyterrier_selfsup.models import batching
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
    monkeypatch.setattr(batching, 'TOKENIZE_SLICE', slice_size)
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
        input_ids, mask = batching.pad(ids, minilm.tokenizer.pad_token_id, left=side == 'left')
        assert torch.equal(input_ids, expected['input_ids'])
        assert torch.equal(mask, expected['attention_mask'])
    cut = batching.budget_batches(np.array([9, 4, 4, 2, 2, 2, 1]), 8)
    assert [(s.start, s.stop) for s in cut] == [(0, 1), (1, 3), (3, 7)]


# operations an inference batch of MiniLM dispatches, as counted here (in bf16, 24 casts of
# activations more): the weights cast again at every forward and the pooler computed for nothing
# made 273 in bf16 and 174 in fp32; the library's mean pooling, which expands the mask, 2 more
# than the package's own did
OPERATIONS_A_BATCH = {'fp32': 173, 'bf16': 197}


@pytest.mark.parametrize('precision', ['fp32', 'bf16'])
def test_an_inference_batch_dispatches_a_fixed_number_of_operations(precision):
    encoder = DualEncoder.from_pretrained(MINILM, precision=precision, device='cpu',
                                          max_length=8, batch_size=2)
    texts = [f'passage {i} is longer than eight tokens, every one of them' for i in range(12)]

    # 1 batch against 6 (2 texts a batch): what one more batch dispatches
    per_batch = (OperationCount.of(lambda: encoder.encode_docs(texts))
                 - OperationCount.of(lambda: encoder.encode_docs(texts[:2]))) / 5
    assert per_batch == OPERATIONS_A_BATCH[precision]


def long_texts():
    """Real long texts (CISI's abstracts, three to a text: about 3,000 characters, where 2,048
    are cut before tokenization), and awkward ones: words of 150 letters (one [UNK] each, so
    the cut text falls short of 256 ids), and texts without a space to cut at."""
    docs = [d['text'] for d, _ in zip(Collection('classic/cisi').corpus_iter(), range(240))]
    return ([' '.join(docs[i:i + 3]) for i in range(0, len(docs), 3)]
            + [('b' * 150 + ' ') * 30, 'x' * 5000 + ' tail', '漢字' * 2000 + ' end',
               '1,2,3,4 ' * 600, 'a  b   ' * 900])


def counting(tokenize, counts):
    def wrapped(texts, *rest):
        counts.append(len(texts))
        return tokenize(texts, *rest)
    return wrapped


def test_long_texts_cut_before_tokenizing_give_the_ids_of_the_whole_text(minilm):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from pyterrier_selfsup.models import _token_ids
    texts = long_texts()
    cut = [_token_ids.cut_at_word(t, 256 * _token_ids.CHARS_PER_TOKEN) for t in texts]
    # 69 of the 80 CISI texts, and the [UNK] words, the digits and the runs of spaces
    assert sum(c is not None for c in cut) == 72
    whole = minilm.tokenizer(texts, truncation=True, max_length=256)['input_ids']
    assert [list(ids) for ids in minilm.token_ids(texts, 'passage')] == whole

    # a byte-level BPE (GPT-2's pre-tokenizer), trained here on the same texts
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    bpe.enable_truncation(256)
    encodings = []
    ids = _token_ids.tokenize_cut(counting(lambda t: [e.ids for e in bpe.encode_batch(t)],
                                           encodings), texts, 256)
    assert ids == [e.ids for e in bpe.encode_batch(texts)]
    assert encodings == [len(texts), 1]  # the [UNK] words' text, tokenized whole after its cut
    assert _token_ids.splits_at_spaces(bpe)
    for split in (True, False):  # SentencePiece's metaspace: cut only where it splits words
        bpe.pre_tokenizer = pre_tokenizers.Metaspace(split=split)
        assert _token_ids.splits_at_spaces(bpe) == split
    # never where the normalizer rewrites the space, or an added token holds one
    from tokenizers import normalizers
    bpe.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    assert _token_ids.splits_at_spaces(bpe)
    bpe.normalizer = normalizers.Replace(' ', '_')
    assert not _token_ids.splits_at_spaces(bpe)
    bpe.normalizer = None
    bpe.add_tokens(['new york'])
    assert not _token_ids.splits_at_spaces(bpe)


def test_passage_token_ids_are_kept_between_encodings_when_asked(minilm, monkeypatch):
    import copy
    calls = []
    monkeypatch.setattr(minilm, '_token_ids', counting(minilm._token_ids, calls))
    texts = TEXTS * 3
    first = minilm.encode_docs(texts)
    minilm.keep_passage_token_ids()
    try:
        kept = minilm.encode_docs(texts)
        again = minilm.encode_docs(texts)
        copy.deepcopy(minilm).encode_docs(texts)  # (an asynchronous refresh's snapshot)
        minilm.encode_queries(texts)
        assert calls == [12, 12, 12] and len(minilm._kept_ids) == 4
        np.testing.assert_array_equal(kept, first)
        np.testing.assert_array_equal(again, first)
        minilm.keep_passage_token_ids(max_tokens=12)  # room for the first text's ids only
        minilm.encode_docs(TEXTS)
        assert len(minilm._kept_ids) == 1 and minilm._kept_ids.tokens == 11
    finally:
        minilm.keep_passage_token_ids(None)
    minilm.encode_docs(texts)
    assert calls[-1] == 12


def test_plain_encoder_defaults_to_thesis_settings(tiny_dir):
    enc = DualEncoder.from_pretrained(str(tiny_dir), device='cpu', precision='fp32')
    assert enc.config() | {'name': None} == {'name': None, 'pooling': 'cls', 'dim': None,
                                             'normalize': False, 'max_length': 128,
                                             'query_max_length': 128, 'temperature': 1.0,
                                             'tied': True,
                                             'prompts': {'query': '', 'passage': ''}}
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


# (projection, tied, normalised, prompts): each layout a trained dual encoder saves
LAYOUTS = [(None, True, True, False), (None, False, True, True), (16, True, False, False),
           (16, False, True, True)]
LOAD_WITHOUT_THE_PACKAGE = """
import sys
import numpy as np
from sentence_transformers import SentenceTransformer
out = {}
for i, path in enumerate(sys.argv[2:]):
    model = SentenceTransformer(path, device='cpu')
    out[f'{i}q'] = model.encode_query(['first text', 'word ' * 40])
    out[f'{i}d'] = model.encode_document(['a third text here', 'word ' * 60])
assert not any(name.startswith('pyterrier_selfsup') for name in sys.modules)
np.savez(sys.argv[1], **out)
"""


def test_sentence_transformers_loads_every_trained_dual_encoder_without_the_package(
        tiny_dir, tmp_path):
    """Each layout is saved as training leaves it (the query side moved), and loaded by
    sentence-transformers alone, in a process that never imports the package."""
    import subprocess
    import sys
    encoders, paths = [], []
    for i, (dim, tied, normalize, prompted) in enumerate(LAYOUTS):
        enc = DualEncoder.from_pretrained(str(tiny_dir), dim=dim, pooling='mean',
                                          normalize=normalize, device='cpu', precision='fp32',
                                          max_length=48, query_max_length=8)
        if prompted:
            enc.prompts = {'query': 'query: ', 'passage': 'passage: '}
        if not tied:  # a query tower trained against a frozen passage tower
            enc.model.freeze_passage_tower()
        with torch.no_grad():  # move the query side, as training would
            for p in enc.model.encoder.parameters():
                p.add_(0.01 * torch.randn_like(p))
            if dim is not None:
                enc.model.query_proj.weight.add_(0.1)
        encoders.append(enc)
        paths.append(str(enc.save_pretrained(tmp_path / f'out{i}')))
    subprocess.run([sys.executable, '-c', LOAD_WITHOUT_THE_PACKAGE, str(tmp_path / 'st.npz'),
                    *paths], check=True)
    loaded = np.load(tmp_path / 'st.npz')
    # (the long texts are cut to each side's length: 8 tokens a query, 48 a passage)
    queries, docs = ['first text', 'word ' * 40], ['a third text here', 'word ' * 60]
    for i, (enc, (dim, tied, _, prompted)) in enumerate(zip(encoders, LAYOUTS)):
        ours_q, ours_d = enc.encode_queries(queries), enc.encode_docs(docs)
        assert ours_q.shape[1] == (dim or enc.model.encoder.config.hidden_size)
        np.testing.assert_allclose(loaded[f'{i}q'], ours_q, atol=1e-5)
        np.testing.assert_allclose(loaded[f'{i}d'], ours_d, atol=1e-5)
        # where the two sides differ, a side exported for the other would fail above
        apart = np.abs(enc.encode_queries(docs[:1]) - ours_d[:1]).max()
        assert apart > 1e-3 if (dim or not tied or prompted) else apart < 1e-6
        assert [len(enc.token_ids(texts[1:], side)[0]) for texts, side
                in ((queries, 'query'), (docs, 'passage'))] == [8, 48]


def test_the_encoders_give_the_vectors_they_gave_at_af17d79():
    """A sample of scripts/encoder_equivalence.py's check, which compares every local
    collection's first 1,000 passages: ADI's first 16 passages and 8 queries, each of its three
    encoders (the published MiniLM; cls pooling with seeded projections and e5's prompts; the
    same untied, its passage side moved), against the vectors the package gave at af17d79."""
    import importlib.util
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location('encoder_equivalence',
                                                  root / 'scripts' / 'encoder_equivalence.py')
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    before = np.load(root / 'tests' / 'data' / 'af17d79_adi_vectors.npz')
    passages, queries = check.texts('classic/adi', 16)
    torch.manual_seed(0)
    for config, encoder in check.encoders():
        for side, vectors in (('passage', encoder.encode_docs(passages)),
                              ('query', encoder.encode_queries(queries[:8]))):
            np.testing.assert_allclose(vectors, before[f'{config}|classic~adi|{side}'],
                                       atol=1e-5, rtol=0)


def _tiny_sentence_transformer(tiny_dir, path, pooling: str, prompts: dict,
                               normalize: bool = True):
    """The tiny BERT saved in the sentence-transformers format, with ``pooling`` and
    ``prompts``."""
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
    transformer = Transformer(str(tiny_dir), max_seq_length=40)
    modules = [transformer, Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling)]
    SentenceTransformer(modules=modules + ([Normalize()] if normalize else []), device='cpu',
                        prompts=prompts).save(str(path))
    return SentenceTransformer(str(path), device='cpu')


# e5's two prompts; bge's query instruction alone; none; a default prompt, which the sides'
# own (empty) prompts override, as they do in sentence-transformers
PROMPTED = [('mean', {'query': 'query: ', 'document': 'passage: '}, ('query: ', 'passage: ')),
            ('cls', {'query': 'Represent this sentence for searching relevant passages: '},
             ('Represent this sentence for searching relevant passages: ', '')),
            ('lasttoken', {}, ('', '')),
            ('mean', {'classification': 'topic: '}, ('', ''))]


@pytest.mark.parametrize('pooling, prompts, sides', PROMPTED)
def test_a_sentence_transformers_start_encodes_as_it_does_with_its_prompts_and_exports_them(
        tiny_dir, tmp_path, pooling, prompts, sides):
    default = 'classification' if 'classification' in prompts else None
    st = _tiny_sentence_transformer(tiny_dir, tmp_path / 'start', pooling, prompts)
    if default:  # (a default prompt: what both sides read where they have none of their own)
        st.default_prompt_name = default
        st.save(str(tmp_path / 'start'))
    enc = DualEncoder.from_pretrained(str(tmp_path / 'start'), device='cpu', precision='fp32')
    expected = dict(zip(('query', 'passage'), sides))
    assert enc.prompts == expected
    assert enc.model.pooling == {'lasttoken': 'last'}.get(pooling, pooling)
    queries, docs = TEXTS[:2], TEXTS[2:]
    np.testing.assert_allclose(enc.encode_queries(queries), st.encode_query(queries), atol=1e-5)
    np.testing.assert_allclose(enc.encode_docs(docs), st.encode_document(docs), atol=1e-5)
    # the training path reads the same prompts
    with torch.no_grad():
        torch.testing.assert_close(enc.encode(queries, 'query').numpy(),
                                   st.encode_query(queries), atol=1e-5, rtol=0)
    # trained (the query tower moved), saved and exported: sentence-transformers reads the
    # prompts back and gives the package's vectors, which the prompts change
    enc.model.freeze_passage_tower()
    with torch.no_grad():
        for p in enc.model.encoder.parameters():
            p.add_(0.01 * torch.randn_like(p))
    enc.save_pretrained(tmp_path / 'out')
    again = SentenceTransformer(str(tmp_path / 'out'), device='cpu')
    np.testing.assert_allclose(again.encode_query(queries), enc.encode_queries(queries), atol=1e-5)
    np.testing.assert_allclose(again.encode_document(docs), enc.encode_docs(docs), atol=1e-5)
    assert DualEncoder.from_pretrained(str(tmp_path / 'out')).prompts == expected
    if expected['query']:
        unprompted = DualEncoder.from_pretrained(str(tmp_path / 'out'), device='cpu',
                                                 precision='fp32')
        unprompted.prompts = {'query': '', 'passage': ''}
        assert np.abs(unprompted.encode_queries(queries)
                      - enc.encode_queries(queries)).max() > 1e-3


def test_a_sentence_transformer_the_dual_encoder_cannot_run_is_refused(tiny_dir, tmp_path):
    from sentence_transformers.sentence_transformer.modules import Dense, Pooling, Transformer
    transformer = Transformer(str(tiny_dir), max_seq_length=40)
    width = transformer.get_embedding_dimension()
    # a Dense after the pooling (with its bias and tanh) runs as sentence-transformers runs it
    with_dense = SentenceTransformer(modules=[transformer, Pooling(width), Dense(width, 8)],
                                     device='cpu')
    with_dense.save(str(tmp_path / 'with_dense'))
    enc = DualEncoder.from_pretrained(str(tmp_path / 'with_dense'), device='cpu',
                                      precision='fp32')
    np.testing.assert_allclose(enc.encode_docs(TEXTS), with_dense.encode_document(TEXTS),
                               atol=1e-5)
    # max pooling is not among the package's
    SentenceTransformer(modules=[transformer, Pooling(width, 'max')],
                        device='cpu').save(str(tmp_path / 'dense'))
    with pytest.raises(ValueError, match="pooling 'max' is not one of"):
        DualEncoder.from_pretrained(str(tmp_path / 'dense'))
    # a zero-shot retriever of it is encoded by sentence-transformers instead
    from pyterrier_dr import SBertBiEncoder

    from pyterrier_selfsup.retrieval.dense import DenseRetriever
    retriever = DenseRetriever.from_collection('classic/adi', str(tmp_path / 'dense'),
                                               cache_dir=tmp_path / 'cache')
    assert isinstance(retriever.encoder, SBertBiEncoder)
    assert len(retriever.search('computer indexing')) > 0


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
