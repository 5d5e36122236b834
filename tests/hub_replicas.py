"""Replicas of models on the Hugging Face hub, in a hub cache of their own: each model's
published files as the hub holds them (its configuration, its sentence-transformers modules,
pooling and prompts or their absence), all-MiniLM-L6-v2's tokenizer (the same BERT vocabulary)
and random weights, with fewer layers than the real model so that the suite stays fast.

A replica is loaded by its hub name (``intfloat/e5-small-v2``), as a user loads the real model,
once :func:`hub_cache_with` has pointed huggingface_hub at the replicas' cache; the real cache's
models are linked into it, so everything else loads as before.

Where the published files were read from (the hub's pages, at the commits named):

- ``intfloat/e5-small-v2`` (58b0ed6): ``config.json``, ``modules.json`` (Transformer, Pooling,
  Normalize), ``1_Pooling/config.json`` (mean), ``sentence_bert_config.json``, the tokenizer's
  files and the weights; no ``config_sentence_transformers.json``, so no prompts: its model card
  prescribes ``query: `` and ``passage: ``.
- ``BAAI/bge-small-en-v1.5`` (35baf77): the same modules with ``cls`` pooling, and a
  ``config_sentence_transformers.json`` that holds versions only, no prompts: its model card
  prescribes its query instruction.

Their ``config.json`` is a BERT of hidden size 384, 12 heads and intermediate size 1,536 (the
replicas keep those and have 2 layers, not 12).
"""
import json
import shutil
from pathlib import Path

import torch
from transformers import AutoTokenizer, BertConfig, BertModel

from pyterrier_selfsup.models.names import MINILM

# a fixed revision name for every replica's snapshot (any 40 hex digits)
REVISION = '0' * 40
VERSIONS = {'__version__': {'sentence_transformers': '2.2.2', 'transformers': '4.28.1',
                            'pytorch': '1.13.0+cu117'}}


def _modules(normalize: bool) -> list:
    modules = [{'idx': 0, 'name': '0', 'path': '',
                'type': 'sentence_transformers.models.Transformer'},
               {'idx': 1, 'name': '1', 'path': '1_Pooling',
                'type': 'sentence_transformers.models.Pooling'}]
    if normalize:
        modules.append({'idx': 2, 'name': '2', 'path': '2_Normalize',
                        'type': 'sentence_transformers.models.Normalize'})
    return modules


def _pooling(mode: str) -> dict:
    return {'word_embedding_dimension': 384, 'pooling_mode_cls_token': mode == 'cls',
            'pooling_mode_mean_tokens': mode == 'mean', 'pooling_mode_max_tokens': False,
            'pooling_mode_mean_sqrt_len_tokens': False}


# each replica's files beside its weights and tokenizer, as the hub publishes them
REPLICAS = {
    'intfloat/e5-small-v2': {
        'modules.json': _modules(normalize=True),
        '1_Pooling/config.json': _pooling('mean'),
        'sentence_bert_config.json': {'max_seq_length': 512, 'do_lower_case': False},
    },
    'BAAI/bge-small-en-v1.5': {
        'modules.json': _modules(normalize=True),
        '1_Pooling/config.json': _pooling('cls'),
        'sentence_bert_config.json': {'max_seq_length': 512, 'do_lower_case': True},
        'config_sentence_transformers.json': VERSIONS,
    },
}


def write_replica(name: str, cache: Path, seed: int = 0) -> Path:
    """The replica of hub model ``name`` (:data:`REPLICAS`) in hub cache ``cache``; returns
    its snapshot's directory."""
    repo = cache / f'models--{name.replace("/", "--")}'
    snapshot = repo / 'snapshots' / REVISION
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / 'refs').mkdir(exist_ok=True)
    (repo / 'refs' / 'main').write_text(REVISION)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=2,
                        num_attention_heads=12, intermediate_size=1536,
                        max_position_embeddings=512, architectures=['BertModel'])
    BertModel(config).save_pretrained(snapshot)
    AutoTokenizer.from_pretrained(MINILM).save_pretrained(snapshot)
    for file, content in REPLICAS[name].items():
        (snapshot / file).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / file).write_text(json.dumps(content, indent=2))
    return snapshot


def hub_cache_with(replicas, cache: Path, real: Path) -> Path:
    """A hub cache at ``cache`` holding the ``replicas`` (hub names) and, linked, every model of
    the ``real`` cache."""
    cache.mkdir(parents=True, exist_ok=True)
    for model in Path(real).glob('models--*'):
        if not (cache / model.name).exists():
            (cache / model.name).symlink_to(model, target_is_directory=True)
    for name in replicas:
        target = cache / f'models--{name.replace("/", "--")}'
        if target.is_symlink():
            target.unlink()
        elif target.exists():
            shutil.rmtree(target)
        write_replica(name, cache)
    return cache
