"""One settings object per method: the trainer, the command line, the reference and the cache key
all read the same fields."""
import dataclasses
from pathlib import Path

import pytest

from pyterrier_selfsup import Collection
from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.harness import cli, reference, trained
from pyterrier_selfsup.harness.methods import METHODS
from pyterrier_selfsup.harness.pipelines import get_pipeline
from pyterrier_selfsup.harness.store import (
    MODEL_FORMAT,
    collection_digest,
    read_record,
    read_settings,
)
from pyterrier_selfsup.harness.trained import model_dir
from pyterrier_selfsup.training.acrobart import Acrobart
from pyterrier_selfsup.training.adjustment import CrossDocumentAdjustment
from pyterrier_selfsup.training.distant import DistantSupervision
from pyterrier_selfsup.training.distill import Distillation
from pyterrier_selfsup.training.rumbart import Rumbart
from pyterrier_selfsup.training.settings import (
    SETTINGS,
    DistantSupervisionSettings,
    DistillationSettings,
    RumbartSettings,
    setting,
)

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


def test_a_changed_default_trains_a_new_model_and_each_record_reads_back_its_settings(
        tiny_dir, monkeypatch, tmp_path):
    adi = Collection('classic/adi')
    run = RunContext(cache_dir=tmp_path)
    small = {'model_name': str(tiny_dir), 'n_queries': 24, 'batch_size': 8}
    first = trained.train(adi, 'ds', small, run)
    assert read_settings(first) == DistantSupervisionSettings(**small)
    record = read_record(first)
    assert record['format'] == MODEL_FORMAT and record['method'] == 'ds'
    assert record['collection'] == {'id': 'classic/adi', 'digest': collection_digest(adi, run)}
    assert record['queries'] == {'source': 'sentences', 'n': 24, 'seed': 0}
    assert record['run'] == {'gradient_checkpointing': None, 'checkpoint_every': 25,
                             'chosen': []}
    assert record['arithmetic'] in ('float32', 'bfloat16')

    # the package moves lr's default: the same pipeline names another model, trained afresh
    @dataclasses.dataclass(frozen=True)
    class Moved(DistantSupervisionSettings):
        lr: float = setting(3e-5, 'AdamW\'s peak learning rate.', group='training')

    monkeypatch.setitem(SETTINGS, 'ds', Moved)
    again = trained.train(adi, 'ds', small, run)
    assert again.parent != first.parent and (again.parent / 'model.json').is_file()
    assert read_settings(again).lr == 3e-5 and read_settings(first).lr == 2e-5
    # the model trained before is where it was, as it was
    assert read_settings(first).asdict() == DistantSupervisionSettings(**small).asdict()
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
    assert DistillationSettings.parse('example_pairs', 'none') is None
    assert DistillationSettings.parse('depth', '10') == 10
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
    # a copy made with other queries chooses as an object made with them does
    assert (DistillationSettings().replace(queries='crossfold', lr=1e-5).passages
            == DistillationSettings.of(queries='crossfold', lr=1e-5).passages == 'offsets')
    # RUMBArt checkpoints at its refreshes, or every 25 steps where its index never changes
    assert (RumbartSettings().checkpoint_interval == 25 and
            RumbartSettings(refresh_every=10).checkpoint_interval == 10)
    assert RumbartSettings(refresh_every=None, train_passages=False).checkpoint_interval == 25
    assert RumbartSettings(refresh_every=None).checkpoint_interval is None
    assert RumbartSettings(checkpoint_every=3).checkpoint_interval == 3


def test_old_names_are_refused_with_the_names_there_are():
    for old in ({'epochs': 3}, {'passage_offsets': None}, {'keep': 'verdict'},
                {'checkpointing': False}, {'verdict_share': 0.1}):
        with pytest.raises(ValueError, match='has no setting'):
            DistillationSettings.of(**old)
    for gone in ('dual', 'recon'):  # (the former names of dual_encoder and query_likelihood)
        with pytest.raises(ValueError, match='unknown pipeline'):
            get_pipeline(gone)


def test_a_model_key_covers_what_trains_and_nothing_else(tmp_path):
    adi = Collection('classic/adi')
    run = RunContext(cache_dir=tmp_path)
    shipped = model_dir(adi, 'distill', {}, run)
    # a setting of how the run is carried out leaves the key; a default named leaves it
    for same in ({'checkpoint_every': 5}, {'gradient_checkpointing': True}, {'warmup': 0.1},
                 {'passages': 'frozen'}, {'rounds': 1}):
        assert model_dir(adi, 'distill', same, run) == shipped, same
    for other in ({'warmup': 0.2}, {'weight_decay': 0.0}, {'passages': 'offsets'},
                  {'passages': 'offsets', 'offset_weight': 0.5}, {'per_passage': 1},
                  {'example_pairs': 'cranfield'}, {'rounds': 5}, {'seed': 1}):
        assert model_dir(adi, 'distill', other, run) != shipped, other
    # a query log's defaults are the settings they name
    log = {'queries': 'crossfold', 'fold': 0}
    assert model_dir(adi, 'distill', log, run) == \
        model_dir(adi, 'distill', dict(log, passages='offsets', rounds=5), run)
    assert model_dir(adi, 'distill', log, run) != model_dir(adi, 'distill', dict(log, fold=1), run)
    # the two splits of one corpus share it, and their own topics are other queries
    scifact = [Collection(f'beir/scifact/{split}') for split in ('train', 'test')]
    assert scifact[0].corpus_id == scifact[1].corpus_id
    assert (model_dir(scifact[0], 'distill', log, run) !=
            model_dir(scifact[1], 'distill', log, run))


def test_a_query_log_keys_its_models_by_its_texts_wherever_it_lies(tmp_path):
    adi = Collection('classic/adi')
    run = RunContext(cache_dir=tmp_path / 'cache')
    texts = '\n'.join(adi.topics()['query'].head(12)) + '\n'
    for name in ('a.txt', 'b.txt'):
        (tmp_path / name).write_text(texts)
    (tmp_path / 'c.txt').write_text(texts + 'one more query\n')
    keyed = {name: model_dir(adi, 'distill', {'queries': str(tmp_path / name)}, run)
             for name in ('a.txt', 'b.txt', 'c.txt')}
    assert keyed['a.txt'] == keyed['b.txt'] != keyed['c.txt']


def test_a_trainer_takes_its_settings_whole_and_its_run_context_apart(tiny_encoder, tmp_path):
    settings = DistantSupervisionSettings(negatives='bm25', epochs=2)
    trainer = DistantSupervision(tiny_encoder(), 'classic/adi', settings, output_dir=tmp_path,
                                 verbose=False)
    assert (trainer.settings is settings and trainer.output_dir == tmp_path and
            not trainer.run.verbose)
    with pytest.raises(TypeError, match='takes DistantSupervisionSettings'):
        DistantSupervision(tiny_encoder(), 'classic/adi', RumbartSettings())
    changed: DistantSupervisionSettings | None = DistantSupervision(
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


def test_checkpoint_intervals_are_checked():
    with pytest.raises(ValueError, match='checkpoint_every'):
        RumbartSettings(checkpoint_every='round')
    assert RumbartSettings(checkpoint_every='epoch').checkpoint_interval == 'epoch'


def test_equal_settings_key_alike_and_a_record_reads_back_to_choose_again(tmp_path):
    adi = Collection('classic/adi')
    run = RunContext(cache_dir=tmp_path)
    # 1 and 1.0 are one setting, and one model
    assert model_dir(adi, 'distill', {'lr': 1}, run) == model_dir(adi, 'distill', {'lr': 1.0}, run)
    assert DistillationSettings(teacher_temperature=1).teacher_temperature == 1.0
    # a default chosen from the other settings is chosen again from a read-back record
    from pyterrier_selfsup.harness import store
    shipped = DistillationSettings()
    directory = tmp_path / 'model'
    directory.mkdir()
    store.write_record(directory, store.model_record(adi, 'distill', shipped, run=run))
    back = store.read_settings(directory)
    assert back == shipped and back.chosen == shipped.chosen == {'passages', 'rounds'}
    assert back.replace(queries='crossfold').rounds == 5


def test_a_start_is_keyed_by_what_it_is(tmp_path, tiny_dir, monkeypatch):
    adi = Collection('classic/adi')
    run = RunContext(cache_dir=tmp_path)
    # start=ds: the ds model's own settings are part of the key
    from_ds = model_dir(adi, 'rumbart', {'start': 'ds'}, run)

    @dataclasses.dataclass(frozen=True)
    class Moved(DistantSupervisionSettings):
        lr: float = setting(3e-5, 'AdamW\'s peak learning rate.', group='training')

    monkeypatch.setitem(SETTINGS, 'ds', Moved)
    assert model_dir(adi, 'rumbart', {'start': 'ds'}, run) != from_ds
    monkeypatch.undo()
    # a start by path: its files, not the path's name
    import shutil
    shutil.copytree(tiny_dir, tmp_path / 'start')
    by_path = model_dir(adi, 'ds', {'model_name': str(tmp_path / 'start')}, run)
    (tmp_path / 'start' / 'extra.txt').write_text('another model')
    assert model_dir(adi, 'ds', {'model_name': str(tmp_path / 'start')}, run) != by_path
