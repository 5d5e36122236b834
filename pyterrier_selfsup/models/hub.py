"""The Hugging Face hub as this package meets it: a model's saved settings read from a directory
or the hub's cache, and filters for the notices that say nothing a user can act on offline.
"""
import json
import logging
from pathlib import Path

logger = logging.getLogger(__name__)
_SAID = set()  # (the stand-ins said in this process: each once)

def read_saved_config(name_or_path: str | Path, filename: str) -> dict | None:
    """``filename`` (JSON) of a local directory or a hub repository (through the local
    cache), or None where there is none: how every wrapper reads back its settings."""
    local = Path(name_or_path) / filename
    if Path(name_or_path).is_dir():
        return json.loads(local.read_text()) if local.is_file() else None
    try:
        from huggingface_hub import hf_hub_download
        return json.loads(Path(hf_hub_download(str(name_or_path), filename)).read_text())
    except Exception:  # not in that repository (or not a repository): nothing to read
        return None


def on_this_machine(name_or_path: str | Path) -> bool:
    """Whether the model ``name_or_path`` can be loaded here: a local directory, a hub model in
    the local cache (its ``config.json`` or ``modules.json``), or any hub name where the hub may
    be reached."""
    if Path(name_or_path).is_dir():
        return True
    from huggingface_hub import constants, try_to_load_from_cache
    try:
        cached = any(isinstance(try_to_load_from_cache(str(name_or_path), f), str)
                     for f in ('config.json', 'modules.json'))
    except Exception:  # (a name that is no repository id)
        return False
    return cached or not constants.HF_HUB_OFFLINE


def miners_at_hand(names: str) -> list:
    """The dense retrievers of a distillation teacher's ``miners`` setting (names joined by +),
    each at hand or all-MiniLM-L6-v2 in its place: ``[(used, asked for), ...]``."""
    from pyterrier_selfsup.models.names import MINILM
    return at_hand([n.strip() for n in names.split('+') if n.strip()], MINILM,
                   "the teacher's mining")


def at_hand(names, stand_in: str, what: str) -> list:
    """Each of the models ``names``, or ``stand_in`` where one is not on this machine, each once:
    ``[(used, asked for), ...]``; a stand-in is warned of, with ``what`` the models are for.

        at_hand(['sentence-transformers/msmarco-MiniLM-L-6-v3'], MINILM, 'mining')
    """
    out = []
    for name in names:
        if str(name).startswith(('/', './', '../', '~')) and not Path(name).expanduser().is_dir():
            raise FileNotFoundError(f'{name}: no such directory (a model for {what})')
        used = name if on_this_machine(name) else stand_in
        if used != name and (name, what) not in _SAID:
            _SAID.add((name, what))
            logger.warning('%s is not on this machine and the hub cannot be reached: %s stands in '
                           'for it in %s', name, stand_in, what)
        if used not in [u for u, _ in out]:
            out.append((used, name))
        else:  # (two stand-ins of one model: one stage, which stands for both)
            out = [(u, f'{a}, {name}' if u == used else a) for u, a in out]
    return out


class OfflineHubFilter(logging.Filter):
    """Drops huggingface_hub's warning that it could not reach the Hub *because offline mode is
    on*: running offline is normal here. Any other warning passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith('Could not reach the Hub') and
                    'offline mode is enabled' in message)


# where huggingface_hub says it (hf_api.py, revision resolution)
HUB_LOGGER = 'huggingface_hub.hf_api'


class EncoderCacheFilter(logging.Filter):
    """Drops transformers' "`use_cache=True` is incompatible with gradient checkpointing" for
    the encoders this package trains: no encoder here keeps a cache."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith('`use_cache=True` is incompatible with gradient '
                                                  'checkpointing')


# where transformers says it (merge_with_config_defaults)
CACHE_WARNING_LOGGER = 'transformers.utils.generic'


def quiet_offline_hub():
    """Installs :class:`OfflineHubFilter` on the Hub's logger and :class:`EncoderCacheFilter` on
    transformers' (once)."""
    for name, kind in ((HUB_LOGGER, OfflineHubFilter), (CACHE_WARNING_LOGGER, EncoderCacheFilter)):
        log = logging.getLogger(name)
        if not any(isinstance(f, kind) for f in log.filters):
            log.addFilter(kind())


# offline mode (HF_HUB_OFFLINE=1) is normal here: no warning each time a model loads
quiet_offline_hub()
