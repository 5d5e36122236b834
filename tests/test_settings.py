"""One source of settings: a trainer's constructor, its named pipeline and ``selfsup list`` agree."""
import datetime
import inspect

import pytest

from pyterrier_selfsup.harness import cli
from pyterrier_selfsup.harness.pipelines import PIPELINES
from pyterrier_selfsup.harness.trained import DEFAULTS, METHODS
from pyterrier_selfsup.training.adjustment import CrossDocumentAdjustment
from pyterrier_selfsup.training.distant import DistantSupervision
from pyterrier_selfsup.training.distill import Distillation
from pyterrier_selfsup.training.reconstruction import Acrobart, Rumbart
from pyterrier_selfsup.training.settings import CONSTRUCTOR_NAMES, LEGACY_KEYS, SETTINGS

TRAINERS = {'distill': Distillation, 'ds': DistantSupervision, 'rumbart': Rumbart, 'acrobart': Acrobart,
            'reatt': CrossDocumentAdjustment}


def constructor_defaults(cls) -> dict:
    """Each keyword's default as a call ``cls(...)`` sees it: a subclass's own, else the first
    class up its MRO whose ``__init__`` names it (where ``**kwargs`` passes it on)."""
    defaults = {}
    for klass in cls.__mro__:
        if '__init__' not in vars(klass):
            continue
        for name, parameter in inspect.signature(klass.__init__).parameters.items():
            if parameter.default is not inspect.Parameter.empty:
                defaults.setdefault(name, parameter.default)
    return defaults


@pytest.mark.parametrize('method', sorted(TRAINERS))
def test_a_trainers_constructor_defaults_are_its_pipelines(method):
    assert set(TRAINERS) == set(METHODS) == set(SETTINGS)
    constructor = constructor_defaults(TRAINERS[method])
    names = CONSTRUCTOR_NAMES.get(method, {})
    shared = {name: names.get(name, name) for name in DEFAULTS[method] if names.get(name, name) in constructor}
    # the settings that shape training are the constructor's (the rest pick queries and models)
    assert {'lr', 'batch_size', 'epochs', 'seed'} <= set(shared.values())
    differ = {name: (DEFAULTS[method][name], constructor[arg]) for name, arg in shared.items()
              if constructor[arg] != DEFAULTS[method][name]}
    assert not differ, f'{method}: (pipeline, constructor) defaults differ: {differ}'


def test_the_reconstruction_trainers_ship_the_thesis_refresh_and_learning_rate():
    # the values that differed before issue 31 (the constructor's 50 steps and 1e-4)
    assert constructor_defaults(Rumbart)['refresh_every'] == DEFAULTS['rumbart']['refresh_every'] == 25
    assert constructor_defaults(Acrobart)['lr'] == DEFAULTS['acrobart']['lr'] == 2e-5
    assert constructor_defaults(Distillation)['epochs'] == DEFAULTS['distill']['rounds'] == 5


def test_selfsup_list_prints_every_method_setting_from_the_same_source(capsys):
    assert cli.main(['list']) == 0
    printed = {}
    lines = capsys.readouterr().out.splitlines()
    for line, following in zip(lines, lines[1:]):
        if line.startswith('pipeline ') and following.strip().startswith('settings: '):
            printed[line.split()[1].rstrip(':')] = following.split('settings: ', 1)[1]
    for spec in PIPELINES.values():
        if spec.method:
            for name, value in DEFAULTS[spec.method].items():
                assert f'{name}={value}' in printed[spec.name].split(', '), (spec.name, name)


def test_legacy_cache_keys_go_on_their_date():
    today = datetime.date.today().isoformat()
    expired = [name for name, key in LEGACY_KEYS.items() if key.until < today]
    assert not expired, f'remove these special cases of old cache keys (their date has passed): {expired}'
    assert all(key.since < key.until for key in LEGACY_KEYS.values())


# the model directories of the shipped settings on ADI, as they were before the settings had one
# source (aec058a): a change to a default, or a setting added without its legacy entry, moves them,
# and every model trained before is no longer found
SHIPPED_KEYS = {'distill': 'classic_adi.distill-1073349500', 'ds': 'classic_adi.ds-3f870b5fa0',
                'rumbart': 'classic_adi.rumbart-0bfcf7f96a', 'acrobart': 'classic_adi.acrobart-9580c04ce8',
                'reatt': 'classic_adi.reatt-2cc8a89d9f'}


def test_the_shipped_settings_keep_their_model_keys(tmp_path):
    from pyterrier_selfsup import Collection
    from pyterrier_selfsup.harness.trained import model_dir
    adi = Collection('classic/adi')
    assert {method: model_dir(adi, method, {}, tmp_path).name for method in METHODS} == SHIPPED_KEYS
    # a setting added later (LEGACY_KEYS) changes the key only where it is not at its old behaviour
    assert model_dir(adi, 'distill', {'passage_layers': None}, tmp_path).name == SHIPPED_KEYS['distill']
    assert model_dir(adi, 'distill', {'passage_layers': 2}, tmp_path).name != SHIPPED_KEYS['distill']
