"""The Python blocks of the README and of every page in docs/, run here as printed, in order,
one namespace a page (as a reader pasting a page into one session would), on ADI instead of
scifact: the only changes are those in SUBSTITUTIONS, each applied where a page names a
collection or a path that is not on this machine, or a training size that would take the
suite minutes. A block that stops running, or a substitution whose text no page holds any
more, fails the test. The shell blocks are not run (they train for minutes to hours): each
`selfsup` command goes through the command line's own parser, and each script a block names
must exist.
"""
import ast
import importlib.util
import json
import os
import re
from pathlib import Path

import pytest

from pyterrier_selfsup import Collection

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / 'README.md'
PAGES = [README, *sorted((ROOT / 'docs').glob('*.md'))]
# distillation small enough for the suite: 32 corpus sentences, 2 rounds of one step each
SMALL_DISTILL = 'queries=sentences,n_queries=32,rounds=2'
SUBSTITUTIONS = {
    "'beir/scifact/test'": "'classic/adi'",  # a small collection: the test suite's minutes
    # the classic collections here
    "'/data/glasgow'": repr(os.environ.get('SELFSUP_CLASSIC_DATA', '')),
    # one training step of 16 queries (ADI's 250-odd sentences would take eight of 32)
    'corpus_sentences(scifact, 5000)': 'corpus_sentences(scifact, 16)',
    "get_pipeline('distill')": f"get_pipeline('distill:{SMALL_DISTILL}')",
    "get_pipeline('hybrid')": f"get_pipeline('hybrid:{SMALL_DISTILL}')",
}


def python_blocks(text: str):
    """A page's fenced Python blocks (at the start of a line: not those inside list items)."""
    return re.findall(r'^```python\n(.*?)^```', text, flags=re.S | re.M)


def substituted(text: str) -> str:
    for old, new in SUBSTITUTIONS.items():
        text = text.replace(old, new)
    return text


def run_block(code: str, namespace: dict, page: str = 'README.md'):
    """``code`` executed in ``namespace``; the value of its last line if that is an expression."""
    tree = ast.parse(code)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, page, 'exec'), namespace)
    if last is not None:
        return eval(compile(ast.Expression(last.value), page, 'eval'), namespace)
    return None


@pytest.fixture
def a_readers_directory(cache_dir, tmp_path, monkeypatch, classic_from_the_mirror):
    """A working directory holding the files the pages read: ADI's documents as docs.jsonl,
    five of its queries as queries.txt; no $SELFSUP_CLASSIC_DATA, as for a user who has just
    cloned the repository (ADI downloaded on first use, from a server on 127.0.0.1 that serves
    the local copy)."""
    monkeypatch.setenv('SELFSUP_CACHE', str(cache_dir))
    monkeypatch.chdir(tmp_path)
    adi = Collection('classic/adi')
    with open('docs.jsonl', 'w') as out:
        out.writelines(json.dumps({'docno': d['docno'], 'text': d['text']}) + '\n'
                       for d in adi.corpus_iter())
    Path('queries.txt').write_text('\n'.join(adi.topics()['query'].head(5)) + '\n')
    return adi


def test_every_substitution_still_finds_its_text():
    pages = ''.join(page.read_text() for page in PAGES)
    for old in SUBSTITUTIONS:
        assert old in pages, f'no page holds {old} any more: update SUBSTITUTIONS'


@pytest.mark.slow
def test_every_python_block_of_the_readme_runs(a_readers_directory, tmp_path):
    blocks = python_blocks(substituted(README.read_text()))
    assert len(blocks) == 2
    namespace = {}
    quick_start, own = (run_block(code, namespace) for code in blocks)

    table = quick_start.set_index('name')
    assert table.loc['BM25', 'nDCG@10'] == pytest.approx(0.4855, abs=1e-4)  # (tests/test_bm25.py)
    # (tests/test_dense.py)
    assert table.loc['MiniLM', 'nDCG@10'] == pytest.approx(0.4975, abs=1e-4)
    # MiniLM re-ranking BM25's top 100 from its stored vectors: BM25's recall, MiniLM's order
    assert table.loc['BM25 >> MiniLM', 'R@100'] == pytest.approx(table.loc['BM25', 'R@100'])
    assert table.loc['BM25 >> MiniLM', 'nDCG@10'] != table.loc['BM25', 'nDCG@10']
    # the adapted model moved from its start, and the hybrid from both of its parts
    assert table.loc['adapted', 'nDCG@10'] != table.loc['MiniLM', 'nDCG@10']
    assert table.loc['hybrid', 'nDCG@10'] not in (table.loc['adapted', 'nDCG@10'],
                                                  table.loc['BM25', 'nDCG@10'])
    # your own corpus: a model directory that sentence-transformers loads, searched over its index
    assert (namespace['model_dir'] / 'config_sentence_transformers.json').exists()
    adi_docnos = {d['docno'] for d in a_readers_directory.corpus_iter()}
    assert len(own) == 3 and set(own['docno']) <= adi_docnos


@pytest.mark.slow
@pytest.mark.parametrize('page', [p.name for p in PAGES[1:] if python_blocks(p.read_text())])
def test_every_python_block_of_the_docs_runs(page, a_readers_directory):
    namespace = {}
    for code in python_blocks(substituted((ROOT / 'docs' / page).read_text())):
        run_block(code, namespace, page)


def test_every_constructor_of_the_readmes_components_table_takes_its_arguments():
    """Each call to a package name in the components table names something that exists and
    accepts the arguments the table gives it (bound to its signature, not run)."""
    import inspect

    import pyterrier_selfsup as selfsup
    text = README.read_text()
    table = text[text.index('## The components'):text.index('## Adapting to your own corpus')]
    cells = re.findall(r'^\|[^|]*\| `(.*)` \|$', table, flags=re.M)
    assert len(cells) >= 12
    checked = 0
    for cell in cells:
        for call in ast.walk(ast.parse(cell)):
            chain, node = [], getattr(call, 'func', None)
            while isinstance(node, ast.Attribute):
                chain.insert(0, node.attr)
                node = node.value
            if not (isinstance(call, ast.Call) and isinstance(node, ast.Name)
                    and node.id == 'selfsup'):
                continue
            target = selfsup
            for name in chain:
                target = getattr(target, name)
            keywords = {}
            for keyword in call.keywords:
                keywords.update({keyword.arg: None} if keyword.arg else
                                eval(compile(ast.Expression(keyword.value), 'README', 'eval'),
                                     {'selfsup': selfsup}))
            inspect.signature(target).bind(*[None] * len(call.args), **keywords)
            checked += 1
    assert checked == len(cells)


def test_the_readme_is_at_most_12_kb():
    assert README.stat().st_size <= 12 * 1024


def sections():
    """scripts/docs_sections.py, imported: the pages' sections read from the results files."""
    spec = importlib.util.spec_from_file_location('docs_sections',
                                                  ROOT / 'scripts' / 'docs_sections.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


WRITE = 'run `python scripts/docs_sections.py --write`'


def test_the_readmes_table_is_what_the_results_files_say():
    text = README.read_text()
    assert sections().written_into(text) == text, WRITE


def test_the_adapting_guide_is_short_and_opens_with_the_decisions():
    guide = ROOT / 'docs' / 'adapting.md'
    assert len(guide.read_bytes()) <= 12 * 1024, 'research belongs in the results files'
    assert re.findall(r'^## (.*)$', guide.read_text(), flags=re.M)[0] == 'Decide first'


def test_the_adapting_guides_times_are_what_the_results_files_say():
    docs = sections()
    text = docs.ADAPTING.read_text()
    assert docs.how_long_written_into(text) == text, WRITE


def test_the_adapting_guides_pool_sizes_are_what_the_results_file_says():
    """The passages a user grades for 30 queries on each collection (issue 71)."""
    docs = sections()
    rows = docs.pool_rows()
    assert [r['collection'] for r in rows] == list(docs.COLLECTIONS)  # (the README's order)
    text = docs.ADAPTING.read_text()
    assert docs.pool_sentence(rows) in ' '.join(text.split())
    assert docs.pool_sizes_written_into(text) == text, WRITE


def shell_lines():
    """Every line of every shell block of the README and the docs, split as a shell would."""
    import shlex
    for page in PAGES:
        for block in re.findall(r'```bash\n(.*?)```', page.read_text(), flags=re.S):
            for line in block.replace('\\\n', ' ').splitlines():  # (continued lines joined)
                yield page.name, shlex.split(line, comments=True)


def test_every_script_the_pages_name_exists():
    named = [(page, word) for page, words in shell_lines() for word in words
             if word.endswith(('.py', '.sh')) and '/' in word]
    assert len(named) >= 5
    for page, script in named:
        assert (ROOT / script).exists(), f'{page} names {script}, which does not exist'


def test_every_selfsup_command_of_the_pages_parses_and_names_known_pipelines(monkeypatch):
    """Each ``selfsup`` command (and ``python -m pyterrier_selfsup`` under torchrun) goes
    through the CLI's own parser, and every pipeline it names, with its settings, must
    resolve."""
    from pyterrier_selfsup.data import collections
    from pyterrier_selfsup.harness import cli, experiment
    from pyterrier_selfsup.harness.pipelines import get_pipeline
    # `--classic-data DIR` sets $SELFSUP_CLASSIC_DATA for the process, as a command line should;
    # here it must not outlive the test (the walkthrough's kernel, started later, inherits it).
    monkeypatch.setenv('SELFSUP_CLASSIC_DATA', os.environ.get('SELFSUP_CLASSIC_DATA', ''))
    seen = []
    # (the command line imports these where `run` and `train` need them: patched at their home)
    monkeypatch.setattr(experiment, 'run_experiment', lambda names, pipelines, **kwargs:
                        seen.extend(map(get_pipeline, pipelines)))
    monkeypatch.setattr(experiment, 'write_results', lambda *args, **kwargs: [])
    monkeypatch.setattr(cli, 'writable', lambda *args, **kwargs: None)
    monkeypatch.setattr(cli, 'join_process_group', lambda: None)
    monkeypatch.setattr(cli.shutil, 'copytree', lambda *args, **kwargs: None)  # (--output)
    monkeypatch.setattr(collections, 'Collection', lambda name: name)
    monkeypatch.setattr(type(get_pipeline('ds')), 'train',
                        lambda spec, *args, **kwargs: seen.append(spec) or Path('x'))
    # (`selfsup judge` would serve its page: its pipelines are resolved instead)
    from pyterrier_selfsup.harness.judging import campaign, command
    monkeypatch.setattr(campaign, 'read_judgements', lambda qrels, topics=None: None)
    monkeypatch.setattr(command, 'main', lambda args, run: seen.extend(
        map(get_pipeline, args.pipelines or command.DEFAULT_PIPELINES)) or 0)
    commands = []
    for _, words in shell_lines():
        if words[:1] == ['selfsup']:
            commands.append(words[1:])
        elif 'pyterrier_selfsup' in words:
            commands.append(words[words.index('pyterrier_selfsup') + 1:])
    assert len(commands) >= 10
    for argv in commands:
        assert cli.main(argv) == 0, argv
    assert len(seen) >= 15


def test_the_reproduction_table_is_what_the_expected_files_say():
    docs = sections()
    text = docs.EXPERIMENTS_README.read_text()
    # one row for each method's expected file, and every method has one
    assert docs.reproduction_table().count('\n| ') == len(docs.expected_files())
    assert {f.name.split('-', 1)[0] for f in docs.expected_files()} == set(docs.REPRODUCED)
    assert docs.reproduction_written_into(text) == text, WRITE
