"""Judging by the user (issue 71): a campaign pools and blinds two pipelines' results on ADI, keeps
every grade through a crash, writes standard qrels, and reports what ``pt.Experiment`` computes
on them; the server takes posts only from its own page; a real browser judges 12 queries."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
from ir_measures import P, nDCG
from scipy import stats

from pyterrier_selfsup import Collection, RunContext
from pyterrier_selfsup.harness.judging import Campaign, CampaignError, make_app, report
from pyterrier_selfsup.harness.judging.campaign import GRADES_FILE, QRELS_FILE, TOPICS_FILE
from pyterrier_selfsup.harness.judging.server import TOKEN_HEADER, highlighted
from pyterrier_selfsup.harness.pipelines import get_pipeline

NAMES = ['bm25', 'minilm']


@pytest.fixture(scope='module')
def adi(cache_dir):
    """ADI, its first 12 queries, and BM25 and MiniLM over it."""
    collection = Collection('classic/adi')
    run = RunContext(cache_dir=cache_dir)
    pipelines = {n: get_pipeline(n).build(collection, run) for n in NAMES}
    return collection, collection.topics().head(12).reset_index(drop=True), pipelines


def relevant(collection):
    qrels = collection.qrels()
    return set(zip(qrels['qid'], qrels['docno']))


def grade_by_qrels(campaign, collection, queries):
    """Grades every pooled passage of ``queries`` by ADI's own judgements (2 or 0)."""
    known = relevant(collection)
    for qid in queries:
        for p in campaign.passages(qid):
            campaign.grade(qid, p.docno, 2 if (qid, p.docno) in known else 0)


def test_the_pool_is_each_pipelines_top_10_once_blinded_and_shuffled(adi, tmp_path):
    collection, topics, pipelines = adi
    campaign = Campaign.create(tmp_path / 'c', collection, pipelines, topics, seed=3)
    runs = {n: p(topics) for n, p in pipelines.items()}
    for qid in topics['qid']:
        tops = [r[r['qid'] == qid].sort_values('rank')['docno'].head(10).tolist()
                for r in runs.values()]
        shown = [p.docno for p in campaign.passages(qid)]
        assert sorted(shown) == sorted(set(tops[0]) | set(tops[1]))  # the union, once each
        assert len(shown) == len(set(shown))
    # (shuffled: not in either pipeline's order; the same order again from the same seed)
    firsts = [campaign.passages(q)[0].docno for q in topics['qid']]
    assert sum(f == r[r['qid'] == q].sort_values('rank')['docno'].iloc[0]
               for q, f in zip(topics['qid'], firsts) for r in runs.values()) < 8
    again = Campaign.create(tmp_path / 'd', collection, pipelines, topics, seed=3)
    assert ([p.docno for p in again.passages('1')] ==
            [p.docno for p in campaign.passages('1')])
    # blind: the pool names no pipeline; each passage's text is the collection's
    pool = pd.read_csv(tmp_path / 'c' / 'pool.tsv', sep='\t', header=None, dtype=str)
    assert pool.shape[1] == 3 and not set(NAMES) & set(pool.to_numpy().ravel())
    first = campaign.passages('1')[0]
    assert first.text == ' '.join(collection.texts([first.docno])[0].split())
    with pytest.raises(CampaignError, match='holds a campaign already'):
        Campaign.create(tmp_path / 'c', collection, pipelines, topics)


def test_every_grade_survives_a_crash_and_the_last_one_wins(adi, tmp_path):
    collection, topics, pipelines = adi
    campaign = Campaign.create(tmp_path, collection, pipelines, topics.head(2))
    a, b = [p.docno for p in campaign.passages('1')[:2]]
    campaign.grade('1', a, 0)
    campaign.grade('1', a, 2)  # changed: the log keeps both, the last wins
    campaign.grade('1', b, 1)
    with open(tmp_path / GRADES_FILE, 'a') as log:  # a write the crash cut short
        log.write('{"qid": "1", "docno": "')
    reopened = Campaign(tmp_path)
    assert (reopened.grade_of('1', a), reopened.grade_of('1', b)) == (2, 1)
    reopened.grade('1', b, 0)  # (the next grade starts on a line of its own)
    lines = (tmp_path / GRADES_FILE).read_text().splitlines()
    assert len(lines) == 5 and json.loads(lines[-1])['grade'] == 0
    assert Campaign(tmp_path).grade_of('1', b) == 0
    qrels = pt.io.read_qrels(str(tmp_path / QRELS_FILE))
    assert sorted(zip(qrels['docno'], qrels['label'])) == sorted([(a, 2), (b, 0)])
    assert (tmp_path / TOPICS_FILE).read_text() == ''  # (no query is judged in full)
    grade_by_qrels(reopened, collection, ['2'])
    assert (tmp_path / TOPICS_FILE).read_text() == f'2\t{topics["query"][1]}\n'
    with pytest.raises(CampaignError, match='is not pooled'):
        reopened.grade('1', 'no-such-doc', 2)
    with pytest.raises(CampaignError, match='a grade is one of'):
        reopened.grade('1', a, 3)


def test_the_report_is_pt_experiment_on_the_queries_judged_in_full(adi, tmp_path):
    collection, topics, pipelines = adi
    campaign = Campaign.create(tmp_path, collection, pipelines, topics)
    grade_by_qrels(campaign, collection, topics['qid'][:8])
    campaign.grade('9', campaign.passages('9')[0].docno, 2)  # (in part: left out)
    got = report(Campaign(tmp_path))
    assert (got.judged, got.partial) == (8, 1)
    # computed apart: the pipelines run again, the qrels read back from the file
    judged = topics.head(8)
    qrels = pt.io.read_qrels(str(tmp_path / QRELS_FILE))
    qrels = qrels[qrels['qid'].isin(judged['qid'])]
    apart = pt.Experiment(list(pipelines.values()), judged, qrels, [nDCG @ 10, P @ 5],
                          names=NAMES, perquery=True)
    apart = apart.pivot_table(index='qid', columns=['name', 'measure'], values='value')
    for i, name in enumerate(NAMES):
        assert got.table.iloc[i]['nDCG@10'] == pytest.approx(apart[name, 'nDCG@10'].mean())
        assert got.table.iloc[i]['P@5'] == pytest.approx(apart[name, 'P@5'].mean())
    diffs = (apart['minilm', 'nDCG@10'] - apart['bm25', 'nDCG@10']).to_numpy()
    comparison, = got.comparisons
    assert comparison.difference == pytest.approx(diffs.mean())
    assert comparison.p == pytest.approx(stats.ttest_rel(apart['minilm', 'nDCG@10'],
                                                         apart['bm25', 'nDCG@10']).pvalue)
    half = stats.t.ppf(0.975, 7) * diffs.std(ddof=1) / np.sqrt(8)
    assert (comparison.low, comparison.high) == pytest.approx((diffs.mean() - half,
                                                               diffs.mean() + half))
    assert ('clear of the noise' in comparison.sentence()) == (comparison.p < 0.05)
    # the qrels judge the same pipelines through `selfsup run --qrels` (its own run of them)
    from pyterrier_selfsup.harness.experiment import run_experiment
    from pyterrier_selfsup.harness.judging import read_judgements
    result = run_experiment(['classic/adi'], NAMES, run=RunContext(cache_dir=tmp_path / 'cache'),
                            log=lambda s: None,
                            judgements=read_judgements(tmp_path / QRELS_FILE))
    # (topics.tsv: the queries judged in full), and its figures are the report's
    assert result.results[0].topics == 8
    assert (result.results[0].table['nDCG@10'].tolist()
            == pytest.approx(got.table['nDCG@10'].tolist()))


def test_a_clear_difference_is_called_clear_and_a_vague_one_says_how_many_more_queries():
    from pyterrier_selfsup.harness.judging.reporting import Comparison, more_needed
    c = Comparison('good', 'bad', 12, 0.6, 0.5, 0.7, 1e-6, 0)
    assert c.sentence().startswith('good is better than bad: +0.600 nDCG@10 [+0.500, +0.700]')
    assert 'within' not in c.sentence()
    vague = Comparison('new', 'old', 8, 0.02, -0.1, 0.14, 0.7, 40)
    assert 'within the noise' in vague.sentence() and 'about 40 more' in vague.sentence()
    # the estimate: 80% power at alpha .05, by the t distribution at the queries it names
    diffs = np.array([0.1, -0.05, 0.2, 0.0, 0.15, -0.1, 0.05, 0.3])
    more = more_needed(diffs)
    sd, d = diffs.std(ddof=1), diffs.mean()

    def power(n):  # (the noncentral t: the chance a two-sided test at n queries rejects)
        t = stats.t.ppf(0.975, n - 1)
        return stats.nct.sf(t, n - 1, d / sd * np.sqrt(n))
    assert 0.78 < power(8 + more) and power(8 + more - 2) < 0.8
    assert more_needed(diffs, comparisons=3) > more  # (alpha shared among three)
    assert more_needed(np.zeros(5)) is None and more_needed(np.array([0.1])) is None


def test_three_pipelines_are_each_held_to_the_first_with_holms_correction(adi, tmp_path):
    collection, topics, pipelines = adi
    three = {**pipelines, 'bm25-k1': get_pipeline('bm25:k1=2.0').build(collection)}
    campaign = Campaign.create(tmp_path, collection, three, topics.head(6))
    grade_by_qrels(campaign, collection, topics['qid'][:6])
    got = report(campaign)
    apart = pt.Experiment(list(three.values()), topics.head(6), campaign.qrels(), [nDCG @ 10],
                          names=list(three), baseline=0, test='t', correction='holm')
    assert [c.name for c in got.comparisons] == ['minilm', 'bm25-k1']
    assert ([c.p for c in got.comparisons]
            == pytest.approx(apart['nDCG@10 p-value corrected'][1:].tolist(), nan_ok=True))


def test_odd_queries_are_pooled_once_under_ids_of_their_own(adi, tmp_path, caplog):
    collection, topics, pipelines = adi
    pipelines = {'bm25': pipelines['bm25'],
                 'bm25-k1': get_pipeline('bm25:k1=2.0').build(collection)}
    campaign = Campaign.create(tmp_path, collection, pipelines, topics.head(2))
    more = pd.DataFrame({'qid': ['1', '1', 'x', 'y'],
                         'query': ['<script>alert(1)</script> indexing', 'a  new  query ',
                                   topics['query'][0], 'zzzqqq']})
    added = campaign.add_queries(more, collection, pipelines)
    # a taken id gets another; a query pooled already, or found by none, is left out (said)
    assert added == ['1-2', '1-3']
    assert list(campaign.queries['query'][2:]) == ['<script>alert(1)</script> indexing',
                                                   'a new query']
    assert "no pipeline found anything for 1 queries, left out: 'zzzqqq'" in caplog.text
    page = make_app(campaign, token='t').test_client().get('/query/2').data.decode()
    assert '<script>alert' not in page and '&lt;script&gt;alert(1)&lt;/script&gt;' in page


def test_a_campaign_on_ones_own_file_reopens_from_the_command_line(adi, tmp_path, cache_dir,
                                                                   capsys):
    from pyterrier_selfsup.harness.cli import main
    collection, topics, _ = adi
    docs, log = tmp_path / 'docs.jsonl', tmp_path / 'log.txt'
    docs.write_text(''.join(json.dumps({'docno': d['docno'], 'text': d['text']}) + '\n'
                            for d in collection.corpus_iter()))
    log.write_text('\n'.join(topics['query'].head(3)) + '\n')
    directory = tmp_path / 'judged'
    args = ['judge', '-c', str(docs), '-p', 'bm25', 'bm25:k1=2.0', '--queries', str(log),
            '--dir', str(directory), '--cache-dir', str(cache_dir), '--no-serve']
    assert main(args) == 0 and len(Campaign(directory).queries) == 3
    assert main(args) == 0 and len(Campaign(directory).queries) == 3  # (again: nothing new)
    assert main(['judge', '--dir', str(directory), '--no-serve']) == 0
    assert main(['judge', '-c', 'classic/adi', '--dir', str(directory), '--no-serve']) == 2
    assert 'is a campaign of local/docs-' in capsys.readouterr().err
    # an empty query file, and one not UTF-8: each a clear error, the campaign as it was
    for content, said in ((b'', 'no query in it'), (b'caf\xe9 au lait\n', 'not UTF-8 text')):
        log.write_bytes(content)
        assert main(args) == 2 and said in capsys.readouterr().err
        assert len(Campaign(directory).queries) == 3
    docs.write_text(docs.read_text() + json.dumps({'docno': 'new', 'text': 'more'}) + '\n')
    with pytest.raises(CampaignError, match='has changed since'):
        Campaign(directory).collection()


@pytest.fixture
def served(adi, tmp_path):
    collection, topics, pipelines = adi
    campaign = Campaign.create(tmp_path, collection, pipelines, topics.head(2))
    app = make_app(campaign, token='secret', pipelines=lambda: pipelines, collection=collection)
    return campaign, app.test_client()


def test_reopening_a_campaign_loads_no_model(served):
    """A restart to go on judging (``selfsup judge --dir DIR``) reads the campaign's files and
    builds its pipelines only when a typed query needs them: no torch, so it starts in seconds."""
    campaign, _ = served
    probe = ('import sys; from pyterrier_selfsup.harness.cli import main; '
             f'code = main(["judge", "--dir", {str(campaign.directory)!r}, "--no-serve"]); '
             'print(code, "torch" in sys.modules)')
    proc = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True)
    assert proc.stdout.splitlines()[-1] == '0 False', proc.stdout + proc.stderr
    assert f'selfsup judge --report {campaign.directory}' in proc.stdout


def test_the_server_takes_posts_only_from_its_own_page(served):
    campaign, client = served
    docno = campaign.passages('1')[0].docno
    body = {'qid': '1', 'docno': docno, 'grade': 2}
    page = client.get('/query/0', headers={'Host': '127.0.0.1:8765'})
    assert page.status_code == 200 and b'content="secret"' in page.data
    refused = client.post('/grade', json=body)  # no token: a page of an earlier server's
    assert refused.status_code == 403 and 'reload the page' in refused.json['error']
    assert client.post('/grade', json=[1, 2], headers={TOKEN_HEADER: 'secret'}).status_code == 400
    assert client.post('/grade', json=body, headers={TOKEN_HEADER: 'guess'}).status_code == 403
    assert campaign.grade_of('1', docno) is None
    # another name for this address (DNS rebinding): refused, token or not
    assert client.get('/query/0', headers={'Host': 'evil.example:8765'}).status_code == 403
    ok = client.post('/grade', json=body, headers={TOKEN_HEADER: 'secret'})
    assert ok.status_code == 200 and ok.json['graded'] == 1 and campaign.grade_of('1', docno) == 2
    again = client.post('/grade', json=body, headers={TOKEN_HEADER: 'secret'})  # (the same)
    assert again.status_code == 200 and again.json['graded'] == 1
    assert len((campaign.directory / GRADES_FILE).read_text().splitlines()) == 2
    for unknown in ({**body, 'qid': 'no-such-query'}, {**body, 'docno': 'no-such-doc'}):
        bad = client.post('/grade', json=unknown, headers={TOKEN_HEADER: 'secret'})
        assert bad.status_code == 400 and 'is not pooled' in bad.json['error']
    big = client.post('/grade', data='x' * 20_000, content_type='application/json',
                      headers={TOKEN_HEADER: 'secret'})
    assert big.status_code == 413
    bad = client.post('/grade', json={**body, 'grade': 7}, headers={TOKEN_HEADER: 'secret'})
    assert bad.status_code == 400 and 'a grade is one of' in bad.json['error']
    # files: the qrels and topics, nothing else of the campaign's, nothing outside it
    assert client.get(f'/files/{QRELS_FILE}').data.decode() == f'1 0 {docno} 2\n'
    for path in ['/files/grades.jsonl', '/files/../campaign.json', '/files/%2e%2e/campaign.json',
                 '/files//etc/passwd', '/query/99']:
        assert client.get(path, follow_redirects=True).status_code == 404, path


def test_one_server_serves_a_campaign_at_a_time(served):
    import threading

    from pyterrier_selfsup.harness.judging import serve
    campaign, _ = served
    said = []
    first = threading.Thread(target=serve, args=(campaign,), kwargs={'port': 0, 'say': said.append},
                             daemon=True)
    first.start()
    while not said and first.is_alive():
        time.sleep(0.05)
    with pytest.raises(CampaignError, match='another server is serving'):
        serve(Campaign(campaign.directory), port=0)
    port = int(said[0].split()[2].rstrip('/').rsplit(':', 1)[1])
    other = Campaign.create(campaign.directory.parent / 'other', campaign.collection(),
                            dict.fromkeys(campaign.pipelines))
    with pytest.raises(CampaignError, match=rf'cannot serve on 127.0.0.1:{port}, .*--port'):
        serve(other, port=port)  # (the port the first server holds)


def test_a_typed_query_is_pooled_and_judged(served):
    campaign, client = served
    asked = client.post('/queries', json={'query': 'the  retrieval of documents'},
                        headers={TOKEN_HEADER: 'secret'})
    assert asked.status_code == 200 and asked.json['url'] == '/query/2'
    assert campaign.queries['query'].iloc[-1] == 'the retrieval of documents'
    shown = client.get('/query/2').data.decode()
    assert '<mark>retrieval</mark>' in shown and '<mark>documents</mark>' in shown
    assert len(campaign.passages('typed-3')) >= 10
    again = client.post('/queries', json={'query': 'the retrieval of documents'},
                        headers={TOKEN_HEADER: 'secret'})
    assert again.json['url'] == '/query/2' and len(campaign.queries) == 3


def test_highlighting_marks_the_querys_words_and_escapes_the_rest():
    shown = highlighted('Indexing <b>of</b> Documents, and indexes.', 'document indexing')
    assert str(shown) == '<mark>Indexing</mark> &lt;b&gt;of&lt;/b&gt; Documents, and indexes.'


# the browser test: a real headless Chromium, as Debian packages it
CHROMIUM, DRIVER = shutil.which('chromium'), shutil.which('chromedriver')


def start_server(directory: Path, cache_dir, *extra) -> tuple:
    """``selfsup judge`` in a process of its own; (process, its address) once it listens."""
    proc = subprocess.Popen([sys.executable, '-m', 'pyterrier_selfsup', 'judge', '--dir',
                             str(directory), '--port', '0', '--cache-dir', str(cache_dir),
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    said = []
    for line in proc.stdout:
        said.append(line)
        if line.startswith('judging page: '):
            return proc, line.split()[2].rstrip('/')
    raise AssertionError(f'the server did not start: {"".join(said)[-2000:]}')


@pytest.mark.skipif(not (CHROMIUM and DRIVER),
                    reason="no headless Chromium: Debian's chromium and chromium-driver packages "
                           'are not installed (.ci/run installs them)')
def test_a_user_judges_6_adi_queries_in_a_browser_through_a_killed_server(adi, tmp_path,
                                                                         cache_dir, capsys):
    """Every passage of 6 ADI queries graded by mouse and keyboard, the server killed after 3
    and started again; the qrels equal the grades given, and the report's nDCG@10 equals
    pt.Experiment's on them. With $SELFSUP_SCREENSHOT set, the page's picture is saved there
    (docs/images/judging.png)."""
    from selenium import webdriver
    from selenium.webdriver import ActionChains
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    collection, topics, pipelines = adi
    topics = topics.head(6)  # (the suite's time: a grade a passage, each awaited)
    queries = tmp_path / 'queries.jsonl'
    queries.write_text(''.join(json.dumps({'qid': q, 'query': t}) + '\n'
                               for q, t in zip(topics['qid'], topics['query'])))
    directory = tmp_path / 'campaign'
    proc, address = start_server(directory, cache_dir, '-c', 'classic/adi', '-p', *NAMES,
                                 '--queries', str(queries))
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ['--headless=new', '--no-sandbox', '--disable-dev-shm-usage',
                 '--window-size=1100,900']:
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(DRIVER), options=options)
    wait = WebDriverWait(browser, 30, poll_frequency=0.02)
    keys = ActionChains(browser)

    def state(item):  # the passage's grade, and whether the page says it is saved
        return browser.execute_script(
            'const li = document.querySelector(arguments[0]);'
            "return li.dataset.grade + ' ' + li.querySelector('.state').textContent", item)
    known, clicked = relevant(collection), {}
    try:
        browser.get(address + '/')
        for n in range(len(topics)):
            if n == 3:  # halfway: the server is killed, and started again on the same campaign
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                proc, address = start_server(directory, cache_dir)
                browser.get(address + '/')  # (it resumes at the first query not judged in full)
            wait.until(lambda b: b.current_url.endswith(f'/query/{n}'))
            qid = browser.find_element(By.ID, 'query').get_attribute('data-qid')
            assert qid == topics['qid'][n]
            docnos = browser.execute_script(
                "return Array.from(document.querySelectorAll('#passages .passage'), "
                'li => li.dataset.docno)')
            for i, docno in enumerate(docnos):
                grade = 2 if (qid, docno) in known else (1 if i % 5 == 4 else 0)
                item = f'#passages .passage:nth-child({i + 1})'
                if i % 3 == 1:  # by the keyboard: the page's focus moves to the next ungraded
                    keys.send_keys(str(grade)).perform()
                else:
                    if n == 0 and i == 0:  # a grade changed: the last one wins
                        browser.find_element(By.CSS_SELECTOR, f'{item} button[data-grade="1"]'
                                             ).click()
                        wait.until(lambda b: state(item) == '1 saved')
                    browser.find_element(By.CSS_SELECTOR, f'{item} button[data-grade="{grade}"]'
                                         ).click()
                wait.until(lambda b: state(item) == f'{grade} saved')
                clicked[qid, docno] = grade
                if n == 1 and i == 2:  # (the docs' picture, where $SELFSUP_SCREENSHOT names)
                    browser.execute_script('window.scrollTo(0, 0)')
                    browser.save_screenshot(str(os.environ.get('SELFSUP_SCREENSHOT')
                                                or tmp_path / 'judging.png'))
            keys.send_keys('\n').perform()  # Enter: on to the next query
        wait.until(lambda b: b.current_url.endswith('/report'))
        shown = {row.find_element(By.TAG_NAME, 'td').text:
                 float(row.find_element(By.CLASS_NAME, 'ndcg').text)
                 for row in browser.find_elements(By.CSS_SELECTOR, '#table tbody tr')}
        verdict = browser.find_element(By.ID, 'verdicts').text
    finally:
        browser.quit()
        proc.terminate()
        proc.wait()
    qrels = pt.io.read_qrels(str(directory / QRELS_FILE))
    assert dict(zip(zip(qrels['qid'], qrels['docno']), qrels['label'])) == clicked
    assert len(clicked) == sum(len(Campaign(directory).passages(q)) for q in topics['qid'])
    assert len((directory / GRADES_FILE).read_text().splitlines()) == len(clicked) + 1
    # the report's nDCG@10, against pt.Experiment's on the qrels file, computed apart
    apart = pt.Experiment(list(pipelines.values()), topics, qrels, [nDCG @ 10], names=NAMES)
    assert shown == {n: round(v, 4) for n, v in zip(apart['name'], apart['nDCG@10'])}
    # and its words: the paired t-test's p, computed apart, and whether it clears 0.05
    each = pt.Experiment(list(pipelines.values()), topics, qrels, [nDCG @ 10], names=NAMES,
                         perquery=True).pivot_table(index='qid', columns='name', values='value')
    p = stats.ttest_rel(each['minilm'], each['bm25']).pvalue
    assert f'p={p:.3g}' in verdict and ('clear of the noise' in verdict) == (p < 0.05), verdict
    from pyterrier_selfsup.harness.cli import main
    assert main(['judge', '--report', str(directory)]) == 0
    reported = capsys.readouterr().out
    assert '6 queries judged in full' in reported
    assert f'| minilm | {apart["nDCG@10"][1]:.4f} |' in reported
