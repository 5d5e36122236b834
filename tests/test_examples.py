"""Every script in examples/ runs here, as a user runs it (``python examples/x.py args``:
the file executed as ``__main__`` with its arguments), on ADI with small settings given
through its own arguments, so that none of them can rot. Each test then checks numbers
the script computed (the globals it leaves), against what the package gives directly.

The README's own code blocks are covered by tests/test_readme.py, the notebook by
tests/test_walkthrough.py.
"""
import json
import runpy
import sys
from pathlib import Path

import pandas as pd
import pytest

from pyterrier_selfsup import Collection

EXAMPLES = Path(__file__).resolve().parents[1] / 'examples'
ADI = 'classic/adi'


@pytest.fixture
def run_example(cache_dir, tmp_path, monkeypatch, classic_from_the_mirror):
    """``run_example(script, *args)``: examples/<script> run as ``__main__`` with ``args`` in a
    fresh working directory, the test session's cache as ``$SELFSUP_CACHE``, as for a user who
    has just cloned the repository: ``$SELFSUP_CLASSIC_DATA`` unset, ADI downloaded on first
    use (from a server on 127.0.0.1 that serves the local copy); returns the globals it ended
    with."""
    monkeypatch.setenv('SELFSUP_CACHE', str(cache_dir))
    monkeypatch.chdir(tmp_path)

    def run(script: str, *args: str) -> dict:
        monkeypatch.setattr(sys, 'argv', [str(EXAMPLES / script), *map(str, args)])
        return runpy.run_path(str(EXAMPLES / script), run_name='__main__')
    return run


def nDCG10(table: pd.DataFrame, name: str) -> float:
    return float(table.set_index('name').loc[name, 'nDCG@10'])


def test_every_example_has_a_test():
    import re
    tested = set(re.findall(r"run_example\('(\w+\.py)'", Path(__file__).read_text()))
    assert tested == {p.name for p in EXAMPLES.glob('*.py')}


@pytest.mark.slow
def test_rerank_from_stored_vectors_scores_as_reencoding_does(run_example):
    # 5 of ADI's 35 queries: re-encoding every candidate of each query is most of the cost (the
    # whole collection's numbers: tests/test_bm25.py, tests/test_dense.py, tests/test_readme.py)
    table = run_example('rerank_bm25_with_minilm.py', ADI, '--queries', 5)['table']
    assert nDCG10(table, 'BM25') != nDCG10(table, 'MiniLM')
    stored, text = (table.set_index('name').loc[f'BM25 >> MiniLM ({how})']
                    for how in ('stored vectors', 're-encoded'))
    assert stored['nDCG@10'] == text['nDCG@10'] and stored['R@100'] == pytest.approx(text['R@100'])
    # (what each form costs is measured in the results file rerank_cost.md, not asserted here)


@pytest.mark.slow
def test_distant_supervision_then_the_saved_model_loads_back_to_the_same_numbers(run_example,
                                                                                 tmp_path):
    trained = run_example('distant_supervision.py', ADI, '--queries', 8, '--output-dir',
                          tmp_path / 'ds')
    assert trained['queries']['query'].nunique() == len(trained['queries']) <= 8
    adapted = nDCG10(trained['table'], 'MiniLM adapted')
    assert adapted != nDCG10(trained['table'], 'MiniLM')  # one step moved it
    loaded = run_example('load_trained_model.py', tmp_path / 'ds' / 'final', ADI, '--query',
                         'computer indexing')
    assert nDCG10(loaded['table'], str(tmp_path / 'ds' / 'final')) == adapted
    assert list(loaded['results']['qid'].unique()) == ['0'] and len(loaded['results']) == 82


@pytest.mark.slow
def test_distillation(run_example, tmp_path):
    ran = run_example('distillation.py', ADI, '--queries', 8, '--rounds', 1, '--output-dir',
                      tmp_path / 'distill')
    table = ran['table']
    # SmolLM2's, from passages
    assert len(ran['queries']) == 8 and ran['queries']['source_docno'].nunique() > 1
    # the fused teacher (tests/test_distill.py: above both of its parts on ADI)
    assert nDCG10(table, 'teacher (BM25 + MiniLM)') > max(nDCG10(table, 'BM25'),
                                                          nDCG10(table, 'MiniLM'))
    # one step moved the query tower
    assert nDCG10(table, 'MiniLM distilled') != nDCG10(table, 'MiniLM')
    steps = [json.loads(line)
             for line in (tmp_path / 'distill' / 'training_log.jsonl').read_text().splitlines()]
    assert len([s for s in steps if 'loss' in s]) == 1  # 8 queries: one batch of 32, one round
    assert (tmp_path / 'distill' / 'final' / 'config_sentence_transformers.json').exists()


def test_rerank_with_generator(run_example):
    import sqlite3

    from pyterrier_selfsup.models.score_cache import SCORE_DB
    ran = run_example('rerank_with_generator.py', ADI, '--depth', 5, '--queries', 6)
    # the same five documents a query, reordered
    assert nDCG10(ran['table'], 'BM25') != nDCG10(ran['table'], 'BM25 top 5 >> SmolLM2 log p(q|d)')
    assert ran['table'].set_index('name')['RR@10'].nunique() == 2
    # every pair scored once, kept for next time
    with sqlite3.connect(ran['scorer'].cache_path / SCORE_DB) as db:
        assert db.execute('SELECT COUNT(*) FROM cache').fetchone()[0] == len(
            ran['bm25'](ran['collection'].topics().head(6)).query('rank < 5'))


def test_reatt_token_index(run_example):
    table = run_example('reatt_token_index.py', ADI, '--candidate-tokens', 64)['table']
    rows = table.set_index('name')
    assert rows.loc['ReAtt, exact', 'R@100'] == 1.0  # every document of ADI (82) scored
    # MiniLM's head: weak on ADI
    assert rows.loc['ReAtt, exact', 'nDCG@10'] == pytest.approx(0.2839, abs=2e-3)
    # 64 tokens a query token reach every document of ADI's 6,052 tokens:
    # the two stages are exact here
    assert (rows.loc["ReAtt, two stages (K'=64)", ['nDCG@10', 'R@100']]
            == rows.loc['ReAtt, exact', ['nDCG@10', 'R@100']]).all()


@pytest.mark.slow
@pytest.mark.parametrize('method', ['rumbart'])  # (ACROBArT: tests/test_cli.py trains it)
def test_retrieve_and_reconstruct(run_example, tmp_path, method):
    ran = run_example('reconstruction.py', ADI, '--method', method, '--queries', 4, '--k', 2,
                      '--passage-tokens', 64, '--output-dir', tmp_path / method)
    assert ran['adapted'].state['step'] == 1  # 4 queries, one batch
    assert nDCG10(ran['table'], f'MiniLM + {method}') != nDCG10(ran['table'], 'MiniLM')
    assert ((tmp_path / method / 'training_log.jsonl').exists() and
            (tmp_path / method / 'final' / 'modules.json').exists())


def test_cross_document_adjustment(run_example, tmp_path):
    table = run_example('cross_document_adjustment.py', ADI, '--queries', 4, '--epochs', 1,
                        '--output-dir', tmp_path / 'reatt')['table']
    # the head's keys moved (tests/test_cli.py holds a longer run to its committed nDCG@10)
    assert nDCG10(table, 'ReAtt adjusted') != nDCG10(table, 'ReAtt zero-shot')
    assert (tmp_path / 'reatt' / 'final' / 'config.json').exists()


def test_your_own_corpus_on_a_corpus_it_has_never_seen(run_example, tmp_path):
    """A JSONL of documents under new ids, a plain file of queries, no qrels: trained as the
    command line trains, searched, copied; then loaded back and searched by
    load_trained_model.py."""
    adi = Collection(ADI)
    with open(tmp_path / 'docs.jsonl', 'w') as out:
        for doc in adi.corpus_iter():
            out.write(json.dumps({'docno': f'doc-{doc["docno"]}', 'text': doc['text']}) + '\n')
    (tmp_path / 'queries.txt').write_text('\n'.join(adi.topics()['query'].head(12)) + '\n')
    ran = run_example('your_own_corpus.py', tmp_path / 'docs.jsonl', tmp_path / 'queries.txt',
                      '--settings', 'rounds=1', '--output', tmp_path / 'mine')
    corpus = ran['corpus']
    assert corpus.name.startswith('local/docs-') and corpus.docs_count == 82
    assert set(ran['runs']['adapted']['docno']) <= {f'doc-{d["docno"]}' for d in adi.corpus_iter()}
    assert ran['runs']['adapted']['qid'].nunique() == 12
    with pytest.raises(ValueError, match='has no relevance judgements'):
        corpus.qrels()
    # the command line's call: the same pipeline, settings and cache entry
    assert ran['distill'].model_dir(corpus) == ran['final'].parent
    loaded = run_example('load_trained_model.py', tmp_path / 'mine',
                         '--docs', tmp_path / 'docs.jsonl',
                         '--query', adi.topics()['query'].iloc[0], '--precision', 'fp32')
    first = ran['runs']['adapted'].query('qid == "1"').head(10)
    # the copied model, at the precision distill searched in (fp32), ranks and scores as the
    # trained one
    assert loaded['results'].head(10)['docno'].tolist() == first['docno'].tolist()
    assert (loaded['results'].head(10)['score'].tolist()
            == pytest.approx(first['score'].tolist(), abs=1e-5))


def test_your_own_corpus_without_queries_from_a_csv(run_example, tmp_path):
    """Corpus only, the shipped setting: the generator writes the queries."""
    adi = Collection(ADI)
    pd.DataFrame(list(adi.corpus_iter())).head(40).to_csv(tmp_path / 'docs.csv', index=False)
    ran = run_example('your_own_corpus.py', tmp_path / 'docs.csv', '--settings',
                      'n_queries=6,rounds=1', '--output',
                      tmp_path / 'csv')
    assert ran['corpus'].docs_count == 40 and ran['distill'].settings['queries'] == 'sampled'
    assert (tmp_path / 'csv' / 'modules.json').is_file() and len(ran['runs']['adapted']) > 0


def test_distill_data_parallel_on_one_process(run_example, tmp_path):
    ran = run_example('distill_data_parallel.py', ADI, tmp_path / 'dp', 32)  # a step a round
    assert ran['world_size'] == 1 and len([r for r in ran['trainer'].log if 'loss' in r]) > 1
