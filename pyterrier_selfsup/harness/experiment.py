"""The experiment harness: named pipelines over a list of collections, one
``pt.Experiment`` per collection, and results files that say what produced them.

Metrics: nDCG@10, R@100, RR@10 and mean response time; every pipeline is compared with the
first (the baseline) by a paired t-test over queries, Holm-corrected. The per-query scores
are kept for the figure.
"""
import gzip
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyterrier as pt
from ir_measures import RR, R, nDCG

from pyterrier_selfsup._cache import writable, written_whole
from pyterrier_selfsup.context import SILENT, RunContext
from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.harness import provenance, trained
from pyterrier_selfsup.harness.errors import NothingToEvaluate
from pyterrier_selfsup.harness.pipelines import PipelineSpec, get_pipeline
from pyterrier_selfsup.harness.plots import plot_results
from pyterrier_selfsup.progress import progress_mode

MEASURES = [nDCG @ 10, R @ 100, RR @ 10]
MEASURE_NAMES = [str(m) for m in MEASURES]
TEST = 't'
CORRECTION = 'holm'
ALPHA = 0.05


@dataclass
class CollectionResult:
    collection: str
    docs: int | None
    topics: int
    qrels: int
    table: pd.DataFrame  # pt.Experiment's frame, one row per pipeline
    # per pipeline: building or reopening its index, loading its model
    setup_seconds: dict[str, float]
    # name, qid and each measure, a row per pipeline and query
    per_query: pd.DataFrame | None = None
    # the collection's whole time: every pipeline's set-up, its run over the topics, evaluation
    seconds: float | None = None


@dataclass
class ExperimentResult:
    name: str
    header: dict[str, str]
    pipelines: list[PipelineSpec]
    results: list[CollectionResult]

    def table(self) -> pd.DataFrame:
        """All collections in one frame, with a ``collection`` column first."""
        return pd.concat([r.table.assign(collection=r.collection) for r in self.results],
                         ignore_index=True)[
            ['collection'] + list(self.results[0].table.columns)]

    def per_query(self) -> pd.DataFrame | None:
        """Every pipeline's per-query scores on every collection (``collection`` first)."""
        if any(r.per_query is None for r in self.results):
            return None
        return pd.concat([r.per_query.assign(collection=r.collection) for r in self.results],
                         ignore_index=True)[
            ['collection'] + list(self.results[0].per_query.columns)]


def run_experiment(collections: Sequence[str], pipelines: Sequence[str], *,
                   name: str = 'experiment', run: RunContext = SILENT,
                   log=print, judgements: tuple[pd.DataFrame, pd.DataFrame] | None = None
                   ) -> ExperimentResult:
    """Evaluates every pipeline on every collection; names are checked before any work.
    ``run``: the cache and whether progress is shown; ``log``: where each collection's table is
    written; ``judgements``: (topics, qrels) to judge one collection by instead of its own
    (:func:`~pyterrier_selfsup.harness.judging.read_judgements`).

        result = run_experiment(['classic/adi'], ['bm25', 'minilm'], run=RunContext(verbose=True))
    """
    specs = [get_pipeline(p) for p in pipelines]
    if not specs:
        raise ValueError('no pipelines to evaluate')
    colls = [Collection(c) for c in collections]
    if not colls:
        raise ValueError('no collections to evaluate on')
    if judgements is not None and len(colls) != 1:
        raise ValueError('judgements given for one collection; given collections: '
                         f'{list(collections)}')
    for given, coll in zip(collections, colls):
        if judgements is None and not coll.has_judgements:
            raise NothingToEvaluate(
                f'{given} has no queries with relevance judgements, so there is nothing to '
                f'evaluate. To adapt a retriever to it without labels: selfsup train distill '
                f'-c {given} --output DIR')
    header = provenance.header()  # the code and machine as they are when the work starts
    started = time.time()
    results = []
    for coll in colls:
        log(f'== {coll.name}')
        collection_started = time.time()
        systems, setup_seconds = [], {}
        for spec in specs:
            t0 = time.time()
            systems.append(spec.build(coll, run))
            setup_seconds[spec.name] = time.time() - t0
        topics, qrels = judgements or (coll.topics(), coll.qrels())
        # each system runs once, timed as pt.Experiment's mrt is
        names, runs, mrt = [s.name for s in specs], [], []
        for system in systems:
            t0 = time.time()
            runs.append(system(topics))
            mrt.append(1000 * (time.time() - t0) / len(topics))
        table = pt.Experiment(
            runs, topics, qrels, MEASURES, names=names, baseline=0 if len(specs) > 1 else None,
            test=TEST, correction=CORRECTION if len(specs) > 1 else None, correction_alpha=ALPHA,
            verbose=run.verbose and progress_mode() == 'bars')
        table.insert(1 + len(MEASURES), 'mrt', mrt)
        per_query = (pt.Experiment(runs, topics, qrels, MEASURES, names=names, perquery=True)
                     .pivot_table(index=['name', 'qid'], columns='measure', values='value')
                     .reset_index())
        per_query = per_query[['name', 'qid'] + MEASURE_NAMES]
        per_query['name'] = pd.Categorical(per_query['name'], names, ordered=True)
        per_query = (per_query.sort_values(['name', 'qid']).astype({'name': str})
                     .reset_index(drop=True))
        results.append(CollectionResult(coll.name, coll.docs_count, len(topics), len(qrels), table,
                                        setup_seconds, per_query,
                                        seconds=time.time() - collection_started))
        log(format_table(table))
    header['wall time'] = f'{time.time() - started:.0f} s'
    return ExperimentResult(name, header, specs, results)


LOG, LOG_GZ = 'training_log.jsonl', 'training_log.jsonl.gz'


def read_training_log(folder: str | Path) -> list[dict]:
    """The records of the training log in ``folder`` (``training_log.jsonl`` or ``.jsonl.gz``);
    an empty list where there is neither.

        steps = [r for r in read_training_log('runs/ds/final') if 'loss' in r]
    """
    folder = Path(folder)
    for path, opener in ((folder / LOG, open), (folder / LOG_GZ, gzip.open)):
        if path.exists():
            with opener(path, 'rt') as lines:
                return [json.loads(line) for line in lines if line.strip()]
    return []


# ---------------------------------------------------------------------------------------
# Rendering


def format_table(table: pd.DataFrame) -> str:
    """A markdown table: each measure, and for non-baseline rows the corrected p-value
    against the baseline (``*`` where significant at ALPHA)."""
    has_test = f'{MEASURE_NAMES[0]} p-value corrected' in table.columns
    rows = []
    for i, row in table.iterrows():
        cells = [str(row['name'])]
        for m in MEASURE_NAMES:
            cell = f'{row[m]:.4f}'
            if has_test and i > 0:
                p = row[f'{m} p-value corrected']
                if np.isnan(p):  # every per-query value equals the baseline's: no test to make
                    cell += ' (= baseline)'
                else:
                    cell += f' (p={p:.3g}{"*" if row[f"{m} reject"] else ""})'
            cells.append(cell)
        cells.append(f'{row["mrt"]:.1f}')
        rows.append(cells)
    head = ['pipeline'] + MEASURE_NAMES + ['mrt (ms)']
    lines = ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)]
    lines += ['| ' + ' | '.join(cells) + ' |' for cells in rows]
    return '\n'.join(lines)


def describe_settings(result: ExperimentResult) -> dict[str, str]:
    lines = {}
    models = sorted({provenance.model_revision(m) for s in result.pipelines for m in s.models})
    lines['models'] = ', '.join(models) or 'none'
    lines['data'] = '; '.join(
        f'{r.collection} ({r.docs} docs, {r.topics} topics, {r.qrels} judgments)'
        for r in result.results)
    for spec in result.pipelines:
        shown = dict(spec.settings)
        if spec.method:  # (a default that other settings choose, as chosen)
            chosen = trained.training_settings(spec.method, spec.settings)
            shown.update({k: v for k, v in chosen.items() if k in shown})
        settings = ', '.join(f'{k}={v}' for k, v in shown.items())
        lines[f'pipeline {spec.name}'] = f'{spec.description} ({settings})'
    lines['evaluation'] = (f'{", ".join(MEASURE_NAMES)}, mean response time; '
                           f'baseline {result.pipelines[0].name}; '
                           f'paired {TEST}-test, {CORRECTION} correction, alpha {ALPHA}')
    return lines


def header_lines(result: ExperimentResult) -> list[str]:
    return [f'{k}: {v}' for k, v in {**result.header, **describe_settings(result)}.items()]


def write_results(result: ExperimentResult, results_dir: str | Path) -> list[Path]:
    """Writes ``<name>.md``, ``<name>.csv`` and ``<name>.png``, each headed by provenance and
    each whole or not at all."""
    results_dir = Path(results_dir)
    hint = 'choose another directory with --results-dir'
    writable(results_dir, f'the results of {result.name}', hint)
    base = results_dir / result.name
    header = header_lines(result)

    def write(path: Path, fill: Callable[[Path], None]):
        with written_whole(path, f'the results file {path.name}', hint) as partial:
            fill(partial)

    md = [f'# {result.name}', ''] + [f'- {line}' for line in header] + ['']
    for r in result.results:
        setup = ', '.join(f'{k} {v:.0f} s' for k, v in r.setup_seconds.items())
        md += [f'## {r.collection}', '', format_table(r.table), '',
               f'{r.docs} documents, {r.topics} topics, {r.qrels} judgments. Set-up (building or '
               f'reopening indexes, loading models): {setup}.'
               + (f' In all, with retrieval and evaluation: {r.seconds:.0f} s.'
                  if r.seconds is not None else ''), '']
    write(base.with_suffix('.md'), lambda path: path.write_text('\n'.join(md)))

    def csv(path: Path):
        with open(path, 'w') as fh:
            fh.writelines(f'# {line}\n' for line in header)
            result.table().to_csv(fh, index=False)
    write(base.with_suffix('.csv'), csv)
    written = [base.with_suffix('.md'), base.with_suffix('.csv')]
    per_query = result.per_query()
    if per_query is not None:  # (plain CSV: what the figure's intervals are computed from)
        write(base.with_suffix('.perquery.csv'), lambda path: per_query.to_csv(path, index=False))
        written.append(base.with_suffix('.perquery.csv'))

    write(base.with_suffix('.png'),
          lambda path: plot_results(result.table(), path, title=result.name, per_query=per_query,
                                    header=header))
    return written + [base.with_suffix('.png')]
