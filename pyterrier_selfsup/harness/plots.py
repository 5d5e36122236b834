"""The experiment figure: what the results table says, readable at a glance.

One panel per collection, one row per pipeline, its value a dot joined to the baseline's
dashed line; a difference the table's corrected test finds significant is marked (▲ above,
▼ below), and each value is written with its difference from the baseline. With per-query
scores, each dot carries its confidence interval over queries and a win/tie/loss strip
follows; pipelines that differ only in ``seed`` become one dot, the seeds' mean, each seed a
ring.

Labels are short aliases (:func:`short_labels`); the settings all pipelines share are written
once under the title.
"""
import re
import textwrap
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

WRAP = 34  # characters a label line
FOOTER_KEYS = ('date', 'code', 'machine', 'models')  # the provenance lines a figure shows under it


def _settings(name: str) -> dict[str, str]:
    _, _, spec = name.partition(':')
    return dict(part.split('=', 1) for part in spec.split(',') if '=' in part)


def _short_value(value: str) -> str:
    return value.rstrip('/').rsplit('/', 1)[-1]


def short_labels(names: Sequence[str]) -> list[str]:
    """A short, distinct alias for each pipeline spec ``base:key=value,...``: its base name
    and the settings not shared by every pipeline of that base in ``names``."""
    bases = [n.partition(':')[0] for n in names]
    labels = []
    for name, base in zip(names, bases):
        siblings = [_settings(n) for n, b in zip(names, bases) if b == base]
        own = _settings(name)
        differing = {k: v for k, v in own.items() if any(s.get(k) != v for s in siblings)}
        labels.append(' '.join([base] + [f'{k}={_short_value(v)}' for k, v in differing.items()]))
    # still equal (a setting cut to the same last part): fall back to the full specs' order
    for label in set(labels):
        same = [i for i, other in enumerate(labels) if other == label]
        if len(same) > 1:
            for n, i in enumerate(same):
                labels[i] = f'{label} #{n + 1}'
    return labels


def shared_settings(names: Sequence[str]) -> str:
    """The settings every pipeline of a base name shares (said once, under the title)."""
    out = []
    for base in dict.fromkeys(n.partition(':')[0] for n in names):
        group = [_settings(n) for n in names if n.partition(':')[0] == base]
        if len(group) > 1 or group[0]:
            common = {k: v for k, v in group[0].items() if all(g.get(k) == v for g in group)}
            if common:
                out.append(f'{base}: ' + ', '.join(f'{k}={_short_value(v)}'
                                                   for k, v in common.items()))
    return '; '.join(out)


def seed_groups(names: Sequence[str]) -> dict[str, list[str]]:
    """Pipelines that differ only in ``seed``, under their spec without it (in order)."""
    groups: dict[str, list[str]] = {}
    for name in names:
        key = re.sub(r'(?<=[:,])seed=\d+,?|,seed=\d+$', '', name).rstrip(',:')
        groups.setdefault(key, []).append(name)
    return groups


def _wrapped_labels(names: Sequence[str]) -> list[str]:
    return [textwrap.fill(label, WRAP, break_long_words=True) for label in short_labels(names)]


def confidence_interval(values: np.ndarray) -> float:
    """Half-width of the t-based 95% interval of the mean of ``values``."""
    from scipy.stats import t
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return 0.0
    return float(t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values)))


def plot_results(table: pd.DataFrame, path, *, dpi: int = 120, header: Sequence[str] = (),
                 **kwargs):
    """:func:`results_figure` written to ``path``: ``header`` (provenance, ``key: value``
    lines) in its metadata, and its :data:`FOOTER_KEYS` lines under the figure."""
    import matplotlib.pyplot as plt
    footer = [line for line in header if line.split(':')[0] in FOOTER_KEYS]
    fig = results_figure(table, footer=footer, **kwargs)
    fig.savefig(path, dpi=dpi, metadata={'Description': '\n'.join(header)} if header else None)
    plt.close(fig)
    return path


def results_figure(table: pd.DataFrame, *, measure: str = 'nDCG@10', title: str = '',
                   per_query: pd.DataFrame | None = None, footer: Sequence[str] = (),
                   columns: int = 3):
    """The figure of an experiment's ``table`` (columns ``collection``, ``name``, ``measure``
    and, after each collection's baseline row, ``<measure> reject``): a panel per collection,
    ``columns`` panels a row. ``per_query``: columns ``collection``, ``name``, ``qid``,
    ``measure``."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    collections = list(dict.fromkeys(table['collection']))
    names = list(dict.fromkeys(table['name']))
    groups = seed_groups(names)
    seeded = any(len(g) > 1 for g in groups.values())
    keys = list(groups) if seeded else names
    wrapped = _wrapped_labels(keys)
    lines_per_row = max(label.count('\n') + 1 for label in wrapped)
    row_height = 0.25 + 0.15 * lines_per_row
    wins = per_query is not None and len(names) > 1
    columns = min(columns, len(collections))
    panel_rows = -(-len(collections) // columns)
    step = 2 if wins else 1  # grid rows a row of panels takes: the panels (and their strips)
    grid_rows = panel_rows * step
    heights = ([row_height * len(keys) + 0.9, row_height * (len(names) - 1) + 0.9] * panel_rows
               if wins else [row_height * len(keys) + 0.9] * panel_rows)
    width = 2.4 + 3.3 * columns
    legend = ['dashed: the baseline (first), (±x): the difference from it '
              '(seeds: the smallest and largest)',
              'value axes span the data, not 0..1',
              '▲/▼: significant against the baseline (the table\'s corrected test)']
    if per_query is not None:
        legend.append('whiskers: 95% CI over queries')
    if seeded:
        legend.append('rings: seeds, dot: their mean')
    line = int(width * 18)  # monospace characters a footer line holds (6 pt: 20 an inch)
    footer_lines = (textwrap.wrap('; '.join(legend), line) +
                    [textwrap.shorten(f, line) for f in footer])
    fig, axes = plt.subplots(grid_rows, columns,
                             figsize=(width, sum(heights) + 1.2 + 0.12 * len(footer_lines)),
                             squeeze=False, layout='constrained',
                             gridspec_kw={'height_ratios': heights})
    placed = []  # (axes, its value labels)
    for c, collection in enumerate(collections):
        row, column = divmod(c, columns)
        ax = axes[row * step][column]
        rows = table[table['collection'] == collection].set_index('name')
        means, errors, marks, dots = [], [], [], []
        for key in keys:
            members = [m for m in (groups[key] if seeded else [key]) if m in rows.index]
            values = [float(rows.loc[m, measure]) for m in members]
            means.append(np.mean(values) if values else np.nan)
            dots.append(values if len(values) > 1 else [])
            error = 0.0
            if per_query is not None and members:  # seeds: the interval of their per-query mean
                scores = per_query[(per_query['collection'] == collection) &
                                   per_query['name'].isin(members)]
                error = confidence_interval(scores.groupby('qid')[measure].mean().to_numpy())
            errors.append(error)
            marks.append(any(bool(rows.loc[m, f'{measure} reject']) for m in members
                             if m != names[0] and f'{measure} reject' in rows.columns))
        y = np.arange(len(keys))[::-1]
        base_value = means[0]
        ax.axvline(base_value, color='0.45', ls='--', lw=0.9)
        for yi, m, e, vals, key in zip(y, means, errors, dots, keys):
            colour = '0.45' if key == keys[0] else 'C0'
            ax.plot([base_value, m], [yi, yi], color=colour, lw=2, alpha=0.35)
            ax.errorbar([m], [yi], xerr=[e] if e else None, fmt='o', color=colour, ms=6, capsize=3)
            if vals:
                ax.plot(vals, [yi] * len(vals), 'o', mfc='none', mec='k', ms=4, zorder=3)
        low = np.nanmin([m - e for m, e in zip(means, errors)] + [v for d in dots for v in d])
        high = np.nanmax([m + e for m, e in zip(means, errors)] + [v for d in dots for v in d])
        span = max(high - low, 1e-3)
        ax.set_xlim(low - 0.1 * span, high + 0.1 * span)
        labels = []
        for k, (yi, m, e, mark, vals) in enumerate(zip(y, means, errors, marks, dots)):
            text = f'{m:.3f}' + ((' ▲' if m > base_value else ' ▼') if mark else '') \
                + (f'\n({m - base_value:+.3f})' if k else '') \
                + (f'\nseeds {min(vals) - base_value:+.3f} to {max(vals) - base_value:+.3f}'
                   if k and vals else '')
            left = m < base_value  # on the side away from the baseline's line
            anchor = min([m - e] + vals) if left else max([m + e] + vals)
            labels.append(ax.annotate(text, (anchor, yi), xytext=(-4 if left else 4, 0),
                                      textcoords='offset points', va='center',
                                      ha='right' if left else 'left', fontsize=7, linespacing=1.1))
        placed.append((ax, labels))
        ax.set_ylim(-0.6, len(keys) - 0.4)
        ax.set_yticks(y, wrapped if column == 0 else [''] * len(y), fontsize=8)
        ax.set_title(collection, fontsize=9)
        ax.set_xlabel(measure, fontsize=8)
        ax.tick_params(axis='x', labelsize=7)
        if wins:
            _win_tie_loss(axes[row * step + 1][column], per_query, collection, names, measure,
                          first=column == 0)
    for extra in range(len(collections), panel_rows * columns):  # empty cells of the last row
        row, column = divmod(extra, columns)
        for r in range(step):
            axes[row * step + r][column].set_visible(False)
    shared = shared_settings(names)
    fig.suptitle('\n'.join(textwrap.wrap(title + (f' ({shared})' if shared else ''),
                                         int(width * 13))), fontsize=9)
    fig.supxlabel('\n'.join(footer_lines), fontsize=6, family='monospace', ha='left', x=0.005)
    _fit_labels(fig, placed)
    return fig


def _fit_labels(fig, placed, pad: float = 0.02):
    """Widen each panel's value axis until its value labels lie inside it (iterated to a fixed
    point, since a label's width is fixed in points)."""
    fig.canvas.draw()  # the layout, and the labels' extents in pixels
    renderer = fig.canvas.get_renderer()
    for ax, labels in placed:
        width = ax.bbox.width
        low, high = ax.get_xlim()
        extents = []  # (anchor in data, left and right edge in pixels from the anchor)
        for label in labels:
            box = label.get_window_extent(renderer)
            at = ax.transData.transform((label.xy[0], 0))[0]
            extents.append((label.xy[0], box.x0 - at, box.x1 - at))
        x0, x1 = low, high
        for _ in range(100):
            scale = (x1 - x0) / width  # data units a pixel
            new0 = min([low] + [a + left * scale for a, left, _ in extents]) - pad * (x1 - x0)
            new1 = max([high] + [a + right * scale for a, _, right in extents]) + pad * (x1 - x0)
            if abs(new0 - x0) + abs(new1 - x1) < 1e-6 * (x1 - x0):
                break
            x0, x1 = new0, new1
        ax.set_xlim(x0, x1)


def _win_tie_loss(ax, per_query, collection, names, measure, first):
    """Per pipeline but the baseline, the share of queries above / equal to / below it."""
    frame = (per_query[per_query['collection'] == collection]
             .pivot_table(index='qid', columns='name', values=measure))
    base = frame[names[0]]
    labels = _wrapped_labels(names)[1:] if first else None
    names = names[1:]
    y = np.arange(len(names))[::-1]
    shares = []
    for name in names:
        delta = frame[name] - base
        shares.append(((delta > 1e-9).mean(), (delta.abs() <= 1e-9).mean(), (delta < -1e-9).mean()))
    shares = np.array(shares)
    left = np.zeros(len(names))
    for k, (label, colour) in enumerate(zip(('wins', 'ties', 'losses'), ('C2', '0.8', 'C3'))):
        ax.barh(y[:len(names)], shares[:, k], left=left, color=colour, height=0.6, label=label)
        left += shares[:, k]
    ax.set_xlim(0, 1)
    ax.set_yticks(y[:len(names)], labels if labels is not None else [''] * len(names), fontsize=8)
    ax.set_xlabel(f'queries against the baseline ({measure})', fontsize=8)
    ax.tick_params(axis='x', labelsize=7)
    ax.legend(fontsize=6, loc='lower center', bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False)


# what a method's marker records mean, for the curve's legend
MARKER_LABELS = {'refresh seconds': 'index refreshed',
                 'retrieval seconds': 'close documents re-retrieved',
                 'round': 'teacher round starts'}


def plot_training_curve(log: list[dict], path: Path, title: str = '', *, key: str = 'loss',
                        ylabel: str = 'loss', marker: str | None = None, subtitle: str = ''):
    """``key`` of the log per optimiser step (and a running mean), a vertical line at each
    record that has ``marker``, and validation nDCG@10 where the log has it; ``subtitle``:
    the run's settings, wrapped under the title."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    steps = [r['step'] for r in log if key in r]
    losses = [r[key] for r in log if key in r]
    fig, ax = plt.subplots(figsize=(7, 4.4), layout='constrained')
    ax.plot(steps, losses, alpha=0.35, label=f'{ylabel}, each step')
    if len(losses) >= 10:
        w = max(5, len(losses) // 20)
        ax.plot(steps[w - 1:], np.convolve(losses, np.ones(w) / w, mode='valid'),
                label=f'mean of {w} steps')
    marked = [r['step'] for r in log if marker is not None and marker in r]
    for i, step in enumerate(marked):
        ax.axvline(step, color='grey', lw=0.6, ls=':',
                   label=MARKER_LABELS.get(marker, marker) if i == 0 else None)
    ax.set_xlabel('optimiser step')
    ax.set_ylabel(ylabel)
    handles, labels = ax.get_legend_handles_labels()
    validation = [(r['step'], r['validation nDCG@10']) for r in log if 'validation nDCG@10' in r]
    if validation:
        ax2 = ax.twinx()
        ax2.plot(*zip(*validation), 'o-', color='C2', label='validation nDCG@10')
        ax2.set_ylabel('validation nDCG@10')
        more_handles, more_labels = ax2.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    ax.set_title('\n'.join([title] + textwrap.wrap(subtitle, 90)), fontsize=10)
    # below the axes, so that it never covers the curve
    fig.legend(handles, labels, loc='outside lower center', ncol=min(4, len(labels)), fontsize=8,
               frameon=False)
    fig.savefig(path, dpi=110)
    plt.close(fig)
