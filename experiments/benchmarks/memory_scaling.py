"""Peak memory and time against the corpus (issue 32, item 2): every trainer at its shipped
settings, and the index builds and searches beside them, on ADI, CISI, scifact and vaswani.

    python experiments/benchmarks/memory_scaling.py [--collections classic/adi ...] [--cells ...]

Each cell is a process of its own, as a user runs it (``selfsup train METHOD -c COLLECTION``, or
a build or a search), its peak resident memory the child's own ru_maxrss. A collection's cells
share one cache, in this order: the BM25 and MiniLM index builds, their search over the
collection's topics, then the trainers (so a trainer's peak is its own work: the BM25 and
MiniLM fp32 indexes are there, built unmeasured first where a trainer's cell runs alone, and a
trainer that encodes in bf16 builds its start's index in its cell; the queries a generator
writes are written by the first trainer that needs them, and the GGUF conversion by the first
that loads SmolLM2, as a user's later runs find them). Each cell's result is kept in
``experiments/results/memory_scaling/`` as soon as it ends,
and a cell found there is not run again: the whole grid takes many hours on 2 cores and may be
run over several sessions. Every run writes ``memory_scaling.{md,png}`` from the cells there.

A trainer's run longer than a session is run in pieces: stopped on purpose (a SIGTERM to its
``selfsup train``: it is then kept with the return code and marked as stopped, ``STOPPED``), it
goes on with ``--resume``, which runs the cell again on its cache as it was left (its partial
model and checkpoints): ``selfsup train`` resumes from the last checkpoint, as a user's rerun
would. The cell then keeps each piece; its peak is the largest piece's (memory is measured a
process at a time, so memory that grew across the stop would not be seen: each piece starts
from a checkpoint, as the run's own refreshes and rounds start from the state they are given),
its time the pieces' sum.

Where a whole run is out of reach (scifact's RUMBArt takes hours, its ACROBArT most of a day),
``--heaviest N`` runs RUMBArt and ACROBArT on the N of their training queries whose retrieved
passages are the longest (:func:`heaviest_queries`), every batch as heavy as a whole run's
heaviest; ``--settings`` may be given with it (e.g. ``refresh_every=4``: a refresh every few
steps). ``--again`` runs kept cells again, each new run added to the cell (how much the same work's
peak varies from run to run), and ``--env NAME=VALUE`` runs the cells with an environment variable
(the allocator's, to explain a peak: not what the package ships).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from functools import cache
from pathlib import Path

from pyterrier_selfsup.harness import provenance

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / 'scripts'))
from measured import run_measured  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / 'experiments' / 'results'
CELLS_DIR = RESULTS / 'memory_scaling'
COLLECTIONS = ['classic/adi', 'classic/cisi', 'beir/scifact/test', 'vaswani']
# cell -> the pipeline `selfsup train` trains
TRAINERS = {'ds': 'ds', 'distill': 'distill', 'rumbart': 'rumbart', 'acrobart': 'acrobart',
            'reatt': 'reatt_adjusted'}

# builds and searches: a small script each (the index classes as the pipelines use them)
BUILD = {
    'bm25 index': "import pyterrier_selfsup as s; s.BM25.from_collection(s.Collection('{c}'), verbose=True)",
    'minilm index': "import pyterrier_selfsup as s; s.DenseRetriever.from_collection(s.Collection('{c}'), verbose=True)",
    'bm25 search': "import pyterrier_selfsup as s; c = s.Collection('{c}'); s.BM25.from_collection(c)(c.topics())",
    'minilm search': ("import pyterrier_selfsup as s; c = s.Collection('{c}'); "
                      "s.DenseRetriever.from_collection(c)(c.topics())"),
}
CELLS = list(BUILD) + list(TRAINERS)
# how a cell's peak was taken: since 2026-11-26 by run_measured (measured.py), its own; cells without
# this field were started straight from this script's process, whose memory (about 0.5 GiB: torch
# imported) Linux counted in theirs, so a peak below that read as that (the build and search cells)
MEASURED = 'own (run_measured)'
# cells stopped before their end on purpose (a SIGTERM, so that a session could end): their peak is
# the run's up to then, a lower bound of the whole run's; remove the cell's JSON file to run it whole
STOPPED = {
    ('beir/scifact/test', 'reatt'): ('stopped (SIGTERM) after the first of its two iterations (625 of 1,250 steps, its teacher scoring '
                                    'included) and the start of the second, 2026-11-26, so that the session could end'),
    ('classic/cisi', 'rumbart'): ('stopped (SIGTERM) at step 26 of 313, after its checkpoint at step 25, 2026-11-26, so that the '
                                  'session could end; its checkpoint was on that session\'s machine, since returned, so the '
                                  'cell can only be run again whole'),
    ('vaswani', 'acrobart'): ('stopped (SIGTERM) after its checkpoint at step 75 of 313, 2026-11-27, so that the session '
                              'could end; its step records are its last checkpoint\'s'),
}
# cells whose time is not their own, for a reason their JSON file could not record
TIME_NOT_OWN = {
    ('beir/scifact/test', 'ds'): 'stopped (SIGSTOP) while examples_runtime.py and the CI suite ran, 2026-11-26',
    ('vaswani', 'rumbart'): ('unit tests ran beside it for some 7 minutes of its first teacher scoring, 2026-11-26 '
                             '(which went from 34 pairs a second to 4)'),
    ('beir/scifact/test', 'rumbart'): ('two examples (examples_runtime.py\'s new --logs, tried on them) ran beside it '
                                       'for about 2 minutes, 2026-11-27 05:37, its steps 26 to 32'),
}


def cell_path(collection: str, cell: str, queries: int | None = None, settings: str = '') -> Path:
    short = ('' if queries is None else f'@{queries}') + (f'+{settings}' if settings else '')
    return CELLS_DIR / f'{collection.replace("/", "_")}--{cell.replace(" ", "_")}{short}.json'


# the trainers whose step reads each query's top k passages through the generator (--heaviest)
RETRIEVE_AND_RECONSTRUCT = ('rumbart', 'acrobart')
HEAVIEST = 'heaviest'  # the settings label of --heaviest cells


def heaviest_queries(collection: str, n: int, cache: Path) -> dict:
    """The ``n`` of the shipped RUMBArt and ACROBArT runs' training queries (the same draw: their
    5,000 corpus sentences, seed 0) whose top k passages are the longest for the generator,
    written as a query log (``<cache>/heaviest-N.jsonl``) that a trainer cell is given
    (``queries=FILE,n_queries=N``) so that every one of its batches is among the heaviest of a
    whole run. A step's memory grows with its batch's longest row, not its mean: ACROBArT pads each
    row (the k passages, each cut at the generator's ``max_passage_length``, and the query) to the
    batch's longest, and the encoder pads a batch's k passages to their longest. The top k is the
    trainer's own first retrieval (the start encoder's cached index, exact search); a query log
    names no source passage, so none is excluded, as the trainer given the file excludes none.
    Returns the file and the row lengths (in the generator's tokens) of the chosen and of all."""
    import numpy as np

    from pyterrier_selfsup import Collection
    from pyterrier_selfsup.data.queries.source import Query, QuerySource
    from pyterrier_selfsup.harness.methods import source_topics
    from pyterrier_selfsup.models.dual_encoder import DualEncoder
    from pyterrier_selfsup.models.generator import load_generator
    from pyterrier_selfsup.models.reading import truncated_ids
    from pyterrier_selfsup.retrieval.ann import search_stage
    from pyterrier_selfsup.retrieval.base import top_k_excluding
    from pyterrier_selfsup.retrieval.dense import MINILM, flex_index
    from pyterrier_selfsup.training.settings import RumbartSettings
    shipped = RumbartSettings()
    c = Collection(collection)
    topics = source_topics(c, QuerySource(shipped.queries, shipped.n_queries, seed=shipped.seed))
    queries = [Query(str(qid), text, frozenset()) for qid, text in zip(topics['qid'], topics['query'])]
    encoder = DualEncoder.from_pretrained(MINILM)
    index = flex_index(c, encoder, cache_dir=cache)
    vectors = encoder.encode_queries([q.query for q in queries])
    top = top_k_excluding(search_stage(index, 'auto', 1000), queries, shipped.k, query_vectors=vectors)
    generator = load_generator(shipped.generator, cache_dir=cache, max_passage_length=shipped.max_passage_length)
    docnos = sorted({d for q in queries for d in top[q.qid]})
    passage_tokens = dict(zip(docnos, (len(truncated_ids(generator, t)) for t in c.texts(docnos))))
    target_tokens = [len(ids) for ids in generator.target_ids([q.query for q in queries])]
    rows = np.array([sum(passage_tokens[d] for d in top[q.qid]) + t for q, t in zip(queries, target_tokens)])
    chosen = np.argsort(-rows, kind='stable')[:n]
    path = cache / f'{HEAVIEST}-{n}.jsonl'  # (JSON lines: a sentence may hold a quote, which TSV reads as quoting)
    path.write_text(''.join(json.dumps({'qid': queries[i].qid, 'query': queries[i].query}) + '\n' for i in chosen))
    return {'file': str(path), 'qids': [queries[i].qid for i in chosen],
            'row tokens, chosen': {'least': int(rows[chosen].min()), 'most': int(rows[chosen].max())},
            'row tokens, all': {'queries': len(rows), 'mean': round(float(rows.mean()), 1),
                                'median': float(np.median(rows)), '99th percentile': float(np.percentile(rows, 99)),
                                'most': int(rows.max())}}


def label_parts(label: str) -> tuple:
    """A cell's label read back: whether it is a ``--heaviest`` cell, and the rest of its parts
    (``K=V`` settings, then ``env:NAME=VALUE``)."""
    parts = label.split(',') if label else []
    heavy = parts[:1] == [HEAVIEST]
    return heavy, parts[heavy:]


def cell_label(settings: str, env: dict | None = None) -> str:
    """What names a cell besides its collection, trainer and queries: its settings, then the
    environment variables it was run with (``env:NAME=VALUE``)."""
    return ','.join([settings] * bool(settings) + [f'env:{k}={v}' for k, v in (env or {}).items()])


def run_cell(collection: str, cell: str, cache: Path, queries: int | None = None, settings: str = '',
             resume: bool = False, heaviest: dict | None = None, env: dict | None = None) -> dict:
    label = cell_label(settings, env)
    if cell in BUILD:
        command = [sys.executable, '-c', BUILD[cell].format(c=collection)]
    else:
        if heaviest:  # (the label's settings after it, if any, are given as they are)
            settings = ','.join([f'queries={heaviest["file"]}'] + label_parts(settings)[1])
        given = ([f'n_queries={queries}'] if queries is not None else []) + ([settings] if settings else [])
        trainer = TRAINERS[cell] + (':' + ','.join(given) if given else '')
        command = [sys.executable, '-m', 'pyterrier_selfsup', 'train', trainer, '-c', collection]
        # a trainer cell trains: a model trained before under the same settings (a cell run again)
        # would be found in the cache, and only its loading measured; a stopped cell's next piece
        # (resume) goes on from its checkpoints there
        if not resume:
            shutil.rmtree(cache / 'models', ignore_errors=True)
    load = provenance.load()
    log_path = cache / f'{cell.replace(" ", "_")}.log'
    with open(log_path, 'w') as log:
        run = run_measured(command, env={**os.environ, **(env or {}), 'SELFSUP_CACHE': str(cache)}, log=log)
    rc = run.rc
    out = {'collection': collection, 'cell': cell, **({'queries': queries} if queries is not None else {}),
           **({'settings': label} if label else {}), **({HEAVIEST: heaviest} if heaviest else {}),
           **({'env': env} if env else {}),
           'command': ' '.join(['python', '-c', repr(command[2])] if cell in BUILD else ['python'] + command[1:]),
           'peak GiB': run.peak_gib, 'seconds': run.seconds, 'rc': rc, 'measured': MEASURED,
           'load': load, 'load at the end': provenance.load(), 'header': provenance.header()}
    said = log_path.read_text().splitlines()
    out['stage times'] = stage_times_said(said)
    if cell in TRAINERS:
        out['resident by step'] = resident_by_step(cache, cell)
        if resume:
            out['resumed from'] = next((line.split('resuming from ', 1)[1] for line in said
                                        if 'resuming from ' in line), None)
    if rc:
        out['tail'] = said[-20:]
    return out


def indexes_built(collection: str, cache: Path):
    """Builds the BM25 and MiniLM indexes in ``cache`` where its build cells did not (a trainer
    cell run on its own), unmeasured: a trainer's cell measures its own work, as a user's run
    after the indexes are built does. Where they are there, it only reopens them."""
    for cell in ('bm25 index', 'minilm index'):
        built = subprocess.run([sys.executable, '-c', BUILD[cell].format(c=collection)],
                               env={**os.environ, 'SELFSUP_CACHE': str(cache)},
                               capture_output=True, text=True)
        if built.returncode:  # (the trainer's cell then builds it, measured, and says so)
            print(f'{collection}: building the {cell} before the trainers failed:\n'
                  + '\n'.join(built.stderr.splitlines()[-10:]), flush=True)


def in_pieces(before: dict, piece: dict) -> dict:
    """A stopped cell (``before``) and the piece that resumed it, as one cell: each piece kept (with
    its own load, stage times and header), the peak the largest piece's, the time their sum, the
    load at the start the first piece's, the rest (return code, load at the end, log tail) the
    last piece's."""
    keys = ('peak GiB', 'seconds', 'rc', 'load', 'load at the end', 'stage times', 'header', 'tail')
    pieces = before.get('pieces') or [{k: before[k] for k in keys if k in before}]
    pieces = pieces + [{k: piece[k] for k in keys if k in piece}]
    whole = {**{k: v for k, v in before.items() if k not in keys}, **piece, 'pieces': pieces}
    whole['peak GiB'] = max(p['peak GiB'] for p in pieces)
    whole['seconds'] = sum(p['seconds'] for p in pieces)
    whole['load'] = pieces[0].get('load')
    return whole


def checkpoints(cache: Path, cell: str) -> list:
    """The whole checkpoints a stopped run of ``cell``'s trainer left in ``cache`` (its partial model)."""
    from pyterrier_selfsup.training.checkpoints import checkpoints as whole_checkpoints
    return [c for partial in sorted((cache / 'models').glob(f'*.{cell}-*.partial')) for c in whole_checkpoints(partial)]


def resident_by_step(cache: Path, cell: str) -> dict:
    """The trainer's resident memory as its training log kept it, step by step (since
    2026-11-26): at its first step, its least and most, and at its last; whether the run's memory
    grows with its length shows there."""
    logs = sorted((cache / 'models').glob(f'*.{cell}-*/training_log.jsonl'), key=lambda p: p.stat().st_mtime)
    stopped = [] if logs else checkpoints(cache, cell)  # a stopped run writes no log: its last checkpoint
    if logs:                                            # keeps the records so far
        records = list(map(json.loads, logs[-1].read_text().splitlines()))
    elif stopped:
        import torch

        from pyterrier_selfsup.training.checkpoints import STATE_FILE
        records = torch.load(stopped[-1] / STATE_FILE, map_location='cpu', weights_only=False)['log']
    else:
        return {}
    steps = [r for r in records if 'loss' in r and r.get('resident GiB') is not None]
    if not steps:
        return {}
    resident = [r['resident GiB'] for r in steps]
    # (and the steps whose record found the process's peak risen: where a run's peak came, which
    # vaswani's whole RUMBArt run, 2026-11-26, could not say once its cache was cleared)
    rose, peak = {}, 0.0
    for r in steps:
        if r.get('peak resident GiB') is not None and r['peak resident GiB'] > peak + 0.01:
            rose[r['step']] = peak = round(r['peak resident GiB'], 3)
    return {'steps': len(steps), 'first': resident[0], 'least': min(resident), 'most': max(resident),
            'last': resident[-1], 'at step': {r['step']: round(r['resident GiB'], 3) for r in steps},
            'peak rose at step': rose}


def stage_times_said(lines) -> list:
    """The per-stage times ``selfsup train`` logged at its end (the lines after "stage times:")."""
    at = max((i for i, line in enumerate(lines) if line.endswith('stage times:')), default=None)
    if at is None:
        return []
    return [line.split(': ', 1)[1].strip() for line in lines[at + 1:] if 'harness.trained:   ' in line]


def beside(cell: dict) -> bool:
    """Whether another job ran beside ``cell`` (cells from before the load was recorded: unknown, False)."""
    end = cell.get('load at the end')
    return bool(end) and float(end.split()[0]) > int(end.rsplit(' on ', 1)[1].split()[0]) + 0.5


def machine_of(cell: dict) -> str:
    """The machine a cell ran on, as its header names it."""
    return cell['header'].get('machine', '')


def main_machine(cells: list) -> str:
    """The machine most cells ran on: the summary marks each cell that ran on another (°)."""
    return Counter(map(machine_of, cells)).most_common(1)[0][0]


def table(cells: list, columns: list, order: list, sizes: dict, machine: str = '') -> list:
    lines = ['| collection | documents | ' + ' | '.join(columns) + ' |', '|---|---|' + '---|' * len(columns)]
    for c in order:
        row = {cell['cell']: cell for cell in cells if cell['collection'] == c}
        if not row:
            continue
        lines.append(f'| {c} | {sizes[c]:,} | ' + ' | '.join(
            (f'{row[k]["peak GiB"]:.2f} GiB{again(row[k])}, {row[k]["seconds"] / 60:.1f} min'
             + (f' (in {len(row[k]["pieces"])} pieces§)' if row[k].get('pieces') else '')
             + ((' (stopped‡)' if (c, k) in STOPPED else ' (failed)') if row[k]['rc'] else '')
             + ('*' if beside(row[k]) else '') + ('†' if (c, k) in TIME_NOT_OWN and whole_run(row[k]) else '')
             + ('°' if machine and machine_of(row[k]) != machine else '')
             if k in row else '') for k in columns) + ' |')
    return lines + ['']


def again(cell: dict) -> str:
    """`` (again: 4.31, 4.02)``: the peaks of the cell's runs again (``--again``), if any."""
    runs = [run['peak GiB'] for run in cell.get('runs again', []) if not run['rc']]
    return f' (again: {", ".join(f"{p:.2f}" for p in runs)})' if runs else ''


def queries_named(cell: dict) -> str:
    """A cell's training queries and what else it was given: ``all``, ``64``, ``192 heaviest, `refresh_every=4```."""
    heavy, parts = label_parts(cell.get('settings', ''))
    return str(cell.get('queries', 'all')) + ' heaviest' * heavy + ''.join(f', `{p}`' for p in parts)


def halves_most(at_step: dict) -> tuple:
    """The most resident memory over the first half of a run's steps and over the second."""
    values = [at_step[k] for k in sorted(at_step, key=int)]  # (to the MiB: a half's most may read 0.01 above
    # the run's most, which is kept whole; a row shows the lesser)
    middle = len(values) // 2
    return max(values[:middle] or values), max(values[middle:])


@cache
def mean_words(collection: str) -> float:
    """The mean number of words (split at white space) of a document's text as the trainers read it
    (read once a process: the summary is written after every cell)."""
    from pyterrier_selfsup import Collection
    lengths = [len(d['text'].split()) for d in Collection(collection).corpus_iter()]
    return sum(lengths) / max(1, len(lengths))


def whole_run(cell: dict) -> bool:
    """Whether a cell is a run of the whole work at shipped settings (not some queries, nor other settings)."""
    return 'queries' not in cell and 'settings' not in cell


def write_summary():
    from pyterrier_selfsup import Collection
    cells = [json.loads(p.read_text()) for p in sorted(CELLS_DIR.glob('*.json'))]
    if not cells:
        return
    sizes = {c: Collection(c).docs_count for c in {cell['collection'] for cell in cells}}
    order = [c for c in COLLECTIONS if c in sizes] + sorted(set(sizes) - set(COLLECTIONS))
    # (a trainer reads passages, up to the generator's 256 tokens each: their length, not their number, sizes a step)
    words = {c: mean_words(c) for c in order}
    machine = main_machine(cells)
    others = sorted({machine_of(cell) for cell in cells} - {machine})
    md = ['# Peak memory and time against the corpus', '',
          '- command: memory_scaling.py (each cell a process of its own; its header in its JSON file under '
          'memory_scaling/)',
          f'- machine: {machine}' + (' (every cell but those marked °)' if others else ''),
          *(f'- °: {other}' for other in others), '',
          '| collection | documents | words a document (mean) |', '|---|---|---|',
          *(f'| {c} | {sizes[c]:,} | {words[c]:.0f} |' for c in order), '',
          *table([cell for cell in cells if whole_run(cell)], CELLS, order, sizes, machine),
          'Each cell: peak resident memory, wall time (a cell that failed says so; its log tail is in its '
          'JSON file). *: another job ran beside it (the 1-minute load average at its end above the cores + 0.5), '
          'so its time is longer than alone; its memory is its own.', '',
          'A peak is the cell\'s own (`run_measured`, scripts/measured.py), except in cells whose JSON file has no '
          '`measured` field: those were started straight from this script, whose memory (torch imported: about '
          '0.5 GiB) Linux counted in theirs. Such a peak is right where it is above that (every trainer\'s); a '
          'cell below it would have read as it, so the build and search cells were run again (ADI, CISI, scifact, '
          '2026-11-26 10:21): all but one moved by 0.06 GiB at most (their own peaks are about as high: each '
          'imports the package); scifact\'s MiniLM index went from 0.99 GiB to 1.19 with its code unchanged (the earlier run '
          'beside the tests; not explained).', '',
          *(f'†: {c} {k}: its time is not its own: {why}.' for (c, k), why in TIME_NOT_OWN.items()), '',
          *(f'‡: {c} {k}: {why}. Its peak is the run\'s up to then, a lower bound of the whole run\'s (remove its '
            'JSON file to run it whole).' for (c, k), why in STOPPED.items()
            if any(cell['collection'] == c and cell['cell'] == k and cell['rc'] for cell in cells)),
          *(['§: run in pieces (`--resume`): stopped on purpose, then resumed from its last checkpoint by the same '
             'command on the same cache. Its peak is the largest piece\'s, its time the sum of the pieces\' (each '
             'piece, with its own peak, time and load, is in its JSON file).', '']
            if any(cell.get('pieces') for cell in cells) else [])]
    traced = [cell for cell in cells if cell.get('resident by step')]
    if traced:
        md += ['## Resident memory across a run\'s steps', '',
               'From the training log, which keeps the process\'s resident memory with every step (since 2026-11-26): '
               'at the first step, the least and the most over the steps, the most over each half of them, and at '
               'the last. A run whose memory grew with its length, not with its work, would show it here.', '',
               '| collection | trainer | queries | steps | first | least | most | most, first half | most, second half '
               '| last |', '|---|---|---|---|---|---|---|---|---|---|',
               *(f'| {cell["collection"]} | {cell["cell"]} | {queries_named(cell)} | '
                 f'{cell["resident by step"]["steps"]}'
                 + (f' (the last of {len(cell["pieces"])} pieces)' if cell.get('pieces') else '') + ' | '
                 + ' | '.join(f'{value:.2f} GiB' for value in (
                     *(cell['resident by step'][k] for k in ('first', 'least', 'most')),
                     *(min(half, cell['resident by step']['most'])
                       for half in halves_most(cell['resident by step']['at step'])), cell['resident by step']['last']))
                 + ' |' for cell in traced), '']
    short = [cell for cell in cells if not whole_run(cell)]
    if short:
        md += ['## Short runs, and what a setting trades', '',
               '`--queries N`: each trainer on N training queries (drawn as its full run draws its own), where the '
               'full run takes hours: its peak is a lower bound of the full run\'s (the same batches, fewer steps to '
               'creep); its time is not the full run\'s. `--settings K=V,...`: the same with those settings.', '']
        for n, given in sorted({(cell.get('queries', 0), cell.get('settings', '')) for cell in short}):
            heavy, rest = label_parts(given)
            plain = [p for p in rest if not p.startswith('env:')]
            named = [f'`--settings {",".join(plain)}`'] * bool(plain) + [f'`--env {p[4:]}`' for p in rest
                                                                         if p.startswith('env:')]
            title = (f'the {n} heaviest queries (`--heaviest {n}`' + ''.join(' ' + x for x in named) + ')' if heavy
                     else f'{n or "all the"} queries' + ''.join(', ' + x for x in named))
            md += [title + ':', '',
                   *table([cell for cell in short if (cell.get('queries', 0), cell.get('settings', '')) == (n, given)],
                          list(TRAINERS), order, sizes, machine)]
    heavy = [cell for cell in short if cell.get(HEAVIEST)]
    if heavy:
        md += ['## The heaviest batches', '',
               '`--heaviest N`: RUMBArt and ACROBArT on the N of their shipped training queries (5,000 corpus '
               'sentences, seed 0) whose top k passages, as the start encoder retrieves them, make the longest '
               'generator row (the k passages, each cut at 256 tokens, and the query; `heaviest_queries`), so that '
               'every batch is about as heavy as a whole run\'s heaviest: a step pads each row to its batch\'s '
               'longest. The trainer reads them as a query log, so it excludes no source passage. Row lengths in '
               'SmolLM2\'s tokens, of the chosen and of all 5,000; the steps where the run\'s peak rose. They do not '
               'bound a whole run\'s peak: on vaswani, whose whole runs are measured, each peaked below its whole run\'s. '
               'The same work\'s peak varies from run to run (`--again`), and with the allocator told to give large blocks '
               'back when they are freed (`--env MALLOC_MMAP_THRESHOLD_=131072`) the same steps peak about 1.5 GiB lower: '
               'what a long run adds to a short one\'s peak is mostly freed memory that glibc holds, which grows over '
               'a run\'s first few dozen steps (experiments/probes/research_log.md, "Training memory").', '',
               '| collection | trainer | queries | besides shipped | rows chosen | rows, all: median / 99th percentile / '
               'most | steps | peak | peak rose at step (GiB) | whole run\'s peak |', '|---|---|---|---|---|---|---|---|---|---|']
        whole = {(cell['collection'], cell['cell']): cell for cell in cells if whole_run(cell)}
        for cell in sorted(heavy, key=lambda cell: (order.index(cell['collection']), cell['cell'], cell['queries'])):
            h, rows = cell[HEAVIEST], cell[HEAVIEST]['row tokens, all']
            other = whole.get((cell['collection'], cell['cell']))
            md.append(f'| {cell["collection"]} | {cell["cell"]} | {cell["queries"]} | '
                      + ', '.join(f'`{kv}`' for kv in label_parts(cell['settings'])[1]) + ' | '
                      f'{h["row tokens, chosen"]["least"]} to '
                      f'{h["row tokens, chosen"]["most"]} | {rows["median"]:.0f} / {rows["99th percentile"]:.0f} / '
                      f'{rows["most"]} | {cell.get("resident by step", {}).get("steps", "")} | '
                      f'{cell["peak GiB"]:.2f} GiB{again(cell)} | '
                      + ', '.join(f'{k}: {v:.2f}' for k, v in cell.get('resident by step', {}).get('peak rose at step', {}).items())
                      + ' | ' + ('' if other is None else f'{other["peak GiB"]:.2f} GiB'
                                 + (' (stopped‡, a lower bound)' if other['rc'] else '')) + ' |')
        md.append('')
    (RESULTS / 'memory_scaling.md').write_text('\n'.join(md))
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for k in CELLS:
        points = sorted((sizes[cell['collection']], cell['peak GiB']) for cell in cells
                        if cell['cell'] == k and not cell['rc'] and whole_run(cell))
        if points:
            ax.plot(*zip(*points), marker='o', label=k)
    ax.set_xscale('log')
    ax.set_xlabel('documents in the corpus')
    ax.set_ylabel('peak resident memory (GiB)')
    ax.set_title('Peak memory against corpus size (2-core CPU, shipped settings)')
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(RESULTS / 'memory_scaling.png', dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--collections', nargs='+', default=COLLECTIONS)
    parser.add_argument('--cells', nargs='+', default=CELLS, choices=CELLS)
    parser.add_argument('--queries', type=int, help='trainers on only N training queries (cells kept '
                                                    'apart: a lower bound of the peak, in minutes, not hours)')
    parser.add_argument('--settings', default='', help='KEY=VALUE,... for every trainer (cells kept apart, '
                                                        'named with them): what a setting trades')
    parser.add_argument('--heaviest', type=int, metavar='N',
                        help='RUMBArt and ACROBArT on the N of their training queries whose retrieved passages are '
                             'the longest (heaviest_queries), every batch as heavy as a whole run\'s heaviest (cells '
                             'kept apart; not a bound of a whole run\'s peak: see the results\' "The heaviest '
                             'batches")')
    parser.add_argument('--env', action='append', default=[], metavar='NAME=VALUE',
                        help='run the trainers with this environment variable too (cells kept apart, named with it): '
                             'e.g. the allocator\'s MALLOC_MMAP_THRESHOLD_, to explain a peak, not to ship one')
    parser.add_argument('--again', action='store_true', help='run cells that are kept again, each new run added to '
                                                              'its file (`runs again`): how much a peak varies between '
                                                              'runs of the same work')
    parser.add_argument('--resume', action='store_true', help='run a stopped cell\'s next piece: it goes on from '
                                                               'its last checkpoint (see above)')
    parser.add_argument('--cache-root', default=None, help='where each collection\'s cache lives (default: a '
                                                           'directory under $TMPDIR kept between runs)')
    args = parser.parse_args()
    if args.queries is not None and args.queries < 1:
        parser.error('--queries: at least 1')
    if any('=' not in kv for kv in args.env):
        parser.error('--env: NAME=VALUE')
    env = dict(kv.split('=', 1) for kv in args.env)
    if args.again and args.resume:
        parser.error('--again: not with --resume')
    if args.heaviest is not None:
        if args.queries is not None or args.resume:
            parser.error('--heaviest: neither with --queries nor with --resume')
        if args.heaviest < 1:
            parser.error('--heaviest: at least 1')
        args.queries, args.settings = args.heaviest, ','.join([HEAVIEST] + ([args.settings] if args.settings else []))
        args.cells = [c for c in args.cells if c in RETRIEVE_AND_RECONSTRUCT]
    CELLS_DIR.mkdir(parents=True, exist_ok=True)
    root = Path(args.cache_root or Path(os.environ.get('TMPDIR', '/tmp')) / 'selfsup-memory-scaling')
    for collection in args.collections:
        cache = root / collection.replace('/', '_')
        cache.mkdir(parents=True, exist_ok=True)
        heaviest, indexed = None, False
        for cell in [c for c in CELLS if c in args.cells
                     and not ((args.queries is not None or args.settings or env) and c in BUILD)]:
            path = cell_path(collection, cell, args.queries, cell_label(args.settings, env))
            before = json.loads(path.read_text()) if path.exists() else None
            if args.resume:  # only a stopped cell whose checkpoints are still there: any other run would clear them
                if before is None or not before['rc'] or cell not in TRAINERS:
                    continue
                if not checkpoints(cache, cell):
                    print(f'{collection} {cell}: stopped, but no checkpoint of it is left in {cache / "models"}: '
                          'remove its JSON file to run it whole', flush=True)
                    continue
            elif args.again:
                if before is None or before['rc']:
                    continue
            elif before is not None:
                continue
            if cell in TRAINERS and not indexed:  # (once a collection, before its first trainer)
                indexes_built(collection, cache)
                indexed = True
            if args.heaviest is not None and heaviest is None:
                heaviest = heaviest_queries(collection, args.heaviest, cache)
            result = run_cell(collection, cell, cache, args.queries, args.settings, resume=args.resume,
                              heaviest=heaviest, env=env)
            if args.again:  # (kept beside the first run, which stays the cell's value)
                keys = ('peak GiB', 'seconds', 'rc', 'load', 'load at the end', 'stage times', 'resident by step',
                        'header')
                result = {**before, 'runs again': before.get('runs again', []) + [{k: result[k] for k in keys
                                                                                   if k in result}]}
            if args.resume:
                if not result['resumed from']:
                    sys.exit(f'{collection} {cell}: the next piece did not resume from a checkpoint (its log: '
                             f'{cache / cell.replace(" ", "_")}.log); the cell is left as it was')
                result = in_pieces(before, result)
            path.write_text(json.dumps(result, indent=1))
            print(json.dumps({k: v for k, v in result.items() if k not in ('header', 'tail', 'pieces')}), flush=True)
            write_summary()
    write_summary()


if __name__ == '__main__':
    main()
