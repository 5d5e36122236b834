"""Where the cache is, and the names of what it holds: directories keyed by digests of settings
and weights."""
import hashlib
import json
import os
import re
from pathlib import Path

CACHE_ENV = 'SELFSUP_CACHE'


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """``cache_dir`` if given, else ``$SELFSUP_CACHE``, else ``~/.cache/pyterrier-selfsup``."""
    if cache_dir is not None:
        return Path(cache_dir)
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path.home() / '.cache' / 'pyterrier-selfsup'


def cache_key(name: str, settings: dict) -> str:
    """A directory name readable by people (``name``) and unique to ``settings``."""
    slug = re.sub(r'[^A-Za-z0-9._-]+', '_', name).strip('_')
    digest = hashlib.sha1(
        json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return f'{slug}-{digest}'


def weights_fingerprint(config: dict, model) -> str:
    """A digest of a model's settings and weights (a torch module, or its state dict):
    equal fingerprints, equal outputs. Keys what is cached from a model's outputs
    (indexes, scores)."""
    import torch
    digest = hashlib.sha1(json.dumps(config, sort_keys=True).encode())
    state = model if isinstance(model, dict) else model.state_dict()
    for name, tensor in sorted(state.items()):
        digest.update(name.encode())
        # (the bytes read in place: a copy of the largest tensor would cost its size again)
        digest.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().data)
    return digest.hexdigest()[:16]
