"""Offline mode (HF_HUB_OFFLINE=1) is a normal way to run: the Python API's model loads say
nothing about the Hub, as the command line's do (issue 32)."""
import logging
import os

import pytest

from pyterrier_selfsup.models.hub import HUB_LOGGER, OfflineHubFilter

OFFLINE = ("Could not reach the Hub (Cannot reach https://huggingface.co/api/models/x: offline "
           "mode is enabled. To disable it, please unset the `HF_HUB_OFFLINE` environment "
           "variable.). Using cached commit hash for 'x'.")


@pytest.fixture
def hub_warnings(caplog, monkeypatch):
    """What the Hub's loggers let through, at their default level (WARNING: the CLI, run in
    process by other tests, raises it to ERROR): the messages so far, and a way to forget them."""
    monkeypatch.setattr(logging.getLogger('huggingface_hub'), 'level', logging.WARNING)
    caplog.set_level(logging.WARNING)

    def said():
        return [r.getMessage() for r in caplog.records if r.name.startswith('huggingface_hub')]
    said.clear = caplog.clear
    return said


def test_the_offline_warning_is_dropped_and_every_other_kept(hub_warnings):
    import pyterrier_selfsup  # noqa: F401 (importing the package installs the filter)
    logger = logging.getLogger(HUB_LOGGER)
    assert any(isinstance(f, OfflineHubFilter) for f in logger.filters)
    logger.warning(OFFLINE)
    logger.warning("Could not reach the Hub (ConnectError: timed out). "
                   "Using cached commit hash for 'x'.")
    logger.warning('Ignored error while caching commit hash')
    assert hub_warnings() == [
        "Could not reach the Hub (ConnectError: timed out). Using cached commit hash for 'x'.",
        'Ignored error while caching commit hash']


@pytest.mark.skipif(os.environ.get('HF_HUB_OFFLINE') != '1',
                    reason='the model hub is reachable: not offline')
def test_a_model_load_offline_says_nothing_of_the_hub(hub_warnings, monkeypatch):
    from pyterrier_selfsup import MINILM, sbert_encoder
    logger = logging.getLogger(HUB_LOGGER)
    installed = [f for f in logger.filters if isinstance(f, OfflineHubFilter)]
    monkeypatch.setattr(logger, 'filters', [f for f in logger.filters if f not in installed])
    sbert_encoder(MINILM)  # without the filter: the warning this is about
    assert any('Could not reach the Hub' in message for message in hub_warnings())
    hub_warnings.clear()
    monkeypatch.setattr(logger, 'filters', logger.filters + installed)
    sbert_encoder(MINILM)
    assert not [message for message in hub_warnings() if 'Could not reach the Hub' in message]


def test_a_cached_untied_dual_encoder_with_no_config_json_is_on_this_machine(tmp_path,
                                                                              monkeypatch):
    """An untied dual encoder published to the hub keeps its towers' configs under its Router's
    folders: its top level has ``modules.json`` and no ``config.json``."""
    from huggingface_hub import constants

    from pyterrier_selfsup.models import hub
    snapshot = tmp_path / 'models--someone--untied' / 'snapshots' / ('0' * 40)
    snapshot.mkdir(parents=True)
    (snapshot.parents[1] / 'refs').mkdir()
    (snapshot.parents[1] / 'refs' / 'main').write_text('0' * 40)
    monkeypatch.setattr(constants, 'HF_HUB_CACHE', str(tmp_path))
    monkeypatch.setattr(constants, 'HF_HUB_OFFLINE', True)
    assert not hub.on_this_machine('someone/untied')
    (snapshot / 'modules.json').write_text('[]')
    assert hub.on_this_machine('someone/untied')
    assert not hub.on_this_machine('someone/elsewhere')
