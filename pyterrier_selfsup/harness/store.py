"""The model store: trained models that describe themselves.

Each trained model lives in ``<cache>/models/<corpus>.<method>-<key>/`` beside a record,
``model.json``, that says what it is:

- ``format``: the package's model format (:data:`MODEL_FORMAT`);
- ``method`` and ``settings``: the method and every setting its weights depend on, as resolved;
- ``collection``: the corpus it adapted to, by its id and a digest of its contents;
- ``queries``: what it trained on
  (:meth:`~pyterrier_selfsup.data.queries.source.QuerySource.identity`);
- ``starts``: what a start named by a path or another method is;
- ``miners``: which dense retrievers mined a distillation teacher's candidates;
- ``arithmetic``: the dtype matrix products run in where a setting leaves it to the hardware;
- ``run``: how the run was carried out, and which settings took a chosen value (``chosen``).

The key is a digest of the record but ``run``: any change gives another model, trained on
first use. :func:`read_settings` reads a record back into its settings object.

    path = record_dir(model_record(Collection('classic/adi'), 'distill', DistillationSettings()))
    read_settings(path)   # DistillationSettings(...), equal to the one that trained it
"""
import hashlib
import json
from pathlib import Path

from pyterrier_selfsup._cache import cache_key, cache_root, written_whole
from pyterrier_selfsup.context import SILENT, RunContext
from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.data.queries.logs import query_file
from pyterrier_selfsup.data.queries.source import QuerySource
from pyterrier_selfsup.models.hub import miners_at_hand
from pyterrier_selfsup.models.precision import compute_dtype, resolve_device
from pyterrier_selfsup.training.settings import SETTINGS, MethodSettings
from pyterrier_selfsup.training.teacher_parts import parse_teacher

# the layout of a trained model's directory and record: raise it when older ones cannot be read
MODEL_FORMAT = 2
RECORD = 'model.json'


def collection_digest(collection: Collection, run: RunContext = SILENT) -> str:
    """A digest of ``collection``'s documents (each docno and text, in order), computed once
    for each contents of its files and kept in ``<cache>/digests/``."""
    memo = (cache_root(run.cache_dir) / 'digests'
            / cache_key(collection.corpus_id, collection.cache_settings({})))
    if memo.is_file():
        return memo.read_text().strip()
    digest = hashlib.sha256()
    for doc in collection.corpus_iter():
        digest.update(f'{doc["docno"]}\t{doc["text"]}\n'.encode())
    value = digest.hexdigest()[:16]
    memo.parent.mkdir(parents=True, exist_ok=True)
    with written_whole(memo, f'the digest of {collection.name}', 'choose another --cache-dir') \
            as out:
        out.write_text(value + '\n')
    return value


def model_record(collection: Collection, method: str, settings: MethodSettings,
                 fold: int | None = None, run: RunContext = SILENT) -> dict:
    """What the model of ``method`` trained on ``collection`` with ``settings`` is: the record
    its directory holds, and whose digest (``run`` left out) names it."""
    every = settings.asdict()
    trains = settings.identity()
    mask = {'mask': 'the mask token of model_name'} if method == 'reatt' else {}
    return {'format': MODEL_FORMAT, 'method': method, 'settings': trains,
            'collection': {'id': collection.corpus_id,
                           'digest': collection_digest(collection, run)},
            'queries': QuerySource.of(settings, fold, **mask).identity(collection),
            'starts': _starts(collection, settings, fold, run),
            **_miners(settings),
            'arithmetic': str(compute_dtype('auto', resolve_device(None))).replace('torch.', ''),
            'run': {**{name: value for name, value in every.items() if name not in trains},
                    'chosen': sorted(settings.chosen)}}


def _miners(settings: MethodSettings) -> dict:
    """``miners``: the dense retrievers that mine a distillation teacher's candidates, as they
    are on this machine (a stand-in named as such)."""
    if 'miners' not in parse_teacher(getattr(settings, 'teacher', '') or 'bm25'):
        return {}
    return {'miners': [used if used == asked else f'{used} (in place of {asked})'
                       for used, asked in miners_at_hand(settings.miners)]}


def _starts(collection: Collection, settings: MethodSettings, fold: int | None,
            run: RunContext) -> dict:
    """What each start named by another method or a local path is: the distant-supervision
    model's key, or a directory's identity (:func:`_directory_identity`)."""
    out = {}
    if getattr(settings, 'start', None) == 'ds':
        ds = SETTINGS['ds'].of(**settings.start_settings)
        out['start'] = model_key(model_record(collection, 'ds', ds, fold, run))
    for name in ('start', 'model_name'):
        value = getattr(settings, name, None)
        if isinstance(value, str) and Path(value).is_dir():
            out[name] = _directory_identity(Path(value))
    return out


def _directory_identity(path: Path) -> str:
    """A stored model's key, or else a digest of a directory's files by name and size."""
    for record in (path / RECORD, path.parent / RECORD):
        if record.is_file():
            return model_key(json.loads(record.read_text()))
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob('*') if p.is_file()):
        digest.update(f'{file.relative_to(path)}\t{file.stat().st_size}\n'.encode())
    return digest.hexdigest()[:16]


def model_key(record: dict) -> str:
    """The directory name of the model ``record`` describes: ``<corpus>.<method>-<digest>`` (a
    query file keyed by its texts, not its path)."""
    identity = {name: value for name, value in record.items() if name != 'run'}
    identity['settings'] = {name: 'a file, keyed by its texts' if query_file(value) else value
                            for name, value in record['settings'].items()}
    return cache_key(f'{record["collection"]["id"]}.{record["method"]}', identity)


def record_dir(record: dict, run: RunContext = SILENT) -> Path:
    """The directory of the model ``record`` describes, in ``run``'s cache."""
    return cache_root(run.cache_dir) / 'models' / model_key(record)


def write_record(directory: Path, record: dict) -> Path:
    """Writes ``record`` as ``model.json`` in ``directory``."""
    path = Path(directory) / RECORD
    with written_whole(path, 'the model record', 'choose another --cache-dir') as out:
        out.write_text(json.dumps(record, indent=2, sort_keys=True) + '\n')
    return path


def read_record(directory: str | Path) -> dict:
    """The record in a model's directory (or in the directory above its ``final/``)."""
    directory = Path(directory)
    path = directory / RECORD if (directory / RECORD).is_file() else directory.parent / RECORD
    record = json.loads(path.read_text())
    if record.get('format') != MODEL_FORMAT:
        raise ValueError(f'{path} is of model format {record.get("format")}, and this package '
                         f'reads format {MODEL_FORMAT}: train the model again')
    return record


def read_settings(directory: str | Path) -> MethodSettings:
    """The settings object that trained the model in ``directory``, read back from its record."""
    record = read_record(directory)
    run = dict(record['run'])
    chosen = set(run.pop('chosen', []))
    settings = {name: None if name in chosen else value
                for name, value in record['settings'].items()}
    return SETTINGS[record['method']].of(**settings, **run)
