"""Trained once, cached, resumed: the one mechanism behind every pipeline that trains a model.

A trained pipeline names a method (``ds``, ``rumbart``, ``acrobart``, ``reatt``) and its
settings. :func:`train` keeps the model under ``<cache>/models/<corpus>.<method>-<digest>``,
the digest covering every setting that training reads: all of the pipeline's settings but
those that only the search reads (:data:`SEARCH_SETTINGS`). It is trained on first use,
in a staging directory that becomes the model only when training is over; a run that is
interrupted resumes from its last checkpoint when the model is asked for again.

Each method here is a function from settings to a ready :class:`~pyterrier_selfsup.training.Trainer`
and its training topics; the trainers themselves know nothing of caches or pipelines.
"""
import json
import logging
import time
from pathlib import Path
from typing import Callable, Dict, Optional, Tuple, Union

import pandas as pd
import torch

from pyterrier_selfsup._cache import build_once, cache_key, cache_root
from pyterrier_selfsup._distributed import distributed
from pyterrier_selfsup.data.collections import Collection, UnknownCollectionError
from pyterrier_selfsup.data.local import content_hash
from pyterrier_selfsup.data.queries import (MASK, SAMPLING, corpus_sentences, cropped_spans,
                                            document_titles, generated_queries, given_topics,
                                            masked_spans, other_folds, query_log,
                                            round_trip_queries, sampled_queries, spreads)
from pyterrier_selfsup.models.dual_encoder import DualEncoder
from pyterrier_selfsup.models.generator import MAX_PASSAGE_LENGTH, Generator, load_generator
from pyterrier_selfsup.models.reatt import ReAtt
from pyterrier_selfsup.harness import plan
from pyterrier_selfsup.harness.plots import plot_training_curve
from pyterrier_selfsup.models.writing import EXAMPLES_INTRO, WRITER_VERSION
from pyterrier_selfsup.retrieval.bm25 import BM25
from pyterrier_selfsup.retrieval.dense import MINILM, DenseRetriever
from pyterrier_selfsup.retrieval.fusion import Fusion
from pyterrier_selfsup.training.adjustment import CrossDocumentAdjustment, mask_token
from pyterrier_selfsup.training.distant import DistantSupervision
from pyterrier_selfsup.training.distill import Distillation
from pyterrier_selfsup.progress import stage_times
from pyterrier_selfsup.training.loop import Trainer, checkpoint_step, fit_resumably, resume_point
from pyterrier_selfsup.training.reconstruction import Acrobart, Rumbart
from pyterrier_selfsup.training.settings import (GENERATED, QUERY_SOURCES, SETTINGS,
                                                 CrossDocumentAdjustmentSettings,
                                                 DistantSupervisionSettings, DistillationSettings,
                                                 MethodSettings, ReconstructionSettings,
                                                 parse_teacher)
from pyterrier_selfsup.context import SILENT, RunContext

SEARCH_SETTINGS = frozenset({'num_results', 'candidate_tokens', 'nprobe', 'rescore', 'bm25_weight',
                             'hybrid_depth', 'search', 'backend'})
ROUND_TRIP_DEPTH = 10
# the (passage, query) pairs a writer is shown with example_pairs=COLLECTION (InPars shows 3)
EXAMPLE_PAIRS = 3
# queries=crossfold: the collection's own topic texts, in this many folds; the model that answers a
# fold's queries is trained on the other folds' texts (its setting ``fold``: the fold it answers)
CROSS_FOLDS = 2

logger = logging.getLogger(__name__)


def each_model(settings: dict) -> list:
    """The settings of each model a pipeline's ``settings`` stand for: themselves, or with
    ``queries=crossfold`` (and no ``fold`` yet) one copy a fold, ``fold`` set."""
    if settings.get('queries') == 'crossfold' and 'fold' not in settings:
        return [dict(settings, fold=fold) for fold in range(CROSS_FOLDS)]
    return [settings]


def typed_settings(method: str, settings: dict) -> MethodSettings:
    """``method``'s settings object for a pipeline's ``settings`` (old names accepted; the
    search-time settings and a cross-fold model's ``fold`` left out); a setting the method does
    not have is refused."""
    if method not in METHODS:
        raise ValueError(f'unknown training method {method!r}; known: {", ".join(METHODS)}')
    return SETTINGS[method].of(**{name: value for name, value in settings.items()
                                  if name not in SEARCH_SETTINGS and name != 'fold'})


def training_settings(method: str, settings: dict) -> dict:
    """Every setting ``method`` trains with, as a dict: the settings object's fields, and
    ``fold`` for a model of a cross-fold pipeline."""
    fold = ({'fold': settings['fold']}
            if 'fold' in settings and settings.get('queries') == 'crossfold' else {})
    if 'fold' in settings and not fold:
        raise ValueError(f'{method} has no setting fold '
                         '(only queries=crossfold trains one model a fold)')
    return {**typed_settings(method, settings).asdict(), **fold}


def model_dir(collection: Collection, method: str, settings: dict,
              run: RunContext = SILENT) -> Path:
    """Where the model of ``method`` trained with ``settings`` lives (``final/``,
    ``training_log.jsonl``, ``training_curve.png``; while it trains, ``<dir>.partial``).
    Its name holds a digest of the settings' cache key
    (:meth:`~pyterrier_selfsup.training.settings.MethodSettings.key`), of the contents of a
    query log rather than its path, of the query writer's version, and of whether the written
    queries kept were spread over the passages (:func:`~pyterrier_selfsup.data.queries.spreads`)."""
    s = typed_settings(method, settings)
    key = s.key()
    if settings.get('queries') == 'crossfold' and 'fold' in settings:
        key['fold'] = settings['fold']
    for name in ('queries', 'query_examples'):  # a query log: its contents, wherever it lies
        if query_file(key.get(name)):
            key[name] = f'file-{content_hash(key[name])}'
    if key.get('queries') == 'sampled':
        # models trained on an earlier writer's queries are not found
        key['query writer'] = WRITER_VERSION
        if key.get('query_examples'):  # (and the words that introduce its examples)
            key['examples intro'] = EXAMPLES_INTRO
        if spreads(collection, s.n_queries, getattr(s, 'per_passage', SAMPLING['per_passage'])):
            key['spread'] = True  # (a model of the queries kept before they were spread: not found)
    if method != 'distill' and key.get('queries') in ('sentences', 'spans'):
        # a corpus with fewer documents than n_queries gives several sentences a document: the key
        # has said so since that changed, and distill was born with it
        key['several a document'] = True
    return (cache_root(run.cache_dir) / 'models' /
            cache_key(f'{collection.corpus_id}.{method}', key))


def train(collection: Union[str, Collection], method: str, settings: dict,
          run: RunContext = SILENT) -> Path:
    """The ``final/`` directory of ``method``'s model trained on ``collection`` with
    ``settings`` (the rest at :data:`DEFAULTS`): trained on first use (resuming an
    interrupted run), then reused. Before training, its plan (stages, sizes, the time each
    should take on this machine: :mod:`~pyterrier_selfsup.harness.plan`) is logged; after,
    what each stage took, logged and appended to the training log. ``run``: where the cache is
    and whether progress is shown (its ``output_dir`` is set to the model's directory here)."""
    fold = settings.get('fold')
    s = typed_settings(method, settings)
    collection = Collection.of(collection)

    def build(staging: Path):
        started, before = time.time(), stage_times()
        said = distributed()[0] == 0  # (one process speaks for the group)
        context = plan.run_context(s, distributed()[1])
        resumed = resume_point(staging)
        at = checkpoint_step(resumed) if resumed is not None else 0
        # a query log's size is known before training: the plan says it, not n_queries
        expected = (min(s.n_queries, len(query_log(s.queries))) if query_file(s.queries)
                    else s.n_queries)
        stages = plan.stages(collection, method, s.replace(n_queries=expected),
                             s.queries in GENERATED)
        planned = plan.estimate(plan.resuming(stages, at), plan.known_rates(run.cache_dir), context)
        if said:
            docs = collection.docs_count
            for line in plan.plan_lines(f'{method} on {collection.name}' +
                                        (f' ({docs:,} documents)' if docs else ''), planned):
                logger.info(line)
        trainer, topics = METHODS[method](collection, s, run.replace(
            output_dir=staging, keep_checkpoints=1, draw_curve=plot_training_curve), fold=fold)
        if said and len(topics) < expected:  # (a corpus with fewer sentences than asked for)
            known = s.replace(n_queries=len(topics))
            replanned = [p for p in plan.estimate(
                plan.resuming(plan.stages(collection, method, known, False), at),
                plan.known_rates(run.cache_dir), context) if p.desc != 'writing queries']
            for line in plan.plan_lines(f'{len(topics):,} training queries, not {s.n_queries:,}',
                                        replanned):
                logger.info(line)
        fit_resumably(trainer, topics)
        # what each stage took, said, kept in the training log, and learnt for the next plan
        if said:
            done, seconds = stage_times(before), time.time() - started
            for line in plan.times_lines(done, seconds):
                logger.info(line)
            with open(staging / 'training_log.jsonl', 'a') as log:
                log.writelines(json.dumps(r) + '\n'
                               for r in plan.log_records(planned, done, seconds))
            plan.learn(done, context, run.cache_dir)

    # under torch.distributed (torchrun) every process trains, together; a damaged model is
    # not retrained on its own (hours of work): the error says how
    return build_once(model_dir(collection, method, settings, run), build, resumable=True,
                      collective=True, what=f'the {method} model trained on {collection.name}',
                      on_damage='raise') / 'final'


def at_most(topics: pd.DataFrame, n: int, seed: int = 0) -> pd.DataFrame:
    """A query log's texts, or ``n`` of them drawn with ``seed`` where it has more (``n_queries``
    caps every source; the shipped 2,000 leaves the logs here whole)."""
    if n is None or n <= 0 or len(topics) <= n:
        return topics
    return topics.sample(n=n, random_state=seed).sort_index().reset_index(drop=True)


def example_texts(examples: Optional[str]) -> list:
    """The query texts a writer is shown: none, a file's, or a collection's topics'."""
    if not examples:
        return []
    if query_file(examples):
        return query_log(examples)['query'].tolist()
    return given_topics(Collection(examples).topics())['query'].tolist()


def example_pairs(name: Optional[str], n: int = EXAMPLE_PAIRS, seed: int = 0) -> list:
    """``n`` (passage, query) pairs of the collection ``name`` for a writer to be shown (none
    for None): topics drawn with ``seed`` among those with a judged relevant passage, each with
    the text of its first relevant passage by docno. This reads that collection's relevance
    judgements: name another collection than the one the model adapts to."""
    if not name:
        return []
    coll = Collection(name)
    qrels = coll.qrels()
    relevant = (qrels[qrels['label'] > 0].sort_values(['qid', 'docno'])
                .groupby('qid')['docno'].first())
    topics = coll.topics()
    topics = topics[topics['qid'].isin(relevant.index)].sort_values('qid')
    picked = topics.sample(n=min(n, len(topics)), random_state=seed)
    texts = coll.texts([relevant[q] for q in picked['qid']])
    return list(zip(texts, picked['query']))


def query_file(queries) -> bool:
    """Whether a pipeline's ``queries`` names a file (a query log), not a source or a collection."""
    return isinstance(queries, str) and queries not in QUERY_SOURCES and Path(queries).is_file()


def training_topics(collection: Collection, queries: str, n_queries: int, *, seed: int = 0,
                    generator: Union[None, str, Generator] = None, mask: str = MASK,
                    run: RunContext = SILENT, fold: Optional[int] = None, style: str = 'plain',
                    examples: Optional[str] = None,
                    per_passage: int = SAMPLING['per_passage'],
                    pairs: Optional[str] = None) -> pd.DataFrame:
    """The training queries a pipeline names by ``queries``: ``n_queries`` corpus
    ``sentences``, ``spans`` or ``masked`` sentences (with their ``answer``), or document
    ``titles``; ``n_queries``
    queries ``generated`` by ``generator`` (greedy, one a passage), ``sampled`` from it
    (:data:`SAMPLING`, several a passage, repeats dropped), or generated and kept by BM25's
    ``roundtrip`` check (top 10), written once under ``<cache>/queries/``, keyed by the generator's
    fingerprint, so that every trainer given the same source trains on the same queries;
    or a query log: a file of query texts (:func:`~pyterrier_selfsup.data.queries.query_log`),
    or the name of a collection whose topic texts are used (never its qrels); or
    ``crossfold``: ``collection``'s own topic texts outside ``fold`` (of :data:`CROSS_FOLDS`).
    ``style``, ``examples``, ``per_passage`` and ``pairs`` (sampled queries): the writer's
    prompt, a query log (a file or a collection, as ``queries`` names one) whose texts it is
    shown as the style to write in, how many queries it writes for each passage it draws, and a
    collection whose judged (passage, query) pairs it is shown (:func:`example_pairs`).
    ``generator``: a :class:`Generator`, or a name for :func:`load_generator` (loaded at its
    default settings, and only for a source that needs it). ``mask`` replaces a masked
    sentence's span: the student's own mask token, so that it reads one token it knows.
    ``run``: the cache the written queries are kept in."""
    if queries == 'sentences':
        return corpus_sentences(collection, n_queries, seed=seed)
    if queries == 'spans':
        return cropped_spans(collection, n_queries, seed=seed)
    if queries == 'titles':
        return document_titles(collection, n_queries, seed=seed)
    if queries == 'masked':
        return masked_spans(collection, n_queries, seed=seed, mask=mask)
    if queries == 'crossfold':
        if fold is None:
            raise ValueError('queries=crossfold trains one model a fold: which fold it answers '
                             '(fold=) is missing')
        return at_most(other_folds(collection.topics(), fold, CROSS_FOLDS), n_queries, seed)
    if query_file(queries):
        return at_most(query_log(queries), n_queries, seed)
    if queries not in GENERATED:
        try:
            return at_most(given_topics(Collection(queries).topics()), n_queries, seed)
        except UnknownCollectionError as error:
            raise UnknownCollectionError(f'queries={queries!r} is neither a source '
                                         f'({", ".join(QUERY_SOURCES)}), a file of query texts, '
                                         f'nor a collection: {error}') from None
    if generator is None:
        raise ValueError(f'queries={queries!r} needs a generator')
    if isinstance(generator, str):
        generator = load_generator(generator, cache_dir=run.cache_dir)
    settings = {'generator': generator.fingerprint(), 'n': n_queries, 'seed': seed}
    if queries == 'sampled':
        from pyterrier_selfsup.models.writing import QueryWriter
        shown = example_texts(examples)
        sampling = dict(SAMPLING, per_passage=per_passage)
        settings['sampling'] = sampling
        shown_pairs = example_pairs(pairs, seed=seed)
        settings['writer'] = QueryWriter(generator, style=style, examples=shown, pairs=shown_pairs,
                                         seed=seed).config()
        if spreads(collection, n_queries, per_passage):
            settings['spread'] = True  # (sets written before they were spread are not found)
    if queries == 'roundtrip':
        settings['check'] = f'bm25 top {ROUND_TRIP_DEPTH}'
    path = (cache_root(run.cache_dir) / 'queries' /
            cache_key(f'{collection.corpus_id}.{queries}', settings))

    def write(staging: Path):
        # (resumable: sampled queries are written with a checkpoint in the staging directory,
        # so that a stopped run resumes after the last batch it wrote)
        staging.mkdir(parents=True, exist_ok=True)
        checkpoint = staging / 'writing.pt'
        if queries == 'generated':
            topics = generated_queries(collection, generator, n_queries, seed=seed)
        elif queries == 'sampled':
            topics = sampled_queries(collection, generator, n_queries, seed=seed, style=style,
                                     examples=shown, pairs=shown_pairs, checkpoint=checkpoint,
                                     **sampling)
        else:
            bm25 = BM25.from_collection(collection, cache_dir=run.cache_dir) % ROUND_TRIP_DEPTH
            topics = round_trip_queries(collection, generator, n_queries, bm25,
                                        depth=ROUND_TRIP_DEPTH, seed=seed)
        topics.to_json(staging / 'topics.jsonl', orient='records', lines=True)
        checkpoint.unlink(missing_ok=True)

    built = build_once(path, write, what=f'the {queries} training queries of {collection.name}',
                       check=lambda built: _topics_damage(built / 'topics.jsonl'),
                       on_damage='set aside', resumable=True)
    return _read_topics(built / 'topics.jsonl')


def _read_topics(path: Path) -> pd.DataFrame:
    return pd.read_json(path, orient='records', lines=True, dtype=False)


def _topics_damage(path: Path) -> Optional[str]:
    """A generated-queries file that does not parse, or lacks a query column (garbled
    where its size still matches): damaged, and rebuilt whole (sampled queries come from
    one random stream, so a part rebuilt alone would not be the same queries)."""
    try:
        topics = _read_topics(path)
    except (OSError, ValueError) as error:
        return f'{path.name} does not parse ({str(error).splitlines()[0][:200]})'
    if not {'qid', 'query'} <= set(topics.columns) or topics['query'].isna().any():
        return f'{path.name} lacks queries'
    return None


# -- the methods: settings -> (trainer, training topics) ---------------------------------

Setup = Callable[..., Tuple[Trainer, pd.DataFrame]]


def _distant_supervision(collection: Collection, s: DistantSupervisionSettings, run: RunContext, *,
                         fold: Optional[int] = None) -> Tuple[Trainer, pd.DataFrame]:
    # generated queries are the same ones RUMBArt trains on (SmolLM2, its default settings)
    topics = training_topics(collection, s.queries, s.n_queries, seed=s.seed, generator='smollm2',
                             run=run, fold=fold)
    torch.manual_seed(s.seed)
    encoder = DualEncoder.from_pretrained(s.model_name, dim=s.dim)
    return DistantSupervision(encoder, collection, s, run), topics


def start_model(collection: Collection, settings: ReconstructionSettings,
                run: RunContext = SILENT) -> str:
    """What a RUMBArt or ACROBArT run starts from: all-MiniLM-L6-v2 (``start='minilm'``),
    the ds pipeline's model trained on the same queries (``start='ds'``, trained first if
    it is not yet), or a path."""
    start = settings.start
    if start == 'ds':
        return str(train(collection, 'ds', settings.start_settings, run))
    return MINILM if start == 'minilm' else start


def _retrieve_and_reconstruct(trainer_class) -> Setup:
    def setup(collection: Collection, s: ReconstructionSettings, run: RunContext, *,
              fold: Optional[int] = None) -> Tuple[Trainer, pd.DataFrame]:
        start = start_model(collection, s, run)
        gen = load_generator(s.generator, cache_dir=run.cache_dir,
                             max_passage_length=s.max_passage_length, verbose=run.verbose)
        torch.manual_seed(s.seed)
        trainer = trainer_class(DualEncoder.from_pretrained(start), gen, collection, s, run)
        # generated queries are written by the generator at its default settings, whatever this
        # run's passage length, so that every trainer given that source trains on the same queries
        writer = gen if s.max_passage_length == MAX_PASSAGE_LENGTH else s.generator
        return trainer, training_topics(collection, s.queries, s.n_queries, seed=s.seed,
                                        generator=writer, run=run, fold=fold)
    return setup


def _cross_document_adjustment(collection: Collection, s: CrossDocumentAdjustmentSettings,
                               run: RunContext, *,
                               fold: Optional[int] = None) -> Tuple[Trainer, pd.DataFrame]:
    gen = load_generator(s.generator, cache_dir=run.cache_dir, verbose=run.verbose)
    torch.manual_seed(s.seed)
    reatt = ReAtt.from_pretrained(s.model_name, **s.retrieval_head)
    topics = training_topics(collection, s.queries, s.n_queries, seed=s.seed, generator=gen,
                             mask=mask_token(reatt), run=run, fold=fold)
    return CrossDocumentAdjustment(reatt, gen, collection, s, run), topics


def teacher_pipeline(collection: Collection, spec: str, *, student=None, depth: int = 100,
                     rerank_depth: int = 10, generator: Union[None, str, Generator] = None,
                     run: RunContext = SILENT) -> Fusion:
    """The teacher ``spec`` names (:func:`parse_teacher`) over ``collection``, as a PyTerrier
    retriever: its parts' top ``depth`` fused by weighted per-query z-scores, their indexes in
    ``run``'s cache."""
    from pyterrier_selfsup.models.score_cache import score_cache_dir
    cache_dir, shows = run.cache_dir, run.verbose and distributed()[0] == 0
    weights = parse_teacher(spec)
    stages, rerankers = {}, {}
    for part in weights:
        if part == 'bm25':
            stages[part] = BM25.from_collection(collection, num_results=depth, cache_dir=cache_dir,
                                                verbose=shows)
        elif part == 'minilm':
            stages[part] = DenseRetriever.from_collection(
                collection, MINILM, num_results=depth, cache_dir=cache_dir, verbose=shows)
        elif part == 'student':
            if student is None:
                raise ValueError(f'teacher {spec!r} names the student, and no student is given')
            stages[part] = student
        else:
            gen = (load_generator(generator or 'smollm2', cache_dir=cache_dir)
                   if not isinstance(generator, Generator) else generator)
            rerankers[part] = collection.text_loader() >> gen.scorer(
                normalise='mean', cache=score_cache_dir(collection.corpus_id, gen, cache_dir))
    if not stages:
        raise ValueError(f'teacher {spec!r} has no first stage (bm25, student or minilm)')
    return Fusion(stages, weights=weights, depth=depth, rerankers=rerankers,
                  rerank_depth=rerank_depth)


def distillation_topics(collection: Collection, s: DistillationSettings, *,
                        generator: Union[None, str, Generator] = None, run: RunContext = SILENT,
                        fold: Optional[int] = None) -> pd.DataFrame:
    """The training queries of a distillation with settings ``s`` (:func:`training_topics`,
    written once and cached): what its trainer trains on, and what a report of them reads.

        topics = distillation_topics(Collection('classic/adi'), DistillationSettings(),
                                     generator='smollm2')
    """
    return training_topics(collection, s.queries, s.n_queries, seed=s.seed, generator=generator,
                           run=run, fold=fold, style=s.query_style, examples=s.query_examples,
                           per_passage=s.per_passage, pairs=s.example_pairs)


def _distillation(collection: Collection, s: DistillationSettings, run: RunContext, *,
                  fold: Optional[int] = None) -> Tuple[Trainer, pd.DataFrame]:
    needs_gen = 'gen' in parse_teacher(s.teacher) or s.queries in GENERATED
    gen = (load_generator(s.generator, cache_dir=run.cache_dir, verbose=run.verbose)
           if needs_gen else None)
    topics = distillation_topics(collection, s, generator=gen, run=run, fold=fold)
    torch.manual_seed(s.seed)
    encoder = DualEncoder.from_pretrained(s.model_name, precision=s.precision)

    def teacher(student):
        return teacher_pipeline(collection, s.teacher, student=student, depth=s.fusion_depth,
                                generator=gen, run=run)

    if 'student' not in parse_teacher(s.teacher):  # one pipeline for every round, ranked once
        teacher = teacher(None)
    return Distillation(encoder, collection, teacher, s, run), topics


METHODS: Dict[str, Setup] = {
    'distill': _distillation,
    'ds': _distant_supervision,
    'rumbart': _retrieve_and_reconstruct(Rumbart),
    'acrobart': _retrieve_and_reconstruct(Acrobart),
    'reatt': _cross_document_adjustment,
}

# Every setting of every method, at its default (read from pyterrier_selfsup.training.settings)
DEFAULTS: Dict[str, dict] = {method: settings.defaults() for method, settings in SETTINGS.items()}
