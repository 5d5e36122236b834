"""Faults on disk (issue 20): a full disk, a read-only cache, a damaged build, an engine
that dies. Each case asserts the message (what, the path and the cause) and that the run
after the fault is cleared gives the same results as an undisturbed one.

Full disks and read-only directories are real where the machine allows it: a tmpfs or a
read-only bind mount in a private mount namespace (``unshare -m``, as root, or ``unshare
-rm`` in a user namespace), each scenario in a child process whose mounts die with it.
Where neither works the mount tests are skipped and the in-process cases (writes made to
fail with ENOSPC, truncated and garbled files) still run.
"""
import errno
import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from pyterrier_selfsup import BM25, MINILM, Collection
from pyterrier_selfsup._cache import (
    CacheFull,
    CacheNotWritable,
    CacheWriteFailed,
    DamagedBuild,
    build_once,
    writable,
)
from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.models.dual_encoder import DualEncoder
from pyterrier_selfsup.retrieval.bm25 import ENGINE_LOG
from pyterrier_selfsup.retrieval.dense import DenseRetriever, flex_index
from tests.helpers import start_ranks

ROOT = Path(__file__).resolve().parents[1]


def _unshare_prefix():
    """The command prefix that gives a child its own mount namespace here, or None."""
    if shutil.which('unshare') is None:
        return None
    for prefix in (['unshare', '-m'], ['unshare', '-r', '-m']):
        probe = subprocess.run(prefix + ['sh', '-c',
                                         'mount -t tmpfs -o size=64k tmpfs /mnt 2>/dev/null || '
                                         'mount -t tmpfs -o size=64k tmpfs "$TMPDIR"'],
                               capture_output=True, env={**os.environ, 'TMPDIR': '/tmp'})
        if probe.returncode == 0:
            return prefix
    return None


UNSHARE = _unshare_prefix()
needs_mounts = pytest.mark.skipif(UNSHARE is None,
                                  reason='no private mount namespace on this machine')


def in_namespace(script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """``script`` (sh) run in a private mount namespace, with ``$PY`` the test's Python
    (the package importable) and ``$D`` an empty directory to mount on."""
    mountpoint = tmp_path / 'mnt'
    mountpoint.mkdir()
    env = {**os.environ, 'PY': sys.executable, 'D': str(mountpoint), 'PYTHONPATH': str(ROOT)}
    return subprocess.run(UNSHARE + ['sh', '-c', script], capture_output=True, text=True, env=env,
                          timeout=600)


@pytest.fixture(scope='module')
def cranfield_reference(cache_dir):
    return BM25.from_collection('cranfield', cache_dir=cache_dir)(Collection('cranfield').topics())


# -- PISA: refused early, an engine that aborts on a full disk, the next run ------------

PISA_CHILD = textwrap.dedent('''
    import sys
    from pyterrier_selfsup import BM25, Collection, _cache
    cache, phase = sys.argv[1], sys.argv[2]
    if phase == 'abort':  # an estimate that was too low: the engine itself meets the full disk
        _cache.builds._check_space = lambda *args: None
    try:
        results = BM25.from_collection('cranfield',
                                       cache_dir=cache)(Collection('cranfield').topics())
    except _cache.CacheError as error:
        print(f'{type(error).__name__}: {error}')
        sys.exit(3)
    results.to_pickle(sys.argv[3])
''')


@pytest.mark.slow
@needs_mounts
def test_pisa_on_a_full_disk_is_refused_then_leaves_its_log_when_it_dies(tmp_path,
                                                                         cranfield_reference):
    (tmp_path / 'child.py').write_text(PISA_CHILD)
    out = tmp_path / 'results.pkl'
    proc = in_namespace(f'''
        mount -t tmpfs -o size=1m tmpfs "$D" || exit 99
        "$PY" {tmp_path}/child.py "$D/cache" refuse x; echo "refuse rc=$?"
        "$PY" {tmp_path}/child.py "$D/cache" abort x; echo "abort rc=$?"
        for log in "$D"/cache/pisa/*.partial/{ENGINE_LOG}; do
            echo "LOG $log"; tr -d '\\000' < "$log"; done
        mount -o remount,size=64m "$D"
        "$PY" {tmp_path}/child.py "$D/cache" again {out}; echo "again rc=$?"
        ls "$D"/cache/pisa
    ''', tmp_path)
    text = proc.stdout + proc.stderr
    assert 'refuse rc=3' in text, text
    # refused before it started, with the numbers and the path
    assert 'CacheFull: the BM25 index of cranfield needs about' in text and 'MiB free' in text
    assert f'{tmp_path}/mnt/cache/pisa' in text and '--cache-dir' in text
    # the engine died (SIGABRT: no Python handler runs), but said where its log is first ...
    assert 'abort rc=0' not in text and 'abort rc=3' not in text
    assert f'the engine writes to {tmp_path}/mnt/cache/pisa/' in text
    # ... and the log holds the engine's last words
    log = text.split('LOG ', 1)[1]
    assert 'terminate' in log or 'No space' in log or 'failed' in log.lower(), text
    # cleared: rebuilt (its log kept beside), the same results as an undisturbed build
    assert 'again rc=0' in text and 'incomplete build' in text and '.failed-build.log' in text
    pd.testing.assert_frame_equal(pd.read_pickle(out), cranfield_reference)


# -- FlexIndex: a full disk mid-build, a truncated index, a garbled marker ---------------

@pytest.fixture(scope='module')
def adi_flex(cache_dir):
    encoder = DualEncoder.from_pretrained(MINILM, precision='fp32')
    index = flex_index('classic/adi', encoder, cache_dir=cache_dir)
    return encoder, index, DenseRetriever(encoder, index)(Collection('classic/adi').topics())


FLEX_CHILD = textwrap.dedent('''
    import os, subprocess, sys
    from pyterrier_selfsup import MINILM, Collection, _cache
    from pyterrier_selfsup.models.dual_encoder import DualEncoder
    from pyterrier_selfsup.retrieval.dense import DenseRetriever, flex_index
    cache, mount, out = sys.argv[1:4]
    _cache.builds._check_space = lambda *args: None  # (exact here: the write meets the full disk)
    encoder = DualEncoder.from_pretrained(MINILM, precision='fp32')
    try:
        flex_index('classic/adi', encoder, cache_dir=cache)
    except _cache.CacheError as error:
        print(f'{type(error).__name__}: {error}')
        print('full rc=3')
    print('\\n'.join(sorted(os.listdir(f'{cache}/flex'))), flush=True)
    # (one process for both builds: the disk made larger between them, as a user would)
    subprocess.run(['mount', '-o', 'remount,size=8m', mount], check=True)
    index = flex_index('classic/adi', encoder, cache_dir=cache)
    DenseRetriever(encoder, index)(Collection('classic/adi').topics()).to_pickle(out)
    print('again rc=0')
''')


@pytest.mark.slow
@needs_mounts
def test_flex_index_on_a_full_disk_names_the_index_and_the_cause(tmp_path, adi_flex):
    (tmp_path / 'child.py').write_text(FLEX_CHILD)
    out = tmp_path / 'results.pkl'
    # 82 vectors of 384 floats are 126 KiB: a 96 KiB disk fills while they are written
    proc = in_namespace(f'''
        mount -t tmpfs -o size=96k tmpfs "$D" || exit 99
        "$PY" {tmp_path}/child.py "$D/cache" "$D" {out}
    ''', tmp_path)
    text = proc.stdout + proc.stderr
    assert 'full rc=3' in text, text
    assert ('CacheWriteFailed: the sentence-transformers/all-MiniLM-L6-v2 index of '
            'classic/adi: writing' in text)
    assert ('the disk is full (No space left on device' in text
            and 'the partial build was removed' in text)
    # the staging directory is gone
    assert '.partial' not in text.split('full rc=3', 1)[1].split('again rc')[0]
    assert 'again rc=0' in text, text
    pd.testing.assert_frame_equal(pd.read_pickle(out), adi_flex[2])


SHARDED_REFRESH_CHILD = textwrap.dedent('''
    import os, subprocess, sys
    from datetime import timedelta

    import numpy as np
    import torch, torch.distributed as dist
    from pyterrier_selfsup import MINILM, Collection, _cache
    from pyterrier_selfsup.models.dual_encoder import DualEncoder
    from pyterrier_selfsup.retrieval import dense
    from tests.helpers import start_ranks

    def rank_main(rank, store, mount, out):
        torch.set_num_threads(1)
        # a rank left at a barrier would time out rather than hang the test
        dist.init_process_group('gloo', init_method=f'file://{store}', rank=rank, world_size=2,
                                timeout=timedelta(seconds=120))
        encoder = DualEncoder.from_pretrained(MINILM, precision='fp32')
        checked = _cache.builds.check_space
        # (one process group for the three refreshes: the disk made larger before the last)
        for phase in ('refuse', 'full', 'again'):
            # full: an estimate that was too low, so that rank 0's merge meets the full disk
            _cache.builds.check_space = (lambda *args: None) if phase == 'full' else checked
            try:
                index, tmp = dense.fresh_index(Collection('classic/adi'), encoder)
            except _cache.CacheError as error:
                if phase == 'again':
                    raise
                print(f'rank {rank} {type(error).__name__}: {error}', flush=True)
            else:
                if rank == 0 and phase == 'again':
                    docnos, vectors, _ = index.payload()
                    np.save(out, np.asarray(vectors))
            dist.barrier()
            if rank == 0:
                print(f'{phase} rc=0', flush=True)
                if phase == 'full':
                    print(f'LEFT {len(os.listdir(mount))}', flush=True)
                    subprocess.run(['mount', '-o', 'remount,size=8m', mount], check=True)
            dist.barrier()
        dist.destroy_process_group()

    if __name__ == '__main__':
        scratch, mount = sys.argv[1], sys.argv[2]
        # (forked: the ranks start with the modules imported above)
        start_ranks(rank_main, (f'{scratch}/store', mount, f'{scratch}/vectors.npy'))
''')


@pytest.mark.slow
@needs_mounts
def test_a_sharded_refresh_on_a_full_tmpdir_fails_every_rank_naming_tmpdir(tmp_path, adi_flex):
    """A data-parallel trainer's refreshed index goes to $TMPDIR: too small, it is refused
    before encoding on both ranks; a merge that still meets the full disk fails both ranks
    (none is left at a barrier), the temporary directory removed; cleared, the same vectors."""
    (tmp_path / 'child.py').write_text(SHARDED_REFRESH_CHILD)
    # shards and merged index: 2 x 126 KiB; 192 KiB holds the shards, not the merge as well
    proc = in_namespace(f'''
        mount -t tmpfs -o size=192k tmpfs "$D" || exit 99
        TMPDIR="$D" "$PY" {tmp_path}/child.py {tmp_path} "$D"
    ''', tmp_path)
    text = proc.stdout + proc.stderr
    refused, full = (text.split('refuse rc=0', 1)[0],
                     text.split('refuse rc=0', 1)[1].split('full rc=0')[0])
    for rank in (0, 1):
        assert (f'rank {rank} CacheFull: the refreshed index of classic/adi needs about 251.1 KiB '
                f'under {tmp_path}/mnt/' in refused), text
        assert (f'rank {rank} CacheWriteFailed: the refreshed index of classic/adi: writing '
                in full), text
    assert 'set $TMPDIR to a directory on a disk with more space' in refused
    assert ('the disk is full' in full and 'the temporary index was removed' in full
            and '$TMPDIR' in full)
    assert 'LEFT 0' in text  # nothing left behind in $TMPDIR
    assert 'again rc=0' in text, text
    np.testing.assert_allclose(np.load(tmp_path / 'vectors.npy'), adi_flex[1].payload()[1],
                               atol=1e-6)


@pytest.mark.slow
def test_a_collective_build_that_fails_on_one_rank_fails_on_every_rank(tmp_path):
    from tests.collective_build import collective_rank
    cache, out = tmp_path / 'cache', str(tmp_path / 'out')
    cache.mkdir()
    start_ranks(collective_rank, (str(tmp_path / 'store-1'), str(cache), True, out))
    for rank in (0, 1):  # rank 1's full disk reached rank 0, which was not left at a barrier
        assert Path(f'{out}-{rank}').read_text().startswith(
            f'CacheWriteFailed: the test model: writing {cache}/model.partial/rank-1 failed, the '
            'disk is full'), rank
        assert 'is kept in' in Path(f'{out}-{rank}').read_text()
    # kept to resume
    assert sorted(p.name for p in (cache / 'model.partial').iterdir()) == ['rank-0', 'rank-1']
    start_ranks(collective_rank, (str(tmp_path / 'store-2'), str(cache), False, out))
    for rank in (0, 1):
        assert Path(f'{out}-{rank}').read_text() == 'built .selfsup-complete rank-0 rank-1'


def _killed_flex_build(cache: str):
    """A child process's MiniLM index of ADI, killed (SIGKILL) once every vector is written,
    before the marker."""
    import signal

    from pyterrier_selfsup.retrieval import dense
    encode_into = dense.encode_into

    def killed(staging, *args, **kwargs):
        encode_into(staging, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGKILL)
    dense.encode_into = killed  # (in the child only)
    dense.flex_index('classic/adi', DualEncoder.from_pretrained(MINILM, precision='fp32'),
                     cache_dir=cache)


def test_a_flex_build_killed_before_its_marker_is_rebuilt(tmp_path, adi_flex, caplog):
    import multiprocessing
    import signal
    # (spawned, not forked: a fork of a process that has compiled an OpenVINO model, as the
    # OpenVINO tests do when they run first in the same process, can crash the child)
    child = multiprocessing.get_context('spawn').Process(target=_killed_flex_build,
                                                         args=(str(tmp_path),))
    child.start()
    child.join()
    assert child.exitcode == -signal.SIGKILL
    [staging] = (tmp_path / 'flex').glob('*.partial')
    # whole vectors, yet not a finished index
    assert (staging / 'vecs.f4').stat().st_size == 82 * 384 * 4
    encoder, _, reference = adi_flex
    with caplog.at_level(logging.WARNING, logger='pyterrier_selfsup'):
        rebuilt = flex_index('classic/adi', encoder, cache_dir=tmp_path)
    assert (f'{staging} is an incomplete build (interrupted?); removing it and rebuilding'
            in caplog.text)
    pd.testing.assert_frame_equal(
        DenseRetriever(encoder, rebuilt)(Collection('classic/adi').topics()), reference)


def copied_index(adi_flex, cache: Path) -> Path:
    """The session's finished MiniLM index of ADI copied into ``cache`` where a build there
    would put it (the same files, marker included, without encoding the collection again)."""
    index = Path(adi_flex[1].index_path)
    copy = cache / index.relative_to(index.parents[1])
    shutil.copytree(index, copy)
    return copy


def test_a_truncated_flex_index_is_rebuilt_with_a_warning_naming_it(tmp_path, adi_flex, caplog):
    encoder, index, reference = adi_flex
    path = copied_index(adi_flex, tmp_path)
    assert Path(flex_index('classic/adi', encoder, cache_dir=tmp_path).index_path) == path
    os.truncate(path / 'vecs.f4', 1000)
    with caplog.at_level(logging.WARNING, logger='pyterrier_selfsup'):
        rebuilt = flex_index('classic/adi', encoder, cache_dir=tmp_path)
    assert (f'{path} is damaged (vecs.f4 is 1,000 bytes where 125,952 were written)' in caplog.text
            and 'rebuilding' in caplog.text)
    pd.testing.assert_frame_equal(
        DenseRetriever(encoder, rebuilt)(Collection('classic/adi').topics()), reference)


def test_an_index_built_before_sizes_were_recorded_is_still_checked(tmp_path, adi_flex, caplog):
    """An old completion marker (empty) has no sizes: the format's own check (vectors
    against pt_meta.json) finds the truncation."""
    encoder, _, reference = adi_flex
    path = copied_index(adi_flex, tmp_path)
    assert Path(flex_index('classic/adi', encoder, cache_dir=tmp_path).index_path) == path
    (path / '.selfsup-complete').write_text('')
    # intact: reused
    assert Path(flex_index('classic/adi', encoder, cache_dir=tmp_path).index_path) == path
    os.truncate(path / 'vecs.f4', 1000)
    with caplog.at_level(logging.WARNING, logger='pyterrier_selfsup'):
        rebuilt = flex_index('classic/adi', encoder, cache_dir=tmp_path)
    assert 'vecs.f4 is 1,000 bytes, where 82 vectors of 384 floats take 125,952' in caplog.text
    pd.testing.assert_frame_equal(
        DenseRetriever(encoder, rebuilt)(Collection('classic/adi').topics()), reference)


def test_a_garbled_marker_is_a_damaged_build(tmp_path, adi_flex, caplog):
    encoder = adi_flex[0]
    path = copied_index(adi_flex, tmp_path)
    (path / '.selfsup-complete').write_bytes(b'\x00\xff{garbled')
    with caplog.at_level(logging.WARNING, logger='pyterrier_selfsup'):
        flex_index('classic/adi', encoder, cache_dir=tmp_path)
    assert 'completion marker' in caplog.text and 'garbled' in caplog.text
    assert json.loads((path / '.selfsup-complete').read_text())['files']['vecs.f4'] == 82 * 384 * 4


# -- the cache itself: read-only, full before a build, a damaged model -------------------

READ_ONLY_CHILD = textwrap.dedent('''
    import sys
    from pyterrier_selfsup import BM25, Collection, _cache
    try:
        results = BM25.from_collection('cranfield',
                                       cache_dir=sys.argv[1])(Collection('cranfield').topics())
    except _cache.CacheError as error:
        print(f'{type(error).__name__}: {error}')
        sys.exit(3)
    results.to_pickle(sys.argv[2])
''')


@pytest.mark.slow
@needs_mounts
def test_a_read_only_cache_is_reported_at_once_with_the_settings_that_move_it(
        tmp_path, cranfield_reference, cache_dir):
    (tmp_path / 'child.py').write_text(READ_ONLY_CHILD)
    complete = tmp_path / 'complete'  # a read-only cache that holds the index is still read
    shutil.copytree(cache_dir / 'pisa', complete / 'pisa',
                    ignore=shutil.ignore_patterns('*.lock', '*.failed-build.log'))
    out = tmp_path / 'results.pkl'
    proc = in_namespace(f'''
        mount --bind "$D" "$D" && mount -o remount,bind,ro "$D" || exit 99
        "$PY" {tmp_path}/child.py "$D/cache" x; echo "empty rc=$?"
        mount --bind {complete} {complete} && mount -o remount,bind,ro {complete} || exit 98
        "$PY" {tmp_path}/child.py {complete} {out}; echo "complete rc=$?"
    ''', tmp_path)
    text = proc.stdout + proc.stderr
    assert 'empty rc=3' in text, text
    assert (f'CacheNotWritable: the BM25 index of cranfield: the directory '
            f'{tmp_path}/mnt/cache/pisa cannot be written (Read-only file system)' in text)
    assert '--cache-dir' in text and '$SELFSUP_CACHE' in text
    assert 'complete rc=0' in text, text
    pd.testing.assert_frame_equal(pd.read_pickle(out), cranfield_reference)


def test_a_build_larger_than_the_free_space_is_refused_before_it_starts(tmp_path, monkeypatch):
    free = shutil.disk_usage(tmp_path).free
    built = []
    with pytest.raises(CacheFull,
                       match=rf'the test index needs about .* under {tmp_path}, which has .* free; '
                             r'free some space or move the cache with --cache-dir'):
        build_once(tmp_path / 'x', built.append, what='the test index', needs=lambda: 2 * free)
    assert not built and not (tmp_path / 'x.partial').exists()


def test_a_write_that_fails_for_space_names_the_build_the_file_and_the_cause(tmp_path):
    def build(staging):
        staging.mkdir()
        (staging / 'part').write_text('written before the disk filled')
        raise OSError(errno.ENOSPC, 'No space left on device', str(staging / 'vecs.f4'))

    with pytest.raises(CacheWriteFailed,
                       match=rf'the test index: writing {tmp_path}/x.partial/vecs.f4 failed, the '
                             r'disk is full \(No space left on device; .* free now\); the partial '
                             'build was removed'):
        build_once(tmp_path / 'x', build, what='the test index')
    assert not (tmp_path / 'x.partial').exists()
    # resumable: kept, and said so
    with pytest.raises(CacheWriteFailed,
                       match='is kept in .*x.partial and the next run resumes from it'):
        build_once(tmp_path / 'x', build, what='the test index', resumable=True)
    assert (tmp_path / 'x.partial' / 'part').exists()


def test_a_damaged_trained_model_is_refused_not_retrained(tmp_path):
    def train(staging):
        (staging / 'final').mkdir(parents=True)
        (staging / 'final' / 'model.safetensors').write_bytes(b'w' * 4096)

    path = build_once(tmp_path / 'model', train, what='the ds model', on_damage='raise',
                      resumable=True)
    os.truncate(path / 'final' / 'model.safetensors', 100)
    with pytest.raises(DamagedBuild,
                       match=rf'the ds model at {path} is damaged: final/model.safetensors is 100 '
                             rf'bytes where 4,096 were written. Remove it \(rm -r {path}\) to '
                             r'rebuild it'):
        build_once(path, train, what='the ds model', on_damage='raise', resumable=True)
    assert (path / 'final').exists()  # nothing removed


def test_trained_models_are_refused_and_indexes_rebuilt_when_damaged(monkeypatch, tmp_path):
    """Which builds take which course: trained models are refused (hours of work), the rest
    rebuilt."""
    from pyterrier_selfsup.harness import trained
    seen = {}
    monkeypatch.setattr(trained, 'build_once',
                        lambda path, build, **kwargs: seen.update(kwargs) or path)
    trained.train(Collection('classic/adi'), 'ds', {}, run=RunContext(cache_dir=tmp_path))
    assert seen['on_damage'] == 'raise' and seen['what'] == 'the ds model trained on classic/adi'


def test_unwritable_directory_probe_uses_a_real_write(tmp_path):
    writable(tmp_path / 'new' / 'dir', 'the test')  # created
    (tmp_path / 'file').write_text('')
    with pytest.raises(CacheNotWritable,
                       match=r'the test: the directory .*file/sub cannot be written \(Not a '
                             r'directory\); move the cache with --cache-dir'):
        writable(tmp_path / 'file' / 'sub', 'the test')


# -- generated queries, the ReAtt token index, results files ---------------------------

def test_garbled_generated_queries_are_set_aside_and_rebuilt(tmp_path, tiny_generator_dir, caplog):
    from pyterrier_selfsup.data.queries.source import QuerySource
    from pyterrier_selfsup.harness.methods import source_topics
    from pyterrier_selfsup.models.generator import Generator
    coll = Collection('classic/adi')
    gen = Generator.from_pretrained(str(tiny_generator_dir['llama']), device='cpu',
                                    precision='fp32', max_passage_length=32)
    run = RunContext(cache_dir=tmp_path)
    first = source_topics(coll, QuerySource('generated', 6, seed=1), generator=gen, run=run)
    [path] = (tmp_path / 'queries').glob('*/topics.jsonl')
    size = path.stat().st_size
    path.write_bytes(b'{"qid": "1", "query' + b'#' * (size - 19))  # garbled, its size unchanged
    with caplog.at_level(logging.WARNING, logger='pyterrier_selfsup'):
        again = source_topics(coll, QuerySource('generated', 6, seed=1), generator=gen, run=run)
    assert ('the generated training queries of classic/adi' in caplog.text
            and 'topics.jsonl does not parse' in caplog.text)
    assert f'setting it aside as {path.parent}.damaged' in caplog.text
    assert (path.parent.with_name(path.parent.name + '.damaged')
            / 'topics.jsonl').read_bytes().endswith(b'###')
    pd.testing.assert_frame_equal(again, first)


def test_a_truncated_token_index_is_rebuilt(tiny_reatt, tmp_path, caplog):
    from pyterrier_selfsup.retrieval.token_index import KEYS_FILE, reatt_index
    r = tiny_reatt()
    coll = Collection('classic/adi')
    first = reatt_index(coll, r, nlist=8, cache_dir=tmp_path)
    query = ['the retrieval of documents']
    expected = first.retriever(r, num_results=5)(pd.DataFrame({'qid': ['1'], 'query': query}))
    os.truncate(first.path / KEYS_FILE, 1000)
    # (as an index built before sizes were recorded)
    (first.path / '.selfsup-complete').write_text('')
    with caplog.at_level(logging.WARNING, logger='pyterrier_selfsup'):
        again = reatt_index(coll, r, nlist=8, cache_dir=tmp_path)
    assert ('the ReAtt token index of classic/adi' in caplog.text
            and f'{KEYS_FILE} is 1,000 bytes' in caplog.text)
    pd.testing.assert_frame_equal(
        again.retriever(r, num_results=5)(pd.DataFrame({'qid': ['1'], 'query': query})), expected)


def test_results_files_are_written_whole_or_not_at_all(tmp_path, monkeypatch):
    from pyterrier_selfsup.harness.experiment import run_experiment, write_results
    result = run_experiment(['classic/adi'], ['bm25'], name='faults',
                            run=RunContext(cache_dir=tmp_path / 'cache'), log=lambda s: None)
    first = write_results(result, tmp_path / 'results')
    before = {p: p.read_bytes() for p in first}

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, 'No space left on device')
    monkeypatch.setattr(pd.DataFrame, 'to_csv', full)
    with pytest.raises(CacheWriteFailed,
                       match=r'the results file faults.csv: writing .*faults.csv failed, the disk '
                             r'is full .*choose another directory with --results-dir'):
        write_results(result, tmp_path / 'results')
    assert {p: p.read_bytes() for p in first} == before  # the earlier files as they were
    assert sorted(p.name for p in (tmp_path / 'results').iterdir()) == sorted(p.name for p in first)


# -- the generator's score cache: damaged, half-written, full ---------------------------

@pytest.fixture(scope='module')
def scoring(tiny_generator_dir, cache_dir):
    """A tiny generator, BM25's top 12 for ADI's 35 queries with their text (a cache of some
    30 pages), and the scores an undisturbed cache gives them."""
    from pyterrier_selfsup.models.generator import Generator
    coll = Collection('classic/adi')
    gen = Generator.from_pretrained(str(tiny_generator_dir['llama']), device='cpu',
                                    precision='fp32', max_passage_length=32)
    pairs = ((BM25.from_collection(coll, cache_dir=cache_dir) % 12)
             >> coll.text_loader())(coll.topics())
    return gen, pairs, gen.scorer()(pairs)


def counted(gen, monkeypatch):
    """Counts the pairs ``gen`` scores (for the rest of the test)."""
    seen = []
    score = gen.log_likelihoods
    monkeypatch.setattr(gen, 'log_likelihoods',
                        lambda targets, passages, **kwargs: (seen.append(len(targets))
                                                             or score(targets, passages, **kwargs)))
    return seen


@pytest.mark.parametrize('damage', ['garbled header', 'truncated', 'garbled page'])
def test_a_damaged_score_cache_is_set_aside_and_only_its_damaged_part_scored_again(
        scoring, tmp_path, caplog, monkeypatch, damage):
    from pyterrier_selfsup.models.reranker import ReconstructionScorer
    from pyterrier_selfsup.models.score_cache import SCORE_DB
    gen, pairs, reference = scoring
    path = tmp_path / 'scores'
    ReconstructionScorer(gen, cache=path)(pairs)
    db = path / SCORE_DB
    size = db.stat().st_size
    with open(db, 'r+b') as fh:
        if damage == 'garbled header':
            fh.write(b'\xff' * 100)
        elif damage == 'truncated':
            fh.truncate(size // 2 + 100)
        else:  # the last page of the table's rows (a table leaf: its first byte is 13)
            # overwritten: SQLite opens the file, and finds the damage in its check
            pages = fh.read()
            leaf = max(i for i in range(1, size // 4096) if pages[i * 4096] == 13)
            fh.seek(leaf * 4096)
            fh.write(b'\xa5' * 4096)
    seen = counted(gen, monkeypatch)
    with caplog.at_level(logging.WARNING, logger='pyterrier_selfsup'):
        scorer = ReconstructionScorer(gen, cache=path)
    assert (f'the score cache at {path} was damaged' in caplog.text
            and f'set aside as {path}.damaged' in caplog.text)
    recovered = int(caplog.text.split('; ')[-1].split(' scores recovered')[0].rsplit(' ', 1)[-1])
    assert recovered < len(pairs)
    if damage == 'garbled header':
        assert 'not a SQLite database' in caplog.text and recovered == 0
    pd.testing.assert_frame_equal(scorer(pairs), reference)
    assert sum(seen) == len(pairs) - recovered  # only what was lost is scored again


def test_a_full_disk_while_scoring_keeps_what_was_committed(scoring, tmp_path, monkeypatch):
    from pyterrier_selfsup.models.reranker import ReconstructionScorer
    gen, pairs, reference = scoring
    path = tmp_path / 'scores'
    scorer = ReconstructionScorer(gen, cache=path)
    scorer.CHUNK = 4  # a commit every 4 passages
    pages = scorer.cache.db.execute('PRAGMA page_count').fetchone()[0]
    scorer.cache.db.execute(f'PRAGMA max_page_count = {pages + 8}')  # SQLite's own 'disk full'
    with pytest.raises(CacheWriteFailed,
                       match=rf'the score cache: writing {path}/db.sqlite3 failed, the disk is '
                             r'full \(database or disk is full; .*\); the scores committed before'):
        scorer(pairs)
    kept = scorer.cache.db.execute('SELECT count(*) FROM cache').fetchone()[0]
    assert 0 < kept < len(pairs)
    seen = counted(gen, monkeypatch)
    again = ReconstructionScorer(gen, cache=path)  # the fault cleared
    pd.testing.assert_frame_equal(again(pairs), reference)
    assert sum(seen) == len(pairs) - kept


# -- training: a damaged checkpoint, a full disk while one is written --------------------

CHECKPOINTED = dict(negatives='bm25', batch_size=8, epochs=3, lr=3e-4, accumulation=2,
                    verbose=False, checkpoint_every=3)


def test_a_damaged_checkpoint_is_set_aside_and_training_resumes_from_the_one_before(
        tiny_encoder, cache_dir, tmp_path, caplog):
    from pyterrier_selfsup.training.checkpoints import checkpoints, fit_resumably
    from pyterrier_selfsup.training.distant import DistantSupervision
    coll = Collection('classic/adi')
    full = DistantSupervision(tiny_encoder(max_length=64), coll, output_dir=tmp_path / 'full',
                              cache_dir=cache_dir, **CHECKPOINTED).fit(coll.topics())
    # a run killed after its second checkpoint, whose weights were then truncated
    shutil.copytree(tmp_path / 'full', tmp_path / 'killed', ignore=shutil.ignore_patterns('final'))
    last = checkpoints(tmp_path / 'killed')[-1]
    assert last.name == 'checkpoint-6'
    [weights] = last.glob('*.safetensors')
    os.truncate(weights, 1000)
    resumed = DistantSupervision(tiny_encoder(max_length=64), coll, output_dir=tmp_path / 'killed',
                                 cache_dir=cache_dir, **CHECKPOINTED)
    with caplog.at_level(logging.WARNING, logger='pyterrier_selfsup'):
        fit_resumably(resumed, coll.topics())
    assert f'checkpoint {last} is damaged ({weights.name} is 1,000 bytes where' in caplog.text
    assert f'resuming from {tmp_path}/killed/checkpoint-3' in caplog.text
    assert (tmp_path / 'killed' / 'checkpoint-6.damaged').is_dir()
    for a, b in zip(full.encoder.model.parameters(), resumed.encoder.model.parameters()):
        assert torch.equal(a, b)  # the same weights as the undisturbed run


def test_a_checkpoint_that_meets_a_full_disk_is_removed_and_named(tiny_encoder, cache_dir, tmp_path,
                                                                  monkeypatch):
    from pyterrier_selfsup.training import checkpoints as loop
    from pyterrier_selfsup.training.distant import DistantSupervision
    coll = Collection('classic/adi')
    trainer = DistantSupervision(tiny_encoder(max_length=64), coll, output_dir=tmp_path / 'run',
                                 cache_dir=cache_dir, **CHECKPOINTED)
    save = torch.save

    def full_at_step_6(obj, path, *args, **kwargs):
        if 'checkpoint-6' in str(path):
            raise OSError(errno.ENOSPC, 'No space left on device', str(path))
        return save(obj, path, *args, **kwargs)
    monkeypatch.setattr(loop.torch, 'save', full_at_step_6)
    with pytest.raises(CacheWriteFailed,
                       match=r'the checkpoint at step 6: writing .*checkpoint-6/\S+ failed, the '
                             r'disk is full .*; it was removed; the next run resumes from '
                             r'.*checkpoint-3'):
        trainer.fit(coll.topics())
    assert [p.name for p in loop.checkpoints(tmp_path / 'run')] == ['checkpoint-3']
    assert not (tmp_path / 'run' / 'checkpoint-6').exists()


def test_a_checkpoint_whose_random_state_does_not_load_is_an_error_where_accelerate_goes_on(
        tiny_encoder, cache_dir, tmp_path, caplog):
    """Why the loop keeps its own checkpoints (training/checkpoints.py): accelerate's
    load_accelerator_state restores the optimiser and the scheduler, then goes on past random
    states that do not load (a resumed run would draw other batches and masks, unsaid); the
    package's resume refuses them."""
    from accelerate.checkpointing import load_accelerator_state, save_accelerator_state

    from pyterrier_selfsup.training.checkpoints import TRAINER_STATE_FILE, checkpoints
    from pyterrier_selfsup.training.distant import DistantSupervision
    coll = Collection('classic/adi')
    trainer = DistantSupervision(tiny_encoder(max_length=64), coll, output_dir=tmp_path / 'run',
                                 cache_dir=cache_dir, **CHECKPOINTED)
    trainer.fit(coll.topics())
    first = checkpoints(tmp_path / 'run')[0]
    state = torch.load(first / TRAINER_STATE_FILE, weights_only=False)
    state['torch_rng'] = torch.zeros(3, dtype=torch.uint8)  # (a state that does not load)
    torch.save(state, first / TRAINER_STATE_FILE)
    again = DistantSupervision(tiny_encoder(max_length=64), coll, output_dir=tmp_path / 'again',
                               cache_dir=cache_dir, **CHECKPOINTED)
    with pytest.raises(RuntimeError):
        again.fit(coll.topics(), resume_from=first)
    # accelerate's: the same random state, saved and loaded through its own files
    param = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.AdamW([param])
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    (tmp_path / 'accelerate').mkdir()
    save_accelerator_state(tmp_path / 'accelerate', [], [optimizer], [scheduler], [], 0, 0)
    rng = tmp_path / 'accelerate' / 'random_states_0.pkl'
    saved = torch.load(rng, weights_only=False)
    torch.save(dict(saved, torch_manual_seed=torch.zeros(3, dtype=torch.uint8)), rng)
    with caplog.at_level('INFO'):
        load_accelerator_state(tmp_path / 'accelerate', [], [optimizer], [scheduler], [], 0)
    assert 'Could not load random states' in caplog.text
