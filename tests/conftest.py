import os

import pytest
import torch
from transformers import AutoTokenizer, BertConfig, BertModel

# The data and models come from the standard caches (ir_datasets, Hugging Face hub),
# seeded offline by `make test`. Without them these tests fail rather than skip: a
# suite that skips its data would pass having tested nothing.
REQUIRED_ENV = ('SELFSUP_CLASSIC_DATA',)


def pytest_configure(config):
    missing = [v for v in REQUIRED_ENV if not os.environ.get(v)]
    if missing:
        raise pytest.UsageError(
            f'{", ".join(missing)} not set: run the suite with `make test`, or '
            f'`eval "$(../shared/bin/offline-assets)"` first (see README).')


@pytest.fixture(scope='session')
def cache_dir(tmp_path_factory):
    """One index cache for the whole session, so that each index is built once."""
    return tmp_path_factory.mktemp('selfsup-cache')



@pytest.fixture(scope='session')
def tiny_dir(tmp_path_factory):
    """A randomly initialised 2-layer BERT, with MiniLM's tokenizer, saved as a hub-style directory."""
    path = tmp_path_factory.mktemp('tiny-bert')
    tokenizer = AutoTokenizer.from_pretrained('sentence-transformers/all-MiniLM-L6-v2')
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    BertModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
