"""The committed effectiveness of each trained method: what a short run on ADI must score.

A test marked ``effectiveness`` trains a method with small settings, evaluates it beside its
start, and calls :func:`assert_committed` with the run's nDCG@10 and the start's. The values
it is held to are in ``tests/data/effectiveness.json``, with a tolerance measured on two CPU
kinds by ``scripts/effectiveness_values.py``, which runs the same tests with
``$SELFSUP_RECORD_EFFECTIVENESS`` set: :func:`assert_committed` then writes what it was given
instead of checking it. Each committed change from the start is more than twice its tolerance
(``tests/test_effectiveness_values.py``), so that a method whose change is halved fails.

    from tests.effectiveness import FP32, assert_committed
    proc = selfsup('run', ..., env=FP32)
    assert_committed(spec, table.loc[spec, 'nDCG@10'], start=table.loc['dual_encoder', 'nDCG@10'])
"""
import json
import os
from pathlib import Path

import pytest

VALUES = Path(__file__).resolve().parent / 'data' / 'effectiveness.json'
RECORD_ENV = 'SELFSUP_RECORD_EFFECTIVENESS'

# The package's choices as on an AVX2-only CPU: fp32 wherever it would choose bf16 on a CPU that
# has it natively, so that every CPU kind runs the same arithmetic, up to its kernels' order of
# summation (which the tolerance measures).
FP32 = {'SELFSUP_CPU_FLAGS': 'avx2 fma f16c'}


def committed() -> dict:
    """The committed runs, by key: each one's ``nDCG@10``, ``start`` and ``tolerance``."""
    return json.loads(VALUES.read_text())['runs']


def assert_committed(key: str, value: float, start: float, method: str | None = None):
    """Asserts that the run ``key`` scored its committed nDCG@10 ``value`` from the committed
    ``start``, each within the run's tolerance; or, with ``$SELFSUP_RECORD_EFFECTIVENESS`` set
    to a file, appends the run to it (one JSON line) and asserts nothing.

    Args:
        key: the run's name in the values file (the pipeline, as the command line names it).
        value: the trained model's nDCG@10.
        start: the nDCG@10 of the model the training started from, evaluated in the same run.
        method: the trained method (default: the pipeline's name, before its first ``:``).
    """
    method = method or key.split(':')[0]
    record = os.environ.get(RECORD_ENV)
    if record:
        with open(record, 'a') as fh:
            fh.write(json.dumps({'key': key, 'method': method, 'nDCG@10': float(value),
                                 'start': float(start)}) + '\n')
        return
    runs = committed()
    assert key in runs, f'{key} has no committed value: run scripts/effectiveness_values.py'
    run = runs[key]
    assert float(start) == pytest.approx(run['start'], abs=run['tolerance'])
    assert float(value) == pytest.approx(run['nDCG@10'], abs=run['tolerance']), (
        f'{key}: nDCG@10 {value:.4f} from {start:.4f}, committed {run["nDCG@10"]:.4f} '
        f'from {run["start"]:.4f} (within {run["tolerance"]})')
