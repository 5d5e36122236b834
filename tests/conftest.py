import os

import pytest

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

