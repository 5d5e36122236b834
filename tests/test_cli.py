import re
import subprocess
import sys

import pandas as pd
import pytest

from tests.helpers import snapshot


def selfsup(*args, cwd):
    return subprocess.run([sys.executable, '-m', 'pyterrier_selfsup', *args], capture_output=True, text=True, cwd=cwd)


def test_run_writes_results_with_header(tmp_path, cache_dir):
    proc = selfsup('run', '-c', 'classic/adi', '-p', 'bm25', 'minilm', '--save', 'adi',
                   '--results-dir', str(tmp_path / 'results'), '--cache-dir', str(cache_dir), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r'\| bm25 \| 0\.4855 \| 0\.8144 \| 0\.6427 \|', proc.stdout)
    assert re.search(r'\| minilm \| 0\.497\d \(p=0\.8\d*\)', proc.stdout)

    md = (tmp_path / 'results' / 'adi.md').read_text()
    for key in ('date', 'command', 'code', 'machine', 'packages', 'models', 'data', 'pipeline bm25',
                'pipeline minilm', 'evaluation'):
        assert f'\n- {key}: ' in md
    assert 'sentence-transformers/all-MiniLM-L6-v2@' in md  # the model's hub revision
    assert 'classic/adi (82 docs, 35 topics, 170 judgments)' in md

    csv = tmp_path / 'results' / 'adi.csv'
    assert csv.read_text().startswith('# date: ')
    table = pd.read_csv(csv, comment='#')
    assert table[['collection', 'name']].values.tolist() == [['classic/adi', 'bm25'], ['classic/adi', 'minilm']]
    assert table['nDCG@10'][0] == pytest.approx(0.4855, abs=1e-4)

    png = (tmp_path / 'results' / 'adi.png').read_bytes()
    assert png.startswith(b'\x89PNG') and b'machine: ' in png  # the header is in the image's metadata too


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
