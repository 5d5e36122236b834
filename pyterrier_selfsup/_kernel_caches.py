"""Bounds on the kernel caches of PyTorch's CPU back end, set when the package builds its first
model (:func:`bound_kernel_caches`, which every wrapper's device resolution calls).

oneDNN (the CPU back end of PyTorch's bf16 matrix products) and ideep over it keep every kernel they
build, keyed by the shapes of its tensors, up to 1024 of each (``ONEDNN_PRIMITIVE_CACHE_CAPACITY``,
``LRU_CACHE_CAPACITY``; pytorch/pytorch#27971). A trainer meets new sequence lengths at every step,
so at PyTorch's defaults those caches grow with the run's length, not with its batch; a bound of 64
kernels a cache keeps the memory in use flat, with the same results (measured: docs/results.md).
Both settings are read once, when the first kernel is built, so they are set before the package's
first model runs, and only where the user has not set them. Importing the package sets nothing; a
kernel that the process built before the package's first model leaves PyTorch's defaults in
place."""
import os

KERNEL_CACHE_CAPACITY = 64
VARIABLES = ('ONEDNN_PRIMITIVE_CACHE_CAPACITY', 'LRU_CACHE_CAPACITY')


def bound_kernel_caches() -> None:
    """Sets each bound the user has not set (once a process: later calls change nothing)."""
    for name in VARIABLES:
        if name == VARIABLES[0] and 'DNNL_PRIMITIVE_CACHE_CAPACITY' in os.environ:
            continue  # (oneDNN's older name for it, which ONEDNN_... would override)
        os.environ.setdefault(name, str(KERNEL_CACHE_CAPACITY))
