"""Where a model runs and in which precision: the device, the dtype its matrix products run in,
the contexts its forward passes run in (:class:`TorchModel`), and the conversions that hold
frozen weights in that dtype once rather than casting them at every forward.

    compute_dtype('auto', torch.device('cpu'))   # bfloat16 where the CPU multiplies it natively
"""
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from pyterrier_selfsup._kernel_caches import bound_kernel_caches
from pyterrier_selfsup.machine import cpu_has_native_bf16

PRECISIONS = ('auto', 'fp32', 'bf16', 'fp16')


def compute_dtype(precision: str, device: torch.device) -> torch.dtype:
    """``'fp32'``, ``'bf16'``, ``'fp16'``, or ``'auto'``: bf16 where the hardware multiplies
    bf16 natively (CUDA, or a CPU with AVX512-BF16/AMX; fp16 on older GPUs), fp32 elsewhere."""
    if precision not in PRECISIONS:
        raise ValueError(f'precision must be one of {PRECISIONS}, not {precision!r}')
    if precision == 'auto':
        if device.type == 'cuda':
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.bfloat16 if device.type == 'cpu' and cpu_has_native_bf16() else torch.float32
    return {'fp32': torch.float32, 'bf16': torch.bfloat16, 'fp16': torch.float16}[precision]


def resolve_device(device: str | None) -> torch.device:
    """``device``, or CUDA where torch sees a GPU, else the CPU; bounds the CPU kernel caches
    first (:mod:`~pyterrier_selfsup._kernel_caches`)."""
    bound_kernel_caches()
    return torch.device(device or ('cuda' if torch.cuda.is_available() else 'cpu'))


class TorchModel:
    """Device and precision of a wrapper, and the contexts its forward passes run in.

    Subclasses set ``self.device`` and ``self.precision`` and list their modules in
    :meth:`torch_modules`. A frozen model whose matrices were converted to its compute dtype sets
    ``_held_in`` to that dtype, and refuses a precision that resolves to another."""
    device: torch.device
    _held_in: torch.dtype | None = None

    @property
    def precision(self) -> str:
        return self._precision

    @precision.setter
    def precision(self, value: str):
        held = self._held_in
        if held is not None and compute_dtype(value, self.device) != held:
            raise ValueError(f'this frozen model holds its matrices in {held} (its precision '
                             f'when built): build it with precision={value!r} instead')
        self._precision = value

    def torch_modules(self) -> list[torch.nn.Module]:
        raise NotImplementedError

    def compute_dtype(self) -> torch.dtype:
        """The dtype matrix products run in, as ``precision`` resolves on this device."""
        return compute_dtype(self.precision, self.device)

    def autocast(self):
        dtype = self.compute_dtype()
        return torch.autocast(self.device.type, dtype=dtype, enabled=dtype != torch.float32)

    @contextmanager
    def inference(self) -> Iterator[None]:
        """Eval mode, no autograd, autocast; each module's mode restored afterwards
        (a trainer may call this between steps)."""
        modes = [(m, m.training) for m in self.torch_modules()]
        for m, _ in modes:
            m.eval()
        try:
            with torch.inference_mode(), self.autocast():
                yield
        finally:
            for m, mode in modes:
                m.train(mode)


@contextmanager
def linears_held_in(modules: Sequence[torch.nn.Module], dtype: torch.dtype) -> Iterator[None]:
    """Holds every ``nn.Linear`` weight and bias of ``modules`` in ``dtype`` for the duration
    and restores the originals after: under inference mode autocast would cast them again at
    every forward, and a cast made once gives the same products. BERT's pooler, which a dual
    encoder never reads, is switched off too. Not for a model training on another thread."""
    saved_params, saved_poolers, cast = [], [], {}
    for module in modules:
        for m in module.modules():
            if isinstance(getattr(m, 'pooler', None), torch.nn.Module):
                saved_poolers.append((m, m.pooler))
                m.pooler = None
            if not isinstance(m, torch.nn.Linear) or dtype == torch.float32:
                continue
            for name in ('weight', 'bias'):
                p = m._parameters.get(name)
                if p is None or p.dtype == dtype:
                    continue
                if id(p) not in cast:
                    cast[id(p)] = torch.nn.Parameter(p.detach().to(dtype), requires_grad=False)
                saved_params.append((m, name, p))
                m._parameters[name] = cast[id(p)]
    try:
        yield
    finally:
        for m, name, p in saved_params:
            m._parameters[name] = p
        for m, pooler in saved_poolers:
            m.pooler = pooler


def matrices_in_compute_dtype(model: torch.nn.Module, dtype: torch.dtype) -> int:
    """A frozen model's matrices kept in the dtype its products run in: each ``nn.Linear``
    whose weight no other kind of module shares is converted to ``dtype``, the cast autocast
    would make at every forward, done once (the same products, bit for bit). Every forward must
    then run under the generator's autocast.

    The tensors left as loaded are copied into memory of their own, so that the safetensors
    mapping they viewed is released. Returns the number of weights converted (0 for fp32)."""
    if dtype == torch.float32:
        return 0
    others = {id(p) for m in model.modules() if not isinstance(m, torch.nn.Linear)
              for p in m.parameters(recurse=False)}
    converted = 0
    for module in model.modules():
        if (isinstance(module, torch.nn.Linear) and id(module.weight) not in others and
                module.weight.dtype != dtype):
            converted += sum(p.numel() for p in module.parameters(recurse=False))
            module.to(dtype)
    for tensor in [*model.parameters(), *model.buffers()]:
        if tensor.dtype != dtype:
            tensor.data = tensor.data.clone()
    return converted


@contextmanager
def casts_kept(model: torch.nn.Module):
    """Within one autocast region, each weight is cast to the lower precision once, not at every
    use: autocast keeps casts only of leaf tensors that require grad, and none under inference
    mode (pytorch/pytorch#113685 and #165068). So for the region the floating-point weights are
    marked as requiring grad and it runs under ``no_grad``; the same casts, so the same numbers.
    Enter it inside the autocast region (``Generator.inference``); every weight marked is
    unmarked, whatever ends the region."""
    marked = []
    try:
        for p in model.parameters():
            if p.is_floating_point() and not p.requires_grad:
                p.requires_grad_(True)
                marked.append(p)
        with torch.inference_mode(False), torch.no_grad():
            yield
    finally:
        for p in marked:
            p.requires_grad_(False)
