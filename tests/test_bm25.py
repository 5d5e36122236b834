import logging
import os
import shutil
import signal
import subprocess
import sys

import pandas as pd
import pyterrier as pt
import pytest
from ir_measures import nDCG

from pyterrier_selfsup import BM25, Collection
from pyterrier_selfsup.retrieval.bm25 import pisa_safe


@pytest.fixture(scope='module')
def cranfield_bm25(cache_dir):
    return BM25.from_collection('cranfield', cache_dir=cache_dir)


def test_scifact_ndcg_matches_reference(cache_dir):
    # DESIGN.md: BM25 (PISA, porter2, k1=0.9, b=0.4) on the full scifact test set: .678
    coll = Collection('beir/scifact/test')
    result = pt.Experiment([BM25.from_collection(coll, cache_dir=cache_dir)], coll.topics(),
                           coll.qrels(), [nDCG @ 10])
    assert result['nDCG@10'][0] == pytest.approx(0.6776, abs=5e-4)


def test_index_is_reused_not_rebuilt(cranfield_bm25, cache_dir, monkeypatch):
    path = cranfield_bm25.index.path
    files = {f: os.stat(path / f).st_mtime_ns for f in os.listdir(path)}
    monkeypatch.setattr('pyterrier_pisa.PisaIndex.index',
                        lambda *a, **k: pytest.fail('index rebuilt'))
    again = BM25.from_collection('cranfield', cache_dir=cache_dir)
    assert again.index.path == path
    assert {f: os.stat(path / f).st_mtime_ns for f in os.listdir(path)} == files


def test_other_settings_get_their_own_index(cranfield_bm25, cache_dir):
    other = BM25.from_collection('cranfield', stemmer='none', cache_dir=cache_dir)
    assert other.index.path != cranfield_bm25.index.path
    topics = pd.DataFrame({'qid': ['1'], 'query': ['flows']})
    assert len(cranfield_bm25(topics)) > len(other(topics))  # porter2 also matches "flow"


def test_results_and_cutoff(cranfield_bm25):
    topics = Collection('cranfield').topics().head(3)
    results = cranfield_bm25(topics)
    assert list(results.columns[:5]) == ['qid', 'query', 'docno', 'score', 'rank']
    assert results.groupby('qid').size().max() == 1000 or len(results) < 3000
    assert results.groupby('qid')['rank'].min().eq(0).all()
    top5 = (cranfield_bm25 % 5).compile()
    assert isinstance(top5, BM25) and top5.num_results == 5
    pd.testing.assert_frame_equal((cranfield_bm25 % 5)(topics),
                                  results[results['rank'] < 5].reset_index(drop=True))


def test_query_text_made_safe_for_pisa(cranfield_bm25):
    assert pisa_safe('boundary layer: flow\x00 over\ta plate') == 'boundary layer flow over a plate'
    topics = pd.DataFrame({'qid': ['a', 'b'],
                           'query': ['boundary layer: flow\x00', 'boundary layer flow']})
    results = cranfield_bm25(topics)
    a, b = (results[results.qid == q].drop(columns=['qid', 'query']).reset_index(drop=True)
            for q in 'ab')
    assert len(a) > 0
    # the words before ':' are searched, not dropped as a PISA query id
    pd.testing.assert_frame_equal(a, b)
    # original text kept
    assert set(results[results.qid == 'a']['query']) == {'boundary layer: flow\x00'}


def test_topics_without_query_column(cranfield_bm25):
    with pytest.raises(pt.validate.InputValidationError, match='query'):
        cranfield_bm25(pd.DataFrame({'qid': ['1'], 'text': ['flow']}))


def test_empty_topics_give_empty_results(cranfield_bm25):
    results = cranfield_bm25(pd.DataFrame({'qid': [], 'query': []}))
    assert len(results) == 0
    assert list(results.columns) == ['qid', 'query', 'docno', 'score', 'rank']


KILLED_BUILD = '''
import os, signal, sys
import pyterrier_pisa
from pyterrier_selfsup import BM25
# Die once PISA has written the index files, before the build is marked complete:
# the state in which a half-written index looks most like a finished one.
pyterrier_pisa.PisaIndex.bm25 = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
BM25.from_collection('cranfield', cache_dir=sys.argv[1])
'''


def test_killed_build_is_detected_and_rebuilt(cranfield_bm25, tmp_path, caplog):
    proc = subprocess.run([sys.executable, '-c', KILLED_BUILD, str(tmp_path)], capture_output=True)
    assert proc.returncode == -signal.SIGKILL
    leftovers = [p for p in (tmp_path / 'pisa').iterdir() if not p.name.endswith('.lock')]
    assert [p.name for p in leftovers] == [cranfield_bm25.index.path.name + '.partial']
    assert (leftovers[0] / 'inv.docs').exists()  # PISA had written its files

    with caplog.at_level(logging.WARNING, logger='pyterrier_selfsup'):
        rebuilt = BM25.from_collection('cranfield', cache_dir=tmp_path)
    assert 'incomplete build' in caplog.text
    topics = Collection('cranfield').topics()
    pd.testing.assert_frame_equal(rebuilt(topics), cranfield_bm25(topics))


def test_half_written_index_directory_is_rebuilt(cranfield_bm25, tmp_path, caplog):
    # A directory at the final path that lacks the completion marker (e.g. copied, or
    # written by an older build) and misses one of PISA's files.
    broken = tmp_path / 'pisa' / cranfield_bm25.index.path.name
    shutil.copytree(cranfield_bm25.index.path, broken)
    (broken / '.selfsup-complete').unlink()
    (broken / 'inv.docs').unlink()
    with caplog.at_level(logging.WARNING, logger='pyterrier_selfsup'):
        rebuilt = BM25.from_collection('cranfield', cache_dir=tmp_path)
    assert 'incomplete build' in caplog.text
    assert (broken / 'inv.docs').exists() and (broken / '.selfsup-complete').exists()
    topics = Collection('cranfield').topics().head(20)
    pd.testing.assert_frame_equal(rebuilt(topics), cranfield_bm25(topics))
