"""examples/walkthrough.ipynb, executed here by nbclient as Jupyter would run it, with the
small setting it reads from the environment (4 queries; the shipped single round), so that it
cannot rot; and the copy in the repository must hold the outputs of a complete run."""
import json
from pathlib import Path

import nbformat
import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / 'examples' / 'walkthrough.ipynb'


def test_the_committed_notebook_holds_the_outputs_of_a_complete_run():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == 'code']
    # in order, none skipped
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1))
    assert not [o for cell in code for o in cell.outputs if o.output_type == 'error']
    images = [o for cell in code for o in cell.outputs if 'image/png' in o.get('data', {})]
    assert len(images) == 2  # the training curve and the comparison
    text = ''.join(o.get('text', '') for cell in code for o in cell.outputs)
    assert 'with QUERIES=2000 rounds=1' in text  # the shipped settings, not the test's


@pytest.mark.slow
def test_the_walkthrough_runs(cache_dir, tmp_path, monkeypatch, classic_from_the_mirror):
    """As for a user who has just cloned the repository: no $SELFSUP_CLASSIC_DATA, ADI
    downloaded on first use (here from a server on 127.0.0.1 that serves the local copy)."""
    monkeypatch.syspath_prepend(str(NOTEBOOK.parents[1] / 'scripts'))
    from execute_notebook import execute
    for name, value in {'WALKTHROUGH_QUERIES': '4', 'SELFSUP_CACHE': str(cache_dir),
                        'WALKTHROUGH_OUTPUT': str(tmp_path / 'run')}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv('WALKTHROUGH_ROUNDS', raising=False)  # (the shipped rounds)
    notebook = execute(NOTEBOOK, timeout=600, cwd=tmp_path)
    text = ''.join(o.get('text', '') for cell in notebook.cells if cell.cell_type == 'code'
                   for o in cell.outputs)
    assert 'classic/adi: 82 documents; 35 test queries, 170 judgements' in text
    assert '4 queries from' in text and 'with QUERIES=4 rounds=1' in text
    assert (tmp_path / 'run' / 'comparison.png').stat().st_size > 10_000
    assert (tmp_path / 'run' / 'final').is_dir()
    log = [json.loads(line)
           for line in (tmp_path / 'run' / 'training_log.jsonl').read_text().splitlines()]
    assert any('loss' in record for record in log)
