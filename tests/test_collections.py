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
    with pytest.raises(UnknownCollectionError,
                       match=r"unknown collection 'beir/scifact/tset'.*Did you mean "
                             r"'beir/scifact/test'"):
        Collection('beir/scifact/tset')
    with pytest.raises(UnknownCollectionError, match="unknown collection 'no-such-thing'"):
        BM25.from_collection('no-such-thing', cache_dir=tmp_path / 'cache')
    assert snapshot(tmp_path) == {}


def test_text_loader_gives_title_and_text():
    coll = Collection('classic/cisi')
    results = pd.DataFrame({'qid': ['1', '1'], 'docno': ['2', '1']})
    texts = coll.text_loader()(results)['text'].tolist()
    assert texts[1].startswith('18 Editions of the Dewey Decimal Classifications '
                               'The present study is')
    assert texts[0].startswith('Use Made of Technical Libraries ')
    with pytest.raises(KeyError, match="no documents \\['99999'\\]"):
        coll.text_loader()(pd.DataFrame({'qid': ['1'], 'docno': ['99999']}))


def test_a_corpus_of_ones_own_from_jsonl_csv_and_tsv(tmp_path):
    import gzip
    import json
    docs = [{'_id': 'a', 'title': 'Cats', 'text': 'Cats purr.'},
            {'_id': 'b', 'title': '', 'text': 'Dogs, "barking".'},
            {'_id': 'a', 'title': 'again', 'text': 'a repeated id: the first wins'}]
    with gzip.open(tmp_path / 'docs.jsonl.gz', 'wt') as out:
        out.writelines(json.dumps(d) + '\n' for d in docs)
    pd.DataFrame(docs).rename(columns={'_id': 'docno'}).to_csv(tmp_path / 'docs.csv', index=False)
    # (TSV as BEIR and MS MARCO write it: no quoting)
    (tmp_path / 'docs.tsv').write_text(''.join('\t'.join(row) + '\n' for row in
                                               [('doc_id', 'title', 'text')]
                                               + [tuple(d.values()) for d in docs]))
    (tmp_path / 'queries.txt').write_text('purring cats\n\ndogs\n')
    for name in ('docs.jsonl.gz', 'docs.csv', 'docs.tsv'):
        corpus = Collection.from_files(tmp_path / name, tmp_path / 'queries.txt')
        assert list(corpus.corpus_iter()) == [{'docno': 'a', 'text': 'Cats Cats purr.'},
                                              {'docno': 'b', 'text': 'Dogs, "barking".'}], name
        assert (corpus.texts(['b', 'a']) == ['Dogs, "barking".', 'Cats Cats purr.']
                and corpus.docs_count == 2)
        # qid: the line's number
        assert corpus.topics().values.tolist() == [['1', 'purring cats'], ['3', 'dogs']]
    # the corpus is named by its contents: the same file under another path is the same corpus
    (tmp_path / 'elsewhere').mkdir()
    (tmp_path / 'elsewhere' / 'docs.csv').write_bytes((tmp_path / 'docs.csv').read_bytes())
    assert (Collection.from_files(tmp_path / 'elsewhere' / 'docs.csv').corpus_id
            == Collection.from_files(tmp_path / 'docs.csv').corpus_id
            != Collection.from_files(tmp_path / 'docs.tsv').corpus_id)
    # the same contents registered again from another path, the first path gone: read from
    # the new one
    moved = Collection.from_files(tmp_path / 'elsewhere' / 'docs.csv')
    (tmp_path / 'docs.csv').unlink()
    assert Collection.from_files(tmp_path / 'elsewhere' / 'docs.csv').name == moved.name
    assert moved.docs_count == 2 and len(list(moved.corpus_iter())) == 2
    # a spreadsheet's byte-order mark; a TSV field that starts with a quote (TSV does not quote)
    (tmp_path / 'bom.csv').write_text('docno,text\nx,"one, two"\n', encoding='utf-8-sig')
    (tmp_path / 'quote.tsv').write_text('docno\ttext\nx\t"unclosed\ny\tsecond\n')
    assert (list(Collection.from_files(tmp_path / 'bom.csv').corpus_iter())
            == [{'docno': 'x', 'text': 'one, two'}])
    assert ([d['docno'] for d in Collection.from_files(tmp_path / 'quote.tsv').corpus_iter()]
            == ['x', 'y'])
    with pytest.raises(ValueError, match='has no relevance judgements'):
        corpus.qrels()
    with pytest.raises(ValueError, match='has no queries'):
        Collection.from_files(tmp_path / 'docs.tsv').topics()
    (tmp_path / 'bad.jsonl').write_text('{"title": "no id"}\n')
    with pytest.raises(ValueError, match=r'bad.jsonl: a record has no document id field '
                                         r'\(one of docno, doc_id'):
        list(Collection.from_files(tmp_path / 'bad.jsonl').corpus_iter())
    with pytest.raises(FileNotFoundError, match='no documents file'):
        Collection.from_files(tmp_path / 'missing.jsonl')
    bm25 = BM25.from_collection(Collection.from_files(tmp_path / 'docs.tsv'),
                                cache_dir=tmp_path / 'cache')
    assert bm25.search('cats')['docno'].tolist() == ['a']


def test_ms_marco_layout_a_tsv_without_a_header(tmp_path):
    """MS MARCO's collection.tsv (docno<TAB>text a line, no header) and queries.tsv (qid<TAB>query)
    load as they are; a line with another number of fields is an error that names it."""
    (tmp_path / 'collection.tsv').write_text(
        '0\tThe presence of communication amid scientific minds.\n'
        '1\tThe Manhattan Project and its atomic bomb.\n7\t"quoted" text\n')
    (tmp_path / 'queries.tsv').write_text('121352\tdefine extreme\n'
                                          '634306\twhat does chattel mean\n')
    corpus = Collection.from_files(tmp_path / 'collection.tsv', tmp_path / 'queries.tsv')
    # the first line is a document
    assert [d['docno'] for d in corpus.corpus_iter()] == ['0', '1', '7']
    assert corpus.texts(['7']) == ['"quoted" text']
    assert corpus.topics().values.tolist() == [['121352', 'define extreme'],
                                               ['634306', 'what does chattel mean']]
    (tmp_path / 'torn.tsv').write_text('0\tfine\n1\ttorn\tin two\n2\tfine\n')
    with pytest.raises(ValueError,
                       match=r'torn.tsv, line 2: 3 field\(s\) where a TSV without a header has 2 '
                             r'\(docno<TAB>text a line\)'):
        list(Collection.from_files(tmp_path / 'torn.tsv').corpus_iter())
    (tmp_path / 'three.tsv').write_text('0\ta\tb\n')  # neither a header nor a docno<TAB>text line
    with pytest.raises(ValueError,
                       match=r'three.tsv, line 1: 3 field\(s\) where a TSV without a header has 2'):
        list(Collection.from_files(tmp_path / 'three.tsv').corpus_iter())


def test_a_malformed_corpus_file_is_named_with_its_line_and_what_to_write(tmp_path, caplog):
    """An empty file, a CSV quote never closed, a file that is not UTF-8 and a corpus with no
    text are errors naming the file and the line; repeated ids and empty texts, which leave a
    usable corpus, are warned of once, with the first line."""
    import logging

    def read(name: str, content) -> list:
        path = tmp_path / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
        return list(Collection.from_files(path).corpus_iter())

    with pytest.raises(ValueError, match=r'empty.jsonl: no document in it'):
        read('empty.jsonl', '')
    # (not one long text of three rows: the quote opened on line 3 is never closed)
    with pytest.raises(ValueError, match=r'quote.csv, line 3: unexpected end of data .*close the '
                                         r'quote'):
        read('quote.csv', 'docno,text\na,"fine, ""quoted"""\nb,"open\nc,x\nd,y\n')
    # (a block of text decoded at once: the line is found in the bytes)
    latin = ('docno,text\n' + ''.join(f'd{i},text {i}\n' for i in range(3000))).encode()
    with pytest.raises(ValueError, match=r'latin.csv, line 3002: not UTF-8 text .*save the file '
                                         r'as UTF-8'):
        read('latin.csv', latin + 'x,caf\xe9\n'.encode('latin-1'))
    with pytest.raises(ValueError, match=r"blank.csv: no document has a text \(line 2: 'a'\)"):
        read('blank.csv', 'docno,text\na,\nb,  \n')
    with caplog.at_level(logging.WARNING, logger='pyterrier_selfsup'):
        docs = read('dup.jsonl', '{"docno": "a", "text": "x"}\n{"docno": "b", "text": ""}\n'
                                 '{"docno": "a", "text": "z"}\n')
        again = list(Collection.from_files(tmp_path / 'dup.jsonl').corpus_iter())
    assert docs == again == [{'docno': 'a', 'text': 'x'}, {'docno': 'b', 'text': ''}]
    said = [r.getMessage() for r in caplog.records if r.name == 'pyterrier_selfsup.data.local']
    assert said == [f"{tmp_path}/dup.jsonl, line 3: document id 'a' again (first on line 1); 1 "
                    'repeated id(s) in all, of which only the first document is kept: give each '
                    'document an id of its own',
                    f"{tmp_path}/dup.jsonl, line 2: document 'b' has no text; 1 document(s) "
                    'without one, which no query can find']
