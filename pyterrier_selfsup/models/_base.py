"""What the model wrappers share: device, precision, inference mode, text cleaning,
padding, saved settings, and the face they show a :class:`~pyterrier_selfsup.training.Trainer`.

A wrapper (``DualEncoder``, ``Generator``, ``ReAtt``, ``ReAttT5``) holds one or more torch
modules and a tokenizer. The training loop trains any of them through
:class:`TrainableModel`: its parameters, train/eval mode, ``save_pretrained`` and
``load_weights``, never by asking which model it is.
"""
import json
import logging
import math
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

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


def _cpu_flags() -> set:
    """The CPU's feature flags (empty off Linux)."""
    try:
        with open('/proc/cpuinfo') as fh:
            return set(next((line for line in fh if line.startswith('flags')), '').split())
    except OSError:
        return set()


def cpu_has_native_bf16() -> bool:
    """Whether the CPU has AVX512-BF16 or AMX, where bf16 matrix products run faster than fp32
    (experiments/results/encoding_benchmark.md); without them bf16 is emulated and slower."""
    return bool(_cpu_flags() & {'avx512_bf16', 'amx_bf16'})


def cpu_has_native_int8() -> bool:
    """Whether the CPU multiplies int8 into 32-bit sums in one instruction (VNNI or AMX).
    Without them, oneDNN's int8 products add pairs in 16 bits, which can saturate ("Nuances of
    int8 computations" in its guide), and are slower than fp32 here."""
    return bool(_cpu_flags() & {'avx512_vnni', 'avx_vnni', 'amx_int8'})


def resolve_device(device: Optional[str]) -> torch.device:
    return torch.device(device or ('cuda' if torch.cuda.is_available() else 'cpu'))


def to_device(tensor: torch.Tensor, device) -> torch.Tensor:
    """``tensor`` on ``device``; to a GPU from pinned memory without waiting for the copy
    (it is queued on the stream that uses it, so the host can prepare the next batch)."""
    device = torch.device(device) if device is not None else torch.device('cpu')
    if device.type == 'cuda' and tensor.device.type == 'cpu':
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


class TorchModel:
    """Device and precision of a wrapper, and the contexts its forward passes run in.

    Subclasses set ``self.device`` (:func:`resolve_device`) and ``self.precision`` and
    list their modules in :meth:`torch_modules`."""
    device: torch.device
    precision: str

    def torch_modules(self) -> List[torch.nn.Module]:
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


class TrainableModel(TorchModel):
    """What :class:`~pyterrier_selfsup.training.Trainer` needs of a model."""

    def trainable_parameters(self) -> List[torch.nn.Parameter]:
        """Each parameter that trains, once (modules may share weights)."""
        seen, out = set(), []
        for module in self.torch_modules():
            for p in module.parameters():
                if p.requires_grad and id(p) not in seen:
                    seen.add(id(p))
                    out.append(p)
        return out

    def train_mode(self, on: bool = True):
        for m in self.torch_modules():
            m.train(on)

    def gradient_checkpointing(self, on: bool = True):
        """Transformers' gradient checkpointing on (or off) in every pretrained transformer of
        the model: a layer's activations are recomputed in the backward pass rather than kept
        from the forward one (the RNG state kept: the same gradients, a second forward pass
        of each layer). In training mode only; a model without such layers is left alone."""
        from transformers import PreTrainedModel
        for module in self.torch_modules():
            for m in module.modules():
                if not isinstance(m, PreTrainedModel) or not m.supports_gradient_checkpointing:
                    continue
                # (transformers 5.2x renamed it activation checkpointing; the old names warn)
                if hasattr(m, 'activation_checkpointing_enable'):
                    active, enable, disable = (m.is_activation_checkpointing,
                                               m.activation_checkpointing_enable,
                                               m.activation_checkpointing_disable)
                else:
                    active, enable, disable = (m.is_gradient_checkpointing,
                                               m.gradient_checkpointing_enable,
                                               m.gradient_checkpointing_disable)
                if on and not active:
                    enable({'use_reentrant': False})
                elif not on and active:
                    disable()

    def save_pretrained(self, path: Union[str, Path]) -> Path:
        raise NotImplementedError

    def load_weights(self, path: Union[str, Path]):
        """Loads the weights that :meth:`save_pretrained` wrote at ``path`` into this model,
        in place (a trainer resuming from a checkpoint)."""
        raise NotImplementedError


def full_attention_layers(config) -> Optional[int]:
    """A decoder-only model's number of layers if every one attends to every position (no
    sliding window, no other kind), else None: where the package's own key/value caches
    (the query writer's, the scorer's prefixes) stand in for transformers' per-kind layers."""
    from transformers.cache_utils import get_layer_types_and_kwargs
    if getattr(config, 'is_encoder_decoder', False):
        return None
    text = config.get_text_config(decoder=True)
    kinds, _ = get_layer_types_and_kwargs(text)
    return text.num_hidden_layers if all(kind == 'full_attention' for kind in kinds) else None


def clean_texts(texts: Sequence) -> List[str]:
    """None, NaN and other non-strings become strings (missing ones empty)."""
    return [t if isinstance(t, str)
            else '' if t is None or (isinstance(t, float) and math.isnan(t)) else str(t)
            for t in texts]


def pad(seqs: Sequence[Sequence[int]], value: int, *, left: bool = False, device=None,
        min_width: int = 1) -> Tuple[torch.Tensor, torch.Tensor]:
    """Token id lists as one (b, width) int64 tensor and its attention mask, padded on the right
    (or the left, for decoder-only models whose sequences must end together, and for tokenizers
    that pad on the left) to the longest, or to ``min_width`` where that is longer (a slice of a
    batch padded as the whole batch). Filled in numpy: a tokenizer's ``pad`` builds Python lists
    and torch's ``pad_sequence`` a tensor a row, each costing more than the copy itself."""
    lengths = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
    width = max(1, min_width, int(lengths.max(initial=0)))
    ids = np.full((len(seqs), width), value, dtype=np.int64)
    for row, (seq, n) in enumerate(zip(seqs, lengths)):
        if n:
            if left:
                ids[row, width - n:] = seq
            else:
                ids[row, :n] = seq
    columns = np.arange(width)
    mask = columns >= width - lengths[:, None] if left else columns < lengths[:, None]
    ids, mask = torch.from_numpy(ids), torch.from_numpy(mask.astype(np.int64))
    return (ids, mask) if device is None else (to_device(ids, device), to_device(mask, device))


def budget_batches(lengths: np.ndarray, budget: int) -> Iterator[slice]:
    """Cuts ``lengths``, sorted longest first, into consecutive batches whose padded size
    (rows times the batch's first, longest, length) stays within ``budget`` tokens. A text
    longer than the budget makes a batch of its own.

        >>> [(s.start, s.stop) for s in budget_batches(np.array([8, 4, 4, 2, 2, 2]), 8)]
        [(0, 1), (1, 3), (3, 6)]
    """
    start = 0
    while start < len(lengths):
        rows = max(1, budget // max(1, int(lengths[start])))
        yield slice(start, min(start + rows, len(lengths)))
        start += rows


TOKENIZE_SLICE = 1024


def tokenized_in_slices(tokenize: Callable[[List[str]], List[List[int]]], texts: List[str],
                        order: np.ndarray) -> Iterator[Tuple[np.ndarray, List[List[int]]]]:
    """``texts`` in ``order``, cut into slices of :data:`TOKENIZE_SLICE`, each with its token
    ids. One thread tokenizes the slices in turn while the caller consumes the slices before
    them, so that tokenization overlaps the device's work; a fast tokenizer spreads each
    slice over every core itself (unless ``TOKENIZERS_PARALLELISM=false``).

    Yields (positions in ``texts``, their token ids), slice by slice, in order."""
    slices = [order[s:s + TOKENIZE_SLICE] for s in range(0, len(order), TOKENIZE_SLICE)]
    if len(slices) <= 1:
        yield from ((idx, tokenize([texts[i] for i in idx])) for idx in slices)
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix='tokenize') as pool:
        done = pool.map(lambda idx: tokenize([texts[i] for i in idx]), slices)
        yield from zip(slices, done)


@contextmanager
def linears_held_in(modules: Sequence[torch.nn.Module], dtype: torch.dtype) -> Iterator[None]:
    """Holds every ``nn.Linear`` weight and bias of ``modules`` in ``dtype`` for the duration
    and restores the originals after. Under inference mode, autocast keeps no cast cache, so
    it would cast each weight again at every forward; a linear layer's weight and bias cast
    once give the same products, as autocast casts them to the same dtype. BERT's pooler,
    which an encoder computes and a dual encoder never reads, is switched off too.

    Costs a copy of the linear weights in ``dtype`` while it lasts. Not for a model that is
    training at the same time on another thread."""
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


def read_saved_config(name_or_path: Union[str, Path], filename: str) -> Optional[dict]:
    """``filename`` (JSON) of a local directory or a hub repository (through the local
    cache), or None where there is none: how every wrapper reads back its settings."""
    local = Path(name_or_path) / filename
    if Path(name_or_path).is_dir():
        return json.loads(local.read_text()) if local.is_file() else None
    try:
        from huggingface_hub import hf_hub_download
        return json.loads(Path(hf_hub_download(str(name_or_path), filename)).read_text())
    except Exception:  # not in that repository (or not a repository): nothing to read
        return None


class OfflineHubFilter(logging.Filter):
    """Drops huggingface_hub's warning that it could not reach the Hub *because offline mode is
    on* (``HF_HUB_OFFLINE=1``): offline is a normal way to run this package, and the warning came
    once a model load. Any other warning of the Hub's, and this one for a real connection failure,
    passes. The package installs it on the Hub's logger when it is imported
    (:func:`quiet_offline_hub`); the command line also says offline once, in a line of its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (message.startswith('Could not reach the Hub') and
                    'offline mode is enabled' in message)


# where huggingface_hub says it (hf_api.py, revision resolution)
HUB_LOGGER = 'huggingface_hub.hf_api'


class EncoderCacheFilter(logging.Filter):
    """Drops transformers' "`use_cache=True` is incompatible with gradient checkpointing" for the
    encoders this package trains with checkpointing on
    (:meth:`TrainableModel.gradient_checkpointing`): an encoder's config may say ``use_cache``
    (BERT's does, for its use as a decoder), but no encoder here keeps a cache, so there is
    nothing for a user to act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith('`use_cache=True` is incompatible with gradient '
                                                  'checkpointing')


# where transformers says it (merge_with_config_defaults)
CACHE_WARNING_LOGGER = 'transformers.utils.generic'


def quiet_offline_hub():
    """Installs :class:`OfflineHubFilter` on the Hub's logger and :class:`EncoderCacheFilter` on
    transformers' (once)."""
    for name, kind in ((HUB_LOGGER, OfflineHubFilter), (CACHE_WARNING_LOGGER, EncoderCacheFilter)):
        log = logging.getLogger(name)
        if not any(isinstance(f, kind) for f in log.filters):
            log.addFilter(kind())


# offline mode (HF_HUB_OFFLINE=1) is normal here: no warning each time a model loads
quiet_offline_hub()
