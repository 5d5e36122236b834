"""The teacher: a generator's log-likelihood of a text given a passage, log p_θ(x | z).

One interface over seq2seq models (BART as in the thesis, T5) and decoder-only models
(SmolLM2-135M-Instruct, prompted with :data:`~pyterrier_selfsup.models.prompts.PASSAGE_QUESTION`,
the target following). :meth:`Generator.log_likelihoods` scores many pairs without gradients
(:mod:`~pyterrier_selfsup.models.batched_scoring`); :meth:`Generator.log_likelihood` is the
differentiable version, for training.

    gen = Generator.from_pretrained(SMOLLM2, gguf_file=SMOLLM2_GGUF)
    gen.log_likelihoods(['what causes scurvy'], ['Scurvy is caused by a lack of vitamin C.'])
    bm25 % 100 >> collection.text_loader() >> gen.scorer()      # a re-ranker
"""
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
)
from transformers.modeling_outputs import BaseModelOutput

from pyterrier_selfsup._cache import weights_fingerprint
from pyterrier_selfsup.models.batched_scoring import BatchedScoring, gather_logp
from pyterrier_selfsup.models.batching import clean_texts, pad
from pyterrier_selfsup.models.doc2query import Doc2QueryWriter
from pyterrier_selfsup.models.gguf_conversion import dequantised
from pyterrier_selfsup.models.names import (  # noqa: F401
    GENERATORS,
    MAX_PASSAGE_LENGTH,
    QWEN,
    QWEN_GGUF,
    SMOLLM2,
    SMOLLM2_GGUF,
)
from pyterrier_selfsup.models.precision import TorchModel, matrices_in_compute_dtype, resolve_device
from pyterrier_selfsup.models.prompts import (
    PASSAGE_QUESTION,
    SEQ2SEQ_PROMPT,
    cut_to_tokens,
    first_line,
)
from pyterrier_selfsup.models.writing import QueryWriter
from pyterrier_selfsup.progress import progress

if TYPE_CHECKING:
    from pyterrier_selfsup.models.reranker import ReconstructionScorer



class Generator(BatchedScoring, TorchModel):
    """log p(target | passage) under a Hugging Face generator, and text generation.

    Args:
        prompt: how a passage is shown to the model; ``{passage}`` is replaced by the passage
            (truncated to ``max_passage_length`` tokens).
        max_target_length: targets are truncated to this many tokens.
        batch_size: passages encoded per forward; each passage's targets are scored in batches
            of up to ``4 * batch_size`` (on a CPU, within ``LOGITS_BUDGET``).
        trainable: if False (the default) the weights are frozen and, where ``precision``
            resolves to bf16 or fp16, the matrices are held in that dtype.
        precision: ``auto`` (bf16 where the hardware has it), ``fp32``, ``bf16``, ``fp16``.
    """

    def __init__(self, model, tokenizer, *, name: str = 'generator', prompt: str | None = None,
                 max_passage_length: int = MAX_PASSAGE_LENGTH, max_target_length: int = 64,
                 batch_size: int = 16, trainable: bool = False, device: str | None = None,
                 precision: str = 'auto', verbose: bool = False):
        self.is_seq2seq = bool(model.config.is_encoder_decoder)
        self.prompt = prompt or (SEQ2SEQ_PROMPT if self.is_seq2seq else PASSAGE_QUESTION)
        if '{passage}' not in self.prompt:
            raise ValueError(f'prompt must contain {{passage}}: {self.prompt!r}')
        self.device = resolve_device(device)
        self.model = model.to(self.device)
        self.tokenizer = tokenizer
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.name = name
        self.max_passage_length = max_passage_length
        self.max_target_length = max_target_length
        self.batch_size = batch_size
        self.precision = precision
        self.verbose = verbose
        self.trainable = trainable
        self.model.requires_grad_(trainable)
        self.model.eval()
        self._held_in: torch.dtype | None = None
        dtype = self.compute_dtype()
        if not trainable and matrices_in_compute_dtype(self.model, dtype):
            self._held_in = dtype

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, gguf_file: str | None = None,
                        cache_dir: str | Path | None = None, **kwargs) -> 'Generator':
        """Any seq2seq or causal LM by hub name or path. A GGUF checkpoint is de-quantised once
        into ``<cache>/generators/`` and loaded from there."""
        path = name_or_path
        if gguf_file is not None:
            path = str(dequantised(name_or_path, gguf_file, cache_dir))
        config = AutoConfig.from_pretrained(path)
        model_cls = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
        name = f'{name_or_path}/{gguf_file}' if gguf_file else str(name_or_path)
        return cls(model_cls.from_pretrained(path), AutoTokenizer.from_pretrained(path),
                   name=name, **kwargs)

    def config(self) -> dict:
        return {'name': self.name, 'prompt': self.prompt,
                'max_passage_length': self.max_passage_length,
                'max_target_length': self.max_target_length}

    def fingerprint(self) -> str:
        """A digest of the settings and the weights as held: equal fingerprints give equal
        scores (the key of the teacher-score caches)."""
        return weights_fingerprint(self.config(), self.model)

    def save_pretrained(self, path: str | Path) -> Path:
        path = Path(path)
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        return path

    def torch_modules(self) -> list[torch.nn.Module]:
        return [self.model]

    # -- tokenisation -----------------------------------------------------------------

    def passage_ids(self, passages: Sequence[str]) -> list[list[int]]:
        """Token ids of the prompt around each passage, the passage cut at ``max_passage_length``
        tokens."""
        cut = cut_to_tokens(self.tokenizer, passages, self.max_passage_length)
        if not cut:
            return []
        prompts = [self.prompt.replace('{passage}', p) for p in cut]
        if self.is_seq2seq:
            return self.tokenizer(prompts)['input_ids']
        # decoder-only: the target follows, so no end-of-sequence token
        ids = self.tokenizer(prompts, add_special_tokens=False)['input_ids']
        return [self.bos_ids + x for x in ids]

    @cached_property
    def bos_ids(self) -> list[int]:
        bos = self.tokenizer.bos_token_id
        return [bos] if bos is not None and self.tokenizer('a')['input_ids'][:1] == [bos] else []

    def target_ids(self, targets: Sequence[str]) -> list[list[int]]:
        targets = clean_texts(list(targets))
        if not targets:
            return []
        if self.is_seq2seq:
            return self.tokenizer(text_target=targets, truncation=True,
                                  max_length=self.max_target_length)['input_ids']
        # a decoder-only model reads the target after the prompt, separated by a space
        sep = '' if self.prompt[-1:].isspace() else ' '
        return self.tokenizer([sep + t.strip() for t in targets], add_special_tokens=False,
                              truncation=True, max_length=self.max_target_length)['input_ids']

    def target_lengths(self, targets: Sequence[str]) -> np.ndarray:
        return np.array([len(t) for t in self.target_ids(targets)])

    def decode_logp(self, encoded: torch.Tensor, encoder_mask: torch.Tensor,
                    t_ids: list[list[int]], *, min_target_width: int = 1) -> torch.Tensor:
        """Σ log p(target) per row, decoded from given encoder outputs (seq2seq); targets padded
        to the longest, or to ``min_target_width``."""
        labels, t_mask = pad(t_ids, self.tokenizer.pad_token_id, device=self.device,
                             min_width=min_target_width)
        decoder_input = self.model.prepare_decoder_input_ids_from_labels(
            labels=labels.masked_fill(t_mask == 0, -100))
        with self.autocast():
            logits = self.model(encoder_outputs=BaseModelOutput(last_hidden_state=encoded),
                                attention_mask=encoder_mask, decoder_input_ids=decoder_input,
                                decoder_attention_mask=t_mask, use_cache=False).logits
        return gather_logp(logits, labels, t_mask)

    def log_likelihood(self, targets: Sequence[str], passages: Sequence[str]) -> torch.Tensor:
        """Σ_j log p(target_j | passage, target_<j) per pair, with gradients (to the weights if
        ``trainable``); one batch."""
        if len(targets) != len(passages):
            raise ValueError(f'{len(targets)} targets but {len(passages)} passages')
        p_ids, t_ids = self.passage_ids(passages), self.target_ids(targets)
        with self.autocast():
            if self.is_seq2seq:
                pairs = list(range(len(t_ids)))
                chunks = self._seq2seq_logp(p_ids, list(zip(pairs, t_ids)), list(zip(pairs, pairs)))
                return torch.cat([values for _, values in chunks])
            return self.sequence_logp([p + t for p, t in zip(p_ids, t_ids)], t_ids)

    def sequence_logp(self, seqs: list[list[int]], t_ids: list[list[int]], *, min_length: int = 1,
                      min_target_width: int = 1) -> torch.Tensor:
        """Σ log p(target) per row of a decoder-only model, each sequence ending with its target:
        left-padded, and only the last ``target width + 1`` positions reach the output layer.
        ``min_length``, ``min_target_width``: at least this long a padded sequence and target width
        (rows of a batch computed a few at a time, shaped as the whole batch)."""
        ids, mask = pad(seqs, self.tokenizer.pad_token_id, left=True, device=self.device,
                        min_width=min_length)
        width = max(1, min_target_width, max(len(t) for t in t_ids))
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        with self.autocast():
            logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                                use_cache=False, logits_to_keep=width + 1).logits[:, :-1]
        # right-aligned, like the sequences
        targets, t_mask = pad(t_ids, 0, left=True, device=self.device, min_width=width)
        return gather_logp(logits, targets, t_mask)

    # -- generation -------------------------------------------------------------------

    def generate(self, passages: Sequence[str], *, max_new_tokens: int = 32, **kwargs) -> list[str]:
        """Text generated from each passage's prompt by ``generate`` (greedy unless ``kwargs`` say
        otherwise, e.g. ``do_sample=True, top_p=0.92``); decoder-only output stops at the first
        line."""
        p_ids, out, pad_id = self.passage_ids(passages), [], self.tokenizer.pad_token_id
        batches = progress(range(0, len(p_ids), self.batch_size), total=len(p_ids),
                           desc='generating', unit='passage',
                           count=lambda start: len(p_ids[start:start + self.batch_size]),
                           enabled=self.verbose and len(p_ids) > self.batch_size)
        with self.inference():
            for start in batches:
                ids, mask = pad(p_ids[start:start + self.batch_size], pad_id,
                                left=not self.is_seq2seq, device=self.device)
                tokens = self.model.generate(input_ids=ids, attention_mask=mask,
                                             max_new_tokens=max_new_tokens, pad_token_id=pad_id,
                                             **kwargs)
                if not self.is_seq2seq:
                    tokens = tokens[:, ids.shape[1]:]
                out.extend(first_line(t) for t in
                           self.tokenizer.batch_decode(tokens, skip_special_tokens=True))
        return out

    def writer(self, **kwargs) -> QueryWriter | Doc2QueryWriter:
        """A writer of queries with this generator: a decoder-only model's
        :class:`~pyterrier_selfsup.models.writing.QueryWriter`, or a seq2seq doc2query model's
        :class:`~pyterrier_selfsup.models.doc2query.Doc2QueryWriter`."""
        return (Doc2QueryWriter if self.is_seq2seq else QueryWriter)(self, **kwargs)

    def scorer(self, normalise: str = 'mean', text_field: str = 'text',
               cache: str | Path | None = None) -> 'ReconstructionScorer':
        """A re-ranker by log p(query | document) under this generator
        (:class:`~pyterrier_selfsup.models.reranker.ReconstructionScorer`)."""
        from pyterrier_selfsup.models.reranker import ReconstructionScorer
        return ReconstructionScorer(self, normalise=normalise, text_field=text_field, cache=cache)

    def __repr__(self):
        return f'Generator({self.name!r})'


def load_generator(name: str = 'smollm2', **kwargs) -> Generator:
    """The pipelines' generators by name: ``smollm2`` (SmolLM2-135M-Instruct), ``qwen``
    (Qwen2.5-Coder-0.5B-Instruct), each from its GGUF (:data:`GENERATORS`), or any hub name
    or path :meth:`Generator.from_pretrained` takes."""
    if name in GENERATORS:
        repo, gguf_file = GENERATORS[name]
        return Generator.from_pretrained(repo, gguf_file=gguf_file, **kwargs)
    return Generator.from_pretrained(name, **kwargs)
