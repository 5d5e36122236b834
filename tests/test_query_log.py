"""A query log without judgements as a first-class input (issue 30): files of query texts, their
errors, and two-fold cross-validation over a collection's own topic texts."""
import json

import pandas as pd
import pytest

from pyterrier_selfsup import Collection
from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.data.queries.logs import folds, other_folds, query_log
from pyterrier_selfsup.data.queries.source import QuerySource
from pyterrier_selfsup.harness import trained
from pyterrier_selfsup.harness.methods import source_topics
from pyterrier_selfsup.harness.pipelines import CrossFold, get_pipeline


def test_a_query_log_is_read_from_text_tsv_and_jsonl(tmp_path):
    (tmp_path / 'log.txt').write_text('what is indexing\n\n  retrieval of documents  \n',
                                      encoding='utf-8')
    (tmp_path / 'log.tsv').write_text('qid\tquery\n7\twhat is indexing\n9\t"quoted" retrieval\n')
    (tmp_path / 'log.jsonl').write_text('{"qid": "7", "query": "what is indexing"}\n\n'
                                        '{"_id": 9, "text": "x y"}\n')
    assert (query_log(tmp_path / 'log.txt').to_dict('list')
            == {'qid': ['1', '3'], 'query': ['what is indexing', 'retrieval of documents']})
    assert (query_log(tmp_path / 'log.tsv').to_dict('list')
            == {'qid': ['7', '9'], 'query': ['what is indexing', '"quoted" retrieval']})
    assert (query_log(tmp_path / 'log.jsonl').to_dict('list')
            == {'qid': ['7', '9'], 'query': ['what is indexing', 'x y']})


@pytest.mark.parametrize('name, content, message', [
    ('extra.tsv', 'qid\tquery\n1\tfine\n2\ttoo\tmany\n',
     r'extra.tsv, line 3: 3 field\(s\) where its header has 2'),
    ('short.tsv', 'qid\tquery\n1\tfine\n2\n',
     r'short.tsv, line 3: 1 field\(s\) where its header has 2'),
    # a text with a line break: its second half is a row of one field, and the error says why
    ('newline.tsv', 'qid\tquery\n1\tfine\n2\ttwo\nlines\n',
     r'newline.tsv, line 4: 1 field\(s\) where its header has 2 \(qid, query\); a TSV cannot '
     r'quote, so a tab or a line break inside a text splits its row: write such texts '
     r'as JSON lines'),
    ('nojson.jsonl', '{"qid": "1", "query": "a"}\n{"qid": "2", "query": \n',
     r'nojson.jsonl, line 2: not a JSON'),
    ('nofield.jsonl', '{"qid": "1", "query": "a"}\n{"qid": "2", "q": "b"}\n',
     r'nofield.jsonl, line 2: .*no query field'),
    ('empty.csv', 'qid,query\n1,a\n2,\n', r"empty.csv, line 3: query '2' has no text"),
    ('twice.csv', 'qid,query\n1,a\n2,b\n1,c\n',
     r"twice.csv, line 4: query id '1' again \(first on line 2\)"),
    ('latin.txt', b'caf\xc3\xa9\nna\xefve\n', r'latin.txt, line 2: not UTF-8'),
    ('blank.txt', '\n \n', r'blank.txt: no query in it'),
])
def test_a_malformed_query_log_names_its_line(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ValueError, match=message):
        query_log(path)
    # and the pipelines say it the same way, before anything trains
    with pytest.raises(ValueError, match=message):
        source_topics(Collection('classic/adi'), QuerySource(str(path), 10))


def test_folds_split_the_topics_evenly_and_the_same_way_every_time():
    qids = [str(i) for i in range(35)]
    assigned = folds(qids)
    assert sorted(assigned) == sorted(qids) and sorted(set(assigned.values())) == [0, 1]
    assert sorted(pd.Series(assigned).value_counts().tolist()) == [17, 18]
    assert folds(list(reversed(qids))) == assigned != folds(qids, seed=1)
    topics = pd.DataFrame({'qid': qids, 'query': [f'q{i}' for i in range(35)], 'relevant': 1})
    for fold in (0, 1):
        rest = other_folds(topics, fold)
        assert list(rest.columns) == ['qid', 'query']  # (labels dropped)
        assert set(rest['qid']) == {q for q, f in assigned.items() if f != fold}


def test_a_query_log_file_keys_the_model_by_its_contents(tmp_path):
    coll = Collection('classic/adi')
    (tmp_path / 'a').mkdir()
    for path in (tmp_path / 'log.txt', tmp_path / 'a' / 'log.txt'):
        path.write_text('automatic indexing\nretrieval\n')
    here, there = (trained.model_dir(coll, 'distill', {'queries': str(p)}) for p in
                   (tmp_path / 'log.txt', tmp_path / 'a' / 'log.txt'))
    assert here == there
    (tmp_path / 'a' / 'log.txt').write_text('automatic indexing\n')
    assert trained.model_dir(coll, 'distill', {'queries': str(tmp_path / 'a' / 'log.txt')}) != here
    with pytest.raises(ValueError, match='neither a source .* nor a collection'):
        source_topics(coll, QuerySource(str(tmp_path / 'missing.txt'), 10))


def test_crossfold_answers_each_query_with_the_model_that_never_saw_its_text(tiny_dir, cache_dir):
    coll = Collection('classic/adi')
    spec = get_pipeline(f'distill:queries=crossfold,model_name={tiny_dir},rounds=1,precision=fp32')
    run = RunContext(cache_dir=cache_dir)
    pipeline = spec.build(coll, run)
    assert isinstance(pipeline, CrossFold) and len(pipeline.retrievers) == 2
    assigned = folds(coll.topics()['qid'])
    dirs = spec.model_dirs(coll, run)
    assert len(dirs) == 2 and dirs[0] != dirs[1] and spec.model_dir(coll, run) == dirs[0]
    # each fold's model trained on the other fold's texts only
    for fold, directory in enumerate(dirs):
        log = [json.loads(line)
               for line in (directory / 'training_log.jsonl').read_text().splitlines()]
        steps = [r for r in log if 'loss' in r]
        assert steps and len(steps) == -(-sum(f != fold for f in assigned.values()) // 32)
        trained_on = source_topics(coll, QuerySource('crossfold', 0, fold=fold))
        assert not set(trained_on['qid']) & {q for q, f in assigned.items() if f == fold}
    topics = coll.topics()
    results = pipeline(topics)
    assert set(results['qid']) == set(topics['qid'])
    for fold, retriever in enumerate(pipeline.retrievers):
        mine = topics[topics['qid'].map(assigned) == fold]
        expected = retriever(mine)
        got = results[results['qid'].isin(mine['qid'])]
        pd.testing.assert_frame_equal(got.reset_index(drop=True)[['qid', 'docno', 'score']],
                                      expected.reset_index(drop=True)[['qid', 'docno', 'score']])
    assert not (pipeline.retrievers[0].encoder.fingerprint()
                == pipeline.retrievers[1].encoder.fingerprint())
    with pytest.raises(ValueError, match='not topics of'):
        pipeline(pd.DataFrame({'qid': ['new'], 'query': ['a query of no fold']}))


def test_a_query_log_trains_from_the_command_line_and_says_how_to_judge_it(tmp_path, cache_dir,
                                                                           tiny_dir, caplog):
    from pyterrier_selfsup.data.queries.cut import corpus_sentences
    from tests.test_cli import selfsup
    log = tmp_path / 'log.txt'
    log.write_text('\n'.join(corpus_sentences(Collection('classic/adi'), 80)['query']) + '\n')
    spec = f'distill:queries={log},model_name={tiny_dir},rounds=2'
    proc = selfsup('train', spec, '-c', 'classic/adi', '--cache-dir', str(cache_dir), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # no label-free verdict: how to judge the model against its start, on the user's queries
    assert 'verdict' not in proc.stdout
    assert (f'selfsup judge -c classic/adi -p dual_encoder:model_name={tiny_dir} "{spec}"'
            in proc.stdout), proc.stdout
    # its passage offsets, which the sentence-transformers export cannot hold, are said
    assert 'SentenceTransformer(' in proc.stdout and 'encodes passages as the start' in proc.stdout
    # one plan, sized by the log (80 queries, each ranked by the teacher in each of 2 rounds),
    # not a plan for n_queries followed by another for the log
    said = [r.getMessage() for r in caplog.records]
    assert sum(m.startswith('plan: ') for m in said) == 1, said
    assert any('teacher rankings: 160 queries' in m for m in said), said
    bad = tmp_path / 'bad.tsv'
    bad.write_text('qid\tquery\n1\tautomatic indexing\n2\tsearch\textra field\n')
    proc = selfsup('train', f'distill:queries={bad},model_name={tiny_dir}', '-c', 'classic/adi',
                   '--cache-dir', str(cache_dir), cwd=tmp_path)
    assert (proc.returncode == 2
            and f'{bad}, line 3: 3 field(s) where its header has 2' in proc.stderr)
    assert 'Traceback' not in proc.stderr
