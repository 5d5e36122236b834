"""The thesis' dense dual encoder (§4.2.1), trainable, as a pyterrier-dr ``BiEncoder``.

One shared Hugging Face encoder (or, after :meth:`DualEncoderModel.untie`, a query tower
and a separate passage tower, as RAG fine-tunes its retriever); its pooled output
(``cls``, as in the thesis, or ``mean``, as sentence-transformers models are trained)
goes through separate linear projections ``W_Q`` and ``W_P`` to dimension ``d`` (or
none); the score is the dot product, and p(z|x) is the softmax of score / temperature
over the candidates.

Because it is a ``BiEncoder``, pyterrier-dr gives it ``FlexIndex`` indexing, FAISS
retrievers and ``.scorer()`` re-ranking; :meth:`DualEncoder.encode` keeps gradients
for training.
"""
import copy
import importlib.util
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
from transformers import AutoModel, AutoTokenizer

from pyterrier_selfsup._cache import weights_fingerprint
from pyterrier_selfsup.models._openvino import CALIBRATION_TEXTS, OpenVinoSides
from pyterrier_selfsup.models.batching import (
    budget_batches,
    clean_texts,
    pad,
    to_device,
    tokenized_in_slices,
)
from pyterrier_selfsup.models.hub import read_saved_config
from pyterrier_selfsup.models.offsets import PassageOffsets
from pyterrier_selfsup.models.precision import linears_held_in, resolve_device
from pyterrier_selfsup.models.side_tokenizer import SideTokenizer
from pyterrier_selfsup.models.st_format import (
    PASSAGE_ENCODER_DIR,
    export_sentence_transformers,
    is_sentence_transformer,
    model_card_prompts,
    read_sentence_transformer,
)
from pyterrier_selfsup.models.trainable import TrainableModel
from pyterrier_selfsup.progress import progress

logger = logging.getLogger(__name__)

DUAL_ENCODER_CONFIG_FILE = 'dual_encoder.json'
BACKENDS = ('auto', 'torch', 'openvino', 'openvino-int8')
# passages: from here on, an index that backend='auto' encodes goes through OpenVINO. Compiling
# the model takes about 3 s; OpenVINO fp32 saves 1.13x (an AMX CPU) to 2.35x (an AMD EPYC) of
# torch's 36 passages/s at 256 tokens (encoding_benchmark*.md): it pays from about 1,000 passages
# on the slower gain
AUTO_OPENVINO_FROM = 1000
PROJECTIONS_FILE = 'projections.pt'
POOLINGS = ('cls', 'mean', 'last')
NO_PROMPTS = {'query': '', 'passage': ''}
SIDES = {'query': 'queries', 'passage': 'passages'}
# texts an inference batch holds at full length, by device type (see DualEncoder)
INFERENCE_BATCH = {'cpu': 32, 'cuda': 256}


def openvino_installed() -> bool:
    """Whether OpenVINO can be imported (the ``cpu`` extra installs it)."""
    return importlib.util.find_spec('openvino') is not None


def reads_as_made(name_or_path: str) -> bool:
    """Whether :meth:`DualEncoder.from_pretrained` reads ``name_or_path`` as it was made to be
    read: a directory the package saved, or a sentence-transformers model. Any other encoder it
    reads as the thesis does (``cls`` pooling, no normalisation)."""
    return (read_saved_config(name_or_path, DUAL_ENCODER_CONFIG_FILE) is not None
            or is_sentence_transformer(name_or_path))


def resolve_prompts(name: str, declared: dict[str, str] | None,
                    given: dict[str, str] | None = None, *, saved: bool = False
                    ) -> dict[str, str]:
    """Each side's prompt for the model ``name``: a side in ``given`` (the user's) wins; the
    others are ``declared`` (the model's own). A model of the package's own (``saved``) keeps
    what it was trained with. Any other that declares no prompt on either side takes its
    family's model card's (:func:`~pyterrier_selfsup.models.st_format.model_card_prompts`), and
    a log line says so.

        resolve_prompts('intfloat/e5-small-v2', None)   # {'query': 'query: ', ...}
    """
    given = dict(given or {})
    if 'document' in given:  # (sentence-transformers' name for the passage side)
        given.setdefault('passage', given.pop('document'))
    unknown = set(given) - set(NO_PROMPTS)
    if unknown:
        raise ValueError(f'prompts are given for the sides query and passage (or document), not '
                         f'{", ".join(sorted(unknown))}')
    own = dict(NO_PROMPTS, **(declared or {}))
    card = None if saved or any(own.values()) else model_card_prompts(name)
    if card is not None:
        left = {side: card[side] for side in NO_PROMPTS if side not in given}
        if left:
            logger.info('%s declares no prompts: its model card\'s apply (%s); give prompts '
                        '(query_prompt=, passage_prompt=) to change them', name,
                        ', '.join(f'{SIDES[side]} begin with {text!r}' if text
                                  else f'{SIDES[side]} with none' for side, text in left.items()))
        own = card
    return dict(own, **given)


class DualEncoderModel(torch.nn.Module):
    """The trainable part: encoder, pooling, the two projections, optional normalisation."""

    def __init__(self, encoder: torch.nn.Module, pooling: str = 'cls', dim: int | None = None,
                 normalize: bool = False):
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f'pooling must be one of {POOLINGS}, not {pooling!r}')
        self.encoder = encoder
        # None: ``encoder`` serves both sides
        self.passage_encoder: torch.nn.Module | None = None
        self.pooling = pooling
        self.normalize = normalize
        self.dim = dim
        hidden = encoder.config.hidden_size
        if dim is None:
            self.query_proj = self.passage_proj = None
        else:
            self.query_proj = torch.nn.Linear(hidden, dim, bias=False)
            self.passage_proj = torch.nn.Linear(hidden, dim, bias=False)
            # Both start as the same (semi-)orthogonal map, so that the start model ranks
            # as its pooled encoder does: for dim >= hidden it preserves dot products
            # exactly, below that it keeps the top of a random rotation.
            torch.nn.init.orthogonal_(self.query_proj.weight)
            with torch.no_grad():
                self.passage_proj.weight.copy_(self.query_proj.weight)

    @property
    def out_dim(self) -> int:
        return self.dim or self.encoder.config.hidden_size

    @property
    def tied(self) -> bool:
        return self.passage_encoder is None

    def untie(self) -> 'DualEncoderModel':
        """Gives passages their own copy of the encoder: ``encoder`` (and its parameters,
        wherever an optimiser holds them) goes on encoding queries only."""
        if self.tied:
            self.passage_encoder = copy.deepcopy(self.encoder)
        return self

    def freeze_passage_tower(self) -> 'DualEncoderModel':
        """Unties the encoder and freezes the passages' copy (RAG): from here on only queries
        are encoded with gradients, and passage vectors stay those of the model as it is now."""
        self.untie()
        for p in self.passage_parameters():
            p.requires_grad_(False)
        return self

    def passage_parameters(self) -> list[torch.nn.Parameter]:
        """What only passages go through (empty while tied): the passage tower and projection."""
        if self.tied:
            return []
        return list(self.passage_encoder.parameters()) + (
            [self.passage_proj.weight] if self.passage_proj is not None else [])

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                side: str) -> torch.Tensor:
        encoder = self.passage_encoder if side == 'passage' and not self.tied else self.encoder
        hidden = encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.pool(hidden, attention_mask, side)

    def pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor, side: str) -> torch.Tensor:
        """A side's vectors from its last hidden states: pooling, projection, normalisation."""
        if self.pooling == 'cls':
            pooled = hidden[:, 0]
        elif self.pooling == 'last':  # each row's last token, on whichever side it is padded
            last = attention_mask.shape[1] - 1 - attention_mask.flip(1).argmax(1)
            pooled = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        else:  # as sentence-transformers computes it
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        proj = self.query_proj if side == 'query' else self.passage_proj
        if proj is not None:
            pooled = proj(pooled)
        if self.normalize:
            pooled = torch.nn.functional.normalize(pooled, dim=-1)
        return pooled


class DualEncoder(SideTokenizer, BiEncoder, TrainableModel):
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
        the hardware multiplies bf16 natively (CUDA, or a CPU with AVX512-BF16/AMX; fp16 on
        older GPUs), fp32 elsewhere.

        ``backend``: what encodes without gradients (indexing, queries at search time):
        ``'torch'``, or ``'openvino'`` on a CPU (:mod:`~pyterrier_selfsup.models._openvino`:
        the same model compiled by OpenVINO, at the same precision; ``pip install openvino``),
        or ``'openvino-int8'``: the passage side (indexing) quantised to int8 as well,
        calibrated on the first texts it encodes (faster where the CPU has VNNI or AMX, not
        on plain AVX2; its vectors differ), or ``'auto'``: openvino for the passages where the
        model runs on a CPU in fp32 and OpenVINO is installed (the same vectors as torch's,
        sooner), torch for queries and elsewhere. Training always runs in torch; the trainers'
        encoders keep ``'torch'``.

        ``batch_size``: texts a batch when they are ``max_length`` tokens long; shorter texts
        run more to a batch, within the same number of tokens. None: 32 on a CPU, 256 on a
        GPU, where small batches leave the device waiting for the host."""
        device = resolve_device(device)
        batch_size = batch_size or INFERENCE_BATCH.get(device.type, INFERENCE_BATCH['cpu'])
        super().__init__(batch_size=batch_size, text_field='text', verbose=verbose)
        if backend not in BACKENDS:
            raise ValueError(f'backend must be one of {BACKENDS}, not {backend!r}')
        self.device = device
        if backend.startswith('openvino') and self.device.type != 'cpu':
            raise ValueError(f'the openvino backend runs on the CPU, not on {self.device}')
        self._backend = backend
        self._openvino: OpenVinoSides | None = None  # (compiled on first use)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.name = name
        self.max_length = max_length
        self.query_max_length = query_max_length or max_length
        self.temperature = temperature
        # what each side's texts begin with (a sentence-transformers model's query and document
        # prompts: e5's 'query: ' and 'passage: ', bge's query instruction)
        self.prompts = dict(NO_PROMPTS, **(prompts or {}))
        self.precision = precision
        # learned offsets of passage vectors (a query-tower-only training's moving passage side):
        # applied where the index is built, never by encode_docs (see models/offsets.py)
        self.passage_offsets: PassageOffsets | None = None
        # (SideTokenizer's) by max_length: the Rust tokenizer, and whether a long text may be cut;
        # and the passages' kept token ids (see keep_passage_token_ids)
        self._rust_tokenizers: dict[int, tuple[Tokenizer, bool]] = {}
        self._kept_ids = None
        # the stage that counts the passages encoded, batch by batch (see counting_into)
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
        - a sentence-transformers model, loaded by sentence-transformers: its pooling (``cls``,
          ``mean`` or ``last``), normalisation, each side's max length and each side's prompt
          (:func:`~pyterrier_selfsup.models.st_format.read_sentence_transformer`), so that
          its ``encode_query`` and ``encode_document`` are reproduced; no projection unless
          ``dim`` is given;
        - any other encoder: ``cls`` pooling and no normalisation (the thesis).

        ``prompts``: what each side's texts begin with, ``{'query': ..., 'passage': ...}``
        (either side alone; ``'document'`` names the passage side too, as in
        sentence-transformers). A side given wins; a side left out takes the model's own
        prompt. Where the model declares none on either side, the prompts its family's model
        card prescribes apply, and a log line says so
        (:func:`~pyterrier_selfsup.models.st_format.model_card_prompts`: e5's ``query: `` and
        ``passage: ``, bge-*-en-v1.5's query instruction).

            DualEncoder.from_pretrained('intfloat/e5-small-v2').prompts   # 'query: ', 'passage: '
            DualEncoder.from_pretrained(MINILM, prompts={'query': 'query: '})

        ``temperature`` defaults to 0.05 for normalised embeddings (cosines need sharpening
        to make a useful softmax; sentence-transformers' in-batch loss uses the same) and
        1 for raw dot products (the thesis).
        """
        saved = read_saved_config(name_or_path, DUAL_ENCODER_CONFIG_FILE)
        st = ({} if saved or not is_sentence_transformer(name_or_path)
              else read_sentence_transformer(name_or_path))
        base = saved or st or {'pooling': 'cls', 'normalize': False, 'max_length': 512}
        pooling = pooling or base['pooling']
        normalize = base['normalize'] if normalize is None else normalize
        if dim is None and saved:
            dim = saved['dim']
        if st:
            encoder, tokenizer = st['encoder'], st['tokenizer']
        else:
            encoder = AutoModel.from_pretrained(name_or_path)
            tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        model = DualEncoderModel(encoder, pooling=pooling, dim=dim, normalize=normalize)
        if saved and not saved.get('tied', True):
            model.passage_encoder = AutoModel.from_pretrained(
                str(Path(name_or_path) / PASSAGE_ENCODER_DIR))
        if saved and saved['dim'] is not None:
            model.load_state_dict(torch.load(Path(name_or_path) / PROJECTIONS_FILE,
                                             map_location='cpu'), strict=False)
        if temperature is None:
            temperature = base.get('temperature', 0.05 if normalize else 1.0)
        # the tokenizer's limit is often a placeholder (1e30): the position table is the real one
        positions = getattr(encoder.config, 'max_position_embeddings', math.inf)
        if tokenizer.model_max_length < 1e6:  # (RoBERTa's 514 positions hold 512 tokens)
            positions = min(positions, tokenizer.model_max_length)
        if max_length is not None and max_length > positions:
            logger.warning('%s has %d positions: it reads %d tokens, not the %d asked for',
                           name_or_path, positions, positions, max_length)
            max_length = positions
        if query_max_length is not None:
            query_max_length = min(query_max_length, max_length or positions)
        max_length = max_length or min(base['max_length'], positions)
        # queries: as given, else as the model says, within the passages' length
        query_max_length = query_max_length or min(base.get('query_max_length') or max_length,
                                                   max_length)
        encoder = cls(model, tokenizer,
                      name=saved.get('name', str(name_or_path)) if saved else str(name_or_path),
                      max_length=max_length, query_max_length=query_max_length,
                      temperature=temperature,
                      prompts=resolve_prompts(name_or_path, base.get('prompts'), prompts,
                                              saved=bool(saved)), **kwargs)
        if saved:
            encoder.passage_offsets = PassageOffsets.load(name_or_path)
        return encoder

    def config(self) -> dict:
        return {'name': self.name, 'pooling': self.model.pooling, 'dim': self.model.dim,
                'normalize': self.model.normalize, 'max_length': self.max_length,
                'query_max_length': self.query_max_length, 'temperature': self.temperature,
                'tied': self.model.tied, 'prompts': self.prompts}

    def save_pretrained(self, path: str | Path) -> Path:
        """Writes encoder, tokenizer, projections and settings; :meth:`from_pretrained` reads them
        back."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.encoder.save_pretrained(path)
        if not self.model.tied:
            self.model.passage_encoder.save_pretrained(path / PASSAGE_ENCODER_DIR)
        self.tokenizer.save_pretrained(path)
        if self.model.dim is not None:
            torch.save({k: v for k, v in self.model.state_dict().items()
                        if k.endswith('_proj.weight')},
                       path / PROJECTIONS_FILE)
        (path / DUAL_ENCODER_CONFIG_FILE).write_text(json.dumps(self.config(), indent=2))
        if self.passage_offsets is not None:
            self.passage_offsets.save(path)
        return path

    def save_sentence_transformers(self, path: str | Path) -> Path:
        """Writes the sentence-transformers layout of this model into ``path`` (where
        :meth:`save_pretrained` has written its encoder), so that ``SentenceTransformer(path)``
        gives the same embeddings: its pooling, projections and normalisation. A tied model
        without projections is one stack of modules; an untied model (a query tower trained
        against a frozen passage tower), or one with projections (``dim``: a query and a passage
        matrix), becomes a ``Router`` whose ``encode_query`` and ``encode_document`` take each
        side's modules, each projection a ``Dense`` without bias or activation. Passage offsets
        (:mod:`~pyterrier_selfsup.models.offsets`) have no counterpart there:
        sentence-transformers encodes passages as the start encoder did.

            encoder.save_pretrained('out'); encoder.save_sentence_transformers('out')
            SentenceTransformer('out').encode_query(['scurvy'])   # encoder.encode_queries'
        """
        return export_sentence_transformers(self, path)

    def fingerprint(self) -> str:
        """A digest of the weights and settings: two encoders with equal fingerprints
        produce equal vectors (used to key cached indexes)."""
        return weights_fingerprint(self.config(), self.model)

    def passage_fingerprint(self) -> str:
        """A digest of what passage vectors depend on (keys indexes): the fingerprint of
        the tied encoder that encodes passages as this one does. Equal for a tied encoder
        and an untied one whose passage tower is a frozen copy of it, so training only the
        query tower keeps the start's index."""
        if self.model.tied:
            return self.fingerprint()
        config = dict(self.config(), tied=True)
        state = {f'encoder.{k}': v for k, v in self.model.passage_encoder.state_dict().items()}
        if self.model.dim is not None:
            state['query_proj.weight'] = state['passage_proj.weight'] = (
                self.model.passage_proj.weight)
        return weights_fingerprint(config, state)

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
            emb = self.model(*(to_device(batch[k], self.device)
                               for k in ('input_ids', 'attention_mask')), side)
            return emb.float() if emb.dtype in (torch.float16, torch.bfloat16) else emb

    def encode_queries_torch(self, texts, batch_size=None) -> torch.Tensor:
        return self.encode(list(texts), 'query')

    def encode_queries(self, texts, batch_size=None) -> np.ndarray:
        return self._encode_fast(texts, 'query', batch_size or self.batch_size)

    def encode_docs(self, texts, batch_size=None) -> np.ndarray:
        return self._encode_fast(texts, 'passage', batch_size or self.batch_size)

    def _encode_fast(self, texts: Iterable[str], side: str, batch_size: int) -> np.ndarray:
        """Inference, as :meth:`_batches` cuts it: inference mode, and each linear layer held
        in the compute dtype while it runs (:func:`linears_held_in`: what autocast would
        compute, without casting the weights at every forward). The vectors stay on the
        device until the last batch and come back in one copy. Memory: the token ids of
        ``texts`` and the output; callers stream large corpora in chunks (see
        :func:`pyterrier_selfsup.retrieval.dense.flex_index`)."""
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
                vectors = self.model(to_device(input_ids, self.device),
                                     to_device(mask, self.device), side)
                out[to_device(torch.from_numpy(positions), self.device)] = vectors.float()
        return out.cpu().numpy()

    def _batches(self, texts: list[str], side: str, batch_size: int):
        """(positions in ``texts``, input ids, attention mask) for each inference batch.

        Texts go longest first by characters, in slices tokenized on a thread while the device
        encodes the slice before (:func:`tokenized_in_slices`). Each slice is sorted by its
        token counts and cut into batches of at most ``batch_size`` times the side's
        ``max_length`` padded tokens (:func:`budget_batches`), so that short texts (queries)
        run many to a batch and each batch pads only to its own longest text."""
        budget = batch_size * self.side_max_length(side)
        order = np.argsort([-len(t) for t in texts], kind='stable')
        left = self.tokenizer.padding_side == 'left'
        for positions, ids in tokenized_in_slices(lambda chunk: self.token_ids(chunk, side),
                                                  texts, order):
            lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
            by_length = np.argsort(-lengths, kind='stable')
            for batch in budget_batches(lengths[by_length], budget):
                rows = by_length[batch]
                input_ids, mask = pad([ids[r] for r in rows], self.tokenizer.pad_token_id,
                                      left=left)
                yield positions[rows], input_ids, mask

    @property
    def backend(self) -> str:
        """What encodes passages without gradients, resolved: ``'auto'`` is ``'openvino'`` on
        a CPU in fp32 where OpenVINO is installed, ``'torch'`` elsewhere. (Under ``'auto'``,
        queries and an index of fewer than :data:`AUTO_OPENVINO_FROM` passages stay in torch:
        :meth:`index_backend`.)"""
        if self._backend != 'auto':
            return self._backend
        same_vectors = self.device.type == 'cpu' and self.compute_dtype() == torch.float32
        return 'openvino' if same_vectors and openvino_installed() else 'torch'

    def index_backend(self, passages: int) -> str:
        """The backend that encodes an index of ``passages`` passages: as :attr:`backend`, but
        ``'auto'`` keeps torch below :data:`AUTO_OPENVINO_FROM` passages, where compiling the
        model takes longer than OpenVINO saves."""
        if self._backend == 'auto' and passages < AUTO_OPENVINO_FROM:
            return 'torch'
        return self.backend

    @contextmanager
    def counting_into(self, stage):
        """Within the block, each batch of passages encoded is counted into ``stage`` (a
        :class:`~pyterrier_selfsup.progress.Progress`) as it is done: an index's progress,
        where pyterrier-dr hands the encoder thousands of passages at a time."""
        was, self._counted_into = self._counted_into, stage
        try:
            yield
        finally:
            self._counted_into = was

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
        """The compiled sides of the resolved backend for ``side`` (None for torch), made on
        first use. ``'auto'`` encodes queries in torch: they are few and short, and compiling
        their side takes seconds that a search run never wins back."""
        backend = self.backend
        if backend == 'torch' or (self._backend == 'auto' and side == 'query'):
            return None
        int8 = backend == 'openvino-int8'
        if self._openvino is None or self._openvino.int8 != int8:
            self._openvino = OpenVinoSides(int8=int8)
        return self._openvino

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
