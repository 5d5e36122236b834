"""The Hugging Face hub as this package meets it: a model's saved settings read from a directory
or the hub's cache, and the hub's and transformers' notices that say nothing a user can act on
when the package runs offline (installed once, when the package is imported).
"""
import json
import logging
from pathlib import Path
from typing import Optional, Union

def read_saved_config(name_or_path: Union[str, Path], filename: str) -> Optional[dict]:
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


class OfflineHubFilter(logging.Filter):
    """Drops huggingface_hub's warning that it could not reach the Hub *because offline mode is
    on* (``HF_HUB_OFFLINE=1``): offline is a normal way to run this package, and the warning came
    once a model load. Any other warning of the Hub's, and this one for a real connection failure,
    passes. The package installs it on the Hub's logger when it is imported
    (:func:`quiet_offline_hub`); the command line also says offline once, in a line of its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith('Could not reach the Hub') and
                    'offline mode is enabled' in message)


# where huggingface_hub says it (hf_api.py, revision resolution)
HUB_LOGGER = 'huggingface_hub.hf_api'


class EncoderCacheFilter(logging.Filter):
    """Drops transformers' "`use_cache=True` is incompatible with gradient checkpointing" for the
    encoders this package trains with checkpointing on
    (:meth:`TrainableModel.gradient_checkpointing`): an encoder's config may say ``use_cache``
    (BERT's does, for its use as a decoder), but no encoder here keeps a cache, so there is
    nothing for a user to act on."""

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
