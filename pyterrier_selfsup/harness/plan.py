"""What a training run will do and how long it should take here, said before it starts; what
each stage took, said (and kept in the training log) when it ends.

The stages are those that report their progress (:mod:`pyterrier_selfsup.progress`), by the
same names. Their sizes come from the method's settings and the corpus; how long they take,
from the rate each stage ran at the last time on this machine (``stage-rates.json`` in the
cache, a section a machine), which every run updates. A stage never run here has no estimate.
"""
import json
import logging
import math
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from pyterrier_selfsup._cache import cache_root, written_whole
from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.data.queries.written import SAMPLING
from pyterrier_selfsup.harness.provenance import machine
from pyterrier_selfsup.models.hub import miners_at_hand
from pyterrier_selfsup.progress import Stage, counted, rate_text
from pyterrier_selfsup.training.acrobart import Acrobart
from pyterrier_selfsup.training.adjustment import CrossDocumentAdjustment
from pyterrier_selfsup.training.distant import DistantSupervision
from pyterrier_selfsup.training.distill import Distillation
from pyterrier_selfsup.training.rumbart import Rumbart
from pyterrier_selfsup.training.settings import MethodSettings
from pyterrier_selfsup.training.teacher_parts import parse_teacher

logger = logging.getLogger(__name__)

RATES_FILE = 'stage-rates.json'
TRAINERS = {'ds': DistantSupervision, 'rumbart': Rumbart, 'acrobart': Acrobart,
            'distill': Distillation, 'reatt': CrossDocumentAdjustment}


@dataclass
class Planned:
    """A stage to come: its name (as its progress says it), how much, of what, and a note."""
    desc: str
    size: float
    unit: str
    note: str = ''
    seconds: float | None = None  # the estimate, where this machine has run the stage before


def _steps(n: float, batch: int, epochs: int, accumulation: int = 1) -> int:
    return math.ceil(math.ceil(n / batch) * epochs / accumulation)


def stages(collection: Collection, method: str, s: MethodSettings,
           writes_queries: bool) -> list[Planned]:
    """The stages of training ``method`` on ``collection`` with the settings ``s``
    (``writes_queries``: whether a generator writes the training queries), at most: a stage whose
    result is cached is skipped when it comes."""
    docs = collection.docs_count or 0
    queries = s.n_queries
    out = []
    if writes_queries:  # (the writer's stage counts passages: per_passage queries each)
        passages = (math.ceil(queries / getattr(s, 'per_passage', SAMPLING['per_passage']))
                    if s.queries == 'sampled' else queries)
        out.append(Planned('writing queries', passages, 'passage', 'unless written before'))
    steps_name = TRAINERS[method].description
    if method == 'ds':
        out.append(Planned('BM25 index', docs, 'doc', 'unless built before'))
        out.append(Planned(steps_name, _steps(queries, s.batch_size, s.epochs), 'step'))
    elif method in ('rumbart', 'acrobart'):
        steps = _steps(queries, s.batch_size, s.epochs, s.accumulation)
        refreshes = (steps - 1) // s.refresh_every if s.refresh_every and s.train_passages else 0
        out.append(Planned('encoding documents', docs * (1 + refreshes), 'doc',
                           f'the start index (unless built before) and {refreshes} refreshes'))
        if method == 'rumbart':
            out.append(Planned('generator scoring', queries * s.k, 'pair',
                               "the first index's pairs; a refresh scores those it has not seen"))
        out.append(Planned(steps_name, steps, 'step'))
    elif method == 'distill':
        out.append(Planned('BM25 index', docs, 'doc', 'unless built before'))
        if s.passages == 'trained':
            # a passage side that trains: the start index, then one afresh for each later round
            fresh = (s.rounds - 1) * ('student' in parse_teacher(s.teacher))
            out.append(Planned('encoding documents', docs * (1 + fresh), 'doc',
                               "the student's start index (unless built before) "
                               f"and {fresh} afresh"))
        else:
            out.append(Planned('encoding documents', docs, 'doc',
                               "the student's index, unless built before"))
        if 'miners' in parse_teacher(s.teacher):
            mining = len(miners_at_hand(s.miners))
            out.append(Planned('encoding documents', docs * mining, 'doc',
                               f"the {counted(mining, 'miner')}' indexes, unless built before"))
        out.append(Planned('teacher rankings', queries * s.rounds, 'query', 'once a round'))
        out.append(Planned(
            steps_name, _steps(queries, s.batch_size, s.rounds), 'step'))
    elif method == 'reatt':
        out.append(Planned('ReAtt token index', docs * s.epochs, 'doc',
                           'a token index an iteration'))
        if s.epochs > 1:  # (the first iteration's close documents are BM25's)
            out.append(Planned('ReAtt search', queries * (s.epochs - 1), 'query',
                               "the model's close documents, each iteration after the first"))
        out.append(Planned('generator scoring', queries * s.k * s.epochs, 'pair',
                           "each iteration's close documents; "
                           "a pair scored before is in the cache"))
        out.append(Planned(steps_name, _steps(queries, s.batch_size, s.epochs), 'step'))
    return out


def resuming(planned: list[Planned], step: int) -> list[Planned]:
    """The plan of a run that resumes from its checkpoint at ``step``: the training steps left."""
    if step:
        for p in planned:
            if p.unit == 'step':
                p.size, p.note = (max(0, p.size - step),
                                  f'resuming after step {step:,} of {p.size:,}')
    return planned


def rates_path(cache_dir=None) -> Path:
    return cache_root(cache_dir) / RATES_FILE


def known_rates(cache_dir=None) -> dict[str, dict]:
    """This machine's rates, by stage: ``{'rate': units a second, 'unit': ...}``."""
    path = rates_path(cache_dir)
    try:
        return json.loads(path.read_text()).get(machine(), {})
    except (OSError, ValueError):  # none yet, or unreadable: no estimate, nothing worse
        return {}


def run_context(s: MethodSettings, world_size: int = 1) -> dict:
    """What a stage's rate depends on besides the machine: the batch, whether both towers train,
    the processes, and the models where they are not the defaults."""
    both = getattr(s, 'passages', None) == 'trained' or getattr(s, 'train_passages', False)
    models = [getattr(s, f.name) for f in fields(s)
              if f.name in ('model_name', 'start', 'generator') and getattr(s, f.name) != f.default]
    return {'batch': f"{s.batch_size}x{s.accumulation}", 'k': getattr(s, 'k', None),
            'trains': 'both towers' if both else None, 'processes': world_size,
            'models': ', '.join(models) or None}


def rate_key(desc: str, unit: str, context: dict) -> str:
    """The name a stage's rate is kept under: a training step's names its batch, and every
    stage the models other than the defaults and the number of processes."""
    models = f"{context['models']}, " if context.get('models') else ''
    if unit == 'step':
        k = f", k {context['k']}" if context.get('k') else ''
        trains = f", {context['trains']}" if context.get('trains') else ''
        return (f"{desc} (batch {context['batch']}{k}{trains}, {models}"
                f"{context['processes']} process(es))")
    return f"{desc} ({models}{context['processes']} process(es))"


def estimate(planned: list[Planned], rates: dict[str, dict], context: dict) -> list[Planned]:
    for p in planned:
        rate = rates.get(rate_key(p.desc, p.unit, context))
        if rate and rate.get('unit') == p.unit and rate.get('rate'):
            p.seconds = p.size / rate['rate']
    return planned


def learn(stages_done: dict[str, Stage], context: dict, cache_dir=None):
    """Keeps each stage's rate of this run as this machine's, for the next plan (a stage shorter
    than a second is left out)."""
    path = rates_path(cache_dir)
    try:
        every = json.loads(path.read_text())
    except (OSError, ValueError):
        every = {}
    mine = every.setdefault(machine(), {})
    for desc, stage in stages_done.items():
        if stage.seconds >= 1 and stage.done > 0:
            mine[rate_key(desc, stage.unit, context)] = {
                'rate': stage.done / stage.seconds, 'unit': stage.unit,
                'measured': time.strftime('%Y-%m-%d', time.gmtime())}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with written_whole(path, 'the stage rates') as partial:
            partial.write_text(json.dumps(every, indent=1, sort_keys=True))
    except Exception as e:
        # (a read-only cache: the next plan has no estimate, the run is not lost)
        logger.warning('could not keep the stage rates in %s: %s', path, e)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f'{seconds // 3600} h {seconds // 60 % 60:02d} min'
    return f'{seconds // 60} min {seconds % 60:02d} s' if seconds >= 60 else f'{seconds} s'


def plan_lines(what: str, planned: list[Planned]) -> list[str]:
    """The plan as said before training: a line a stage, then the total of the estimates."""
    lines = [f'plan: {what}']
    for p in planned:
        size = counted(round(p.size), p.unit)
        took = (f'about {_duration(p.seconds)}' if p.seconds is not None
                else 'not run on this machine yet')
        lines.append(f'  {p.desc}: {size}, {took}' + (f' ({p.note})' if p.note else ''))
    known = [p.seconds for p in planned if p.seconds is not None]
    unknown = len(planned) - len(known)
    if known:
        lines.append(f'  in all: about {_duration(sum(known))}' +
                     (f', and {unknown} stage(s) this machine has not timed' if unknown else '') +
                     ' (rates measured here before; a stage whose result is cached takes none)')
    else:
        lines.append('  in all: no stage has run on this machine before; '
                     'each says its time left as it goes')
    return lines


def times_lines(done: dict[str, Stage], total_seconds: float) -> list[str]:
    """What each stage did and took (and the peak memory it raised), then the whole run's time."""
    lines = ['stage times:']
    for stage in done.values():
        rate = rate_text(stage.done, stage.seconds, stage.unit)
        lines.append(f'  {stage.desc}: {counted(round(stage.done), stage.unit)} in '
                     f'{_duration(stage.seconds)}' +
                     (f' ({rate})' if rate else '') +
                     (f'; the peak memory rose to {stage.peak_gib:.2f} GiB'
                      if stage.peak_gib is not None else ''))
    lines.append(f'  in all: {_duration(total_seconds)}')
    return lines


def log_records(planned: list[Planned], done: dict[str, Stage], total_seconds: float) -> list[dict]:
    """The plan and the stage times as training-log records."""
    return ([{'plan': [asdict(p) for p in planned]}] +
            [{'stage': s.desc, 'done': s.done, 'unit': s.unit, 'seconds': s.seconds,
              'peak raised to GiB': s.peak_gib}
             for s in done.values()] +
            [{'stage': 'in all', 'seconds': total_seconds}])
