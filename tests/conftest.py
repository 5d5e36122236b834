import os
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertModel

# The data and models come from the standard caches (ir_datasets, Hugging Face hub),
# seeded offline by `make test`. Without them these tests fail rather than skip: a
# suite that skips its data would pass having tested nothing.
REQUIRED_ENV = ('SELFSUP_CLASSIC_DATA',)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``cuda`` are skipped where torch sees no GPU (CI); nothing else is."""
    if not torch.cuda.is_available():
        skip = pytest.mark.skip(reason='needs a CUDA GPU')
        for item in items:
            if 'cuda' in item.keywords:
                item.add_marker(skip)


def pytest_configure(config):
    missing = [v for v in REQUIRED_ENV if not os.environ.get(v)]
    if missing:
        raise pytest.UsageError(
            f'{", ".join(missing)} not set: run the suite with `make test`, or '
            f'`eval "$(../shared/bin/offline-assets)"` first (see README).')


@pytest.fixture(scope='session')
def cache_dir(tmp_path_factory):
    """One index cache for the whole session, so that each index is built once. Under
    pytest-xdist the workers also share its ``generators`` directory: SmolLM2's fp32 conversion
    (half a minute on a slow CPU) is made once for the whole run, the others waiting on the
    build's lock."""
    path = tmp_path_factory.mktemp('selfsup-cache')
    if os.environ.get('PYTEST_XDIST_WORKER'):
        # (the run's base directory, shared by the workers and removed with the run)
        shared = tmp_path_factory.getbasetemp().parent / 'shared-generators'
        shared.mkdir(exist_ok=True)
        (path / 'generators').symlink_to(shared, target_is_directory=True)
    return path



@pytest.fixture(scope='session')
def tiny_dir(tmp_path_factory):
    """A randomly initialised 2-layer BERT, with MiniLM's tokenizer, saved as a hub-style
    directory."""
    path = tmp_path_factory.mktemp('tiny-bert')
    tokenizer = AutoTokenizer.from_pretrained('sentence-transformers/all-MiniLM-L6-v2')
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=128)
    BertModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def _tiny_generator_config(kind: str, tokenizer):
    from transformers import BartConfig, LlamaConfig, T5Config
    # large initial weights, so that a random model's output depends visibly on its passage
    common = dict(vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_token_id)
    if kind == 'bart':
        return BartConfig(init_std=0.3, d_model=32, encoder_layers=2, decoder_layers=2,
                          encoder_attention_heads=2, decoder_attention_heads=2,
                          encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=512,
                          bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id,
                          decoder_start_token_id=tokenizer.cls_token_id, forced_eos_token_id=None,
                          **common)
    if kind == 't5':
        return T5Config(initializer_factor=8.0, d_model=32, d_kv=16, d_ff=64, num_layers=2,
                        num_heads=2, eos_token_id=tokenizer.sep_token_id,
                        decoder_start_token_id=tokenizer.pad_token_id, **common)
    return LlamaConfig(initializer_range=0.3, hidden_size=32, intermediate_size=64,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=2048, tie_word_embeddings=True,
                       bos_token_id=tokenizer.cls_token_id, eos_token_id=tokenizer.sep_token_id,
                       **common)


@pytest.fixture(scope='session')
def tiny_generator_dir(tmp_path_factory):
    """Randomly initialised 2-layer BART, T5 and Llama-architecture models with MiniLM's
    tokenizer (no pretrained seq2seq weights can be had here), by kind."""
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM
    tokenizer = AutoTokenizer.from_pretrained('sentence-transformers/all-MiniLM-L6-v2')
    paths = {}
    for kind in ('bart', 't5', 'llama'):
        path = tmp_path_factory.mktemp(f'tiny-{kind}')
        torch.manual_seed(0)
        config = _tiny_generator_config(kind, tokenizer)
        model_cls = AutoModelForCausalLM if kind == 'llama' else AutoModelForSeq2SeqLM
        model_cls.from_config(config).save_pretrained(path)
        tokenizer.save_pretrained(path)
        paths[kind] = path
    return paths


# Factories of the tiny models, seeded, on the CPU in fp32: a test calls one with the
# settings it needs (``tiny_encoder(max_length=64)``, ``tiny_generator('bart')``).

@pytest.fixture(scope='session')
def tiny_encoder(tiny_dir):
    """The tiny BERT as a :class:`DualEncoder` (:func:`tests.helpers.tiny_dual_encoder`)."""
    from tests.helpers import tiny_dual_encoder
    return lambda **settings: tiny_dual_encoder(tiny_dir, **settings)


@pytest.fixture(scope='session')
def tiny_generator(tiny_generator_dir):
    """A tiny generator by kind (``llama``, ``bart``, ``t5``)."""
    from pyterrier_selfsup import Generator

    def make(kind='llama', **kwargs):
        return Generator.from_pretrained(str(tiny_generator_dir[kind]), device='cpu',
                                         precision='fp32', **kwargs)
    return make


@pytest.fixture(scope='session')
def tiny_reatt(tiny_dir):
    """A ReAtt over the tiny BERT (or the model at ``path``), its retrieval layer counted from 0."""
    from pyterrier_selfsup import ReAtt

    def make(layer=1, path=None, **kwargs):
        torch.manual_seed(0)
        return ReAtt.from_pretrained(str(path or tiny_dir), retrieval_layer=layer, device='cpu',
                                     precision='fp32', **kwargs)
    return make


def _replica_hub(tmp_path_factory, replicas, name):
    from huggingface_hub import constants

    from tests.hub_replicas import hub_cache_with
    return hub_cache_with(replicas, tmp_path_factory.mktemp(name), Path(constants.HF_HUB_CACHE))


@pytest.fixture(scope='session')
def replica_hub(tmp_path_factory):
    """A hub cache that holds replicas of ``intfloat/e5-small-v2`` and ``BAAI/bge-small-en-v1.5``
    (:mod:`tests.hub_replicas`) beside the real cache's models."""
    from tests.hub_replicas import REPLICAS
    return _replica_hub(tmp_path_factory, REPLICAS, 'replica-hub')


@pytest.fixture(scope='session')
def gpl_hub(tmp_path_factory):
    """A hub cache that holds replicas of GPL's writer, cross-encoder and two miners
    (:mod:`tests.hub_replicas`) beside the real cache's models."""
    from tests.hub_replicas import GPL_REPLICAS
    return _replica_hub(tmp_path_factory, GPL_REPLICAS, 'gpl-hub')


def _on_the_hub(hub, monkeypatch):
    from huggingface_hub import constants
    monkeypatch.setattr(constants, 'HF_HUB_CACHE', str(hub))
    monkeypatch.setenv('HF_HUB_CACHE', str(hub))
    return hub


@pytest.fixture
def replicas_on_the_hub(replica_hub, monkeypatch):
    """Loads by hub name from :func:`replica_hub` within the test (and in the processes it
    starts)."""
    return _on_the_hub(replica_hub, monkeypatch)


@pytest.fixture
def gpl_on_the_hub(gpl_hub, monkeypatch):
    """Loads GPL's models by their hub names from :func:`gpl_hub` within the test."""
    return _on_the_hub(gpl_hub, monkeypatch)


@pytest.fixture(scope='session')
def classic_mirror(tmp_path_factory):
    """A server on 127.0.0.1 that serves the local copies of CISI and ADI at the paths of their
    public home (``pyterrier_selfsup.data.classic.DOWNLOADS``): its address, for
    ``$SELFSUP_CLASSIC_MIRROR``. ``requests`` lists the paths asked for."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    from pyterrier_selfsup.data.classic import CLASSIC_DATA_ENV, DOWNLOADS
    root = tmp_path_factory.mktemp('classic-mirror')
    for path, _ in DOWNLOADS.values():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).symlink_to(Path(os.environ[CLASSIC_DATA_ENV]) / Path(path).name)
    asked = []

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, *args):
            asked.append(self.path)

    server = ThreadingHTTPServer(('127.0.0.1', 0),
                                 functools.partial(Handler, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f'http://127.0.0.1:{server.server_address[1]}'
    yield type('Mirror', (), {'url': url, 'root': root, 'requests': asked})
    server.shutdown()


@pytest.fixture
def classic_from_the_mirror(classic_mirror, monkeypatch):
    """CISI and ADI as a user who has only cloned the repository meets them: no
    ``$SELFSUP_CLASSIC_DATA``, downloaded on first use, here from :func:`classic_mirror`."""
    from pyterrier_selfsup.data.classic import CLASSIC_DATA_ENV, MIRROR_ENV
    monkeypatch.delenv(CLASSIC_DATA_ENV)
    monkeypatch.setenv(MIRROR_ENV, classic_mirror.url)
    return classic_mirror
