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

GPL's models (``UKPLab/gpl``'s ``gpl/train.py`` defaults):

- ``BeIR/query-gen-msmarco-t5-base-v1``: a T5 (``config.json``, the weights and T5's
  sentencepiece tokenizer, no ``generation_config.json``); its 892 MB of fp32 weights are
  t5-base's 223M parameters, whose configuration the replica keeps (d_model 768, d_ff 3,072,
  12 heads of 64, relu, a vocabulary of 32,128) with 2 layers a side, not 12. T5's tokenizer
  cannot be had here: MiniLM's stands in (its ids lie within T5's vocabulary).
- ``cross-encoder/ms-marco-MiniLM-L-6-v2``: a BertForSequenceClassification of one label and
  sentence-transformers' identity activation (``predict`` gives raw scores), no
  sentence-transformers files; 2 layers, not 6.
- ``sentence-transformers/msmarco-distilbert-base-v3`` and ``msmarco-MiniLM-L-6-v3``, GPL's
  miners: a DistilBERT (768) and a BERT (384), each a Transformer and a mean Pooling, no
  Normalize (GPL searches them by cosine); 2 layers each, not 6.
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


def _bert(snapshot: Path):
    BertModel(BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=2,
                         num_attention_heads=12, intermediate_size=1536,
                         max_position_embeddings=512, architectures=['BertModel'])
              ).save_pretrained(snapshot)


def _distilbert(snapshot: Path):
    from transformers import DistilBertConfig, DistilBertModel
    DistilBertModel(DistilBertConfig(vocab_size=30522, dim=768, n_layers=2, n_heads=12,
                                     hidden_dim=3072, max_position_embeddings=512,
                                     architectures=['DistilBertModel'])).save_pretrained(snapshot)


def _cross_encoder(snapshot: Path):
    from transformers import BertForSequenceClassification
    config = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=2,
                        num_attention_heads=12, intermediate_size=1536,
                        max_position_embeddings=512, num_labels=1,
                        architectures=['BertForSequenceClassification'],
                        sbert_ce_default_activation_function='torch.nn.modules.linear.Identity')
    BertForSequenceClassification(config).save_pretrained(snapshot)


def _t5_base(snapshot: Path):
    from transformers import T5Config, T5ForConditionalGeneration
    config = T5Config(vocab_size=32128, d_model=768, d_kv=64, d_ff=3072, num_layers=2,
                      num_decoder_layers=2, num_heads=12, feed_forward_proj='relu',
                      decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
                      architectures=['T5ForConditionalGeneration'], initializer_factor=8.0)
    model = T5ForConditionalGeneration(config)
    # (drawn 8 times wider than T5's own initialisation, so that a random model writes text that
    # depends on its passage, not its padding token throughout; the file says T5's factor)
    model.config.initializer_factor = 1.0
    model.save_pretrained(snapshot)


# each replica: what writes its weights and configuration, and its other files as the hub
# publishes them
REPLICAS = {
    'intfloat/e5-small-v2': (_bert, {
        'modules.json': _modules(normalize=True),
        '1_Pooling/config.json': _pooling('mean'),
        'sentence_bert_config.json': {'max_seq_length': 512, 'do_lower_case': False},
    }),
    'BAAI/bge-small-en-v1.5': (_bert, {
        'modules.json': _modules(normalize=True),
        '1_Pooling/config.json': _pooling('cls'),
        'sentence_bert_config.json': {'max_seq_length': 512, 'do_lower_case': True},
        'config_sentence_transformers.json': VERSIONS,
    }),
}
GPL_REPLICAS = {
    'BeIR/query-gen-msmarco-t5-base-v1': (_t5_base, {}),
    'cross-encoder/ms-marco-MiniLM-L-6-v2': (_cross_encoder, {}),
    'sentence-transformers/msmarco-distilbert-base-v3': (_distilbert, {
        'modules.json': _modules(normalize=False),
        '1_Pooling/config.json': dict(_pooling('mean'), word_embedding_dimension=768),
        'sentence_bert_config.json': {'max_seq_length': 512, 'do_lower_case': False},
    }),
    'sentence-transformers/msmarco-MiniLM-L-6-v3': (_bert, {
        'modules.json': _modules(normalize=False),
        '1_Pooling/config.json': _pooling('mean'),
        'sentence_bert_config.json': {'max_seq_length': 512, 'do_lower_case': False},
    }),
}
EVERY = {**REPLICAS, **GPL_REPLICAS}


def write_replica(name: str, cache: Path, seed: int = 0) -> Path:
    """The replica of hub model ``name`` (:data:`EVERY`) in hub cache ``cache``; returns its
    snapshot's directory."""
    repo = cache / f'models--{name.replace("/", "--")}'
    snapshot = repo / 'snapshots' / REVISION
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / 'refs').mkdir(exist_ok=True)
    (repo / 'refs' / 'main').write_text(REVISION)
    torch.manual_seed(seed)
    weights, files = EVERY[name]
    weights(snapshot)
    AutoTokenizer.from_pretrained(MINILM).save_pretrained(snapshot)
    for file, content in files.items():
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
