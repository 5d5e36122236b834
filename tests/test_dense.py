from pathlib import Path

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
from ir_measures import nDCG
from sentence_transformers import SentenceTransformer

from pyterrier_selfsup import MINILM, Collection, DenseRetriever, DualEncoder
from tests.helpers import ranked_alike, start_ranks, tiny_dual_encoder


@pytest.fixture(scope='module')
def adi_dense(cache_dir):
    return DenseRetriever.from_collection('classic/adi', max_length=256, cache_dir=cache_dir)


def test_index_holds_the_model_cards_embeddings(adi_dense):
    # mean pooling + L2 normalisation, as sentence-transformers itself computes them
    docs = list(Collection('classic/adi').corpus_iter())
    reference = SentenceTransformer(MINILM, device='cpu').encode([d['text'] for d in docs],
                                                                 normalize_embeddings=True)
    docnos, vectors, meta = adi_dense.index.payload()
    assert list(docnos) == [d['docno'] for d in docs]
    np.testing.assert_allclose(vectors, reference, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_adi_effectiveness(adi_dense):
    coll = Collection('classic/adi')
    result = pt.Experiment([adi_dense], coll.topics(), coll.qrels(), [nDCG @ 10])
    assert result['nDCG@10'][0] == pytest.approx(0.4975, abs=1e-3)


def test_index_is_reused(adi_dense, cache_dir, monkeypatch):
    monkeypatch.setattr('pyterrier_dr.FlexIndex.index',
                        lambda *a, **k: pytest.fail('index rebuilt'))
    again = DenseRetriever.from_collection('classic/adi', max_length=256, cache_dir=cache_dir)
    assert again.index.index_path == adi_dense.index.index_path


def test_scores_are_cosines_ranked(adi_dense):
    results = adi_dense(pd.DataFrame({'qid': ['1'], 'query': ['computer-based library systems']}))
    assert len(results) == 82
    assert results['score'].is_monotonic_decreasing and results['rank'].tolist() == list(range(82))
    assert results['score'].between(-1, 1).all()
    assert 'query_vec' not in results.columns


def test_stored_vector_reranking_scores_as_reencoding_does_without_encoding_a_passage(
        adi_dense, cache_dir, monkeypatch):
    from pyterrier_selfsup import BM25
    coll = Collection('classic/adi')
    first_stage = BM25.from_collection(coll, cache_dir=cache_dir) % 5
    topics = coll.topics().head(12)  # (re-encoding their 60 candidates is the test's cost)
    reencoded = (first_stage >> coll.text_loader() >> adi_dense.encoder.scorer())(topics)
    encoded = []
    original = type(adi_dense.encoder).encode_docs
    monkeypatch.setattr(type(adi_dense.encoder), 'encode_docs',
                        lambda self, texts, *a, **k: (encoded.extend(texts)
                                                      or original(self, texts, *a, **k)))
    candidates = first_stage(topics)
    # a first stage's own docids (here: the reverse order) must not be read as the index's
    stored = adi_dense.scorer()(candidates.assign(docid=np.arange(len(candidates))[::-1]))
    assert encoded == [] and len(stored) == len(reencoded) == len(candidates) == 60
    assert list(stored.columns) == ['qid', 'query', 'docno', 'score', 'rank']
    both = stored.merge(reencoded, on=['qid', 'docno'], suffixes=('', '_text'))
    assert len(both) == len(stored)
    np.testing.assert_allclose(both['score'], both['score_text'], atol=1e-5)
    for _, query in both.groupby('qid'):  # (ranked alike, but for ties within float rounding)
        assert ranked_alike(query['score_text'].to_numpy(), query['score'].to_numpy(), 2e-5)
    empty = adi_dense.scorer()(candidates.head(0))
    assert len(empty) == 0 and {'score', 'rank'} <= set(empty.columns)


def test_bad_input(adi_dense):
    with pytest.raises(pt.validate.InputValidationError, match='query'):
        adi_dense(pd.DataFrame({'qid': ['1']}))
    empty = adi_dense(pd.DataFrame({'qid': [], 'query': []}))
    assert len(empty) == 0 and list(empty.columns) == ['qid', 'query', 'docno', 'score', 'rank']


def test_a_query_without_text_retrieves_nothing_from_every_retriever(adi_dense, cache_dir):
    from pyterrier_selfsup import BM25
    bm25 = BM25.from_collection('classic/adi', cache_dir=cache_dir)
    topics = pd.DataFrame({'qid': ['1', '2', '3', '4'],
                           'query': ['computer indexing', None, float('nan'), '  ']})
    for retriever in (bm25, adi_dense):
        results = retriever % 5
        out = results(topics)
        assert set(out['qid']) == {'1'} and len(out) == 5, retriever


def test_pyterriers_search_of_one_query_is_a_call_on_a_dense_retriever(adi_dense):
    """``search`` is PyTerrier's one-query call; the setting it was named after lives in
    ``search_method``, so that it does not hide the call."""
    one = adi_dense.search('the retrieval of information from computer files')
    assert set(one['qid']) == {'1'} and len(one) == len(adi_dense.index) > 0
    assert one['rank'].tolist() == list(range(len(one)))


def test_search_auto_is_exact_below_the_threshold_and_ivf_from_it(adi_dense, monkeypatch):
    from pyterrier_selfsup.retrieval import ann
    assert adi_dense.search_method == 'exact'  # 82 passages
    monkeypatch.setattr(ann, 'APPROXIMATE_FROM', 82)
    assert ann.resolve_search('auto', adi_dense.index) == 'ivf'
    assert ann.resolve_search('hnsw', adi_dense.index) == 'hnsw'
    # without FAISS (a GPU image) the same size is searched exactly, with a warning
    real = ann.importlib.util.find_spec
    monkeypatch.setattr(ann.importlib.util, 'find_spec',
                        lambda name, *a: None if name == 'faiss' else real(name, *a))
    assert ann.resolve_search('auto', adi_dense.index) == 'exact'
    with pytest.raises(ValueError, match='search must be one of'):
        ann.resolve_search('annoy', adi_dense.index)
    assert ([ann.ivf_n_list(n) for n in (82, 10_000, 1_000_000, 8_841_823)]
            == [16, 128, 1024, 4096])


def test_approximate_search_scores_as_exact_search_does(adi_dense, cache_dir):
    from pyterrier_selfsup.retrieval import ann
    coll = Collection('classic/adi')
    topics = coll.topics()
    exact = adi_dense(topics)
    exact_scores = exact.set_index(['qid', 'docno'])['score']
    hnsw = DenseRetriever.from_collection('classic/adi', max_length=256, search='hnsw',
                                          cache_dir=cache_dir)
    ivf = DenseRetriever.from_collection('classic/adi', max_length=256, search='ivf',
                                         cache_dir=cache_dir)
    for approximate in (hnsw, ivf):
        out = approximate(topics)
        assert list(out.columns) == list(exact.columns)
        # flat storage: each passage found is scored by its exact dot product, ranked from 0
        np.testing.assert_allclose(out['score'],
                                   exact_scores.loc[list(zip(out['qid'], out['docno']))], atol=1e-5)
        assert (out.groupby('qid')['rank'].min() == 0).all()
    # HNSW searching a beam wider than the corpus finds every passage: exact search's ranking
    hnsw_out = hnsw(topics)
    assert hnsw_out.groupby('qid').size().min() == 82
    assert (hnsw_out.groupby('qid')['docno'].apply(list)
            .equals(exact.groupby('qid')['docno'].apply(list)))
    # IVF: the posting lists FlexIndex names (√82 -> 16), a sixteenth of them probed, so it sees
    # only part of the corpus: fewer results a query than exact search
    faiss_index = ivf._pipeline[-1].faiss_index
    assert (faiss_index.nlist, ivf._pipeline[-1].n_probe) == (16, 1) and faiss_index.ntotal == 82
    assert ivf(topics).groupby('qid').size().max() < 82 == exact.groupby('qid').size().min()
    assert ivf.fuse_rank_cutoff(5).search_method == 'ivf'  # a rank cut-off keeps the search
    assert hnsw.fuse_rank_cutoff(5) is None  # a narrower beam could change HNSW's top 5
    # FlexIndex's retrievers read the structures built here (ann.prebuild_ann, which writes
    # them under FlexIndex's own file names): had pyterrier-dr renamed its files, it would have
    # built its own beside them
    built = {ann.prebuild_ann(approximate.index, approximate.search_method).name
             for approximate in (hnsw, ivf)}
    assert {p.name for p in Path(ivf.index.index_path).glob('*.faiss')} == built


def _encode_rank(rank: int, world_size: int, store: str, path: str, chunk: int, tiny_dir: str):
    """One process of test_sharded_encoding_equals_one_process."""
    import torch
    import torch.distributed as dist

    from pyterrier_selfsup.retrieval.dense import encode_sharded
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method=f'file://{store}', rank=rank, world_size=world_size)
    try:
        encoder = tiny_dual_encoder(tiny_dir)
        index = encode_sharded(path, Collection('classic/adi'), encoder, rank=rank,
                               world_size=world_size, chunk=chunk)
        assert len(index) == 82
    finally:
        dist.destroy_process_group()


def test_sharded_encoding_equals_one_process(tmp_path, tiny_dir):
    """(The tiny BERT: what is checked is where each vector goes, not what it says.)"""
    from pyterrier_dr import FlexIndex

    from pyterrier_selfsup.retrieval.dense import encode_into
    # 82 passages in chunks of 16: rank 0 encodes chunks 0, 2, 4 (48 passages),
    # rank 1 chunks 1, 3, 5 (34)
    start_ranks(_encode_rank,
                (2, str(tmp_path / 'store'), str(tmp_path / 'sharded.flex'), 16, str(tiny_dir)))
    encoder = tiny_dual_encoder(tiny_dir)
    one = encode_into(tmp_path / 'one.flex', Collection('classic/adi'), encoder, chunk=16)
    sharded_docnos, sharded, _ = FlexIndex(str(tmp_path / 'sharded.flex')).payload()
    one_docnos, reference, _ = one.payload()
    assert (list(sharded_docnos) == list(one_docnos)
            == [d['docno'] for d in Collection('classic/adi').corpus_iter()])
    np.testing.assert_allclose(sharded, reference, atol=1e-6)
    assert not (tmp_path / 'sharded.flex.shards').exists()  # the shard files are gone


def test_without_faiss_an_automatic_search_is_exact_and_says_so_once(monkeypatch, caplog):
    import logging

    from pyterrier_selfsup.retrieval import ann
    monkeypatch.setattr(ann, '_said_no_faiss', False)
    monkeypatch.setattr(ann.importlib.util, 'find_spec', lambda name: None)
    large = range(ann.APPROXIMATE_FROM)  # (the search asks an index only for its length)
    with caplog.at_level(logging.WARNING, logger='pyterrier_selfsup'):
        assert [ann.resolve_search('auto', large) for _ in range(2)] == ['exact', 'exact']
    assert caplog.text.count('FAISS is not installed') == 1


def test_openvino_in_fp32_shares_torchs_index_key_and_other_vectors_are_keyed_apart():
    from pyterrier_selfsup.retrieval.dense import index_key
    adi = Collection('classic/adi')
    fp32 = DualEncoder.from_pretrained(MINILM, precision='fp32', device='cpu')
    bf16 = DualEncoder.from_pretrained(MINILM, precision='bf16', device='cpu')
    # the same vectors to float rounding: a trainer (torch) reads the index minilm built
    assert index_key(adi, fp32, 'openvino') == index_key(adi, fp32, 'torch') == index_key(adi, fp32)
    assert index_key(adi, fp32, 'openvino-int8') != index_key(adi, fp32)
    assert len({index_key(adi, bf16, 'openvino'), index_key(adi, bf16, 'torch'),
                index_key(adi, fp32)}) == 3
