"""Redraws the figures under results/ from the data beside them (issue 18), measuring nothing.

- Each `<name>.csv` written by the harness (`write_results`: provenance lines, then one row
  per collection and pipeline with the measures and the corrected test against the
  baseline) becomes `<name>.png` again through `pyterrier_selfsup.harness.plots`; where a
  `<name>.perquery.csv` was kept (runs from now on), with confidence intervals and a
  win/tie/loss strip.
- Each `*_curves/**/training_log.jsonl.gz` becomes its `training_curve.png` again
  (`plot_training_curve`), titled by the run's folder (its pipeline and settings).
- `search_scaling.png`, `token_index_scaling.png` (from their JSON) and `reatt_heads.png`
  (from its CSV) through their own scripts' `--plot-only`.

    python experiments/tools/replot.py [NAME ...]      # all of them without names
"""
import sys
from pathlib import Path

import pandas as pd

from pyterrier_selfsup.harness.experiment import read_training_log
from pyterrier_selfsup.harness.pipelines import PIPELINES
from pyterrier_selfsup.harness.plots import MARKER_LABELS, plot_results, plot_training_curve

RESULTS = Path(__file__).resolve().parents[1] / 'results'


def read(path: Path):
    header = [line[2:].rstrip('\n') for line in path.read_text().splitlines() if line.startswith('# ')]
    return header, pd.read_csv(path, comment=None, skiprows=len(header))


def replot(path: Path) -> Path:
    header, table = read(path)
    per_query = path.with_suffix('.perquery.csv')
    per_query = pd.read_csv(per_query) if per_query.is_file() else None
    return plot_results(table, path.with_suffix('.png'), title=path.stem, per_query=per_query, header=header)


def replot_curve(log_path: Path) -> Path:
    """A training curve again from its log: what the trainer plotted (RUMBArt: its loss above
    the batch's lower bound), its markers (refreshes, iterations, rounds), a title from
    its folder (``<collection>/<pipeline settings>`` as `copy_training_curves` names them)."""
    log = read_training_log(log_path.parent)
    key, label = ('excess loss', 'loss above its lower bound') if any('excess loss' in r for r in log) \
        else ('loss', 'loss')
    marker = next((m for m in MARKER_LABELS if any(m in r for r in log)), None)
    folder = log_path.parent
    # the folder is `<pipeline>_<settings>`, and pipeline names have underscores too: the longest registered one
    name = max((n for n in PIPELINES if folder.name == n or folder.name.startswith(n + '_')), key=len,
               default=folder.name.partition('_')[0])
    settings = folder.name[len(name) + 1:]
    title = f'{name} ({folder.parent.name})' if folder.parent.parent.name.endswith('_curves') else name
    path = folder / 'training_curve.png'
    plot_training_curve(log, path, title=title, key=key, ylabel=label, marker=marker,
                        subtitle=', '.join(settings_of(settings)))
    return path


def settings_of(folder_settings: str) -> list:
    """``queries=x_n_queries=5_max_passage_length=128`` → its ``key=value`` parts: the folder
    joins them with ``_``, which keys contain too, so a piece with no ``=`` (``n``, ``max``)
    belongs to the next one."""
    parts, pending = [], []
    for piece in folder_settings.split('_') if folder_settings else []:
        pending.append(piece)
        if '=' in piece:
            parts.append('_'.join(pending))
            pending = []
    return parts + (['_'.join(pending)] if pending else [])


def main(argv=None):
    names = (argv if argv is not None else sys.argv[1:])
    paths = [RESULTS / f'{n}.csv' for n in names] if names else sorted(RESULTS.glob('*.csv'))
    for path in paths:
        if path.name.endswith('.perquery.csv'):
            continue
        header, table = read(path)
        if not {'collection', 'name'} <= set(table.columns):
            print(f'skipped {path.name}: not an experiment table')
            continue
        print(replot(path))
    if not names:
        here = Path(__file__).resolve().parents[1]  # the scripts that draw their own figures
        sys.path[:0] = [str(here / 'benchmarks')]
        import reatt_heads
        import search_scaling
        import token_index_scaling
        print(search_scaling.main(['--plot-only']))
        print(token_index_scaling.main(['--plot-only']))
        print(reatt_heads.plot_only())
        for log in sorted(RESULTS.glob('*_curves/**/training_log.jsonl*')):
            print(replot_curve(log))


if __name__ == '__main__':
    main()
