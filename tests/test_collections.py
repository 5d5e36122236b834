import pandas as pd
import pytest

from pyterrier_selfsup import BM25, Collection, UnknownCollectionError
from tests.helpers import snapshot


def test_scifact_test_counts_and_text():
    coll = Collection('irds:beir/scifact/test')
    assert coll.name == 'beir/scifact/test'
    assert coll.docs_count == 5183
    assert len(coll.topics()) == 300
    assert len(coll.qrels()) == 339
    first = next(coll.corpus_iter())
    doc = next(coll.irds.docs_iter())
    assert first == {'docno': doc.doc_id, 'text': f'{doc.title} {doc.text}'}  # title + text


@pytest.mark.parametrize('name, topics, qrels', [('cranfield', 225, 1837), ('vaswani', 93, 2083)])
def test_irds_collections(name, topics, qrels):
    coll = Collection(name)
    assert list(coll.topics().columns) == ['qid', 'query']
    assert (len(coll.topics()), len(coll.qrels())) == (topics, qrels)


def test_unknown_collection_is_named_and_nothing_is_written(tmp_path):
    with pytest.raises(UnknownCollectionError, match=r"unknown collection 'beir/scifact/tset'.*Did you mean 'beir/scifact/test'"):
        Collection('beir/scifact/tset')
    with pytest.raises(UnknownCollectionError, match="unknown collection 'no-such-thing'"):
        BM25.from_collection('no-such-thing', cache_dir=tmp_path / 'cache')
    assert snapshot(tmp_path) == {}


def test_text_loader_gives_title_and_text():
    coll = Collection('classic/cisi')
    results = pd.DataFrame({'qid': ['1', '1'], 'docno': ['2', '1']})
    texts = coll.text_loader()(results)['text'].tolist()
    assert texts[1].startswith('18 Editions of the Dewey Decimal Classifications The present study is')
    assert texts[0].startswith('Use Made of Technical Libraries ')
    with pytest.raises(KeyError, match="no documents \\['99999'\\]"):
        coll.text_loader()(pd.DataFrame({'qid': ['1'], 'docno': ['99999']}))
