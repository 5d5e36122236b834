"""The bounds the package puts on PyTorch's CPU kernel caches (pyterrier_selfsup._kernel_caches)
when it builds its first model, each checked in a fresh process: they are read once, when torch
builds its first kernel."""
import os
import subprocess
import sys

import pytest

from pyterrier_selfsup._kernel_caches import KERNEL_CACHE_CAPACITY, VARIABLES

# a model's device resolved, as every wrapper does first
FIRST_MODEL = ('import pyterrier_selfsup; '
               'from pyterrier_selfsup.models.precision import resolve_device; '
               'resolve_device("cpu")\n')
# (after the package's first model, or not) bf16 products of one Linear over 79 batch sizes, then
# the first size again; ONEDNN_VERBOSE says whether the last one's kernel was built anew
# (cache_miss) or found (cache_hit)
SHAPES = """
import torch
lin = torch.nn.Linear(64, 64)
with torch.autocast('cpu', dtype=torch.bfloat16), torch.no_grad():
    for n in [*range(2, 81), 2]:
        lin(torch.randn(n, 64))
"""


def _run(code: str, **env) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items()
             if k not in (*VARIABLES, 'DNNL_PRIMITIVE_CACHE_CAPACITY')}
    return subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                          env={**clean, **env}, check=True)


def test_the_first_model_bounds_the_kernel_caches_unless_the_user_set_them():
    show = ('import os; from pyterrier_selfsup._kernel_caches import VARIABLES; '
            'print(*(os.environ.get(v, "-") for v in VARIABLES))\n')
    assert VARIABLES == ('ONEDNN_PRIMITIVE_CACHE_CAPACITY', 'LRU_CACHE_CAPACITY')
    # importing the package (its dual encoder too) changes no environment variable; its first
    # model sets both bounds
    imported = 'import pyterrier_selfsup, pyterrier_selfsup.models.dual_encoder\n'
    assert _run(imported + show + FIRST_MODEL + show).stdout.split() == [
        '-', '-', str(KERNEL_CACHE_CAPACITY), str(KERNEL_CACHE_CAPACITY)]
    show = FIRST_MODEL + show
    assert _run(show, LRU_CACHE_CAPACITY='7').stdout.split() == [str(KERNEL_CACHE_CAPACITY), '7']
    # oneDNN's older name for its capacity, which the newer one would override, is left in charge
    assert (_run(show, DNNL_PRIMITIVE_CACHE_CAPACITY='5').stdout.split()
            == ['-', str(KERNEL_CACHE_CAPACITY)])


def test_a_kernel_met_again_after_more_shapes_than_the_cache_holds_is_built_anew():
    def last_build(package=True, **env):
        code = (FIRST_MODEL if package else '') + SHAPES
        builds = [line.split(',')[3]
                  for line in _run(code, ONEDNN_VERBOSE='profile_create', **env).stdout.splitlines()
                  if line.startswith('onednn_verbose') and ',matmul,' in line]
        if not builds:
            pytest.skip("this CPU's bf16 products do not go through oneDNN")
        return builds[-1]
    assert KERNEL_CACHE_CAPACITY < 79
    assert last_build() == 'create:cache_miss'  # evicted: the cache is bounded
    # (without the package: PyTorch's 1024 kernels)
    assert last_build(package=False) == 'create:cache_hit'
