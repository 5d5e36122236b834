"""Bounds on the kernel caches of PyTorch's CPU back end, set before torch builds its first kernel.

oneDNN (the CPU back end of PyTorch's bf16 matrix products) and ideep over it keep every kernel they
build, keyed by the shapes of its tensors, up to 1024 of each (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``,
``LRU_CACHE_CAPACITY``; pytorch/pytorch#27971). A trainer meets new sequence lengths at every step,
so at PyTorch's defaults those caches grow with the run's length, not with its batch; a bound of 64
kernels a cache keeps the memory in use flat, with the same results
(measured: docs/results.md). Both settings are read once, when the
first kernel is built, so they are set here, when the package is imported, and only where the
user has not set them; a kernel built before the package is imported leaves PyTorch's defaults
in place for the process."""
import os

KERNEL_CACHE_CAPACITY = 64
VARIABLES = ('ONEDNN_PRIMITIVE_CACHE_CAPACITY', 'LRU_CACHE_CAPACITY')

for _name in VARIABLES:
    if _name == VARIABLES[0] and 'DNNL_PRIMITIVE_CACHE_CAPACITY' in os.environ:
        continue  # (oneDNN's older name for it, which ONEDNN_... would override)
    os.environ.setdefault(_name, str(KERNEL_CACHE_CAPACITY))
