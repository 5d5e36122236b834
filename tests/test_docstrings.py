"""The package's docstrings say what a thing does: its history and its measurements live in
CHANGELOG.md and the results files, where they can be kept up to date."""
import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / 'pyterrier_selfsup'

# what a docstring must not cite; a ``literal`` (a format, a setting's value) is not read
CITES = {
    'a date': r'\b20\d\d-\d\d-\d\d\b',
    'an issue number': r'\b[Ii]ssues? #?\d+',
    'a measured figure': (r'(?<![\w.])[+−-]?\.\d{3,4}\b'  # a score: .678, +.017
                          r'|\b\d+(\.\d+)? ?(GiB|MiB|GB|MB)\b'  # a memory figure
                          r'|\b\d+(\.\d+)? ?x (faster|slower)\b'  # a speed-up
                          # a rate
                          r'|\b\d+(\.\d+)? ?(docs|passages|pairs|queries|steps|tokens|GFLOP)/s\b'
                          r'|\b\d+(\.\d+)? s a step\b'),
}


def docstrings(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                yield getattr(node, 'name', path.stem), re.sub(r'``.*?``', '``…``', doc, flags=re.S)


def citations(text: str):
    return [(what, m.group(0)) for what, pattern in CITES.items()
            for m in re.finditer(pattern, text)]


def test_the_check_finds_what_it_looks_for():
    assert [what for what, _ in citations('since 2026-11-26 (issue 16): +.008, 2.3 GiB, '
                                          '600 passages/s')] == \
        ['a date', 'an issue number', 'a measured figure', 'a measured figure', 'a measured figure']
    assert citations('``41.2 passages/s`` names a format; β 0.9; top 10 of 100') == [
        ('a measured figure', '41.2 passages/s')]  # (the literal is left out by docstrings())


def test_no_docstring_in_the_package_cites_a_date_an_issue_or_a_measured_figure():
    found = [f'{path.relative_to(PACKAGE.parent)}: {name}: {what} ({text!r})'
             for path in sorted(PACKAGE.rglob('*.py')) for name, doc in docstrings(path)
             for what, text in citations(doc)]
    assert not found, '\n'.join(found)
