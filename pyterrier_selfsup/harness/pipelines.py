"""Named pipelines, for the command line and the experiment harness.

A :class:`PipelineSpec` holds a factory and the settings it is called with, so that what a
results file reports as the settings is what built the pipeline. A pipeline that trains a
model names its ``method`` (:mod:`~pyterrier_selfsup.harness.trained` trains it once).
"""
import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
import pyterrier as pt

from pyterrier_selfsup.context import SILENT, RunContext
from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.harness import trained
from pyterrier_selfsup.harness.errors import UnknownPipelineError
from pyterrier_selfsup.harness.methods import rerank_depth, teacher_pipeline
from pyterrier_selfsup.harness.trained import DEFAULTS
from pyterrier_selfsup.models.generator import SMOLLM2, SMOLLM2_GGUF, Generator
from pyterrier_selfsup.models.reatt import ReAtt
from pyterrier_selfsup.models.score_cache import score_cache_dir
from pyterrier_selfsup.retrieval.bm25 import BM25
from pyterrier_selfsup.retrieval.dense import MINILM, DenseRetriever
from pyterrier_selfsup.retrieval.fusion import Fusion
from pyterrier_selfsup.retrieval.token_index import reatt_index, reatt_retriever
from pyterrier_selfsup.training.settings import (
    GPL,
    REATT_HEAD,
    SETTINGS,
    parse_value,
    prompts_of,
)
from pyterrier_selfsup.training.teacher_parts import parse_teacher


@dataclass(frozen=True)
class PipelineSpec:
    name: str
    description: str
    factory: Callable[..., pt.Transformer]  # factory(collection, run, **settings)
    settings: dict[str, Any] = field(default_factory=dict)
    # for a pipeline that trains a model on first use: its training method (harness.methods.METHODS)
    method: str | None = None

    def build(self, collection: Collection, run: RunContext = SILENT) -> pt.Transformer:
        """The pipeline over ``collection``, its indexes and models in ``run``'s cache
        (training its model first if it is not trained yet)."""
        return self.factory(collection, run, **self.settings)

    def train(self, collection: Collection, run: RunContext = SILENT) -> Path:
        """Trains this pipeline's model on ``collection`` if it is not yet (resuming an
        interrupted run), without evaluating it; returns the model's directory."""
        if self.method is None:
            raise UnknownPipelineError(f'{self.name} trains nothing; pipelines that do: '
                                       f'{", ".join(n for n, s in PIPELINES.items() if s.method)}')
        # (queries=crossfold: the last fold's directory; model_dirs lists them all)
        return [trained.train(collection, self.method, settings, run)
                for settings in trained.each_model(self.settings)][-1]

    def model_dir(self, collection: Collection, run: RunContext = SILENT) -> Path | None:
        """Where the trained model lives; with ``queries=crossfold``, fold 0's
        (:meth:`model_dirs`: every fold's)."""
        return None if self.method is None else self.model_dirs(collection, run)[0]

    def model_dirs(self, collection: Collection, run: RunContext = SILENT) -> list:
        """Where each of its trained models lives: one, or one a fold (``queries=crossfold``)."""
        if self.method is None:
            return []
        return [trained.model_dir(collection, self.method, settings, run)
                for settings in trained.each_model(self.settings)]

    @property
    def models(self) -> list:
        if 'model_name' not in self.settings:
            return []
        gguf = self.settings.get('gguf_file')
        return [f"{self.settings['model_name']}/{gguf}" if gguf else self.settings['model_name']]


PIPELINES: dict[str, PipelineSpec] = {}
# a training method's name, where its pipeline's name is another
METHOD_NAMES = {'ds': 'distant_supervision'}


def register(spec: PipelineSpec) -> PipelineSpec:
    PIPELINES[spec.name] = spec
    return spec


def get_pipeline(spec: str) -> PipelineSpec:
    """A registered pipeline by ``name``, or ``name:key=value,...`` to change its settings
    (``ds:negatives=bm25,epochs=2``), each typed and checked by the method's settings class or
    by its default."""
    name, _, overrides = spec.partition(':')
    if METHOD_NAMES.get(name, name) not in PIPELINES:
        raise UnknownPipelineError(f'unknown pipeline {name!r}; known: '
                                   f'{", ".join(sorted(PIPELINES))}')
    base = PIPELINES[METHOD_NAMES.get(name, name)]
    if not overrides:
        return base if name == base.name else replace(base, name=name)
    settings = dict(base.settings)
    method = SETTINGS.get(base.method)
    changes = {}  # a method's settings, checked together
    try:
        for item in overrides.split(','):
            key, sep, value = item.partition('=')
            if sep and key in base.settings and (method is None or key not in method.names()):
                settings[key] = _parse(value, base.settings[key])
            elif sep and method is not None:
                changes[key] = method.parse(key, value)
            else:
                raise ValueError(f'{name} has no setting {key!r}; its settings: '
                                 f'{", ".join(f"{k}={v}" for k, v in base.settings.items())}')
        if method is not None:  # (refused here, not when the model first trains)
            settings.update(method.check_names(changes))
            method.of(**{k: v for k, v in settings.items() if k in method.names()})
    except ValueError as error:
        raise UnknownPipelineError(f'{spec!r}: {error}') from None
    return replace(base, name=spec, settings=settings)


def _parse(value: str, default: Any) -> Any:
    """``value`` as a setting that is not a training method's, typed as its ``default`` is."""
    kind = int | float | str if default is None else type(default)
    return parse_value(value, kind | None)


def with_prompts(factory: Callable[..., pt.Transformer]) -> Callable[..., pt.Transformer]:
    """A pipeline factory whose constructor takes ``prompts=``, called with the settings
    ``query_prompt`` and ``passage_prompt``."""
    @functools.wraps(factory)
    def build(collection: Collection, run: RunContext = SILENT, *,
              query_prompt: str | None = None, passage_prompt: str | None = None,
              **settings) -> pt.Transformer:
        return factory(collection, run, prompts=prompts_of(query_prompt, passage_prompt),
                       **settings)
    return build


def building_block(factory: Callable[..., pt.Transformer]) -> Callable[..., pt.Transformer]:
    """``factory`` (a library constructor that takes ``cache_dir=`` and ``verbose=``) as a
    pipeline factory, ``factory(collection, run, **settings)``."""
    @functools.wraps(factory)
    def build(collection: Collection, run: RunContext = SILENT, **settings) -> pt.Transformer:
        return factory(collection, cache_dir=run.cache_dir, verbose=run.verbose, **settings)
    return build


def reconstruction_reranker(collection: Collection, run: RunContext = SILENT, *, model_name: str,
                            gguf_file: str | None, depth: int, normalise: str,
                            max_passage_length: int, precision: str) -> pt.Transformer:
    """BM25's top ``depth`` re-ranked by log p(query | document) under a generator, its
    scores cached on disk."""
    gen = Generator.from_pretrained(model_name, gguf_file=gguf_file or None,
                                    cache_dir=run.cache_dir,
                                    max_passage_length=max_passage_length,
                                    precision=precision, verbose=run.verbose)
    bm25 = BM25.from_collection(collection, num_results=depth, cache_dir=run.cache_dir)
    return bm25 >> collection.text_loader() >> gen.scorer(
        normalise=normalise, cache=score_cache_dir(collection, gen, run.cache_dir))


def trained_dense_retriever(collection: Collection, run: RunContext = SILENT, *, method: str,
                            num_results: int = 1000, search: str = 'auto',
                            backend: str = 'auto', **settings) -> pt.Transformer:
    """The dual encoder that ``method`` trained with ``settings`` (on first use), over its
    index (``search`` and ``backend`` leave the model as it is). With ``queries=crossfold``: one
    model a fold of ``collection``'s topics (:class:`CrossFold`)."""
    folds = trained.each_model(settings)
    if len(folds) > 1:
        return CrossFold(collection, [trained_dense_retriever(
            collection, run, method=method, num_results=num_results, search=search,
            backend=backend, **fold) for fold in folds])
    path = trained.train(collection, method, settings, run)
    return DenseRetriever.from_dual_encoder(
        collection, str(path), num_results=num_results, search=search,
        precision=settings.get('precision', 'auto'), backend=backend,
        cache_dir=run.cache_dir, verbose=run.verbose)


class CrossFold(pt.Transformer):
    """Cross-validation over a collection's topics without labels: each query goes to the
    retriever of its fold (:func:`~pyterrier_selfsup.data.queries.logs.folds`), trained on the
    other folds' query texts. A query that is not one of the collection's topics is refused."""

    def __init__(self, collection: Collection, retrievers: list):
        from pyterrier_selfsup.data.queries.logs import folds
        self.collection = collection
        self.retrievers = retrievers
        self.fold = folds(collection.topics()['qid'], len(retrievers))

    def transform(self, topics: pd.DataFrame) -> pd.DataFrame:
        unknown = sorted(set(topics['qid'].astype(str)) - set(self.fold))
        if unknown:
            raise ValueError(f'{len(unknown)} queries (e.g. {unknown[0]!r}) are not topics of '
                             f'{self.collection.name}: a cross-fold model answers only the '
                             f'topics it was validated on')
        which = topics['qid'].astype(str).map(self.fold)
        parts = [retriever(topics[which == fold]) for fold, retriever in enumerate(self.retrievers)
                 if (which == fold).any()]
        if not parts:
            return self.retrievers[0](topics)
        return pd.concat(parts, ignore_index=True)

    def fuse_rank_cutoff(self, k: int):
        cut = [r.fuse_rank_cutoff(k) if hasattr(r, 'fuse_rank_cutoff') else None
               for r in self.retrievers]
        return None if any(c is None for c in cut) else CrossFold(self.collection, cut)

    def __repr__(self):
        return f'CrossFold({self.collection.name!r}, {self.retrievers!r})'


def adjusted_reatt_retriever(collection: Collection, run: RunContext = SILENT, *,
                             candidate_tokens: int | None = 128, nprobe: int = 32,
                             rescore: int | None = None, num_results: int = 1000, **settings):
    """The ReAtt retriever that cross-document adjustment trained with ``settings`` (on first
    use), searched through its token index."""
    path = trained.train(collection, 'reatt', settings, run)
    reatt = ReAtt.from_pretrained(str(path), verbose=run.verbose)
    return reatt_index(collection, reatt, cache_dir=run.cache_dir, verbose=run.verbose).retriever(
        reatt, num_results=num_results, candidate_tokens=candidate_tokens,
        nprobe=nprobe, rescore=rescore)


# how a trained dual encoder searches and encodes (settings that leave the model as it is)
_INFERENCE = dict(search='auto', backend='auto')

register(PipelineSpec(
    'bm25',
    'BM25 over a PISA index of title + text',
    building_block(BM25.from_collection),
    dict(k1=0.9, b=0.4, stemmer='porter2', stops='terrier', num_results=1000)))

register(PipelineSpec(
    'minilm',
    'all-MiniLM-L6-v2 zero-shot: mean pooling, L2-normalised, dot-product search (search=auto: '
    'exact, FAISS IVF on corpora of a million passages or more; or exact, ivf, hnsw), encoded in '
    'fp32 (backend=auto: through OpenVINO on a CPU where it is installed, the same vectors; or '
    'torch)',
    with_prompts(building_block(DenseRetriever.from_collection)),
    dict(model_name=MINILM, query_prompt=None, passage_prompt=None, max_length=256,
         batch_size=32, num_results=1000, search='auto', backend='auto')))

register(PipelineSpec(
    'dual_encoder',
    'all-MiniLM-L6-v2 zero-shot through the trainable DualEncoder (precision auto: bf16 where the '
    'hardware has it; backend=auto: OpenVINO on a CPU in fp32 where it is installed, torch '
    'elsewhere; or torch, openvino, openvino-int8), the trainers\' starting point',
    with_prompts(building_block(DenseRetriever.from_dual_encoder)),
    dict(model_name=MINILM, query_prompt=None, passage_prompt=None, dim=None, search='auto',
         precision='auto', backend='auto')))

register(PipelineSpec(
    'distant_supervision',
    'all-MiniLM-L6-v2 adapted to the collection by distant supervision (BM25 top-1 positives, '
    'in-batch negatives); queries: corpus sentences/spans, SmolLM2-generated (roundtrip: '
    'BM25-checked), or a collection\'s topic texts',
    functools.partial(trained_dense_retriever, method='ds'),
    dict(DEFAULTS['ds'], **_INFERENCE), method='ds'))

register(PipelineSpec(
    'query_likelihood',
    'BM25 top 100 re-ranked by a generator\'s query likelihood log p(query | document) '
    '(SmolLM2-135M-Instruct, prompted), the reconstruction scorer',
    reconstruction_reranker,
    dict(model_name=SMOLLM2, gguf_file=SMOLLM2_GGUF, depth=100, normalise='mean',
         max_passage_length=256, precision='auto')))

register(PipelineSpec(
    'rumbart',
    'all-MiniLM-L6-v2 (or its distant supervision adaptation: start=ds) adapted by RUMBArt: the '
    'top k of a stale MIPS index re-scored by the encoder, loss -log sum_k p(z_k|x) p_gen(x|z_k) '
    'with SmolLM2 frozen as the teacher (its scores cached); queries: corpus sentences/spans, '
    'SmolLM2-generated (roundtrip: BM25-checked), or a collection\'s topic texts',
    functools.partial(trained_dense_retriever, method='rumbart'),
    dict(DEFAULTS['rumbart'], **_INFERENCE), method='rumbart'))

register(PipelineSpec(
    'acrobart',
    'all-MiniLM-L6-v2 adapted by ACROBArT: the k passages go to SmolLM2 together, beta * p(z_j|x) '
    'added to the attention logits from the target towards passage j',
    functools.partial(trained_dense_retriever, method='acrobart'),
    dict(DEFAULTS['acrobart'], **_INFERENCE), method='acrobart'))

def fused_teacher(collection: Collection, run: RunContext = SILENT, *, teacher: str,
                  fusion_depth: int, model_name: str = MINILM, generator: str = 'smollm2',
                  cross_encoder: str | None = None, depth: int = 30, num_results: int = 1000,
                  precision: str = 'fp32', query_prompt: str | None = None,
                  passage_prompt: str | None = None):
    """The distillation teacher as a retriever, with the zero-shot ``model_name`` as its
    student encoding in ``precision`` (distill's, so that it reads the index ``minilm`` and
    ``distill`` read). A cross-encoder part scores the fused top ``depth``, the candidates a
    student learns from."""
    student = (DenseRetriever.from_dual_encoder(collection, model_name, precision=precision,
                                                prompts=prompts_of(query_prompt, passage_prompt),
                                                cache_dir=run.cache_dir, verbose=run.verbose)
               if 'student' in parse_teacher(teacher) else None)
    return teacher_pipeline(collection, teacher, student=student, depth=fusion_depth,
                            rerank_depth=rerank_depth(teacher, depth), generator=generator,
                            cross_encoder=cross_encoder, run=run.replace(verbose=False)
                            ) % num_results


def hybrid_retriever(collection: Collection, run: RunContext = SILENT, *, bm25_weight: float = 1.0,
                     hybrid_depth: int = 100, num_results: int = 1000, **settings):
    """The distilled dense retriever fused with BM25 at query time (per-query z-scores)."""
    dense = trained_dense_retriever(collection, run, method='distill', **settings)
    bm25 = BM25.from_collection(collection, num_results=hybrid_depth, cache_dir=run.cache_dir)
    return Fusion({'bm25': bm25, 'dense': dense}, weights={'bm25': bm25_weight}, depth=hybrid_depth,
                  num_results=num_results)


register(PipelineSpec(
    'teacher',
    'the distillation teacher as a retriever: BM25 and the zero-shot student (all-MiniLM-L6-v2), '
    'each one\'s top fusion_depth fused by per-query z-scores (teacher=2*bm25+student weights '
    'them; +gen adds SmolLM2\'s query likelihood on the fused top 10; +ce a cross-encoder\'s '
    'scores on the fused top depth, cross_encoder=NAME)',
    fused_teacher,
    dict(teacher=DEFAULTS['distill']['teacher'], fusion_depth=DEFAULTS['distill']['fusion_depth'],
         model_name=MINILM, query_prompt=None, passage_prompt=None, generator='smollm2',
         cross_encoder=DEFAULTS['distill']['cross_encoder'], depth=DEFAULTS['distill']['depth'],
         precision=DEFAULTS['distill']['precision'], num_results=1000)))

register(PipelineSpec(
    'distill',
    'all-MiniLM-L6-v2 distilled from the teacher (BM25 + the student itself, fused), no labels: '
    'listwise KL over the teacher\'s top depth with in-batch negatives, the query tower trained; '
    'corpus only: one round against the start\'s passage vectors; with a query log: passage '
    'offsets and 5 rounds, the student re-entering the teacher each round '
    '(passages=frozen|offsets|trained, rounds=N); the last round kept; queries: a '
    'query log (queries=FILE: one query a line, or JSONL/CSV/TSV with qid and query; or '
    'queries=COLLECTION: its topic texts; or queries=crossfold: the evaluated collection\'s own '
    'topic texts, two-fold), or corpus only: written by a generator (sampled: '
    'generator=smollm2|qwen|a hub name or path, query_style=plain|chat, '
    'query_examples=FILE|COLLECTION shown as the style to write), corpus sentences/spans, '
    'document titles',
    functools.partial(trained_dense_retriever, method='distill'),
    dict(DEFAULTS['distill'], **_INFERENCE), method='distill'))

register(PipelineSpec(
    'gpl',
    'GPL\'s recipe (Wang et al., 2022) as distillation settings: a T5 doc2query model writes 3 '
    'queries a passage (generator=BeIR/query-gen-msmarco-t5-base-v1, top_k=25, 64 tokens), two '
    'MS MARCO bi-encoders each mine a query\'s top 50 by cosine (teacher=0*miners+ce, '
    'miners=...msmarco-distilbert-base-v3+...msmarco-MiniLM-L-6-v3; all-MiniLM-L6-v2 stands in '
    'for one not on the machine) and a cross-encoder scores them and the query\'s own passage '
    '(cross_encoder=cross-encoder/ms-marco-MiniLM-L-6-v2), Margin-MSE on its raw margins over '
    '(query, own passage, one drawn negative) triples (negatives=1), both towers trained '
    '(passages=trained) by dot product at 350 tokens, lr 2e-5, in fp32; with the models at '
    'hand: generator=smollm2,top_k=none,query_tokens=32,teacher=0*miners+fused',
    functools.partial(trained_dense_retriever, method='distill'),
    dict(DEFAULTS['distill'], **GPL, **_INFERENCE), method='distill'))

register(PipelineSpec(
    'hybrid',
    'the distill pipeline\'s dense retriever fused with BM25 at query time (per-query z-scores): '
    'a reference, not label-free adaptation alone',
    hybrid_retriever,
    dict(DEFAULTS['distill'], bm25_weight=1.0, hybrid_depth=100, **_INFERENCE), method='distill'))

# candidate_tokens=None: every document scored exactly (K' tokens per query token otherwise)
_REATT_SEARCH = dict(candidate_tokens=None, nprobe=32, num_results=1000)

register(PipelineSpec(
    'reatt',
    'Retrieval as Attention, zero-shot: one attention head of all-MiniLM-L6-v2 as a '
    'late-interaction retriever (mean over query tokens of the max pre-softmax attention to '
    'document tokens) over a token-level FAISS index',
    building_block(reatt_retriever),
    dict(model_name=MINILM, **REATT_HEAD, **_REATT_SEARCH)))

register(PipelineSpec(
    'reatt_adjusted',
    'ReAtt adapted by cross-document adjustment: KL from SmolLM2\'s judgement of each query\'s '
    'close documents (BM25\'s, then the model\'s own each iteration) to the softmax of r over '
    'them and the batch\'s other documents; queries: corpus sentences/spans/masked sentences, '
    'generated, or a collection\'s topic texts',
    adjusted_reatt_retriever,
    dict(DEFAULTS['reatt'], **_REATT_SEARCH), method='reatt'))
