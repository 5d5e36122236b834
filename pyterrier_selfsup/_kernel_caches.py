"""Bounds on the kernel caches of PyTorch's CPU back end, set when the package builds its first
model (:func:`bound_kernel_caches`, which every wrapper's device resolution calls).

oneDNN and ideep keep every kernel they build, keyed by its tensors' shapes, up to 1024 of each
(``ONEDNN_PRIMITIVE_CACHE_CAPACITY``, ``LRU_CACHE_CAPACITY``; pytorch/pytorch#27971), so a
trainer meeting new sequence lengths at every step grows them with the run's length. Both are
read when the first kernel is built, so they are set before the package's first model runs,
only where the user has not set them; importing the package sets nothing."""
import os

KERNEL_CACHE_CAPACITY = 64
VARIABLES = ('ONEDNN_PRIMITIVE_CACHE_CAPACITY', 'LRU_CACHE_CAPACITY')


def bound_kernel_caches() -> None:
    """Sets each bound the user has not set (once a process: later calls change nothing)."""
    for name in VARIABLES:
        if name == VARIABLES[0] and 'DNNL_PRIMITIVE_CACHE_CAPACITY' in os.environ:
            continue  # (oneDNN's older name for it, which ONEDNN_... would override)
        os.environ.setdefault(name, str(KERNEL_CACHE_CAPACITY))
