"""One settings object per method: the trainer, the command line, the reference and the cache key
all read the same fields."""
import dataclasses
from pathlib import Path
from typing import Optional

import pytest

from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup import Collection
from pyterrier_selfsup.harness import cli, reference, trained
from pyterrier_selfsup.harness.pipelines import get_pipeline
from pyterrier_selfsup.harness.trained import METHODS, model_dir
from pyterrier_selfsup.training.adjustment import CrossDocumentAdjustment
from pyterrier_selfsup.training.distant import DistantSupervision
from pyterrier_selfsup.training.distill import Distillation
from pyterrier_selfsup.training.reconstruction import Acrobart, Rumbart
from pyterrier_selfsup.training.settings import (SETTINGS, DistantSupervisionSettings,
                                                 DistillationSettings, RumbartSettings, setting)

TRAINERS = {'distill': Distillation, 'ds': DistantSupervision, 'rumbart': Rumbart,
            'acrobart': Acrobart, 'reatt': CrossDocumentAdjustment}
DOCS = Path(__file__).resolve().parents[1] / 'docs' / 'settings.md'


def test_each_method_has_one_settings_class_and_its_trainer_takes_it():
    assert set(TRAINERS) == set(METHODS) == set(SETTINGS)
    for method, trainer in TRAINERS.items():
        assert trainer.Settings is SETTINGS[method]
        for field in dataclasses.fields(SETTINGS[method]):
            assert field.metadata['help'].endswith('.'), (method, field.name)  # a sentence


def test_a_field_added_to_a_settings_class_reaches_the_trainer_the_list_the_key_and_the_reference(
        tiny_encoder, monkeypatch, capsys, tmp_path):
    @dataclasses.dataclass(frozen=True)
    class Extended(DistantSupervisionSettings):
        probe_depth: int = setting(7, 'How deep a probe looks, added by a test.')

    monkeypatch.setitem(SETTINGS, 'ds', Extended)
    monkeypatch.setattr(DistantSupervision, 'Settings', Extended)
    trainer = DistantSupervision(tiny_encoder(), 'classic/adi', probe_depth=9)
    assert trainer.settings.probe_depth == 9
    assert trained.typed_settings('ds', {'probe_depth': 9}).probe_depth == 9
    assert get_pipeline('ds:probe_depth=9').settings['probe_depth'] == 9
    adi = Collection('classic/adi')
    run = RunContext(cache_dir=tmp_path)
    assert model_dir(adi, 'ds', {'probe_depth': 9}, run) != model_dir(adi, 'ds', {}, run)
    assert cli.main(['list']) == 0
    listed = capsys.readouterr().out
    assert any(line.split() == ['probe_depth=7', 'How', 'deep', 'a', 'probe', 'looks,', 'added',
                                'by', 'a', 'test.']
               for line in listed.splitlines())
    assert ('| `probe_depth` | `7` | How deep a probe looks, added by a test. |'
            in reference.markdown())


def test_a_default_that_moves_keeps_the_keys_of_the_models_cached_before():
    # keep's default moved from verdict to last: the models cached before keep existed trained
    # as keep=verdict and keep their key, and the new default's models get a key of their own
    assert 'keep' not in DistillationSettings(keep='verdict').key()
    assert DistillationSettings().key()['keep'] == 'last'
    assert {f.name: f for f in DistillationSettings.fields()}['keep'].metadata['was'] == 'verdict'
    with pytest.raises(ValueError, match='per_passage must be at least 1'):
        DistillationSettings(per_passage=0)


def test_the_settings_reference_in_the_docs_is_the_generated_one():
    assert DOCS.read_text() == reference.markdown(), \
        'regenerate: selfsup settings --markdown > docs/settings.md'


def test_selfsup_list_prints_every_setting_of_every_method_with_its_help(capsys):
    assert cli.main(['list']) == 0
    lines = capsys.readouterr().out.splitlines()
    for method, cls in SETTINGS.items():
        start = next(i for i, line in enumerate(lines) if line.startswith(f'settings of {method} '))
        block = lines[start + 1:start + 1 + len(cls.fields())]
        assert [line.split()[0].split('=')[0] for line in block] == cls.names()


def test_values_are_typed_and_checked_by_their_settings_class():
    assert DistillationSettings.parse('filter_depth', 'none') is None
    assert DistillationSettings.parse('filter_depth', '10') == 10
    assert DistillationSettings.parse('in_batch', 'false') is False
    assert RumbartSettings.parse('checkpoint_every', 'epoch') == 'epoch'
    assert RumbartSettings.parse('checkpoint_every', '5') == 5
    with pytest.raises(ValueError, match='not a int'):
        DistillationSettings.parse('depth', 'deep')
    with pytest.raises(ValueError, match='loss must be one of kl, margin_mse'):
        DistillationSettings(loss='mse')
    with pytest.raises(ValueError, match='no setting'):
        DistillationSettings().replace(dpth=3)
    with pytest.raises(ValueError, match='warmup'):
        RumbartSettings(warmup=2.0)


def test_a_dependent_value_is_a_documented_rule_of_the_settings():
    # queries cut from a passage may not retrieve it; queries written for one may
    assert DistillationSettings(queries='sentences').excludes_sources
    assert not DistillationSettings(queries='sampled').excludes_sources
    # round-trip filtering applies to queries written for a passage only
    assert DistillationSettings(queries='sampled', filter_depth=3).round_trip_depth == 3
    assert DistillationSettings(queries='sentences', filter_depth=3).round_trip_depth is None
    # the passage side and the rounds follow the queries where they are left at None: frozen and
    # one round with queries from the corpus, offsets and five rounds with a query log
    for queries in ('sampled', 'sentences', 'titles'):
        assert (DistillationSettings(queries=queries).passages,
                DistillationSettings(queries=queries).rounds) == ('frozen', 1)
    log = DistillationSettings(queries='crossfold')
    assert (log.passages, log.rounds) == ('offsets', 5)
    # a copy chooses again where it was chosen, and keeps what was named
    assert (DistillationSettings().replace(queries='crossfold').passages,
            DistillationSettings().replace(queries='crossfold').rounds) == ('offsets', 5)
    named = DistillationSettings(rounds=3, passages='trained').replace(queries='crossfold')
    assert (named.rounds, named.passages) == (3, 'trained')
    assert DistillationSettings.of(train_passages=False, queries='crossfold').passages == 'offsets'
    assert DistillationSettings.of(train_passages=False).passages == 'frozen'
    # an old spelling combines with the side that the changed queries choose, made or copied
    assert (DistillationSettings().replace(queries='crossfold', train_passages=False).passages
            == DistillationSettings.of(queries='crossfold', train_passages=False).passages
            == 'offsets')
    # RUMBArt checkpoints at its refreshes, or every 25 steps where its index never changes
    assert (RumbartSettings().checkpoint_interval == 25 and
            RumbartSettings(refresh_every=10).checkpoint_interval == 10)
    assert RumbartSettings(refresh_every=None, train_passages=False).checkpoint_interval == 25
    assert RumbartSettings(refresh_every=None).checkpoint_interval is None
    assert RumbartSettings(checkpoint_every=3).checkpoint_interval == 3


def test_old_names_still_work():
    assert DistillationSettings.of(epochs=3).rounds == 3
    assert DistillationSettings.of(passage_offsets=None, queries='crossfold').passages == 'frozen'
    assert (DistillationSettings.of(passage_offsets=0.5)
            == DistillationSettings(passages='offsets', offset_weight=0.5))
    assert DistillationSettings.of(train_passages=True, passage_offsets=None).passages == 'trained'
    assert RumbartSettings.of(checkpointing=False).gradient_checkpointing is False
    assert get_pipeline('distill:passage_offsets=none').settings['passages'] == 'frozen'


# the model directories of the shipped settings on ADI, as they have been since each method's
# settings first had one source: a change to a default, or a setting added to the key at its
# default, moves them, and every model trained before is no longer found
SHIPPED_KEYS = {'distill': 'classic_adi.distill-2190d6e4da', 'ds': 'classic_adi.ds-3f870b5fa0',
                'rumbart': 'classic_adi.rumbart-0bfcf7f96a',
                'acrobart': 'classic_adi.acrobart-9580c04ce8',
                'reatt': 'classic_adi.reatt-2cc8a89d9f'}


def test_the_shipped_settings_keep_their_model_keys(tmp_path):
    adi = Collection('classic/adi')
    run = RunContext(cache_dir=tmp_path)
    assert {method: model_dir(adi, method, {}, run).name for method in METHODS} == SHIPPED_KEYS
    # a setting that changes only the run, or one added later at its default, leaves the key
    # as it is
    for unchanged in ({'checkpoint_every': 5}, {'gradient_checkpointing': True}, {'warmup': 0.1},
                      {'passage_offsets': None}, {'passages': 'frozen'}, {'rounds': 1},
                      {'keep': 'last'}):
        assert (model_dir(adi, 'distill', unchanged, run).name
                == SHIPPED_KEYS['distill']), unchanged
    for changed in ({'warmup': 0.2}, {'weight_decay': 0.0}, {'passages': 'offsets'},
                    {'passages': 'offsets', 'offset_weight': 0.5}, {'keep': 'verdict'},
                    {'per_passage': 1},
                    {'example_pairs': 'cranfield'}, {'rounds': 5}):
        assert model_dir(adi, 'distill', changed, run).name != SHIPPED_KEYS['distill'], changed
    # the default before the passage side and the rounds followed the queries, and the verdict
    # stopped choosing the round, still finds its models under their names
    assert model_dir(adi, 'distill', {'passages': 'offsets', 'rounds': 5, 'keep': 'verdict'},
                     run).name == 'classic_adi.distill-1073349500'
    # a query log's defaults are the settings they name
    log = {'queries': 'crossfold', 'fold': 0}
    assert model_dir(adi, 'distill', log, run) == \
        model_dir(adi, 'distill', dict(log, passages='offsets', rounds=5, keep='last'), run)
    # the passage side keys as its two former settings did
    assert model_dir(adi, 'distill', {'passages': 'offsets'}, run) == \
        model_dir(adi, 'distill', {'passage_offsets': 1.0}, run)


def test_a_trainer_takes_its_settings_whole_and_its_run_context_apart(tiny_encoder, tmp_path):
    settings = DistantSupervisionSettings(negatives='bm25', epochs=2)
    trainer = DistantSupervision(tiny_encoder(), 'classic/adi', settings, output_dir=tmp_path,
                                 verbose=False)
    assert (trainer.settings is settings and trainer.output_dir == tmp_path and
            not trainer.run.verbose)
    with pytest.raises(TypeError, match='takes DistantSupervisionSettings'):
        DistantSupervision(tiny_encoder(), 'classic/adi', RumbartSettings())
    changed: Optional[DistantSupervisionSettings] = DistantSupervision(
        tiny_encoder(), 'classic/adi', settings, lr=1e-3).settings
    assert changed.lr == 1e-3 and changed.negatives == 'bm25' and settings.lr == 2e-5


def test_every_environment_variable_the_package_reads_is_listed_in_one_place():
    import re
    from pyterrier_selfsup.context import ENVIRONMENT
    package = Path(__file__).resolve().parents[1] / 'pyterrier_selfsup'
    named = {m for path in package.rglob('*.py')
             for m in re.findall(r'SELFSUP_[A-Z_]+', path.read_text())}
    assert named == set(ENVIRONMENT)
    assert all(f'| `{name}` |' in reference.markdown() for name in ENVIRONMENT)


def test_the_passage_sides_old_spellings_combine_as_they_did_and_contradictions_are_refused():
    trained = DistillationSettings(passages='trained')
    frozen = DistillationSettings(passages='frozen')
    assert trained.replace(passage_offsets=None).passages == 'trained'
    assert frozen.replace(train_passages=False).passages == 'frozen'
    for contradictory in (dict(train_passages=True, passage_offsets=0.5),
                          dict(train_passages=True, queries='crossfold'),
                          dict(passages='frozen', passage_offsets=0.5)):
        with pytest.raises(ValueError):
            DistillationSettings.of(**contradictory)


def test_removed_settings_are_accepted_only_at_what_they_did_and_checkpoints_are_checked():
    assert DistillationSettings.of(stop_overlap=None, min_round_steps=0) == DistillationSettings()
    assert get_pipeline('distill:stop_overlap=none,source_share=0').settings == \
        get_pipeline('distill').settings
    with pytest.raises(ValueError, match='source_share has been removed'):
        DistillationSettings.of(source_share=0.5)
    with pytest.raises(ValueError, match='checkpoint_every'):
        RumbartSettings(checkpoint_every='round')
    assert RumbartSettings(checkpoint_every='epoch').checkpoint_interval == 'epoch'


def test_a_verdict_resumed_from_a_checkpoint_that_kept_its_scores_in_the_log_goes_on():
    from types import SimpleNamespace
    from pyterrier_selfsup.training.verdict import HeldOutVerdict
    verdict = HeldOutVerdict(0.1)
    verdict.held = ['q']  # (a slice; judge() is not reached for the rounds the log has)
    log = [{'verdict round': r, 'verdict scores': [s], 'verdict nDCG@10': s}
           for r, s in ((0, 0.5), (1, 0.7))]
    trainer = SimpleNamespace(state={'epoch': 1}, log=list(log))
    verdict.judge(trainer, 1)  # round 1 is in the log: nothing is scored again
    assert trainer.state['verdict scores'] == {0: [0.5], 1: [0.7]}
    assert trainer.state['verdict means'] == {0: 0.5, 1: 0.7} and trainer.log == log


def test_a_results_file_from_before_distills_defaults_moved_finds_the_models_it_meant(tmp_path):
    import subprocess
    from pyterrier_selfsup.harness.experiment import LAST_FORMER, as_written
    from pyterrier_selfsup.harness.provenance import code_revision
    early = 'ae1edd5'  # (label_free's first table, before the settings had a module of their own)
    found = subprocess.run(['git', 'cat-file', '-e', f'{early}^{{commit}}'],
                           cwd=Path(__file__).parent, capture_output=True).returncode == 0
    if not found:
        pytest.skip('the checkout has no git history to read the commits from')
    run = RunContext(cache_dir=tmp_path)
    for before in (LAST_FORMER, early):
        assert as_written('distill', before) == 'distill:passages=offsets,rounds=5,keep=verdict'
    adi = Collection('classic/adi')
    assert (get_pipeline(as_written('hybrid', LAST_FORMER)).model_dir(adi, run).name
            == 'classic_adi.distill-1073349500')
    # what a name spells is left as it is; the passage side's old spellings name it
    assert as_written('distill:keep=last,epochs=2,passage_offsets=none', LAST_FORMER) == \
        'distill:keep=last,epochs=2,passage_offsets=none'
    assert as_written('bm25', LAST_FORMER) == 'bm25'
    # a later file, or one that names no commit, meant what the names mean now
    assert as_written('distill', '') == 'distill'
    assert as_written('distill', code_revision().split('+')[0]) == 'distill'
