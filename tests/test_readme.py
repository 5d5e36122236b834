"""The README's Python blocks, run here as printed, in order, in one namespace (as a
reader pasting them into one session would), on ADI instead of scifact: the only changes
are those in SUBSTITUTIONS, each applied where the README names a collection or a path
that is not on this machine, or a training size that would take the suite minutes. A block
that stops running, or a substitution whose text the README no longer holds, fails the test.
"""
import ast
import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest

from pyterrier_selfsup import Collection

README = Path(__file__).resolve().parents[1] / 'README.md'
SUBSTITUTIONS = {
    "'beir/scifact/test'": "'classic/adi'",  # a small collection: the test suite's minutes
    # the classic collections here
    "'/data/glasgow'": repr(os.environ.get('SELFSUP_CLASSIC_DATA', '')),
    # two training steps of 32 queries (ADI's 250-odd sentences would take eight)
    'corpus_sentences(scifact, 5000)': 'corpus_sentences(scifact, 64)',
}


def python_blocks(text: str):
    """The README's fenced Python blocks (at the start of a line: not those inside list items)."""
    return re.findall(r'^```python\n(.*?)^```', text, flags=re.S | re.M)


def run_block(code: str, namespace: dict):
    """``code`` executed in ``namespace``; the value of its last line if that is an expression."""
    tree = ast.parse(code)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, 'README.md', 'exec'), namespace)
    if last is not None:
        return eval(compile(ast.Expression(last.value), 'README.md', 'eval'), namespace)
    return None


@pytest.mark.slow
def test_every_python_block_of_the_readme_runs(cache_dir, tmp_path, monkeypatch):
    monkeypatch.setenv('SELFSUP_CACHE', str(cache_dir))
    monkeypatch.chdir(tmp_path)
    adi = Collection('classic/adi')  # the files the README's own-corpus block reads
    with open('docs.jsonl', 'w') as out:
        out.writelines(json.dumps({'docno': d['docno'], 'text': d['text']}) + '\n'
                       for d in adi.corpus_iter())
    Path('queries.txt').write_text('\n'.join(adi.topics()['query'].head(5)) + '\n')

    text = README.read_text()
    for old in SUBSTITUTIONS:
        assert old in text, f'the README no longer holds {old}: update SUBSTITUTIONS'
    for old, new in SUBSTITUTIONS.items():
        text = text.replace(old, new)
    blocks = python_blocks(text)
    assert len(blocks) == 4
    namespace = {}
    quick_start, adapting, classic, own = (run_block(code, namespace) for code in blocks)

    table = quick_start.set_index('name')
    assert table.loc['BM25', 'nDCG@10'] == pytest.approx(0.4855, abs=1e-4)  # (tests/test_bm25.py)
    # (tests/test_dense.py)
    assert table.loc['MiniLM', 'nDCG@10'] == pytest.approx(0.4975, abs=1e-4)
    # MiniLM re-ranking BM25's top 100 from its stored vectors: BM25's recall, MiniLM's order
    assert table.loc['BM25 >> MiniLM', 'R@100'] == pytest.approx(table.loc['BM25', 'R@100'])
    assert table.loc['BM25 >> MiniLM', 'nDCG@10'] != table.loc['BM25', 'nDCG@10']
    assert len(adapting) == 3 and (tmp_path / 'runs' / 'ds' / 'final' / 'config.json').exists()
    assert isinstance(classic, pd.DataFrame) and len(classic) == 76  # CISI's judged queries
    assert (own['qid'].nunique() == 5 and
            set(own['docno']) <= {d['docno'] for d in adi.corpus_iter()})


def test_every_selfsup_command_of_the_readme_parses_and_names_known_pipelines(monkeypatch):
    """The README's shell lines are not run (they train on scifact for hours): each
    ``selfsup`` command (and ``python -m pyterrier_selfsup`` under torchrun) goes through the
    CLI's own parser, and every pipeline it names, with its settings, must resolve."""
    import shlex

    from pyterrier_selfsup.harness import cli
    from pyterrier_selfsup.harness.pipelines import get_pipeline
    # `--classic-data DIR` sets $SELFSUP_CLASSIC_DATA for the process, as a command line should;
    # here it must not outlive the test (the walkthrough's kernel, started later, inherits it).
    monkeypatch.setenv('SELFSUP_CLASSIC_DATA', os.environ.get('SELFSUP_CLASSIC_DATA', ''))
    seen = []
    monkeypatch.setattr(cli, 'run_experiment', lambda collections, pipelines, **kwargs: seen.extend(
        get_pipeline(p) for p in pipelines))
    monkeypatch.setattr(cli, 'write_results', lambda *args, **kwargs: [])
    monkeypatch.setattr(cli, 'writable', lambda *args, **kwargs: None)
    monkeypatch.setattr(cli, 'join_process_group', lambda: None)
    monkeypatch.setattr(cli.shutil, 'copytree', lambda *args, **kwargs: None)  # (--output)
    monkeypatch.setattr(cli, 'Collection', lambda name: name)
    monkeypatch.setattr(type(get_pipeline('ds')), 'train',
                        lambda spec, *args, **kwargs: seen.append(spec) or Path('x'))
    commands = []
    for block in re.findall(r'```bash\n(.*?)```', README.read_text(), flags=re.S):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ['selfsup']:
                commands.append(words[1:])
            elif 'pyterrier_selfsup' in words:
                commands.append(words[words.index('pyterrier_selfsup') + 1:])
    assert len(commands) >= 10
    for argv in commands:
        assert cli.main(argv) == 0, argv
    assert len(seen) >= 15
