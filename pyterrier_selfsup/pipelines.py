"""Named pipelines, for the command line and the experiment harness.

A :class:`PipelineSpec` holds a factory and the settings it is called with, so that
what a results file reports as the settings is exactly what built the pipeline.
Later components add themselves with :func:`register`.
"""
import functools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Union

import pyterrier as pt

from pyterrier_selfsup.bm25 import BM25
from pyterrier_selfsup.collections import Collection
from pyterrier_selfsup.dense import MINILM, DenseRetriever
from pyterrier_selfsup.distant import DS_DEFAULTS, adapted_model_dir, adapted_retriever
from pyterrier_selfsup.generator import SMOLLM2, SMOLLM2_GGUF, Generator, score_cache_dir
from pyterrier_selfsup.reconstruction import reconstruction_model_dir, reconstruction_retriever
from pyterrier_selfsup.adjustment import adjusted_model_dir, adjusted_retriever
from pyterrier_selfsup.token_index import reatt_retriever


@dataclass(frozen=True)
class PipelineSpec:
    name: str
    description: str
    factory: Callable[..., pt.Transformer]  # factory(collection, cache_dir=, verbose=, **settings)
    settings: Dict[str, Any] = field(default_factory=dict)
    # for pipelines that train a model on first use: model_dir(collection, settings, cache_dir)
    # is where it lives (checkpoints, training_log.jsonl, training_curve.png)
    model_dir: Optional[Callable[..., Path]] = None

    def build(self, collection: Collection, *, cache_dir: Optional[Union[str, Path]] = None,
              verbose: bool = False) -> pt.Transformer:
        return self.factory(collection, cache_dir=cache_dir, verbose=verbose, **self.settings)

    @property
    def models(self) -> list:
        if 'model_name' not in self.settings:
            return []
        gguf = self.settings.get('gguf_file')
        return [f"{self.settings['model_name']}/{gguf}" if gguf else self.settings['model_name']]


PIPELINES: Dict[str, PipelineSpec] = {}


class UnknownPipelineError(ValueError):
    pass


def register(spec: PipelineSpec) -> PipelineSpec:
    PIPELINES[spec.name] = spec
    return spec


def get_pipeline(spec: str) -> PipelineSpec:
    """A registered pipeline by ``name``, or ``name:key=value,...`` to change its settings
    (``ds:negatives=bm25,epochs=2``); values take the type of the setting's default."""
    name, _, overrides = spec.partition(':')
    if name not in PIPELINES:
        raise UnknownPipelineError(f'unknown pipeline {name!r}; known: {", ".join(sorted(PIPELINES))}')
    base = PIPELINES[name]
    if not overrides:
        return base
    settings = dict(base.settings)
    for item in overrides.split(','):
        key, sep, value = item.partition('=')
        if not sep or key not in base.settings:
            raise UnknownPipelineError(f'{spec!r}: {name} has no setting {key!r}; its settings: '
                                       f'{", ".join(f"{k}={v}" for k, v in base.settings.items())}')
        settings[key] = _parse(value, base.settings[key])
    return replace(base, name=spec, settings=settings)


def _parse(value: str, default: Any) -> Any:
    if value.lower() == 'none':
        return None
    if isinstance(default, bool):
        return value.lower() in ('1', 'true', 'yes')
    for kind in ((type(default),) if default is not None else (int, float)):
        try:
            return kind(value)
        except ValueError:
            if default is not None:
                raise UnknownPipelineError(f'{value!r} is not a {kind.__name__}') from None
    return value


def reconstruction_reranker(collection: Collection, *, model_name: str, gguf_file: Optional[str], depth: int,
                            normalise: str, max_passage_length: int, precision: str,
                            cache_dir: Optional[Union[str, Path]] = None, verbose: bool = False) -> pt.Transformer:
    """BM25's top ``depth`` re-ranked by log p(query | document) under a generator; the
    generator's scores are cached on disk, so a second run costs nothing."""
    gen = Generator.from_pretrained(model_name, gguf_file=gguf_file or None, cache_dir=cache_dir,
                                    max_passage_length=max_passage_length, precision=precision, verbose=verbose)
    bm25 = BM25.from_collection(collection, num_results=depth, cache_dir=cache_dir)
    return bm25 >> collection.text_loader() >> gen.scorer(
        normalise=normalise, cache=score_cache_dir(collection.corpus_id, gen, cache_dir))


register(PipelineSpec(
    'bm25', 'BM25 over a PISA index of title + text',
    BM25.from_collection, dict(k1=0.9, b=0.4, stemmer='porter2', stops='terrier', num_results=1000)))

register(PipelineSpec(
    'minilm', 'all-MiniLM-L6-v2 zero-shot: mean pooling, L2-normalised, exact dot-product search',
    DenseRetriever.from_collection, dict(model_name=MINILM, max_length=256, batch_size=32, num_results=1000)))

register(PipelineSpec(
    'dual', 'all-MiniLM-L6-v2 zero-shot through the trainable DualEncoder (precision auto: bf16 where the '
            'hardware has it), the trainers\' starting point',
    DenseRetriever.from_dual_encoder, dict(model_name=MINILM, dim=None)))

register(PipelineSpec(
    'ds', 'all-MiniLM-L6-v2 adapted to the collection by distant supervision (BM25 top-1 positives, '
          'in-batch negatives); queries: corpus sentences/spans, SmolLM2-generated (roundtrip: BM25-checked), or a collection\'s topic texts',
    adapted_retriever, dict(DS_DEFAULTS), model_dir=adapted_model_dir))

register(PipelineSpec(
    'recon', 'BM25 top 100 re-ranked by a generator\'s query likelihood log p(query | document) '
             '(SmolLM2-135M-Instruct, prompted), the reconstruction scorer',
    reconstruction_reranker, dict(model_name=SMOLLM2, gguf_file=SMOLLM2_GGUF, depth=100, normalise='mean',
                                  max_passage_length=256, precision='auto')))

_RECONSTRUCTION = dict(start='minilm', queries='sentences', n_queries=5000, k=5, refresh_every=25, null_document=False,
                       train_passages=True,
                       epochs=1, batch_size=16, accumulation=1, lr=2e-5, generator='smollm2', max_passage_length=256,
                       seed=0)

register(PipelineSpec(
    'rumbart', 'all-MiniLM-L6-v2 (or its ds adaptation: start=ds) adapted by RUMBArt: the top k of a stale MIPS '
               'index re-scored by the encoder, loss -log sum_k p(z_k|x) p_gen(x|z_k) with SmolLM2 frozen as the '
               'teacher (its scores cached); queries: corpus sentences/spans, SmolLM2-generated (roundtrip: BM25-checked), or a collection\'s topic texts',
    functools.partial(reconstruction_retriever, method='rumbart'), dict(_RECONSTRUCTION, teacher_temperature=1.0),
    model_dir=functools.partial(reconstruction_model_dir, method='rumbart')))

register(PipelineSpec(
    'acrobart', 'all-MiniLM-L6-v2 adapted by ACROBArT: the k passages go to SmolLM2 together, beta * p(z_j|x) '
                'added to the attention logits from the target towards passage j',
    functools.partial(reconstruction_retriever, method='acrobart'), dict(_RECONSTRUCTION, beta=1.0),
    model_dir=functools.partial(reconstruction_model_dir, method='acrobart')))

# all-MiniLM-L6-v2's zero-shot retrieval head: the (layer, head, special tokens) whose r_h
# re-ranks BM25's top 100 best on beir/scifact/train (experiments/reatt_heads.py; layers
# counted from 0, as ReAtt's retrieval_layer: the attention of the second layer)
REATT_HEAD = dict(retrieval_layer=1, head=1, special_tokens=False)
# candidate_tokens=None: every document scored exactly (K' tokens per query token otherwise)
_REATT_SEARCH = dict(candidate_tokens=None, nprobe=32, num_results=1000)

register(PipelineSpec(
    'reatt', 'Retrieval as Attention, zero-shot: one attention head of all-MiniLM-L6-v2 as a late-interaction '
             'retriever (mean over query tokens of the max pre-softmax attention to document tokens) over a '
             'token-level FAISS index',
    reatt_retriever, dict(model_name=MINILM, **REATT_HEAD, **_REATT_SEARCH)))

register(PipelineSpec(
    'reatt_adjusted', 'ReAtt adapted by cross-document adjustment: KL from SmolLM2\'s judgement of each query\'s close '
                      'documents (BM25\'s, then the model\'s own each iteration) to the softmax of r over them and '
                      'the batch\'s other documents; queries: corpus sentences/spans/masked sentences, generated, or '
                      'a collection\'s topic texts',
    adjusted_retriever, dict(model_name=MINILM, **REATT_HEAD, queries='sentences', n_queries=5000, k=8, epochs=2,
                             batch_size=8, lr=2e-5, alpha=1.0, target='likelihood', teacher_temperature=1.0,
                             generator='smollm2', seed=0, **_REATT_SEARCH),
    model_dir=adjusted_model_dir))
