import io
import json
import os
import re
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.effectiveness import FP32, assert_committed
from tests.helpers import free_port, snapshot


def selfsup_process(*args, cwd, env=None) -> subprocess.CompletedProcess:
    """``selfsup ARGS`` in a process of its own: what a user's shell runs (the smoke test, and
    what only a fresh process shows: the libraries' own output, offline warnings)."""
    return subprocess.run([sys.executable, '-m', 'pyterrier_selfsup', *args], capture_output=True,
                          text=True, cwd=cwd, env=env)


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def selfsup(*args, cwd, env=None) -> Ran:
    """``selfsup ARGS`` run in this process (``cli.main(argv)``) in ``cwd``, with ``env`` set
    for the call: its exit status and what it printed, as a process would have, without a
    process's start-up (seconds of imports and model loads a call). The libraries' own
    progress bars, which the CLI turns off off a terminal, are turned back on after it."""
    from huggingface_hub.utils import enable_progress_bars
    from transformers.utils import logging as transformers_logging

    from pyterrier_selfsup import progress
    from pyterrier_selfsup.data.classic import CLASSIC_DATA_ENV
    from pyterrier_selfsup.harness import cli
    saved = {name: os.environ.get(name) for name in {CLASSIC_DATA_ENV, *(env or {})}}
    shown = dict(progress._settings)  # (the CLI sets the process's progress mode)
    here = os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.update(env or {})
        os.chdir(cwd)
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = cli.main([str(a) for a in args])
            except SystemExit as exit:  # (argparse's errors)
                code = exit.code if isinstance(exit.code, int) else 1
    finally:
        os.chdir(here)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        enable_progress_bars()
        transformers_logging.enable_progress_bar()
        progress._settings.update(shown)
    return Ran(code, out.getvalue(), err.getvalue())


@pytest.fixture(scope='module')
def own_cache(tmp_path_factory, cache_dir):
    """A cache for this module's effectiveness tests alone, sharing only the session's converted
    generators: the models they find and count, and the numbers they are held to, depend on no
    other test's builds, in whatever order and on whichever worker the tests run."""
    path = tmp_path_factory.mktemp('effectiveness-cache')
    generators = cache_dir / 'generators'
    generators.mkdir(exist_ok=True)
    (path / 'generators').symlink_to(generators.resolve(), target_is_directory=True)
    return path


@pytest.mark.slow
def test_run_writes_results_with_header(tmp_path, cache_dir):
    # the smoke test: a process of its own, as a user's shell runs it
    proc = selfsup_process('run', '-c', 'classic/adi', '-p', 'bm25', 'minilm', '--save', 'adi',
                           '--results-dir', str(tmp_path / 'results'), '--cache-dir',
                           str(cache_dir), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r'\| bm25 \| 0\.4855 \| 0\.8144 \| 0\.6427 \|', proc.stdout)
    assert re.search(r'\| minilm \| 0\.497\d \(p=0\.8\d*\)', proc.stdout)
    # offline is a normal way to run: said once, and no library chatter about it
    assert 'Could not reach the Hub' not in proc.stderr and 'direct file access' not in proc.stderr
    assert len([line for line in proc.stderr.splitlines() if 'offline' in line.lower()]) == 1
    # not on a terminal: no progress bars, the libraries' included
    assert 'Loading weights' not in proc.stderr

    md = (tmp_path / 'results' / 'adi.md').read_text()
    for key in ('date', 'command', 'code', 'machine', 'packages', 'models', 'data', 'pipeline bm25',
                'pipeline minilm', 'evaluation'):
        assert f'\n- {key}: ' in md
    assert 'sentence-transformers/all-MiniLM-L6-v2@' in md  # the model's hub revision
    assert 'classic/adi (82 docs, 35 topics, 170 judgments)' in md

    csv = tmp_path / 'results' / 'adi.csv'
    assert csv.read_text().startswith('# date: ')
    table = pd.read_csv(csv, comment='#')
    assert table[['collection', 'name']].values.tolist() == [['classic/adi', 'bm25'],
                                                             ['classic/adi', 'minilm']]
    assert table['nDCG@10'][0] == pytest.approx(0.4855, abs=1e-4)

    # the per-query scores are kept, and are what the table averages
    per_query = pd.read_csv(tmp_path / 'results' / 'adi.perquery.csv', dtype={'qid': str})
    assert len(per_query) == 2 * 35 and set(per_query['name']) == {'bm25', 'minilm'}
    means = per_query.groupby('name')['nDCG@10'].mean()
    assert (means['bm25'] == pytest.approx(table['nDCG@10'][0]) and
            means['minilm'] == pytest.approx(table['nDCG@10'][1]))

    png = (tmp_path / 'results' / 'adi.png').read_bytes()
    # the header is in the image's metadata too
    assert png.startswith(b'\x89PNG') and b'machine: ' in png


@pytest.mark.parametrize('args, message', [
    (['-c', 'beir/scifact/tset'], "unknown collection 'beir/scifact/tset'"),
    (['-c', 'classic/adi', '-p', 'bm25', 'nope'], "unknown pipeline 'nope'"),
])
def test_bad_names_fail_before_any_work(tmp_path, args, message):
    proc = selfsup('run', *args, '--save', 'x', '--results-dir', str(tmp_path / 'results'),
                   '--cache-dir', str(tmp_path / 'cache'), cwd=tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert snapshot(tmp_path) == {}


def test_list():
    proc = selfsup('list', cwd='.')
    assert proc.returncode == 0
    assert 'pipeline bm25' in proc.stdout and 'collection classic/cisi' in proc.stdout


def test_help_and_settings_import_no_model_library():
    """`selfsup --help`, `selfsup run --help` and `selfsup settings` answer without importing
    PyTerrier, pyterrier-dr, torch or transformers (seconds of imports a process)."""
    code = '\n'.join([
        'import contextlib, io, sys',
        'from pyterrier_selfsup.harness import cli',
        'with contextlib.redirect_stdout(io.StringIO()) as out:',
        '    assert cli.main(["settings", "distill"]) == 0',
        '    for argv in (["--help"], ["run", "--help"]):',
        '        try:',
        '            cli.main(argv)',
        '        except SystemExit as stop:',
        '            assert stop.code == 0',
        'assert "n_queries" in out.getvalue() and "selfsup list" in out.getvalue()',
        'heavy = ("pyterrier", "pyterrier_dr", "torch", "transformers", "sentence_transformers")',
        'print(sorted(name for name in heavy if name in sys.modules))'])
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == '[]'


def test_pipeline_settings_from_the_command_line():
    from pyterrier_selfsup.harness.pipelines import UnknownPipelineError, get_pipeline
    spec = get_pipeline('ds:negatives=bm25,epochs=2,dim=128,lr=1e-4')
    assert spec.name == 'ds:negatives=bm25,epochs=2,dim=128,lr=1e-4'
    assert {k: spec.settings[k] for k in ('negatives', 'epochs', 'dim', 'lr', 'queries')} == {
        'negatives': 'bm25', 'epochs': 2, 'dim': 128, 'lr': 1e-4, 'queries': 'sentences'}
    assert get_pipeline('ds').settings['epochs'] == 1  # the registered default is untouched
    with pytest.raises(UnknownPipelineError,
                       match="ds:epoch=2': DistantSupervisionSettings has no setting 'epoch'"):
        get_pipeline('ds:epoch=2')
    with pytest.raises(UnknownPipelineError, match="'two' is not a int"):
        get_pipeline('ds:epochs=two')


@pytest.mark.effectiveness
def test_adaptation_runs_from_the_command_line(tmp_path, own_cache):
    ds = 'ds:queries=classic/adi,batch_size=16,seed=1,lr=2e-4'
    proc = selfsup('run', '-c', 'classic/adi', '-p', 'minilm', 'dual_encoder', ds, '--save', 'ds',
                   '--results-dir', str(tmp_path), '--cache-dir', str(own_cache), cwd=tmp_path,
                   env=FP32)
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(tmp_path / 'ds.csv', comment='#').set_index('name')
    # the DualEncoder reproduces the sentence-transformers start (two fp32 implementations:
    # on another CPU kind a near-tie between two documents may swap)
    assert (table.loc['dual_encoder', 'nDCG@10']
            == pytest.approx(table.loc['minilm', 'nDCG@10'], abs=5e-3))
    # 3 steps of training (ADI's topic texts) moved the model to its committed nDCG@10
    assert_committed(ds, table.loc[ds, 'nDCG@10'], start=table.loc['dual_encoder', 'nDCG@10'],
                     method='distant_supervision')
    models = [p for p in (own_cache / 'models').glob('classic_adi.ds-*') if p.is_dir()]
    assert len(models) == 1 and (models[0] / 'final' / 'dual_encoder.json').exists()
    assert (models[0] / 'training_curve.png').exists()
    trained = os.stat(models[0] / 'final' / 'dual_encoder.json').st_mtime_ns
    again = selfsup('run', '-c', 'classic/adi', '-p', ds, '--cache-dir', str(own_cache),
                    cwd=tmp_path, env=FP32)
    # reused, not retrained
    assert os.stat(models[0] / 'final' / 'dual_encoder.json').st_mtime_ns == trained
    assert f"{table.loc[ds, 'nDCG@10']:.4f}" in again.stdout


@pytest.mark.slow
@pytest.mark.effectiveness
def test_rumbart_runs_from_the_command_line(tmp_path, own_cache):
    """The acceptance path with the real models: MiniLM adapted on ADI with SmolLM2 frozen
    as the teacher, on corpus spans, by RUMBArt and ACROBArT (2 steps each, at a learning
    rate high enough to move nDCG@10 by more than the tolerance), evaluated beside BM25; and
    MiniLM's ReAtt head adjusted with SmolLM2 judging 4 close documents of 8 of ADI's topic
    texts."""
    settings = 'queries=spans,k=2,batch_size=3,refresh_every={},max_passage_length=64,' \
               'n_queries=6,lr=3e-4'
    # (RUMBArt refreshes its index after step 1; ACROBArT, for the suite's time, does not)
    rumbart, acrobart = f'rumbart:{settings.format(1)}', f'acrobart:{settings.format(2)}'
    adjusted = 'reatt_adjusted:queries=classic/adi,n_queries=8,k=4,epochs=1,lr=3e-4'
    proc = selfsup('run', '-c', 'classic/adi', '-p', 'bm25', 'dual_encoder', rumbart, acrobart,
                   'reatt', adjusted, '--save', 'rr', '--results-dir', str(tmp_path),
                   '--cache-dir', str(own_cache), cwd=tmp_path, env=FP32)
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(tmp_path / 'rr.csv', comment='#').set_index('name')
    for name in (rumbart, acrobart):
        assert_committed(name, table.loc[name, 'nDCG@10'],
                         start=table.loc['dual_encoder', 'nDCG@10'])
    assert_committed(adjusted, table.loc[adjusted, 'nDCG@10'], start=table.loc['reatt', 'nDCG@10'])
    model, = [p for p in (own_cache / 'models').glob('classic_adi.rumbart-*') if p.is_dir()]
    log = model / 'training_log.jsonl'
    records = [json.loads(line) for line in log.read_text().splitlines()]
    # built, then refreshed after step 1
    assert [r['step'] for r in records if 'refresh seconds' in r] == [0, 1]
    assert len([r for r in records if 'loss' in r]) == 2


def test_code_revision_is_the_one_the_process_imported(tmp_path, monkeypatch):
    from pyterrier_selfsup.harness import provenance
    monkeypatch.setattr(provenance, 'code_revision', lambda: 'moved-on')
    assert provenance.header()['code'] == f'pyterrier-selfsup {provenance.CODE_AT_IMPORT}'
    assert provenance.CODE_AT_IMPORT != 'moved-on'


def test_a_copy_told_its_commit_names_it_over_its_git(monkeypatch):
    from pyterrier_selfsup.harness import provenance
    # stage.sh's export on a lent GPU machine
    monkeypatch.setenv('SELFSUP_CODE_REVISION', 'bae234a8ce4f')
    assert provenance.code_revision() == 'bae234a8ce4f'


def test_a_measured_child_peaks_at_its_own_memory_not_at_its_parents():
    """run_measured, the memory experiments' way of taking a peak: the child's own and its exit
    code. Started straight from this process (which holds torch and the array below), Linux would
    count this process's peak in the child's ru_maxrss."""
    import numpy as np
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'scripts'))
    from measured import run_measured
    held = np.ones(256 * 2 ** 20 // 8)  # (this process: far above the children below)
    small = run_measured([sys.executable, '-c', 'pass'])
    big = run_measured([sys.executable, '-c',
                        "import sys; b = b'x' * (200 * 2 ** 20); sys.exit(3)"])
    assert small.rc == 0 and small.peak_gib < 0.05
    assert big.rc == 3 and 0.19 < big.peak_gib < 0.25
    assert held.sum() > 0


def test_a_measure_equal_to_the_baseline_on_every_query_is_not_marked_significant():
    from pyterrier_selfsup.harness.experiment import MEASURE_NAMES, format_table
    row = {'name': 'bm25', 'mrt': 1.0, **{m: 0.5 for m in MEASURE_NAMES}}
    other = dict(row, name='rerank', **{f'{m} p-value corrected': 0.01 for m in MEASURE_NAMES},
                 **{f'{m} reject': True for m in MEASURE_NAMES})
    other[f'{MEASURE_NAMES[1]} p-value corrected'] = float('nan')  # pyterrier rejects on nan
    table = pd.DataFrame([row, other])
    lines = format_table(table).splitlines()
    assert '0.5000 (= baseline)' in lines[-1] and '0.5000 (p=0.01*)' in lines[-1]


def test_train_trains_once_without_evaluating_and_run_picks_the_model_up(tmp_path, cache_dir,
                                                                         tiny_dir):
    ds = f'ds:model_name={tiny_dir},queries=classic/adi,batch_size=16'
    proc = selfsup('train', ds, '-c', 'classic/adi', '--cache-dir', str(cache_dir), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    final = Path(re.search(r'trained .* on classic/adi: (\S+)', proc.stdout).group(1))
    assert final.name == 'final' and (final / 'dual_encoder.json').is_file()
    assert (final.parent / 'training_log.jsonl').is_file() and 'nDCG' not in proc.stdout
    # every trained dual encoder loads in sentence-transformers, to the package's vectors
    from sentence_transformers import SentenceTransformer

    from pyterrier_selfsup import DualEncoder
    texts = ['automatic indexing', 'the retrieval of documents']
    ours = DualEncoder.from_pretrained(str(final), device='cpu', precision='fp32')
    theirs = SentenceTransformer(str(final), device='cpu')
    np.testing.assert_allclose(theirs.encode_query(texts), ours.encode_queries(texts), atol=1e-5)
    trained = os.stat(final / 'dual_encoder.json').st_mtime_ns
    again = selfsup('train', ds, '-c', 'classic/adi', '--cache-dir', str(cache_dir), cwd=tmp_path)
    assert again.returncode == 0 and str(final) in again.stdout
    run = selfsup('run', '-c', 'classic/adi', '-p', ds, '--cache-dir', str(cache_dir), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    # trained once, found by train and run
    assert os.stat(final / 'dual_encoder.json').st_mtime_ns == trained

    nothing = selfsup('train', 'bm25', '-c', 'classic/adi', '--cache-dir', str(cache_dir),
                      cwd=tmp_path)
    assert nothing.returncode == 2 and 'bm25 trains nothing' in nothing.stderr


def test_any_smart_collection_in_the_data_directory_is_named_on_the_command_line(tmp_path):
    from tests.test_classic import write_toy
    data = write_toy(tmp_path / 'glasgow', '1 1\n2 2\n', name='TOY')
    proc = selfsup('run', '-c', 'classic/toy', '-p', 'bm25', '--classic-data', str(data),
                   '--cache-dir', str(tmp_path / 'cache'), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # each query finds its one relevant document
    assert re.search(r'\| bm25 \| 1\.0000 \|', proc.stdout)
    listed = selfsup('list', cwd=tmp_path, env={'SELFSUP_CLASSIC_DATA': str(data)}).stdout
    assert 'collection classic/toy' in listed
    missing = selfsup('run', '-c', 'classic/nope', '-p', 'bm25', '--classic-data', str(data),
                      cwd=tmp_path)
    assert missing.returncode == 2 and "unknown collection 'classic/nope'" in missing.stderr


def test_the_command_line_keeps_ir_datasets_info_out_of_its_output():
    probe = ('from pyterrier_selfsup.harness.cli import _quiet_libraries\n'
             '_quiet_libraries()\n'
             'from pyterrier_selfsup import Collection\n'
             'print(Collection("beir/scifact/test").texts(["4983"])[0][:14])\n')
    proc = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == 'Microstructura' and 'direct file access' not in proc.stderr


@pytest.mark.slow
@pytest.mark.effectiveness
def test_distillation_runs_from_the_command_line(tmp_path, own_cache):
    """The teacher, the distilled student and their query-time fusion side by side on ADI:
    corpus sentences (several a document: ADI has 82), SmolLM2's samples, and GPL's recipe
    with the models at hand (SmolLM2 writing, the fused teacher scoring)."""
    # (32 sentences: a step a round; a learning rate that moves nDCG@10 past the tolerance)
    sentences = 'distill:queries=sentences,n_queries=32,rounds=2,lr=5e-4'
    hybrid = 'hybrid:queries=sentences,n_queries=32,rounds=2,lr=5e-4'
    sampled = 'distill:queries=sampled,n_queries=8,rounds=1,lr=5e-4'
    gpl = 'gpl:generator=smollm2,top_k=none,query_tokens=16,teacher=0*miners+fused,n_queries=16'
    proc = selfsup('run', '-c', 'classic/adi', '-p', 'bm25', 'dual_encoder', 'teacher', sentences,
                   hybrid, sampled, gpl, '--save', 'distill', '--results-dir', str(tmp_path),
                   '--cache-dir', str(own_cache), cwd=tmp_path, env=FP32)
    assert proc.returncode == 0, proc.stderr
    table = pd.read_csv(tmp_path / 'distill.csv', comment='#').set_index('name')
    # BM25 .4855 and MiniLM .4976 fused 1:1 (DESIGN.md: .548)
    assert table.loc['teacher', 'nDCG@10'] == pytest.approx(0.548, abs=0.01)
    for name in (sentences, sampled, gpl):
        assert_committed(name, table.loc[name, 'nDCG@10'],
                         start=table.loc['dual_encoder', 'nDCG@10'])
    # hybrid starts where the teacher is: BM25 fused with the zero-shot student
    assert_committed(hybrid, table.loc[hybrid, 'nDCG@10'], start=table.loc['teacher', 'nDCG@10'])
    models = {p.name: p for p in (own_cache / 'models').glob('classic_adi.distill-*') if p.is_dir()}
    assert len(models) == 3  # hybrid found the model its distill pipeline trained
    # each model's record says what it trained on
    records = [json.loads((p / 'model.json').read_text()) for p in models.values()]
    assert sorted(r['queries']['source'] for r in records) == ['sampled', 'sampled', 'sentences']
    assert all(r['collection']['id'] == 'classic/adi' and r['method'] == 'distill'
               for r in records)
    from sentence_transformers import SentenceTransformer
    for path in models.values():  # each can be taken away
        model = SentenceTransformer(str(path / 'final'), device='cpu')
        assert model.encode_query(['automatic indexing']).shape == (1, 384)


def test_any_writer_by_path_trains_from_selfsup_train(tmp_path, cache_dir, tiny_dir,
                                                      tiny_generator_dir):
    """A writer named by its path, as a user names GPL's doc2query model by its hub name: a tiny
    random T5 (passage in, query out) and a tiny random Llama (a prompt completed) each write the
    queries that `selfsup train distill` trains on, and the model's record names the writer."""
    for kind in ('t5', 'llama'):
        spec = (f'distill:generator={tiny_generator_dir[kind]},model_name={tiny_dir},'
                f'queries=sampled,n_queries=6,teacher=bm25,depth=10')
        ran = selfsup('train', spec, '-c', 'classic/adi', '--cache-dir', str(cache_dir),
                      cwd=tmp_path)
        assert ran.returncode == 0, ran.stderr
        final = Path(re.search(r'trained .* on classic/adi: (\S+)', ran.stdout).group(1))
        record = json.loads((final.parent / 'model.json').read_text())
        assert record['queries']['generator'] == str(tiny_generator_dir[kind])
        written = [p for p in (cache_dir / 'queries').glob('classic_adi.sampled-*') if p.is_dir()]
        assert written, 'the queries were written and kept'


def test_a_file_of_ones_own_documents_is_a_collection_on_the_command_line(tmp_path, cache_dir):
    """What a user with a JSON lines file of documents does: `selfsup run` says there is nothing
    to evaluate (no judgements); `selfsup train distill -c FILE --output DIR` adapts MiniLM to
    it, and DIR loads with sentence-transformers and with the package, to the same vectors."""
    from sentence_transformers import SentenceTransformer

    from pyterrier_selfsup import Collection, DualEncoder
    docs = tmp_path / 'my docs.jsonl'
    docs.write_text(''.join(json.dumps({'docno': d['docno'], 'text': d['text']}) + '\n'
                            for d in Collection('classic/adi').corpus_iter()))
    assert Collection(str(docs)).docs_count == 82

    ran = selfsup('run', '-c', docs, '-p', 'bm25', '--cache-dir', cache_dir, cwd=tmp_path)
    assert ran.returncode == 0 and 'nothing to evaluate' in ran.stdout, ran
    assert f'selfsup train distill -c {docs} --output DIR' in ran.stdout

    ran = selfsup('train', 'distill:queries=sentences,n_queries=32,rounds=1', '-c',
                  docs, '--output', tmp_path / 'adapted', '--cache-dir', cache_dir, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert f'the trained model, copied: {tmp_path / "adapted"}' in ran.stdout
    queries = ['automatic indexing', 'information retrieval systems']
    theirs = SentenceTransformer(str(tmp_path / 'adapted'), device='cpu').encode_query(queries)
    ours = DualEncoder.from_pretrained(str(tmp_path / 'adapted'), device='cpu', precision='fp32')
    np.testing.assert_allclose(ours.encode_queries(queries), theirs, atol=1e-5)
    start = DualEncoder.from_pretrained('sentence-transformers/all-MiniLM-L6-v2', device='cpu',
                                        precision='fp32')
    assert not np.allclose(start.encode_queries(queries), theirs, atol=1e-3)  # it trained

    ran = selfsup('run', '-c', tmp_path / 'missing.jsonl', '-p', 'bm25', cwd=tmp_path)
    assert ran.returncode == 2 and 'no documents file' in ran.stderr, ran


@pytest.mark.slow
def test_train_runs_on_two_processes_under_torchrun(tmp_path, cache_dir, tiny_dir):
    ds = f'ds:model_name={tiny_dir},queries=classic/adi,batch_size=16,seed=7'
    proc = subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node', '2',
                           '--master_port', str(free_port()), '-m', 'pyterrier_selfsup', 'train',
                           ds, '-c', 'classic/adi', '--cache-dir', str(cache_dir)],
                          capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # rank 0 alone reports, writes the model and its log; the 35 queries make 3 steps of 16
    assert len(re.findall(r'trained .* on 2 processes: ', proc.stdout)) == 1, proc.stdout
    final = Path(re.search(r'on 2 processes: (\S+)', proc.stdout).group(1))
    assert ((final / 'dual_encoder.json').is_file() and
            not final.parent.with_name(final.parent.name + '.partial').exists())
    log = [json.loads(line)
           for line in (final.parent / 'training_log.jsonl').read_text().splitlines()]
    assert [r['step'] for r in log if 'loss' in r] == [1, 2, 3]
    assert [p.name for p in final.parent.iterdir() if p.name.startswith('checkpoint')] == []
    # the model is found by a later run in one process, without training again
    again = selfsup('train', ds, '-c', 'classic/adi', '--cache-dir', str(cache_dir), cwd=tmp_path)
    assert again.returncode == 0 and str(final) in again.stdout
    # only training runs on several processes
    refused = selfsup('run', '-c', 'classic/adi', '-p', 'bm25', cwd=tmp_path,
                      env={'WORLD_SIZE': '2'})
    assert (refused.returncode == 2 and
            'only `selfsup train` runs on several processes' in refused.stderr)
