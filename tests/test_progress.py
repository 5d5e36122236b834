"""Long stages say where they are off a terminal: plain lines at a bounded rate with done/total,
rate and time left; ``selfsup train`` says its plan first and what each stage took at the end."""
import json
import logging
import os
import re
import subprocess
import sys
import time

import pytest

from pyterrier_selfsup import progress as P
from pyterrier_selfsup.harness import plan
from pyterrier_selfsup.progress import Stage


@pytest.fixture
def lines_every(monkeypatch):
    """Lines mode at a given interval for one test (the process's setting put back after)."""
    def set_to(interval):
        monkeypatch.setattr(P, '_settings', {'mode': 'lines', 'interval': interval})
    return set_to


def test_lines_come_at_most_once_an_interval_with_counts_rate_and_time_left(lines_every, caplog):
    lines_every(0.25)
    caplog.set_level(logging.INFO, logger='pyterrier_selfsup.progress')
    for _ in P.progress(range(0, 40, 4), total=40, desc='encoding passages', unit='passage', count=lambda s: 4):
        time.sleep(0.1)
    said = [r for r in caplog.records if r.name == 'pyterrier_selfsup.progress']
    middle, end = said[:-1], said[-1]
    # 1 s of work, a line at most every 0.25 s: 3 or 4 of them, then the end's
    assert 3 <= len(middle) <= 4
    assert all(b.created - a.created >= 0.25 - 0.01 for a, b in zip(middle, middle[1:]))
    for record in middle:
        assert re.fullmatch(r'encoding passages: (\d+)/40 passages \(\d+%\), [\d.]+ passages/s, 0:0\d elapsed, '
                            r'0:0\d left', record.getMessage()), record.getMessage()
    done = [int(re.match(r'encoding passages: (\d+)/', r.getMessage()).group(1)) for r in middle]
    assert done == sorted(done) and done[-1] < 40
    assert re.fullmatch(r'encoding passages: 40 passages in 0:01 \([\d.]+ passages/s\)', end.getMessage())


def test_a_stage_shorter_than_the_interval_says_nothing_and_off_a_logger_lines_go_to_stderr(lines_every, capsys):
    lines_every(0.2)
    for _ in P.progress(range(3), desc='quick', unit='batch'):
        pass
    assert capsys.readouterr().err == ''
    for _ in P.progress(range(3), desc='slow', unit='batch'):
        time.sleep(0.1)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith('slow: 2/3 batches (67%), ') and err[-1].startswith('slow: 3 batches in 0:00')


def test_a_stage_inside_another_counts_on_its_own_only_when_it_is_shown(lines_every):
    lines_every(60)
    before = P.stage_times()
    steps = P.progress(total=2, desc='test training', unit='step')
    for step in range(2):
        for _ in P.progress(range(2), desc='test encoding passages', unit='passage', enabled=False):
            time.sleep(0.05)  # (the steps' own work)
        if step == 1:
            for _ in P.progress(range(2), desc='test encoding documents', unit='doc'):
                time.sleep(0.1)  # (a refresh: a stage of its own)
        steps.update(1)
    steps.close()
    done = P.stage_times(before)
    assert set(done) == {'test training', 'test encoding documents'}
    assert done['test encoding documents'].done == 2 and done['test training'].done == 2
    assert 0.2 <= done['test encoding documents'].seconds < 0.3
    assert 0.2 <= done['test training'].seconds < 0.3  # the refresh's 0.2 s taken off


def test_a_plan_estimates_each_stage_from_this_machines_rates_and_says_which_it_has_none_for():
    planned = [plan.Planned('writing queries', 2000, 'passage'), plan.Planned('distillation', 315, 'step'),
               plan.Planned('BM25 index', 5183, 'doc')]
    plan.estimate(planned, {'writing queries': {'rate': 2.0, 'unit': 'passage'},
                            'distillation': {'rate': 1.5, 'unit': 'step'},
                            'BM25 index': {'rate': 1.0, 'unit': 'query'}})  # (another unit: no estimate)
    assert [p.seconds for p in planned] == [1000, 210, None]
    lines = plan.plan_lines('distill on beir/scifact/test', planned)
    assert lines[1] == '  writing queries: 2,000 passages, about 16 min 40 s'
    assert lines[3] == '  BM25 index: 5,183 docs, not run on this machine yet'
    assert lines[-1].startswith('  in all: about 20 min 10 s, and 1 stage(s) this machine has not timed')


def test_rates_are_learnt_per_machine_from_stages_of_a_second_or_more(tmp_path):
    plan.learn({'a': Stage('a', 10, 10, 'doc', 2.0), 'b': Stage('b', 10, 10, 'doc', 0.1)}, tmp_path)
    assert plan.known_rates(tmp_path) == {'a': {'rate': 5.0, 'unit': 'doc', 'measured': time.strftime(
        '%Y-%m-%d', time.gmtime())}}
    every = json.loads((tmp_path / plan.RATES_FILE).read_text())
    assert list(every) == [plan.machine()]


@pytest.fixture(scope='module')
def background_train(cache_dir, tmp_path_factory):
    """``selfsup train ds`` on 40 ADI sentences in a process whose output is a pipe (as
    ``nohup ... > log`` makes it), a line every half second: each line and when it came."""
    from pyterrier_selfsup import BM25
    BM25.from_collection('classic/adi', cache_dir=cache_dir)  # built once a session: the test is of what follows
    cache = tmp_path_factory.mktemp('train-cache')
    (cache / 'pisa').symlink_to(cache_dir / 'pisa')
    env = {**os.environ, 'SELFSUP_PROGRESS_SECONDS': '0.5'}
    proc = subprocess.Popen([sys.executable, '-m', 'pyterrier_selfsup', 'train', 'ds:n_queries=40,batch_size=8', '-c',
                             'classic/adi', '--cache-dir', str(cache)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    came = [(time.monotonic(), line.rstrip('\n')) for line in proc.stdout]
    assert proc.wait() == 0, '\n'.join(line for _, line in came)
    return came, cache


def test_a_background_training_says_where_it_is_at_a_bounded_rate(background_train):
    came, _ = background_train
    steps = [(t, line) for t, line in came if 'progress: distant supervision: ' in line and '/5 steps' in line]
    assert len(steps) >= 2, '\n'.join(line for _, line in came)
    for _, line in steps:
        assert re.search(r'distant supervision: [1-5]/5 steps \(\d+%\), [\d.]+ (s/step|steps/s), \d:\d\d elapsed, '
                         r'\d:\d\d left', line), line
    assert all(b - a >= 0.5 - 0.05 for (a, _), (b, _) in zip(steps, steps[1:]))  # (a pipe delays, never hastens)
    assert not any('\r' in line or '|' in line for _, line in came)  # no bar in the log


def test_selfsup_train_says_its_plan_first_and_each_stages_time_at_the_end(background_train):
    came, cache = background_train
    text = [line for _, line in came]
    first_step = next(i for i, line in enumerate(text) if 'progress: distant supervision: ' in line)
    plan_at = next(i for i, line in enumerate(text) if line.endswith('plan: ds on classic/adi (82 documents)'))
    assert plan_at < first_step
    assert text[plan_at + 1].endswith('  BM25 index: 82 docs, not run on this machine yet (unless built before)')
    assert text[plan_at + 2].endswith('  distant supervision: 5 steps, not run on this machine yet')
    times = next(i for i, line in enumerate(text) if line.endswith('stage times:'))
    assert times > first_step
    assert re.search(r'  distant supervision: 5 steps in (\d+ min )?\d+ s \([\d.]+ (s/step|steps/s)\)$', text[times + 1])
    assert re.search(r'  in all: (\d+ min )?\d+ s$', text[times + 2])
    log = [json.loads(line) for line in next((cache / 'models').glob('*/training_log.jsonl')).read_text().splitlines()]
    assert [p['desc'] for p in log[-3]['plan']] == ['BM25 index', 'distant supervision']
    assert log[-2]['stage'] == 'distant supervision' and log[-2]['done'] == 5
    assert log[-1]['stage'] == 'in all' and log[-1]['seconds'] >= log[-2]['seconds']
    assert plan.known_rates(cache)['distant supervision']['unit'] == 'step'  # the next plan's estimate
