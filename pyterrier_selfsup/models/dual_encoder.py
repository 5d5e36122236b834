"""The thesis' dense dual encoder (§4.2.1), trainable, as a pyterrier-dr ``BiEncoder``.

Its model (:class:`DualEncoderModel`) is a sentence-transformers model: one shared encoder (or,
after untying, a query tower and a passage tower), ``cls`` or ``mean`` pooling, and separate
projections ``W_Q`` and ``W_P`` to dimension ``d`` (or none); the score is the dot product, and
p(z|x) the softmax of score / temperature over the candidates. What it saves
``SentenceTransformer(dir)`` loads. The package adds fast encoding, devices and precisions,
OpenVINO, and passage offsets; :meth:`DualEncoder.encode` keeps gradients for training.
"""
import json
import logging
import math
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from pyterrier_dr import BiEncoder
from tokenizers import Tokenizer

from pyterrier_selfsup._cache import weights_fingerprint
from pyterrier_selfsup.models._openvino import CALIBRATION_TEXTS, Backends, OpenVinoSides
from pyterrier_selfsup.models.batching import clean_texts, to_device
from pyterrier_selfsup.models.dual_encoder_model import (
    NO_PROMPTS,
    TASKS,
    DualEncoderModel,
    library_prompts,
    resolve_prompts,
    side_lengths,
)
from pyterrier_selfsup.models.hub import read_saved_config
from pyterrier_selfsup.models.offsets import PassageOffsets
from pyterrier_selfsup.models.precision import linears_held_in, resolve_device
from pyterrier_selfsup.models.side_tokenizer import SideTokenizer
from pyterrier_selfsup.models.trainable import TrainableModel
from pyterrier_selfsup.progress import progress

logger = logging.getLogger(__name__)

# what the package saves beside the sentence-transformers model: its name and temperature
DUAL_ENCODER_CONFIG_FILE = 'dual_encoder.json'
# texts an inference batch holds at full length, by device type (see DualEncoder)
INFERENCE_BATCH = {'cpu': 32, 'cuda': 256}


class DualEncoder(SideTokenizer, Backends, BiEncoder, TrainableModel):
    """A dense retriever with a trainable shared encoder and query/passage projections.

    Build one with :meth:`from_pretrained` (any Hugging Face encoder, a
    sentence-transformers model, or a directory written by :meth:`save_pretrained`).
    """

    def __init__(self, model: DualEncoderModel, tokenizer, *, name: str = 'dual-encoder',
                 max_length: int = 256, query_max_length: int | None = None,
                 temperature: float = 1.0, prompts: dict[str, str] | None = None,
                 batch_size: int | None = None, device: str | None = None,
                 precision: str = 'auto', backend: str = 'torch', verbose: bool = False):
        """``precision``: ``'fp32'``, ``'bf16'``, ``'fp16'`` (autocast), or ``'auto'``: bf16 where
        the hardware multiplies bf16 natively, fp32 elsewhere.

        ``backend``: what encodes without gradients: ``'torch'``; ``'openvino'`` on a CPU;
        ``'openvino-int8'``, its passage side quantised to int8; or ``'auto'``
        (:mod:`~pyterrier_selfsup.models._openvino`). Training always runs in torch.

        ``batch_size``: texts a batch when they are ``max_length`` tokens long (shorter texts run
        more to a batch, within the same tokens); None: :data:`INFERENCE_BATCH` for the device."""
        device = resolve_device(device)
        batch_size = batch_size or INFERENCE_BATCH.get(device.type, INFERENCE_BATCH['cpu'])
        super().__init__(batch_size=batch_size, text_field='text', verbose=verbose)
        self.device = device
        self.choose_backend(backend)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.name = name
        self.max_length = max_length
        self.query_max_length = query_max_length or max_length
        self.temperature = temperature
        # what each side's texts begin with (e5's 'query: ' and 'passage: ')
        self.prompts = dict(NO_PROMPTS, **(prompts or {}))
        self.precision = precision
        # learned passage-vector offsets, applied where the index is built (models/offsets.py)
        self.passage_offsets: PassageOffsets | None = None
        # (SideTokenizer's) the Rust tokenizers by max_length, and the passages' kept token ids
        self._rust_tokenizers: dict[int, tuple[Tokenizer, bool]] = {}
        self._kept_ids = None
        self._counted_into = None

    # -- construction and persistence -------------------------------------------------

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, pooling: str | None = None,
                        dim: int | None = None, normalize: bool | None = None,
                        max_length: int | None = None, query_max_length: int | None = None,
                        temperature: float | None = None,
                        prompts: dict[str, str] | None = None, **kwargs) -> 'DualEncoder':
        """Loads a model by hub name or path; arguments left as None come from the model:

        - a directory from :meth:`save_pretrained`: everything as saved;
        - a sentence-transformers model: its modules, each side's max length and prompt (its
          ``encode_query`` and ``encode_document`` reproduced), no projection unless ``dim``;
        - any other encoder: ``cls`` pooling and no normalisation (the thesis).

        ``prompts``: what each side's texts begin with, ``{'query': ..., 'passage': ...}``; a side
        left out takes the model's own, or where it declares none its model card's
        (:func:`~pyterrier_selfsup.models.dual_encoder_model.model_card_prompts`).

            DualEncoder.from_pretrained('intfloat/e5-small-v2').prompts   # 'query: ', 'passage: '
            DualEncoder.from_pretrained(MINILM, prompts={'query': 'query: '})

        ``temperature`` defaults to 0.05 for normalised embeddings and 1 for raw dot products.
        """
        saved = read_saved_config(name_or_path, DUAL_ENCODER_CONFIG_FILE)
        if saved is not None:
            if pooling is not None or dim is not None or normalize is not None:
                raise ValueError(f'{name_or_path} is a trained dual encoder: its pooling, '
                                 'projections and normalisation are its own')
            model = DualEncoderModel(str(name_or_path), device='cpu')
        else:
            model = DualEncoderModel.start(name_or_path, pooling=pooling, dim=dim,
                                           normalize=normalize)
        if temperature is None:
            temperature = (saved or {}).get('temperature', 0.05 if model.normalize else 1.0)
        # the tokenizer's limit is often a placeholder (1e30): the position table is the real one
        tokenizer = model.transformers()[0].tokenizer
        positions = getattr(model.encoder.config, 'max_position_embeddings', math.inf)
        if tokenizer.model_max_length < 1e6:  # (RoBERTa's 514 positions hold 512 tokens)
            positions = min(positions, tokenizer.model_max_length)
        if max_length is not None and max_length > positions:
            logger.warning('%s has %d positions: it reads %d tokens, not the %d asked for',
                           name_or_path, positions, positions, max_length)
            max_length = positions
        if query_max_length is not None:
            query_max_length = min(query_max_length, max_length or positions)
        declared, declared_query = side_lengths(model)
        max_length = max_length or min(declared or 512, positions)
        # queries: as given, else as the model says, within the passages' length
        query_max_length = query_max_length or min(declared_query or max_length, max_length)
        encoder = cls(model, tokenizer, name=(saved or {}).get('name', str(name_or_path)),
                      max_length=max_length, query_max_length=query_max_length,
                      temperature=temperature,
                      prompts=resolve_prompts(name_or_path, library_prompts(model), prompts,
                                              saved=saved is not None), **kwargs)
        if saved is not None:
            encoder.passage_offsets = PassageOffsets.load(name_or_path)
        return encoder

    def config(self) -> dict:
        return {'name': self.name, 'pooling': self.model.pooling, 'dim': self.model.dim,
                'normalize': self.model.normalize, 'max_length': self.max_length,
                'query_max_length': self.query_max_length, 'temperature': self.temperature,
                'tied': self.model.tied, 'prompts': self.prompts}

    def save_pretrained(self, path: str | Path) -> Path:
        """Writes the model as sentence-transformers saves it, and beside it the name, the
        temperature and any passage offsets; :meth:`from_pretrained` reads them back, and
        ``SentenceTransformer(path)`` gives the same vectors but for the offsets.

            encoder.save_pretrained('out')
            SentenceTransformer('out').encode_query(['scurvy'])   # encoder.encode_queries'
        """
        path = Path(path)
        for transformer in self.model.transformers():
            transformer.max_seq_length = transformer.document_length = self.max_length
            transformer.query_length = self.query_max_length
        self.model.prompts = {TASKS[side]: text for side, text in self.prompts.items()}
        modes = [(m, m.training) for m in self.model.modules()]
        try:
            self.model.save(str(path))
        finally:  # (the library's save leaves the model in eval mode: a trainer's goes on)
            for m, training in modes:
                m.training = training
        (path / DUAL_ENCODER_CONFIG_FILE).write_text(json.dumps(
            {'name': self.name, 'temperature': self.temperature}, indent=2))
        if self.passage_offsets is not None:
            self.passage_offsets.save(path)
        return path

    def fingerprint(self) -> str:
        """A digest of the weights and settings: equal fingerprints, equal vectors."""
        return weights_fingerprint(self.config(), self.model)

    def passage_fingerprint(self) -> str:
        """A digest of what passage vectors depend on (the key of indexes). Equal for a tied
        encoder and an untied one whose passage tower is a frozen copy of it."""
        config = {key: value for key, value in self.config().items()
                  if key not in ('query_max_length', 'tied')}
        config['prompts'] = self.prompts['passage']
        return weights_fingerprint(config, self.model.passage_state())

    # -- what a trainer needs ------------------------------------------------------

    def torch_modules(self) -> list[torch.nn.Module]:
        return [self.model]

    def load_weights(self, path: str | Path):
        saved = DualEncoder.from_pretrained(str(path), device='cpu').model
        if not saved.tied:  # a run that untied its encoder (a frozen passage tower)
            self.model.untie()
        self.model.load_state_dict(saved.state_dict())
        self.passage_offsets = PassageOffsets.load(path)

    # -- encoding ---------------------------------------------------------------------

    def encode(self, texts: list[str], side: str) -> torch.Tensor:
        """Embeddings of ``texts`` with gradients, in one batch (for training)."""
        batch = self.tokenize(texts, side)
        with self.autocast():
            emb = self.model.embed(*(to_device(batch[k], self.device)
                                     for k in ('input_ids', 'attention_mask')), side)
            return emb.float() if emb.dtype in (torch.float16, torch.bfloat16) else emb

    def encode_queries_torch(self, texts, batch_size=None) -> torch.Tensor:
        return self.encode(list(texts), 'query')

    def encode_queries(self, texts, batch_size=None) -> np.ndarray:
        return self._encode_fast(texts, 'query', batch_size or self.batch_size)

    def encode_docs(self, texts, batch_size=None) -> np.ndarray:
        return self._encode_fast(texts, 'passage', batch_size or self.batch_size)

    def _encode_fast(self, texts: Iterable[str], side: str, batch_size: int) -> np.ndarray:
        """Inference over :meth:`_batches`, each linear layer held in the compute dtype while it
        runs (:func:`linears_held_in`); the vectors come back from the device in one copy."""
        texts = clean_texts(list(texts))
        if not texts:
            return np.empty((0, self.model.out_dim), dtype=np.float32)
        batches = progress(self._batches(texts, side, batch_size),
                           total=len(texts), desc=f'encoding {side}s', unit=side,
                           count=lambda batch: len(batch[0]),
                           enabled=self.verbose and len(texts) > batch_size)
        if self._counted_into is not None and side == 'passage':  # (an index's stage)
            batches = self._counted_into.counting(batches, count=lambda batch: len(batch[0]))
        compiled = self._openvino_sides(side)
        if compiled is not None:  # (int8 calibrated on the first texts, batched alike)
            return compiled.encode(self, texts, side, batches, calibration=lambda: [
                OpenVinoSides.inputs(input_ids, mask) for _, input_ids, mask
                in self._batches(texts[:CALIBRATION_TEXTS], side, batch_size)])
        out = torch.empty((len(texts), self.model.out_dim), dtype=torch.float32,
                          device=self.device)
        with self.inference(), linears_held_in([self.model], self.compute_dtype()):
            for positions, input_ids, mask in batches:
                vectors = self.model.embed(to_device(input_ids, self.device),
                                           to_device(mask, self.device), side)
                out[to_device(torch.from_numpy(positions), self.device)] = vectors.float()
        return out.cpu().numpy()

    @contextmanager
    def counting_into(self, stage):
        """Within the block, each batch of passages encoded is counted into ``stage`` (a
        :class:`~pyterrier_selfsup.progress.Progress`) as it is done."""
        was, self._counted_into = self._counted_into, stage
        try:
            yield
        finally:
            self._counted_into = was

    # (copies and pickles leave the compiled OpenVINO sides behind: rebuilt on use)
    def __getstate__(self):
        state = dict(self.__dict__)
        state['_openvino'] = None
        state['_rust_tokenizers'] = {}
        state['_counted_into'] = None
        return state

    def __repr__(self):
        backend = f', backend={self.backend!r}' if self.backend != 'torch' else ''
        return (f'DualEncoder({self.name!r}, pooling={self.model.pooling!r}, '
                f'dim={self.model.dim}{backend})')
