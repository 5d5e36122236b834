import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
from ir_measures import nDCG
from sentence_transformers import SentenceTransformer

from pyterrier_selfsup import MINILM, Collection, DenseRetriever


@pytest.fixture(scope='module')
def adi_dense(cache_dir):
    return DenseRetriever.from_collection('classic/adi', max_length=256, cache_dir=cache_dir)


def test_index_holds_the_model_cards_embeddings(adi_dense):
    # mean pooling + L2 normalisation, as sentence-transformers itself computes them
    docs = list(Collection('classic/adi').corpus_iter())
    reference = SentenceTransformer(MINILM, device='cpu').encode([d['text'] for d in docs], normalize_embeddings=True)
    docnos, vectors, meta = adi_dense.index.payload()
    assert list(docnos) == [d['docno'] for d in docs]
    np.testing.assert_allclose(vectors, reference, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_adi_effectiveness(adi_dense):
    coll = Collection('classic/adi')
    result = pt.Experiment([adi_dense], coll.topics(), coll.qrels(), [nDCG @ 10])
    assert result['nDCG@10'][0] == pytest.approx(0.4975, abs=1e-3)


def test_index_is_reused(adi_dense, cache_dir, monkeypatch):
    monkeypatch.setattr('pyterrier_dr.FlexIndex.index', lambda *a, **k: pytest.fail('index rebuilt'))
    again = DenseRetriever.from_collection('classic/adi', max_length=256, cache_dir=cache_dir)
    assert again.index.index_path == adi_dense.index.index_path


def test_scores_are_cosines_ranked(adi_dense):
    results = adi_dense(pd.DataFrame({'qid': ['1'], 'query': ['computer-based library systems']}))
    assert len(results) == 82
    assert results['score'].is_monotonic_decreasing and results['rank'].tolist() == list(range(82))
    assert results['score'].between(-1, 1).all()
    assert 'query_vec' not in results.columns


def test_bad_input(adi_dense):
    with pytest.raises(pt.validate.InputValidationError, match='query'):
        adi_dense(pd.DataFrame({'qid': ['1']}))
    empty = adi_dense(pd.DataFrame({'qid': [], 'query': []}))
    assert len(empty) == 0 and list(empty.columns) == ['qid', 'query', 'docno', 'score', 'rank']


def test_a_query_without_text_retrieves_nothing_from_every_retriever(adi_dense, cache_dir):
    from pyterrier_selfsup import BM25
    bm25 = BM25.from_collection('classic/adi', cache_dir=cache_dir)
    topics = pd.DataFrame({'qid': ['1', '2', '3', '4'], 'query': ['computer indexing', None, float('nan'), '  ']})
    for retriever in (bm25, adi_dense):
        results = retriever % 5
        out = results(topics)
        assert set(out['qid']) == {'1'} and len(out) == 5, retriever
