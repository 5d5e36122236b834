"""Trained once, stored, resumed: the one mechanism behind every pipeline that trains a model.

A trained pipeline names a method and its settings. :func:`train` keeps the model in the model
store (:mod:`~pyterrier_selfsup.harness.store`), under a key that says what it is. It is trained
on first use in a staging directory that becomes the model only when training is over; an
interrupted run resumes from its last checkpoint. Before training its plan is logged
(:mod:`~pyterrier_selfsup.harness.plan`); after, what each stage took.
"""
import json
import logging
import time
from pathlib import Path

from pyterrier_selfsup._cache import build_once
from pyterrier_selfsup._distributed import distributed
from pyterrier_selfsup.context import SILENT, RunContext
from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.data.queries import CROSS_FOLDS, CROSSFOLD, GENERATED
from pyterrier_selfsup.harness import plan, store
from pyterrier_selfsup.harness.methods import METHODS
from pyterrier_selfsup.harness.plots import plot_training_curve
from pyterrier_selfsup.progress import stage_times
from pyterrier_selfsup.retrieval.dense import MINILM
from pyterrier_selfsup.training.checkpoints import checkpoint_step, fit_resumably, resume_point
from pyterrier_selfsup.training.settings import SETTINGS, MethodSettings

# the settings a trained pipeline's search reads, and its training does not
SEARCH_SETTINGS = frozenset({'num_results', 'candidate_tokens', 'nprobe', 'rescore', 'bm25_weight',
                             'hybrid_depth', 'search', 'backend'})

logger = logging.getLogger(__name__)


def each_model(settings: dict) -> list:
    """The settings of each model a pipeline's ``settings`` stand for: themselves, or with
    ``queries=crossfold`` (and no ``fold`` yet) one copy a fold, ``fold`` set."""
    if settings.get('queries') == CROSSFOLD and 'fold' not in settings:
        return [dict(settings, fold=fold) for fold in range(CROSS_FOLDS)]
    return [settings]


def typed_settings(method: str, settings: dict) -> MethodSettings:
    """``method``'s settings object for a pipeline's ``settings`` (search-time settings and
    ``fold`` left out); a setting the method does not have is refused."""
    if method not in METHODS:
        raise ValueError(f'unknown training method {method!r}; known: {", ".join(METHODS)}')
    return SETTINGS[method].of(**{name: value for name, value in settings.items()
                                  if name not in SEARCH_SETTINGS and name != 'fold'})


def _fold(method: str, settings: dict):
    if 'fold' in settings and settings.get('queries') != CROSSFOLD:
        raise ValueError(f'{method} has no setting fold '
                         '(only queries=crossfold trains one model a fold)')
    return settings.get('fold')


def training_settings(method: str, settings: dict) -> dict:
    """Every setting ``method`` trains with, as a dict: the settings object's fields, and
    ``fold`` for a model of a cross-fold pipeline."""
    fold = _fold(method, settings)
    return {**typed_settings(method, settings).asdict(),
            **({'fold': fold} if fold is not None else {})}


def model_dir(collection: Collection, method: str, settings: dict,
              run: RunContext = SILENT) -> Path:
    """Where the model of ``method`` trained with a pipeline's ``settings`` lives in the model
    store."""
    record = store.model_record(Collection.of(collection), method,
                                typed_settings(method, settings), _fold(method, settings), run)
    return store.record_dir(record, run)


def start_model(collection: Collection, settings, run: RunContext = SILENT,
                fold: int | None = None) -> str:
    """What a RUMBArt or ACROBArT run starts from: all-MiniLM-L6-v2, the ds pipeline's model on
    the same queries (trained first if it is not yet), or a path."""
    start = settings.start
    if start == 'ds':
        fold_of = {'fold': fold} if fold is not None else {}
        return str(train(collection, 'ds', dict(settings.start_settings, **fold_of), run))
    return MINILM if start == 'minilm' else start


def train(collection: str | Collection, method: str, settings: dict,
          run: RunContext = SILENT) -> Path:
    """The ``final/`` directory of ``method``'s model trained on ``collection`` with ``settings``:
    trained on first use (resuming an interrupted run), then reused; the plan is logged before,
    the stage times after. ``run``: the cache and whether progress is shown."""
    fold = _fold(method, settings)
    s = typed_settings(method, settings)
    collection = Collection.of(collection)
    record = store.model_record(collection, method, s, fold, run)

    def build(staging: Path):
        started, before = time.time(), stage_times()
        said = distributed()[0] == 0  # (one process speaks for the group)
        context = plan.run_context(s, distributed()[1])
        resumed = resume_point(staging)
        at = checkpoint_step(resumed) if resumed is not None else 0
        writes = s.queries in GENERATED
        docs = collection.docs_count
        title = f'{method} on {collection.name}' + (f' ({docs:,} documents)' if docs else '')

        def planned_for(queries: int, writing: bool) -> list:
            return plan.estimate(plan.resuming(plan.stages(
                collection, method, s.replace(n_queries=queries), writing), at),
                plan.known_rates(run.cache_dir), context)

        # written queries are planned before they are written; any other source's are counted
        planned = planned_for(s.n_queries, True) if writes else None
        if said and writes:
            for line in plan.plan_lines(title, planned):
                logger.info(line)
        start = {'start': start_model(collection, s, run, fold)} if hasattr(s, 'start') else {}
        trainer, topics = METHODS[method](collection, s, run.replace(
            output_dir=staging, keep_checkpoints=1, draw_curve=plot_training_curve), fold=fold,
            **start)
        if not writes or len(topics) < s.n_queries:
            planned = planned_for(len(topics), False)
            if said:
                for line in plan.plan_lines(
                        title if not writes else
                        f'{len(topics):,} training queries written, not {s.n_queries:,}',
                        planned):
                    logger.info(line)
        fit_resumably(trainer, topics)
        # the model's record; the stage times said, logged and learnt for the next plan
        if said:
            store.write_record(staging, record)
            done, seconds = stage_times(before), time.time() - started
            for line in plan.times_lines(done, seconds):
                logger.info(line)
            with open(staging / 'training_log.jsonl', 'a') as log:
                log.writelines(json.dumps(r) + '\n'
                               for r in plan.log_records(planned, done, seconds))
            plan.learn(done, context, run.cache_dir)

    # under torch.distributed every process trains, together; a damaged model is not
    # retrained on its own: the error says how
    return build_once(store.record_dir(record, run), build, resumable=True, collective=True,
                      what=f'the {method} model trained on {collection.name}',
                      on_damage='raise') / 'final'


# Every setting of every method, at its default
DEFAULTS: dict[str, dict] = {method: settings.defaults() for method, settings in SETTINGS.items()}
