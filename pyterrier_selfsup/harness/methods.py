"""The training methods, each a function from its settings to a ready trainer and its training
queries, and the teachers that distillation names by their parts.

A method's function takes the collection, its settings object, the run context and, for a
cross-fold model, its fold; RUMBArt and ACROBArT take the path of the model they start from as
well (:func:`~pyterrier_selfsup.harness.trained.start_model`).
"""
from collections.abc import Callable

import pandas as pd
import torch

from pyterrier_selfsup._distributed import distributed
from pyterrier_selfsup.context import SILENT, RunContext
from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.data.queries import GENERATED
from pyterrier_selfsup.data.queries.source import QuerySource
from pyterrier_selfsup.data.queries.written import ROUND_TRIP_DEPTH
from pyterrier_selfsup.models.cross_encoder import GPL_CROSS_ENCODER, CrossEncoderScorer
from pyterrier_selfsup.models.dual_encoder import DualEncoder
from pyterrier_selfsup.models.generator import MAX_PASSAGE_LENGTH, Generator, load_generator
from pyterrier_selfsup.models.reatt import ReAtt
from pyterrier_selfsup.retrieval.bm25 import BM25
from pyterrier_selfsup.retrieval.dense import MINILM, DenseRetriever
from pyterrier_selfsup.retrieval.fusion import FusedScores, Fusion
from pyterrier_selfsup.training.acrobart import Acrobart
from pyterrier_selfsup.training.adjustment import CrossDocumentAdjustment, mask_token
from pyterrier_selfsup.training.distant import DistantSupervision
from pyterrier_selfsup.training.distill import Distillation
from pyterrier_selfsup.training.loop import Trainer
from pyterrier_selfsup.training.rumbart import Rumbart
from pyterrier_selfsup.training.settings import (
    CrossDocumentAdjustmentSettings,
    DistantSupervisionSettings,
    DistillationSettings,
    ReconstructionSettings,
    encoder_options,
)
from pyterrier_selfsup.training.teacher_parts import LABELLING_PARTS, mines_only, parse_teacher

Setup = Callable[..., tuple[Trainer, pd.DataFrame]]


def source_topics(collection: Collection, source: QuerySource, *,
                  generator: None | str | Generator = None,
                  run: RunContext = SILENT) -> pd.DataFrame:
    """The training queries of ``source`` on ``collection``
    (:meth:`~pyterrier_selfsup.data.queries.source.QuerySource.topics`), with the generator that
    writes (a :class:`Generator` or a name, loaded only for a source that writes) and BM25 for the
    round-trip check, in ``run``'s cache.

        topics = source_topics(Collection('classic/adi'), QuerySource('sampled', 200))
    """
    if source.written and (generator is None or isinstance(generator, str)):
        generator = load_generator(generator or source.generator, cache_dir=run.cache_dir)

    def round_trip():
        return BM25.from_collection(collection, cache_dir=run.cache_dir) % ROUND_TRIP_DEPTH

    return source.topics(collection, generator=generator if source.written else None,
                         round_trip=round_trip, cache_dir=run.cache_dir)


def _distant_supervision(collection: Collection, s: DistantSupervisionSettings, run: RunContext, *,
                         fold: int | None = None) -> tuple[Trainer, pd.DataFrame]:
    topics = source_topics(collection, QuerySource.of(s, fold), run=run)
    torch.manual_seed(s.seed)
    encoder = DualEncoder.from_pretrained(s.model_name, dim=s.dim, **encoder_options(s))
    return DistantSupervision(encoder, collection, s, run), topics


def _retrieve_and_reconstruct(trainer_class) -> Setup:
    def setup(collection: Collection, s: ReconstructionSettings, run: RunContext, *,
              fold: int | None = None,
              start: str | None = None) -> tuple[Trainer, pd.DataFrame]:
        if start is None:  # (a start by another method is trained first: harness.trained does)
            if s.start == 'ds':
                raise ValueError("start='ds' starts from a trained model: give its path as "
                                 "start=, or train through harness.trained.train")
            start = MINILM if s.start == 'minilm' else s.start
        gen = load_generator(s.generator, cache_dir=run.cache_dir,
                             max_passage_length=s.max_passage_length, verbose=run.verbose)
        torch.manual_seed(s.seed)
        trainer = trainer_class(DualEncoder.from_pretrained(start, **encoder_options(s)),
                                gen, collection, s, run)
        # generated queries are written at the generator's default passage length, so that every
        # trainer given that source trains on the same queries
        writer = gen if s.max_passage_length == MAX_PASSAGE_LENGTH else None
        return trainer, source_topics(collection, QuerySource.of(s, fold), generator=writer,
                                      run=run)
    return setup


def _cross_document_adjustment(collection: Collection, s: CrossDocumentAdjustmentSettings,
                               run: RunContext, *,
                               fold: int | None = None) -> tuple[Trainer, pd.DataFrame]:
    gen = load_generator(s.generator, cache_dir=run.cache_dir, verbose=run.verbose)
    torch.manual_seed(s.seed)
    reatt = ReAtt.from_pretrained(s.model_name, **s.retrieval_head)
    topics = source_topics(collection, QuerySource.of(s, fold, mask=mask_token(reatt)),
                           generator=gen, run=run)
    return CrossDocumentAdjustment(reatt, gen, collection, s, run), topics


def teacher_pipeline(collection: Collection, spec: str, *, student=None, depth: int = 100,
                     rerank_depth: int = 10, generator: None | str | Generator = None,
                     cross_encoder: str | None = None, mining: str | None = None,
                     raw_labels: bool = False, run: RunContext = SILENT) -> Fusion:
    """The teacher ``spec`` names (:func:`parse_teacher`) over ``collection``, as a PyTerrier
    retriever: its parts' top ``depth`` fused by weighted per-query z-scores, their indexes in
    ``run``'s cache. Re-rankers (``gen``, ``ce``, ``fused``) score the fused top
    ``rerank_depth``; ``ce`` with ``cross_encoder`` (GPL's by default), ``fused`` with BM25 and
    MiniLM fused 1:1 (the cross-encoder's stand-in where none is at hand). ``miners``: a dense
    retriever a model of ``mining`` (names joined by +; GPL's two by default), each searching
    by cosine.

    Where the teacher mines with ``miners`` alone (every first stage weighted 0), each miner
    gives its top ``rerank_depth``, and the re-rankers score every candidate of their union
    (GPL: the top 50 of each of its two miners); ``raw_labels``: the one re-ranker's own scores
    label them (Margin-MSE's margins), not their z-scores."""
    from pyterrier_selfsup.models.hub import miners_at_hand
    from pyterrier_selfsup.models.names import GPL_MINERS
    from pyterrier_selfsup.models.score_cache import score_cache_dir
    cache_dir, shows = run.cache_dir, run.verbose and distributed()[0] == 0
    weights = parse_teacher(spec)
    stages, rerankers = {}, {}
    for part in list(weights):
        if part == 'bm25':
            stages[part] = BM25.from_collection(collection, num_results=depth, cache_dir=cache_dir,
                                                verbose=shows)
        elif part == 'student':
            if student is None:
                raise ValueError(f'teacher {spec!r} names the student, and no student is given')
            stages[part] = student
        elif part == 'miners':
            weight = weights.pop(part)
            for used, _ in miners_at_hand(mining or '+'.join(GPL_MINERS)):
                name = f'miner {used}'
                stages[name] = DenseRetriever.from_collection(
                    collection, used, normalize=True, num_results=depth, cache_dir=cache_dir,
                    verbose=shows)
                weights[name] = weight
        elif part == 'ce':
            rerankers[part] = collection.text_loader() >> CrossEncoderScorer(
                cross_encoder or GPL_CROSS_ENCODER)
        elif part == 'fused':
            rerankers[part] = FusedScores(bm25_and_minilm(collection, depth=depth, run=run))
        else:
            gen = (load_generator(generator or 'smollm2', cache_dir=cache_dir)
                   if not isinstance(generator, Generator) else generator)
            rerankers[part] = collection.text_loader() >> gen.scorer(
                normalise='mean', cache=score_cache_dir(collection, gen, cache_dir))
    if not stages:
        raise ValueError(f'teacher {spec!r} has no first stage (bm25, student or miners)')
    mining_alone = all(name.startswith('miner ') for name in stages)
    if rerankers and mining_alone and not any(weights.get(name, 1.0) for name in stages):
        depth, rerank_depth = rerank_depth, rerank_depth * len(stages)
    return Fusion(stages, weights=weights, depth=depth, rerankers=rerankers,
                  rerank_depth=rerank_depth, raw_labels=raw_labels)


def bm25_and_minilm(collection: Collection, *, depth: int = 100,
                    run: RunContext = SILENT) -> Fusion:
    """BM25 and the zero-shot all-MiniLM-L6-v2 over ``collection``, each one's top ``depth``
    fused 1:1: the teacher's ``fused`` part, and the ``teacher`` pipeline before training."""
    shows = run.verbose and distributed()[0] == 0
    return Fusion({'bm25': BM25.from_collection(collection, num_results=depth,
                                                cache_dir=run.cache_dir, verbose=shows),
                   'minilm': DenseRetriever.from_collection(
                       collection, MINILM, num_results=depth, cache_dir=run.cache_dir,
                       verbose=shows)},
                  depth=depth)


def rerank_depth(teacher: str, depth: int) -> int:
    """How many of the fused candidates ``teacher``'s re-rankers score: ``depth`` where a
    labelling part is named or the first stages only mine, else the top 10."""
    labels = any(part in LABELLING_PARTS for part in parse_teacher(teacher))
    return depth if labels or mines_only(teacher) else 10


def _distillation(collection: Collection, s: DistillationSettings, run: RunContext, *,
                  fold: int | None = None) -> tuple[Trainer, pd.DataFrame]:
    if s.negatives is not None and not mines_only(s.teacher):
        raise ValueError(f'negatives={s.negatives} trains GPL\'s triples, whose teacher labels the '
                         f'mined candidates and each query\'s own passage: say '
                         f'teacher=0*miners+ce (or 0*student+ce, or +fused), not {s.teacher!r}')
    needs_gen = 'gen' in parse_teacher(s.teacher) or s.queries in GENERATED
    gen = (load_generator(s.generator, cache_dir=run.cache_dir, verbose=run.verbose)
           if needs_gen else None)
    topics = source_topics(collection, QuerySource.of(s, fold), generator=gen, run=run)
    torch.manual_seed(s.seed)
    encoder = DualEncoder.from_pretrained(s.model_name, **encoder_options(s))

    def teacher(student):
        return teacher_pipeline(collection, s.teacher, student=student, depth=s.fusion_depth,
                                rerank_depth=rerank_depth(s.teacher, s.depth), generator=gen,
                                cross_encoder=s.cross_encoder, mining=s.miners,
                                raw_labels=s.loss == 'margin_mse', run=run)

    if 'student' not in parse_teacher(s.teacher):  # one pipeline for every round, ranked once
        teacher = teacher(None)
    return Distillation(encoder, collection, teacher, s, run), topics


METHODS: dict[str, Setup] = {
    'distill': _distillation,
    'ds': _distant_supervision,
    'rumbart': _retrieve_and_reconstruct(Rumbart),
    'acrobart': _retrieve_and_reconstruct(Acrobart),
    'reatt': _cross_document_adjustment,
}
