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
from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.harness import plan
from pyterrier_selfsup.progress import Stage
from pyterrier_selfsup.training.settings import (
    CrossDocumentAdjustmentSettings,
    DistillationSettings,
    RumbartSettings,
)
from tests.helpers import stopped_at_step


class Clock:
    """A fake monotonic clock for the progress module: each stage's timing exact, whatever
    the machine's load."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now

    def tick(self, seconds):
        self.now += seconds


@pytest.fixture
def lines_every(monkeypatch, caplog):
    """Lines mode at a given interval for one test, on a fake clock; the lines go to stderr
    (the progress logger held below INFO, whatever an in-process CLI test left it at)."""
    clock = Clock()
    monkeypatch.setattr(P, 'time', clock)
    caplog.set_level(logging.WARNING, logger='pyterrier_selfsup.progress')

    def set_to(interval):
        # (the timer thread's lines held: this clock moves only when the test moves it)
        monkeypatch.setattr(P, '_settings', {'mode': 'lines', 'interval': interval,
                                             'heartbeat': False})
        return clock
    return set_to


def test_lines_come_at_most_once_an_interval_with_counts_rate_and_time_left(lines_every, capsys):
    clock = lines_every(2.5)
    for _ in P.progress(range(0, 40, 4), total=40, desc='encoding passages', unit='passage',
                        count=lambda s: 4):
        clock.tick(1)  # 1 s a batch of 4: a line every third batch
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        'encoding passages: 12/40 passages (30%), 4.0 passages/s, 0:03 elapsed, 0:07 left',
        'encoding passages: 24/40 passages (60%), 4.0 passages/s, 0:06 elapsed, 0:04 left',
        'encoding passages: 36/40 passages (90%), 4.0 passages/s, 0:09 elapsed, 0:01 left',
        'encoding passages: 40 passages in 0:10 (4.0 passages/s)']


def test_lines_go_to_the_progress_logger_where_logging_shows_them(lines_every, caplog):
    clock = lines_every(1)
    caplog.set_level(logging.INFO, logger='pyterrier_selfsup.progress')
    steps = P.progress(total=3, desc='training', unit='step')
    for _ in range(3):
        clock.tick(2)
        steps.set_postfix(loss='0.5000')
        steps.update(1)
    steps.close()
    assert [r.getMessage() for r in caplog.records if r.name == 'pyterrier_selfsup.progress'] == [
        'training: 1/3 steps (33%), 2.0 s/step, 0:02 elapsed, 0:04 left, loss 0.5000',
        'training: 2/3 steps (67%), 2.0 s/step, 0:04 elapsed, 0:02 left, loss 0.5000',
        'training: 3/3 steps (100%), 2.0 s/step, 0:06 elapsed, 0:00 left, loss 0.5000',
        'training: 3 steps in 0:06 (2.0 s/step), loss 0.5000']


def test_a_resumed_stage_ends_with_what_it_did_itself_and_where_it_began(lines_every, capsys):
    clock = lines_every(2.5)
    # (a write stopped after 24 of 40 passages, resumed: 16 more in 4 s)
    for _ in P.progress(range(24, 40, 4), total=40, initial=24, desc='writing queries',
                        unit='passage', count=lambda s: 4):
        clock.tick(1)
    assert capsys.readouterr().err.splitlines() == [
        'writing queries: 36/40 passages (90%), 4.0 passages/s, 0:03 elapsed, 0:01 left',
        'writing queries: 16 passages in 0:04 (4.0 passages/s), resumed after 24']


def test_a_stage_shorter_than_the_interval_says_nothing(lines_every, capsys):
    clock = lines_every(30)
    for _ in P.progress(range(3), desc='quick', unit='batch'):
        clock.tick(9)
    assert capsys.readouterr().err == ''
    for _ in P.progress(range(3), desc='slow', unit='batch'):
        clock.tick(11)
    assert capsys.readouterr().err.splitlines() == [
        'slow: 3/3 batches (100%), 11.0 s/batch, 0:33 elapsed, 0:00 left',
        'slow: 3 batches in 0:33 (11.0 s/batch)']


def test_a_stage_inside_another_counts_on_its_own_only_when_it_is_shown(lines_every, capsys):
    clock = lines_every(10)
    before = P.stage_times()
    steps = P.progress(total=2, desc='test training', unit='step')
    for step in range(2):
        for _ in P.progress(range(2), desc='test encoding passages', unit='passage', enabled=False):
            clock.tick(5)  # (the steps' own work)
        if step == 1:
            for _ in P.progress(range(2), desc='test encoding documents', unit='doc'):
                clock.tick(7)  # (a refresh: a stage of its own)
        steps.update(1)
    steps.close()
    done = P.stage_times(before)
    assert ({k: (v.done, v.seconds) for k, v in done.items()}
            == {'test training': (2, 20.0), 'test encoding documents': (2, 14.0)})
    assert P._open == []
    # the outer stage's rate and time left leave out the inner one's 14 s
    assert capsys.readouterr().err.splitlines() == [
        'test training: 1/2 steps (50%), 10.0 s/step, 0:10 elapsed, 0:10 left',
        'test encoding documents: 2/2 docs (100%), 7.0 s/doc, 0:14 elapsed, 0:00 left',
        'test encoding documents: 2 docs in 0:14 (7.0 s/doc)',
        'test training: 2/2 steps (100%), 10.0 s/step, 0:34 elapsed, 0:00 left',
        'test training: 2 steps in 0:34 (10.0 s/step)']


def test_resident_memory_is_the_processs_own_now_and_its_peak():
    import numpy as np
    before, peak_before = P.resident_gib(), P.peak_resident_gib()
    held = np.ones(3 * 2 ** 27 // 8 * 2)  # 768 MiB, touched
    now = P.resident_gib()
    assert 0.7 < now - before < 0.8 and P.peak_resident_gib() >= max(now, peak_before)
    # a process started from this one (which holds the array) reports its own peak, not this one's
    child = subprocess.run([sys.executable, '-c', 'from pyterrier_selfsup import progress as P; '
                            'print(P.peak_resident_gib())'],
                           capture_output=True, text=True, check=True)
    assert float(child.stdout) < P.peak_resident_gib() - 0.7
    del held
    assert P.resident_gib() < now - 0.7  # (numpy gives a large array back to the system)


def test_the_stage_that_raised_the_peak_memory_says_so():
    """scifact's adjustment peaked at 4.70 GiB while its 625 steps held 3.36-3.38 (2026-11-26): the
    stage times now say which stage set the peak."""
    import numpy as np
    P.set_progress('off')
    try:
        before = P.stage_times()
        with P.progress(total=1, desc='test holds nothing', unit='item') as stage:
            stage.update(1)
        # GiB: past this process's peak so far
        above = P.peak_resident_gib() - P.resident_gib() + 0.3
        with P.progress(total=1, desc='test allocates', unit='item') as stage:
            held = np.ones(int(above * 2 ** 30) // 8)
            stage.update(1)
        del held
        done = P.stage_times(before)
    finally:
        P.set_progress('auto')
    assert done['test holds nothing'].peak_gib is None
    assert done['test allocates'].peak_gib == pytest.approx(P.peak_resident_gib(), abs=0.01)
    lines = plan.times_lines(done, 2.0)
    assert lines[1].startswith('  test holds nothing: 1 item in 0 s') and 'peak' not in lines[1]
    assert lines[2].endswith(f'; the peak memory rose to {P.peak_resident_gib():.2f} GiB')
    assert (plan.log_records([], done, 2.0)[2]['peak raised to GiB']
            == done['test allocates'].peak_gib)


def test_an_iterable_never_consumed_is_no_stage(lines_every):
    lines_every(600)
    before = P.stage_times()
    P.progress(range(5), desc='test never', unit='item')
    assert P.stage_times(before) == {} and P._open == []


def test_a_plan_estimates_each_stage_from_this_machines_rates_and_says_which_it_has_none_for():
    planned = [plan.Planned('writing queries', 2000, 'passage'),
               plan.Planned('distillation', 315, 'step'), plan.Planned('BM25 index', 5183, 'doc')]
    context = plan.run_context(DistillationSettings(), 1)
    plan.estimate(planned, {
        'writing queries (1 process(es))': {'rate': 2.0, 'unit': 'passage'},
        'distillation (batch 32x1, 1 process(es))': {'rate': 1.5, 'unit': 'step'},
        'distillation (batch 64x1, 1 process(es))': {'rate': 9.0, 'unit': 'step'},
        'BM25 index (1 process(es))': {'rate': 1.0, 'unit': 'query'}},  # (another unit: none)
        context)
    assert [p.seconds for p in planned] == [1000, 210, None]
    lines = plan.plan_lines('distill on beir/scifact/test', planned)
    assert lines[1] == '  writing queries: 2,000 passages, about 16 min 40 s'
    assert lines[3] == '  BM25 index: 5,183 docs, not run on this machine yet'
    assert lines[-1].startswith('  in all: about 20 min 10 s, '
                                'and 1 stage(s) this machine has not timed')


def test_a_distillation_training_its_passages_plans_an_encoding_a_round_and_its_step_rate():
    """A plan once said 9 s for a both-towers distillation that took minutes: the step rate it used
    was the query tower's, and it counted one encoding of the corpus, not one a round."""
    from pyterrier_selfsup import Collection
    from pyterrier_selfsup.harness.trained import typed_settings
    adi = Collection('classic/adi')
    # (the start index, then one afresh for each of rounds 2-5, whose teacher reads the student;
    # a teacher that does not, BM25, reads the start index alone)
    for settings, encoded in [({}, 82), ({'passages': 'trained'}, 82 * 5),
                              ({'passages': 'trained', 'teacher': 'bm25'}, 82)]:
        five_rounds = typed_settings('distill', dict(settings, rounds=5))
        planned = {p.desc: p for p in plan.stages(adi, 'distill', five_rounds, False)}
        assert planned['encoding documents'].size == encoded
    query_tower = plan.run_context(typed_settings('distill', {}))
    both = plan.run_context(typed_settings('distill', {'passages': 'trained'}))
    keys = {plan.rate_key('distillation', 'step', c) for c in (query_tower, both)}
    assert keys == {'distillation (batch 32x1, 1 process(es))',
                    'distillation (batch 32x1, both towers, 1 process(es))'}
    assert (plan.rate_key('encoding documents', 'doc', both)
            == 'encoding documents (1 process(es))')  # (as fast)
    # another student, or another writer, is another rate
    other = plan.run_context(typed_settings('distill', {'model_name': 'tiny-bert',
                                                        'generator': 'qwen'}))
    assert (plan.rate_key('distillation', 'step', other)
            == 'distillation (batch 32x1, qwen, tiny-bert, 1 process(es))')
    assert (plan.rate_key('encoding documents', 'doc', other)
            == 'encoding documents (qwen, tiny-bert, 1 process(es))')
    planned = plan.estimate([plan.Planned('distillation', 115, 'step')],
                            {plan.rate_key('distillation', 'step', query_tower):
                             {'rate': 13.1, 'unit': 'step'}}, both)
    assert planned[0].seconds is None


def test_the_adjustments_plan_has_its_search_for_close_documents_and_their_scoring():
    """scifact's adjustment searched its 5,000 queries against every document's tokens for minutes
    at its second iteration's start, unplanned and unreported, then scored 40,000 pairs, unplanned
    (2026-11-26)."""
    from pyterrier_selfsup import Collection
    planned = plan.stages(Collection('classic/adi'), 'reatt',
                          CrossDocumentAdjustmentSettings(), False)
    assert [(p.desc, p.size) for p in planned] == [('ReAtt token index', 82 * 2),
                                                   ('ReAtt search', 5000),
                                                   ('generator scoring', 5000 * 8 * 2),
                                                   ('ReAtt adjustment', 1250)]


def test_a_resumed_run_plans_the_steps_it_has_left():
    """scifact's adjustment resumed after step 625 of 1,250 planned all 1,250 (2026-11-26)."""
    planned = plan.resuming([plan.Planned('ReAtt token index', 10366, 'doc'),
                             plan.Planned('ReAtt adjustment', 1250, 'step')], 625)
    assert [(p.size, p.note) for p in planned] == [(10366, ''),
                                                   (625, 'resuming after step 625 of 1,250')]
    plan.estimate(planned, {'ReAtt adjustment (batch 8x1, k 8, 1 process(es))':
                            {'rate': 0.5, 'unit': 'step'}},
                  plan.run_context(CrossDocumentAdjustmentSettings()))
    assert planned[1].seconds == 1250
    assert plan.plan_lines('reatt', planned)[2] == (
        '  ReAtt adjustment: 625 steps, about 20 min 50 s (resuming after step 625 of 1,250)')
    assert [p.size for p in plan.resuming([plan.Planned('x', 10, 'step')], 0)] == [10]


def test_a_resumed_run_plans_from_the_checkpoint_fit_resumably_goes_on_from(tmp_path):
    """``selfsup train`` plans from ``resume_point``: the last whole checkpoint whose files are not
    damaged (a torn checkpoint-10, and a checkpoint-11 whose write stopped before its manifest,
    are passed over, as fit_resumably passes over them)."""
    from pyterrier_selfsup.training.checkpoints import (
        CHECKPOINT_MANIFEST,
        TRAINER_STATE_FILE,
        checkpoint_step,
        resume_point,
    )
    assert resume_point(tmp_path) is None
    for step, size in ((5, 5), (10, 99), (11, None)):
        (tmp_path / f'checkpoint-{step}').mkdir()
        (tmp_path / f'checkpoint-{step}' / TRAINER_STATE_FILE).write_bytes(b'state')
        if size is not None:
            (tmp_path / f'checkpoint-{step}' / CHECKPOINT_MANIFEST).write_text(
                json.dumps({'files': {TRAINER_STATE_FILE: size}}))
    (tmp_path / 'checkpoint-12').mkdir()  # (no state: not a whole checkpoint)
    assert (resume_point(tmp_path) == tmp_path / 'checkpoint-5'
            and checkpoint_step(resume_point(tmp_path)) == 5)


def test_rates_are_learnt_per_machine_from_stages_of_a_second_or_more(tmp_path):
    plan.learn({'a': Stage('a', 10, 10, 'doc', 2.0), 'b': Stage('b', 10, 10, 'doc', 0.1),
                'c': Stage('c', 4, 4, 'step', 8.0)},
               plan.run_context(RumbartSettings(train_passages=False), 2), tmp_path)
    today = time.strftime('%Y-%m-%d', time.gmtime())
    assert plan.known_rates(tmp_path) == {
        'a (2 process(es))': {'rate': 5.0, 'unit': 'doc', 'measured': today},
        'c (batch 16x1, k 5, 2 process(es))': {'rate': 0.5, 'unit': 'step', 'measured': today}}
    every = json.loads((tmp_path / plan.RATES_FILE).read_text())
    assert list(every) == [plan.machine()]


@pytest.fixture(scope='module')
def background_train(cache_dir, tmp_path_factory):
    """``selfsup train ds`` on 20 ADI sentences (5 steps of 4) in a process whose output is a
    pipe (as ``nohup ... > log`` makes it), a line at most every half second: each line and when
    it came."""
    from pyterrier_selfsup import BM25
    # built once a session: the test is of what follows
    BM25.from_collection('classic/adi', cache_dir=cache_dir)
    cache = tmp_path_factory.mktemp('train-cache')
    (cache / 'pisa').symlink_to(cache_dir / 'pisa')
    env = {**os.environ, 'SELFSUP_PROGRESS_SECONDS': '0.5'}
    proc = subprocess.Popen([sys.executable, '-m', 'pyterrier_selfsup', 'train',
                             'ds:n_queries=20,batch_size=4', '-c', 'classic/adi',
                             '--cache-dir', str(cache)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    came = [(time.monotonic(), line.rstrip('\n')) for line in proc.stdout]
    assert proc.wait() == 0, '\n'.join(line for _, line in came)
    return came, cache


def test_a_background_training_says_where_it_is_at_a_bounded_rate(background_train):
    came, cache = background_train
    steps = [line for _, line in came
             if 'progress: distant supervision: ' in line and '/5 steps' in line]
    assert steps, '\n'.join(line for _, line in came)
    for line in steps:  # (before the first step is done, the timer's line says the time alone)
        assert re.search(r'distant supervision: ([1-5]/5 steps \(\d+%\), [\d.]+ '
                         r'(s/step|steps/s), \d:\d\d elapsed, \d:\d\d left'
                         r'|0/5 steps \(0%\), \d:\d\d elapsed)', line), line
    # from the first step on, each line says the process's resident memory, as the log keeps it
    # each step
    assert all(re.search(r', memory \d+\.\d\d GiB$', line)
               for line in steps if not re.search(r': 0/5 steps', line))
    log = [json.loads(line) for line in
           next((cache / 'models').glob('*/training_log.jsonl')).read_text().splitlines()]
    memory = [(r['resident GiB'], r['peak resident GiB']) for r in log if 'loss' in r]
    assert len(memory) == 5 and all(0.3 < now <= peak < 8 for now, peak in memory)
    assert [peak for _, peak in memory] == sorted(peak for _, peak in memory)
    # at most a line every half second of the stage (its time from the training log)
    seconds = next(r['seconds'] for r in log if r.get('stage') == 'distant supervision')
    assert len(steps) <= seconds / 0.5 + 1
    assert not any('\r' in line or '|' in line for _, line in came)  # no bar in the log


def test_selfsup_train_says_its_plan_first_and_each_stages_time_at_the_end(background_train):
    came, cache = background_train
    text = [line for _, line in came]
    first_step = next(i for i, line in enumerate(text) if 'progress: distant supervision: ' in line)
    plan_at = next(i for i, line in enumerate(text)
                   if line.endswith('plan: ds on classic/adi (82 documents)'))
    assert plan_at < first_step
    assert text[plan_at + 1].endswith('  BM25 index: 82 docs, not run on this machine yet '
                                      '(unless built before)')
    assert text[plan_at + 2].endswith('  distant supervision: 5 steps, not run on this machine yet')
    times = next(i for i, line in enumerate(text) if line.endswith('stage times:'))
    assert times > first_step
    assert re.search(r'  distant supervision: 5 steps in (\d+ min )?\d+ s '
                     r'\([\d.]+ (s/step|steps/s)\)(; the peak memory rose to [\d.]+ GiB)?$',
                     text[times + 1])
    assert re.search(r'  in all: (\d+ min )?\d+ s$', text[times + 2])
    log = [json.loads(line) for line in
           next((cache / 'models').glob('*/training_log.jsonl')).read_text().splitlines()]
    assert [p['desc'] for p in log[-3]['plan']] == ['BM25 index', 'distant supervision']
    assert log[-2]['stage'] == 'distant supervision' and log[-2]['done'] == 5
    assert log[-1]['stage'] == 'in all' and log[-1]['seconds'] >= log[-2]['seconds']
    assert (plan.known_rates(cache)['distant supervision (batch 4x1, 1 process(es))']['unit']
            == 'step')


def test_a_stopped_training_plans_and_trains_only_the_steps_left_and_ends_as_one_never_stopped(
        cache_dir, tiny_dir, tmp_path, monkeypatch, caplog):
    """Distant supervision checkpoints every ``CHECKPOINT_EVERY`` steps (its one epoch is the whole
    run: it had no checkpoint before its end). ``selfsup train``'s run stopped after one plans the
    steps left, trains them, and ends with the weights of a run that was never stopped, with its
    checkpoints or with none before its end (as before). (The tiny BERT, on the CPU;
    tests/test_cuda.py resumes on a GPU, whose dropout draws from the CUDA generators.)"""
    import torch
    from safetensors.torch import load_file

    from pyterrier_selfsup import BM25
    from pyterrier_selfsup.harness import trained
    from pyterrier_selfsup.training.distant import DistantSupervision
    BM25.from_collection('classic/adi', cache_dir=cache_dir)
    settings = {'n_queries': 12, 'batch_size': 4, 'model_name': str(tiny_dir)}  # 3 steps
    caches = {name: tmp_path / name for name in ('whole', 'checkpointed', 'stopped')}
    for cache in caches.values():
        cache.mkdir()
        (cache / 'pisa').symlink_to(cache_dir / 'pisa')
    # checkpoint_every 25: none
    whole = trained.train('classic/adi', 'ds', settings, run=RunContext(cache_dir=caches['whole']))

    settings['checkpoint_every'] = 2  # (not in the model's key: the same model, checkpointed)
    checkpointed = trained.train('classic/adi', 'ds', settings,
                                 RunContext(cache_dir=caches['checkpointed']))
    # (killed in step 3, after the step-2 checkpoint)
    with stopped_at_step(monkeypatch, DistantSupervision, 3):
        trained.train('classic/adi', 'ds', settings, run=RunContext(cache_dir=caches['stopped']))
    with caplog.at_level(logging.INFO, logger='pyterrier_selfsup'):
        resumed = trained.train('classic/adi', 'ds', settings,
                                RunContext(cache_dir=caches['stopped'], verbose=True))
    said = caplog.text.splitlines()
    assert any(line.endswith('  distant supervision: 1 step, not run on this machine yet '
                             '(resuming after step 2 of 3)')
               for line in said), caplog.text
    assert any(re.search(r'resuming from .*/checkpoint-2$', line) for line in said), caplog.text
    assert any(re.search(r'  distant supervision: 1 step in \d+ s '
                         r'\([\d.]+ (s/step|steps/s)\)', line) for line in said)
    log = [json.loads(line) for line in
           (resumed.parent / 'training_log.jsonl').read_text().splitlines()]
    # (the stopped run's two kept, one more)
    assert [r['step'] for r in log if 'loss' in r] == [1, 2, 3]
    assert next(r for r in log if r.get('stage') == 'distant supervision')['done'] == 1
    weights = [load_file(next(run.glob('**/*.safetensors')))
               for run in (whole, checkpointed, resumed)]
    assert len(weights[0]) > 10 and all(w.keys() == weights[0].keys() for w in weights)
    # (a checkpoint changes nothing of the run that writes it, and resuming from one neither)
    assert all(torch.equal(w[k], weights[0][k]) for w in weights[1:] for k in weights[0])


def test_a_score_cache_filled_a_chunk_at_a_time_is_one_stage_of_the_pairs_it_did_not_hold(
        lines_every, capsys, tiny_generator, cache_dir, tmp_path):
    """RUMBArt's first index fills the score cache with 25,000 pairs, 512 passages a commit: its
    progress said each chunk's pairs and time left (vaswani, 2026-11-26), not the fill's. Now one
    stage counts the pairs the cache did not hold, whatever the chunks."""
    import pandas as pd

    from pyterrier_selfsup import BM25, Collection
    from pyterrier_selfsup.models.reranker import ReconstructionScorer
    lines_every(0)  # (a line at every batch of passages: the fake clock does not move)
    coll = Collection('classic/adi')
    pairs = ((BM25.from_collection(coll, cache_dir=cache_dir) % 5)
             >> coll.text_loader())(coll.topics())
    # a query's text under a second qid
    again = pairs[pairs['qid'] == pairs['qid'].iloc[-1]].assign(qid='again')
    # (its pairs scored once, and counted once)
    pairs = pd.concat([pairs, again], ignore_index=True)
    scorer = ReconstructionScorer(tiny_generator('llama', max_passage_length=32, verbose=True),
                                  cache=tmp_path / 'scores')
    scorer.CHUNK = 8  # passages a commit
    scorer(pairs[pairs['qid'].isin(pairs['qid'].unique()[:10])])  # some of the pairs held already
    held = scorer.cache.db.execute('SELECT count(*) FROM cache').fetchone()[0]
    missing = len(pairs.drop_duplicates(['query', 'docno'])) - held
    assert held > 0 and missing > 0 and pairs['docno'].nunique() > 4 * scorer.CHUNK
    capsys.readouterr()
    before = P.stage_times()
    scorer(pairs)
    lines = [line for line in capsys.readouterr().err.splitlines()
             if line.startswith('generator scoring: ')]
    assert len(lines) > 4, lines
    assert all(re.match(rf'generator scoring: [\d,]+/{missing:,} pairs \(\d+%\), '
                        r'0:00 elapsed, 0:00 left$', line)
               for line in lines[:-1]), lines
    assert lines[-2].startswith(f'generator scoring: {missing:,}/{missing:,} pairs (100%)')
    assert lines[-1] == f'generator scoring: {missing:,} pairs in 0:00'
    assert P.stage_times(before)['generator scoring'].done == missing
    capsys.readouterr()
    scorer(pairs)  # all held: no stage
    assert 'generator scoring' not in P.stage_times(before) or \
        P.stage_times(before)['generator scoring'].done == missing
    assert capsys.readouterr().err == ''


def test_the_time_left_counts_the_stages_that_recur_inside_but_not_what_came_before_the_first_unit(
        lines_every, capsys):
    """vaswani's RUMBArt run (2026-11-26) took 50 min of steps at 9.6 s each, and a refresh every
    25 steps inside the same stage, which a time left from the steps' own rate left out. Its
    first index and scoring, inside the stage before its first step, do not recur."""
    clock = lines_every(0)  # (a line at every update)
    steps = P.progress(total=4, desc='test training', unit='step')
    for _ in P.progress(range(2), desc='test first index', unit='doc'):
        clock.tick(10)
    for step in range(4):
        clock.tick(2)  # a step
        steps.update(1)
        if step == 1:
            for _ in P.progress(range(2), desc='test refresh', unit='doc'):
                clock.tick(3)
    steps.close()
    assert [line for line in capsys.readouterr().err.splitlines()
            if line.startswith('test training: ')] == [
        # (one step: its own time)
        'test training: 1/4 steps (25%), 2.0 s/step, 0:22 elapsed, 0:06 left',
        'test training: 2/4 steps (50%), 2.0 s/step, 0:24 elapsed, 0:04 left',
        # (steps alone: 0:02)
        'test training: 3/4 steps (75%), 2.0 s/step, 0:32 elapsed, 0:05 left',
        'test training: 4/4 steps (100%), 2.0 s/step, 0:34 elapsed, 0:00 left',
        'test training: 4 steps in 0:34 (2.0 s/step)']


def test_the_plan_says_the_steps_a_source_of_fewer_queries_than_asked_will_run(
        cache_dir, tiny_dir, tmp_path, caplog):
    """ADI's 35 topic texts, where 5,000 queries are asked (ds's default): one plan, of the 2
    steps of 32 that will run, not one sized for 5,000 and another after it."""
    from pyterrier_selfsup.harness import trained
    (tmp_path / 'pisa').symlink_to(cache_dir / 'pisa')
    with caplog.at_level(logging.INFO, logger='pyterrier_selfsup'):
        trained.train('classic/adi', 'ds', {'queries': 'classic/adi', 'model_name': str(tiny_dir)},
                      RunContext(cache_dir=tmp_path))
    said = [r.getMessage() for r in caplog.records]
    assert sum(m.startswith('plan: ') for m in said) == 1, said
    assert any(m.startswith('  distant supervision: 2 steps') for m in said), said


def test_a_stage_without_news_for_an_interval_still_says_where_it_is(monkeypatch):
    """A long batch (no update for longer than the interval): the timer thread says a line."""
    import io
    monkeypatch.setattr(P, '_settings', {'mode': 'lines', 'interval': 0.5})
    out = io.StringIO()
    with P.progress(total=10, desc='encoding documents', unit='doc', file=out) as stage:
        stage.update(3)
        time.sleep(2.5)  # (the timer looks each second)
        said = out.getvalue().splitlines()
    assert said and said[0].startswith('encoding documents: 3/10 docs (30%)'), said


def test_an_index_counts_its_passages_as_each_batch_is_encoded(tiny_encoder, tmp_path,
                                                               monkeypatch):
    """ADI's 82 passages are one chunk of pyterrier-dr's; the index's stage counts them as
    each batch is encoded, never ahead of the encoding (taken all at once, they were counted
    before the first was encoded: a long chunk was a silent one)."""
    from pyterrier_selfsup import Collection
    from pyterrier_selfsup.retrieval.dense import encode_into
    monkeypatch.setattr(P, '_settings', {'mode': 'lines', 'interval': 1e9, 'heartbeat': False})
    encoder = tiny_encoder(batch_size=8)
    encoded, seen = [0], []
    embed = type(encoder.model).embed

    def counted_embed(self, input_ids, attention_mask, side):
        encoded[0] += len(input_ids)
        return embed(self, input_ids, attention_mask, side)
    update = P.Progress.update

    def watched(self, n=1):
        update(self, n)
        if self.desc == 'encoding documents':
            seen.append((self.done, encoded[0]))
    monkeypatch.setattr(type(encoder.model), 'embed', counted_embed)
    monkeypatch.setattr(P.Progress, 'update', watched)
    encode_into(tmp_path / 'index', Collection('classic/adi'), encoder, verbose=True)
    assert seen[-1] == (82, 82) and len(seen) > 1
    assert all(done <= encoded for done, encoded in seen), seen
