"""The package's layout is its method: data → models → retrieval → training → harness, one way."""
import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / 'pyterrier_selfsup'
LAYERS = ['machine', '_kernel_caches', 'progress', '_distributed', '_cache', 'context', 'data',
          'models', 'retrieval', 'training', 'harness']
TRAINERS = {'training.distant', 'training.rumbart', 'training.acrobart', 'training.adjustment',
            'training.distill'}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix('').parts
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def imports(path: Path):
    """The package modules ``path`` imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.ImportFrom) and node.module and
                node.module.startswith('pyterrier_selfsup')):
            base = node.module[len('pyterrier_selfsup'):].lstrip('.')
            # `from pyterrier_selfsup.harness import trained` imports a module
            for alias in node.names:
                candidate = f'{base}.{alias.name}' if base else alias.name
                found.add(candidate
                          if (PACKAGE / candidate.replace('.', '/')).with_suffix('.py').is_file()
                          or (PACKAGE / candidate.replace('.', '/')).is_dir() else base)
        elif isinstance(node, ast.Import):
            found.update(a.name[len('pyterrier_selfsup.'):] for a in node.names
                         if a.name.startswith('pyterrier_selfsup.'))
    return {f for f in found if f}


GRAPH = {module_name(p): imports(p) for p in PACKAGE.rglob('*.py') if module_name(p)}


def layer(module: str) -> int:
    top = module.split('.')[0]
    # `python -m pyterrier_selfsup` is the CLI
    return LAYERS.index('harness' if top == '__main__' else top)


def test_the_graph_was_read():
    assert {'training.loop', 'training.distant', 'models.reading', 'harness.trained'} <= set(GRAPH)
    assert ('training.dual_encoder_trainer' in GRAPH['training.distant'] and
            'retrieval.bm25' in GRAPH['training.distant'])


@pytest.mark.parametrize('module', sorted(GRAPH))
def test_no_module_imports_from_a_later_layer(module):
    upward = {m for m in GRAPH[module] if layer(m) > layer(module)}
    assert not upward, (f'{module} imports {sorted(upward)} from a later layer '
                        f'(order: {" -> ".join(LAYERS)})')


def test_no_import_cycle():
    state = {}

    def visit(module, path):
        state[module] = 'open'
        for target in sorted(GRAPH.get(module, ())):
            if state.get(target) == 'open':
                raise AssertionError(f'import cycle: {" -> ".join(path + [target])}')
            if target not in state:
                visit(target, path + [target])
        state[module] = 'done'

    for module in sorted(GRAPH):
        if module not in state:
            visit(module, [module])


def test_trainers_are_siblings_over_one_loop_that_knows_no_model():
    # (the dual encoder's trainers reach the loop through the base they share, RUMBArt and
    # ACROBArT through theirs)
    assert 'training.loop' in GRAPH['training.dual_encoder_trainer']
    assert 'training.dual_encoder_trainer' in GRAPH['training.reconstruction']
    assert not {m for m in GRAPH['training.loop'] if m.startswith(('models.', 'retrieval.'))
                } - {'models.trainable'}
    for trainer in TRAINERS:
        assert GRAPH[trainer] & {'training.loop', 'training.dual_encoder_trainer',
                                 'training.reconstruction'}
        assert not GRAPH[trainer] & (TRAINERS - {trainer}), f'{trainer} imports a sibling trainer'


def test_importing_the_package_runs_no_subprocess_and_leaves_the_harness_alone():
    probe = (
        'import subprocess, sys\n'
        'calls = []\n'
        'real = subprocess.Popen.__init__\n'
        'def spy(self, *args, **kwargs):\n'
        '    argv = args[0] if args else kwargs.get("args")\n'
        # (ctypes.util.find_library asks ldconfig: trio does at its import, which httpx's core
        # imports where trio is installed, as the browser tests' selenium installs it)
        '    if "ldconfig" not in str(argv):\n'
        '        calls.append(argv)\n'
        '    return real(self, *args, **kwargs)\n'
        'subprocess.Popen.__init__ = spy\n'
        'import pyterrier_selfsup\n'
        'print(sorted(m for m in ("torch", "transformers", "pyterrier_dr") if m in sys.modules))\n'
        'for name, module in pyterrier_selfsup._HOME.items():\n'
        '    if not module.startswith("harness"):\n'
        '        getattr(pyterrier_selfsup, name)\n'
        'print(calls, sorted(m for m in sys.modules if '
        'm.startswith("pyterrier_selfsup.harness")))\n'
        'pyterrier_selfsup.PIPELINES\n'
        'print("pyterrier_selfsup.harness.pipelines" in sys.modules)\n')
    out = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True,
                         check=True).stdout
    # the import itself loads none of the heavy libraries; every layer below the harness,
    # loaded through the package's names, starts no process and loads no harness module
    assert out.splitlines()[-3:] == ['[]', '[] []', 'True']


def test_every_public_name_is_where_the_package_says():
    import pyterrier_selfsup
    for name in pyterrier_selfsup.__all__:
        assert getattr(pyterrier_selfsup, name) is not None, name
    assert set(pyterrier_selfsup.__all__) <= set(dir(pyterrier_selfsup))
    with pytest.raises(AttributeError, match='no attribute'):
        pyterrier_selfsup.Distilation


def test_nothing_below_the_harness_draws():
    """Figures (matplotlib) are the harness's: a trainer's curve is drawn by the function its run
    context hands it (RunContext.draw_curve), not by the training layer."""
    drawing = []
    for path in PACKAGE.rglob('*.py'):
        module = module_name(path)
        if not module or layer(module) >= LAYERS.index('harness'):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ''] if isinstance(node, ast.ImportFrom) else []
            drawing += [f'{module}: {name}' for name in names if name.split('.')[0] == 'matplotlib']
    assert not drawing, drawing
    # (the walk found them)
    assert {'training.loop', 'training.distill', 'models.generator'} <= set(GRAPH)


def test_a_trainer_is_small_and_takes_its_settings_whole():
    """Distillation's variants are named parts (training/passages.py, losses.py),
    not flags of one class: the class stays short, and its constructor takes a settings object."""
    import inspect

    from pyterrier_selfsup.training.distill import Distillation
    assert len((PACKAGE / 'training' / 'distill.py').read_text().splitlines()) <= 200
    parameters = [p for p in inspect.signature(Distillation.__init__).parameters if p != 'self']
    assert parameters == ['encoder', 'collection', 'teacher', 'settings', 'run', 'changes']


def test_no_call_relays_settings_field_by_field():
    """A call that passes ``name=s.name`` (or ``settings.name``) for three or more names copies a
    settings object by hand: pass the object instead."""
    relays = []
    for path in PACKAGE.rglob('*.py'):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            copied = [k.arg for k in node.keywords
                      if isinstance(k.value, ast.Attribute) and k.value.attr == k.arg
                      and ast.unparse(k.value.value) in ('s', 'settings', 'self.settings')]
            if len(copied) >= 3:
                relays.append(f'{module_name(path)}:{node.lineno}: {", ".join(copied)}')
    assert not relays, relays


def test_no_module_cites_the_research_log():
    """The package's modules cite the docs (docs/results.md names the measurement behind each
    choice), never a file under experiments/, which may move or go."""
    citing = [f'{path.relative_to(PACKAGE.parent)}:{n}'
              for path in sorted(PACKAGE.rglob('*.py'))
              for n, line in enumerate(path.read_text().splitlines(), 1)
              if 'experiments/' in line]
    assert citing == []
    results = (PACKAGE.parent / 'docs' / 'results.md').read_text()
    assert "## What the code's choices rest on" in results
    cited = re.findall(r'`([\w./-]+\.md)`', results.split("## What the code's choices rest on")[1])
    missing = [name for name in cited if not (PACKAGE.parent / 'experiments' / 'results' / name
                                              ).is_file() and not (PACKAGE.parent / name).is_file()]
    assert len(cited) >= 15 and missing == []
