import os
import shutil
import tarfile
from pathlib import Path

import ir_datasets
import pyterrier as pt
import pytest

import pyterrier_selfsup  # noqa: F401  (registers classic/cisi and classic/adi)
from pyterrier_selfsup.data.classic import ClassicSource, parse_queries, register_classic
from tests.helpers import snapshot

# ../shared/data/README.md: docs, queries, judged queries, qrels
COUNTS = {'cisi': (1460, 112, 76, 3114), 'adi': (82, 35, 35, 170)}


@pytest.fixture
def restore_registration():
    yield
    register_classic()  # back to $SELFSUP_CLASSIC_DATA for the built-in collections


def counts(dataset_id):
    ds = pt.get_dataset(f'irds:{dataset_id}')
    return (sum(1 for _ in ds.get_corpus_iter(verbose=False)), len(ds.get_topics()),
            len(ds.get_qrels()))


@pytest.mark.parametrize('name', sorted(COUNTS))
def test_counts_from_env_tarballs(name):
    docs, queries, judged, qrels = COUNTS[name]
    assert counts(f'classic/{name}') == (docs, judged, qrels)
    assert sum(1 for _ in parse_queries(ClassicSource(name).lines('QRY'))) == queries
    irds = ir_datasets.load(f'classic/{name}')
    assert irds.docs_count() == docs
    assert irds.queries_count() == judged


@pytest.mark.parametrize('name', sorted(COUNTS))
def test_counts_from_unpacked_directory_passed_in_code(name, tmp_path, restore_registration):
    with tarfile.open(Path(os.environ['SELFSUP_CLASSIC_DATA']) / f'{name}.tar.gz') as tar:
        tar.extractall(tmp_path, filter='data')
    assert not list(tmp_path.glob('*.tar.gz'))
    assert f'classic/{name}' in register_classic(tmp_path)
    docs, _, judged, qrels = COUNTS[name]
    assert counts(f'classic/{name}') == (docs, judged, qrels)


def test_cisi_fields():
    store = ir_datasets.load('classic/cisi').docs_store()
    doc = store.get('1')
    assert doc.title == '18 Editions of the Dewey Decimal Classifications'
    assert doc.author == 'Comaromi, J.P.'
    assert doc.text.startswith('The present study is a history of the DEWEY Decimal '
                               'Classification.')
    # .X not appended
    assert doc.text.endswith('spurred the growth of librarianship in this country and abroad.')
    assert doc.default_text() == f'{doc.title} {doc.text}'
    assert store.get('0001').doc_id == '1'  # leading zeros do not matter
    topics = pt.get_dataset('irds:classic/cisi').get_topics().set_index('qid')
    assert (topics.loc['3', 'query']
            == 'What is information science? Give definitions where possible.')
    # queries given as a paper (.T title, .A, .W abstract, .B) keep title and abstract only
    assert topics.loc['58', 'query'].startswith(
        'Directions in Library Networking Bibliographic control before')
    assert 'Avram' not in topics.loc['58', 'query'] and 'JASIS' not in topics.loc['58', 'query']


def write_toy(directory, rel_lines, parts=('ALL', 'QRY', 'REL'), name='TOY'):
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        'ALL': ('.I 001\n.T\nFirst title\n.A\nSomeone\n.W\nfirst text\nspans two lines\n'
                '.K\nkeyword\n.X\n1 2 3\n'
                '.I 2\n.T\nSecond\n.W\n  .NET and :colons: stay text\n.N\nnote\n'
                '.I 3\n.W\nno title here\n'),
        'QRY': '.I 1\n.W\nfirst query\n.I 02\n.W\nsecond query\n.I 3\n.W\nnever judged\n',
        'REL': rel_lines,
    }
    for part in parts:
        # CRLF, like the originals
        (directory / f'{name}.{part}').write_text(files[part].replace('\n', '\r\n'))
    return directory


def test_trec_qrels_leading_zeros_and_skipped_fields(tmp_path, restore_registration):
    write_toy(tmp_path, '01 0 001 2\n1 0 3 0\n002 0 2 1\n2 0 0002 1\n')
    assert register_classic(tmp_path) == ['classic/toy']
    ds = pt.get_dataset('irds:classic/toy')
    docs = {d['docno']: d for d in ds.get_corpus_iter(verbose=False)}
    assert list(docs) == ['1', '2', '3']
    assert docs['1']['title'] == 'First title' and docs['1']['text'] == 'first text spans two lines'
    assert docs['2']['text'] == '.NET and :colons: stay text'  # not mistaken for a field
    assert (docs['3']['title'] == '' and
            ir_datasets.load('classic/toy').docs_store().get('3').default_text() == 'no title here')
    assert ds.get_topics().to_dict('records') == [{'qid': '1', 'query': 'first query'},
                                                  {'qid': '2', 'query': 'second query'}]
    qrels = sorted(map(tuple, ds.get_qrels()[['qid', 'docno', 'label']].values.tolist()))
    assert qrels == [('1', '1', 2), ('1', '3', 0), ('2', '2', 1)]  # the duplicate (2, 0002) merged


def test_qid_docid_qrels(tmp_path, restore_registration):
    write_toy(tmp_path, '1   1   0   0.000000\n2\t3\n')
    register_classic(tmp_path, names=['toy'])
    qrels = ir_datasets.load('classic/toy').qrels_iter()
    assert [(q.query_id, q.doc_id, q.relevance) for q in qrels] == [('1', '1', 1), ('2', '3', 1)]


def test_tarball_in_directory_passed_in_code(tmp_path, restore_registration):
    write_toy(tmp_path / 'src', '1 1\n')
    with tarfile.open(tmp_path / 'toy.tar.gz', 'w:gz') as tar:
        for f in (tmp_path / 'src').iterdir():
            tar.add(f, arcname=f'toy/{f.name}')  # members inside a folder are found too
    shutil.rmtree(tmp_path / 'src')
    register_classic(tmp_path)
    assert counts('classic/toy') == (3, 1, 1)


def test_missing_file_is_named_and_nothing_changes(tmp_path, restore_registration):
    write_toy(tmp_path, '1 1\n', parts=('ALL', 'QRY'), name='GAP')
    before = snapshot(tmp_path)
    with pytest.raises(FileNotFoundError,
                       match=r'GAP\.REL not found in .*needs GAP\.ALL, \.QRY and \.REL'):
        register_classic(tmp_path)
    assert snapshot(tmp_path) == before
    assert 'classic/gap' not in ir_datasets.registry


def test_missing_directory_and_unset_variable(tmp_path, monkeypatch):
    from tests.helpers import free_port
    with pytest.raises(FileNotFoundError, match='does not exist'):
        register_classic(tmp_path / 'nowhere')
    monkeypatch.delenv('SELFSUP_CLASSIC_DATA')
    monkeypatch.setenv('SELFSUP_CACHE', str(tmp_path / 'cache'))
    # (ADI is downloaded where no directory is set: here from an address nothing answers at)
    monkeypatch.setenv('SELFSUP_CLASSIC_MIRROR', f'http://127.0.0.1:{free_port()}')
    with pytest.raises(FileNotFoundError, match=r'could not be downloaded .*set '
                                                r'\$SELFSUP_CLASSIC_DATA to its directory'):
        list(ir_datasets.load('classic/adi').docs_iter())
    with pytest.raises(FileNotFoundError, match=r'Set \$SELFSUP_CLASSIC_DATA'):
        ClassicSource('med').resolve()  # (a collection with no public home recorded)


def test_cisi_and_adi_download_once_from_their_home_checked_against_their_checksums(
        classic_from_the_mirror, tmp_path, monkeypatch):
    mirror = classic_from_the_mirror
    before = len(mirror.requests)  # (the mirror serves the whole session)
    monkeypatch.setenv('SELFSUP_CACHE', str(tmp_path / 'cache'))
    for name, (docs, judged, qrels) in (('adi', (82, 35, 170)), ('cisi', (1460, 76, 3114))):
        assert counts(f'classic/{name}') == (docs, judged, qrels)
        assert (tmp_path / 'cache' / 'classic' / f'{name}.tar.gz').is_file()
    assert sorted(mirror.requests[before:]) == ['/adi/adi.tar.gz', '/cisi/cisi.tar.gz']  # once
    # bytes other than those recorded are refused, and nothing is kept
    from pyterrier_selfsup.data.classic import download
    tampered = tmp_path / 'tampered' / 'adi'
    tampered.mkdir(parents=True)
    (tampered / 'adi.tar.gz').write_bytes((mirror.root / 'adi' / 'adi.tar.gz').read_bytes()[:-1])
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
    server = ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(
        SimpleHTTPRequestHandler, directory=str(tampered.parent)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv('SELFSUP_CLASSIC_MIRROR', f'http://127.0.0.1:{server.server_address[1]}')
        with pytest.raises(FileNotFoundError, match='not the 68c18678.* the package records'):
            download('adi', tmp_path / 'elsewhere')
    finally:
        server.shutdown()
    assert not (tmp_path / 'elsewhere' / 'classic' / 'adi.tar.gz').exists()


def test_docstore_is_parsed_once_per_version_of_its_documents(tmp_path, restore_registration):
    docs = ir_datasets.load('classic/adi').docs_store
    assert docs() is docs()
    with tarfile.open(Path(os.environ['SELFSUP_CLASSIC_DATA']) / 'adi.tar.gz') as tar:
        tar.extractall(tmp_path, filter='data')
    (tmp_path / 'ADI.ALL').write_text('.I 1\n.T\nreplaced\n.W\ntext\n')
    register_classic(tmp_path, names=['adi'])
    assert docs().get('1').title == 'replaced'  # a new directory is read afresh
    (tmp_path / 'ADI.ALL').write_text('.I 1\n.T\nrewritten\n.W\ntext\n')  # (same place)
    assert docs().get('1').title == 'rewritten'


def _adi_in(directory: Path, edit=None) -> Path:
    """ADI's three files unpacked into ``directory``, its first document's title changed to
    ``edit`` where one is given."""
    with tarfile.open(Path(os.environ['SELFSUP_CLASSIC_DATA']) / 'adi.tar.gz') as tar:
        tar.extractall(directory, filter='data')
    if edit is not None:
        path = directory / 'ADI.ALL'
        text = path.read_text()
        head, _, rest = text.partition('\n.T\n')
        path.write_text(head + f'\n.T\n{edit} ' + rest)
    return directory


def test_a_repointed_classic_directory_trains_a_new_model_and_builds_new_indexes(
        tmp_path, tiny_dir, monkeypatch):
    """The caches key a classic collection by its documents' contents, checked at each use:
    another directory with other documents under the same name trains a model and builds
    indexes of its own; a copy of the same files elsewhere finds the first ones again."""
    from pyterrier_selfsup import BM25, Collection
    from pyterrier_selfsup.context import RunContext
    from pyterrier_selfsup.harness import store
    from pyterrier_selfsup.harness.pipelines import get_pipeline
    first = _adi_in(tmp_path / 'first')
    edited = _adi_in(tmp_path / 'edited', edit='zymurgical')
    same = _adi_in(tmp_path / 'same')
    run = RunContext(cache_dir=tmp_path / 'cache')
    spec = get_pipeline(f'distill:model_name={tiny_dir},queries=sentences,n_queries=8,'
                        f'batch_size=4')
    trained, found = {}, {}
    for name, directory in (('first', first), ('edited', edited), ('same', same)):
        monkeypatch.setenv('SELFSUP_CLASSIC_DATA', str(directory))
        adi = Collection('classic/adi')
        trained[name] = spec.train(adi, run)
        found[name] = BM25.from_collection(adi, cache_dir=run.cache_dir).search('zymurgical')
    assert trained['edited'] != trained['first'] == trained['same']
    assert store.read_record(trained['edited'])['collection']['digest'] != store.read_record(
        trained['first'])['collection']['digest']
    assert found['edited']['docno'].tolist()[:1] == ['1'] and found['first'].empty
    assert len([p for p in (run.cache_dir / 'pisa').iterdir() if p.is_dir()]) == 2
