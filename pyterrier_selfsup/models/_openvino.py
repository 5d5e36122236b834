"""OpenVINO as the inference engine of a :class:`~pyterrier_selfsup.models.dual_encoder.DualEncoder`
(``backend='openvino'``): one setting, no change to the model or its training.

``openvino.convert_model`` traces the torch module, the CPU plugin compiles it for the machine
(dynamic batch and length), and ``INFERENCE_PRECISION_HINT`` keeps the precision the encoder
resolves to (fp32 stays fp32).

``backend='openvino-int8'`` also quantises the passage side to int8 by NNCF's post-training
quantisation (``ModelType.TRANSFORMER``), calibrated, label-free, on the first
:data:`CALIBRATION_TEXTS` texts the side encodes after its weights change. Queries stay at the
encoder's precision. It is meant for CPUs with VNNI or AMX; elsewhere the backend warns.

A compiled side is kept per (side, precision) and rebuilt when the weights' fingerprint
changes; the fp32 and bf16 sides compiled last are shared by the process's encoders with the
same fingerprint.
"""
import importlib.util
import logging
import warnings
from collections import OrderedDict
from collections.abc import Callable
from contextlib import contextmanager

import numpy as np
import torch

from pyterrier_selfsup.machine import cpu_has_native_int8

logger = logging.getLogger(__name__)

OPENVINO_PRECISIONS = {torch.float32: 'f32', torch.bfloat16: 'bf16', torch.float16: 'f16'}
# texts whose activations set the int8 ranges (NNCF's default subset is 300 samples)
CALIBRATION_TEXTS = 256
# compiled sides kept for the process's encoders, by fingerprint, side, precision and threads
# (an int8 passage side depends on its calibration texts as well, and stays with its encoder)
SHARED_SIDES = 4
_shared: OrderedDict[tuple, object] = OrderedDict()


@contextmanager
def quiet_tracing():
    """Tracing the model for OpenVINO without its warnings (the tracer's and transformers'),
    none of which concerns the vectors."""
    from transformers.utils import logging as transformers_logging
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore', torch.jit.TracerWarning)
            warnings.simplefilter('ignore', FutureWarning)
            yield
    finally:
        transformers_logging.set_verbosity(verbosity)


class _Side(torch.nn.Module):
    """One side of a DualEncoderModel as a module of (input_ids, attention_mask) alone."""

    def __init__(self, model, side: str):
        super().__init__()
        self.model, self.side = model, side

    def forward(self, input_ids, attention_mask):
        return self.model.embed(input_ids, attention_mask, self.side)


class OpenVinoSides:
    """The compiled sides of one encoder, rebuilt when their weights change."""

    def __init__(self, int8: bool = False):
        self.int8 = int8
        self._warned = False
        self._compiled: dict[tuple[str, str], tuple[str, object]] = {}

    def encode(self, encoder, texts: list[str], side: str, batches,
               calibration: Callable[[], list[dict[str, np.ndarray]]]) -> np.ndarray:
        """``encoder``'s vectors of ``texts`` through its compiled ``side``, over ``batches`` of
        (positions, input ids, mask); the side compiled on the first batch, int8 calibrated by
        ``calibration()``."""
        out = np.empty((len(texts), encoder.model.out_dim), dtype=np.float32)
        compiled = None
        for positions, input_ids, mask in batches:
            if compiled is None:
                compiled = self.get(encoder, side,
                                    {'input_ids': input_ids[:2], 'attention_mask': mask[:2]},
                                    calibration=calibration)
            out[positions] = compiled(self.inputs(input_ids, mask))[0]
        return out

    def get(self, encoder, side: str, sample: dict[str, torch.Tensor],
            calibration: Callable[[], list[dict[str, np.ndarray]]]):
        """The compiled ``side``; ``calibration()`` gives the batches of inputs that
        calibrate int8 (called only when an int8 side is built)."""
        import openvino as ov  # only where this backend is chosen: `pip install openvino`
        hint = OPENVINO_PRECISIONS[encoder.compute_dtype()]
        weights = encoder.passage_fingerprint() if side == 'passage' else encoder.fingerprint()
        built = self._compiled.get((side, hint))
        shared = (weights, side, hint, torch.get_num_threads())
        quantised = self.int8 and side == 'passage'
        if not quantised and (built is None or built[0] != weights) and shared in _shared:
            _shared.move_to_end(shared)
            built = self._compiled[side, hint] = (weights, _shared[shared])
        if built is None or built[0] != weights:
            was_training = encoder.model.training
            encoder.model.eval()
            try:
                with torch.no_grad(), quiet_tracing():
                    converted = ov.convert_model(
                        _Side(encoder.model, side), example_input=dict(sample),
                        input=[(name, ov.PartialShape([-1, -1]), ov.Type.i64) for name in sample],
                        # (a copy: a shared side must not follow its first encoder's training)
                        share_weights=False)
            finally:
                encoder.model.train(was_training)
            if quantised:
                if not cpu_has_native_int8() and not self._warned:
                    self._warned = True
                    logger.warning(
                        "backend='openvino-int8' on a CPU without VNNI or AMX: int8 products "
                        'there are slower than fp32 and can saturate, so the ranking can move '
                        "further from fp32's than where the CPU has them; backend='openvino' "
                        "keeps fp32's")
                converted = _int8(converted, calibration())
            compiled = ov.Core().compile_model(converted, 'CPU',
                                               {'INFERENCE_PRECISION_HINT': hint,
                                                'INFERENCE_NUM_THREADS': torch.get_num_threads()})
            built = self._compiled[side, hint] = (weights, compiled)
            if not quantised:
                _shared[shared] = compiled
                while len(_shared) > SHARED_SIDES:
                    _shared.popitem(last=False)
        return built[1]

    @staticmethod
    def inputs(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> dict[str, np.ndarray]:
        return {'input_ids': input_ids.numpy().astype(np.int64),
                'attention_mask': attention_mask.numpy().astype(np.int64)}


def _int8(model, batches: list[dict[str, np.ndarray]]):
    """``model`` with its matrix products in int8, calibrated on ``batches`` (NNCF)."""
    import nncf  # `pip install nncf` (in the cpu extra)
    nncf.set_log_level(logging.ERROR)
    return nncf.quantize(model, nncf.Dataset(batches), subset_size=len(batches),
                         model_type=nncf.ModelType.TRANSFORMER)


BACKENDS = ('auto', 'torch', 'openvino', 'openvino-int8')
# passages from which an index that backend='auto' encodes goes through OpenVINO
AUTO_OPENVINO_FROM = 1000


def openvino_installed() -> bool:
    """Whether OpenVINO can be imported (the ``cpu`` extra installs it)."""
    return importlib.util.find_spec('openvino') is not None


class Backends:
    """What encodes a :class:`~pyterrier_selfsup.models.dual_encoder.DualEncoder`'s texts
    without gradients (its ``backend``), chosen by :meth:`choose_backend`; the encoder sets
    ``device`` first."""

    def choose_backend(self, backend: str):
        """``'torch'``, ``'openvino'``, ``'openvino-int8'`` or ``'auto'`` (as the encoder's
        constructor says); the OpenVINO ones on a CPU only."""
        if backend not in BACKENDS:
            raise ValueError(f'backend must be one of {BACKENDS}, not {backend!r}')
        if backend.startswith('openvino') and self.device.type != 'cpu':
            raise ValueError(f'the openvino backend runs on the CPU, not on {self.device}')
        self._backend = backend
        self._openvino: OpenVinoSides | None = None  # (compiled on first use)

    @property
    def backend(self) -> str:
        """What encodes passages without gradients, resolved: ``'auto'`` is ``'openvino'`` on a CPU
        in fp32 where OpenVINO is installed, ``'torch'`` elsewhere (see :meth:`index_backend`)."""
        if self._backend != 'auto':
            return self._backend
        same_vectors = self.device.type == 'cpu' and self.compute_dtype() == torch.float32
        return 'openvino' if same_vectors and openvino_installed() else 'torch'

    def index_backend(self, passages: int) -> str:
        """The backend that encodes an index of ``passages`` passages: ``'auto'`` keeps torch below
        :data:`AUTO_OPENVINO_FROM` passages, where compiling takes longer than it saves."""
        if self._backend == 'auto' and passages < AUTO_OPENVINO_FROM:
            return 'torch'
        return self.backend

    @contextmanager
    def encoding_with(self, backend: str):
        """Encodes with ``backend`` within the block (an index's build, its backend chosen
        once for the whole corpus)."""
        was, self._backend = self._backend, backend
        try:
            yield
        finally:
            self._backend = was

    def _openvino_sides(self, side: str) -> OpenVinoSides | None:
        """The compiled sides of the resolved backend for ``side`` (None for torch), made on first
        use; ``'auto'`` encodes queries in torch."""
        backend = self.backend
        if backend == 'torch' or (self._backend == 'auto' and side == 'query'):
            return None
        int8 = backend == 'openvino-int8'
        if self._openvino is None or self._openvino.int8 != int8:
            self._openvino = OpenVinoSides(int8=int8)
        return self._openvino
