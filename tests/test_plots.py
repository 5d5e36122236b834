"""The experiment figure stays readable whatever the names: no text leaves the figure,
no two texts overlap (matplotlib's renderer reports where each was drawn)."""
import itertools

import numpy as np
import pandas as pd
import pytest

from pyterrier_selfsup.harness.plots import results_figure, seed_groups, short_labels


def _long_names(n=10, length=120):
    names = ['bm25']
    for i in range(1, n):
        spec = (f'rumbart:queries=beir/scifact/train,teacher_temperature={i},start=ds,'
                f'note={"x" * 40}{i},k={i}')
        names.append((spec + ',pad=' + 'y' * length)[:length])
    return names


def _table(names, collections):
    rng = np.random.default_rng(0)
    rows = []
    for c in collections:
        for i, name in enumerate(names):
            rows.append({'collection': c, 'name': name, 'nDCG@10': 0.6 + rng.normal(0, 0.02),
                         'nDCG@10 reject': bool(i % 3 == 1)})
    return pd.DataFrame(rows)


def _per_query(names, table):
    rng = np.random.default_rng(1)
    return pd.DataFrame([{'collection': c, 'name': n, 'qid': str(q),
                          'nDCG@10': float(rng.uniform())}
                         for c in table['collection'].unique() for n in names for q in range(30)])


def _texts(fig):
    """Every text the figure draws, with where: tick labels of ticks inside the view (matplotlib
    keeps, visible but not drawn, the labels of ticks outside it), titles, axis labels,
    annotations, legends, the figure's own texts."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    texts = [fig._suptitle, fig._supxlabel, *fig.texts]
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            texts += [tick.label1 for tick in axis.get_major_ticks()
                      if low - 1e-9 <= tick.get_loc() <= high + 1e-9]
            texts.append(axis.label)
        texts += [ax.title, *ax.texts]
        if ax.get_legend() is not None:
            texts += ax.get_legend().get_texts()
    # (the suptitle is among fig.texts too)
    unique = {id(t): t for t in texts if t is not None}.values()
    return [(t.get_text(), t.get_window_extent(renderer)) for t in unique
            if t.get_visible() and t.get_text().strip()]


COLLECTIONS = ('beir/scifact/test', 'cranfield', 'vaswani', 'classic/cisi')


@pytest.mark.parametrize('n_collections', [1, 2, 4])
@pytest.mark.parametrize('seeds', [False, True])
def test_ten_long_names_fit_without_overlap(n_collections, seeds):
    """Ten pipelines of 120 characters (or one run under three seeds among them), on one,
    two or four collections (the figure's width follows), a long footer: all inside, apart."""
    import matplotlib.pyplot as plt
    names = _long_names()
    assert all(len(n) == 120 for n in names[1:])
    if seeds:
        names += [names[-1] + ',seed=1', names[-1] + ',seed=2']
    table = _table(names, COLLECTIONS[:n_collections])
    fig = results_figure(table, title='ten pipelines of 120 characters',
                         per_query=_per_query(names, table),
                         footer=['date: today', 'machine: ' + 'm' * 300])
    figure_box = fig.bbox
    texts = _texts(fig)
    assert len(texts) > 20 * n_collections  # tick labels, values, titles, the footer: all drawn
    # values carry their difference from the baseline
    assert any('(+0.' in t or '(-0.' in t for t, _ in texts)
    for text, box in texts:
        assert box.x0 >= figure_box.x0 - 1 and box.x1 <= figure_box.x1 + 1, text
        assert box.y0 >= figure_box.y0 - 1 and box.y1 <= figure_box.y1 + 1, text
    for (a, box_a), (b, box_b) in itertools.combinations(texts, 2):
        assert not box_a.overlaps(box_b), (a, b)
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:  # value labels inside their own panel, off its neighbours
        for label in ax.texts:
            box = label.get_window_extent(renderer)
            assert ax.bbox.x0 <= box.x0 and box.x1 <= ax.bbox.x1, label.get_text()
    plt.close(fig)


def test_labels_keep_only_what_tells_pipelines_apart():
    names = ['bm25', 'rumbart:queries=beir/scifact/train,teacher_temperature=4',
             'rumbart:queries=beir/scifact/train,teacher_temperature=1']
    assert short_labels(names) == ['bm25', 'rumbart teacher_temperature=4',
                                   'rumbart teacher_temperature=1']
    assert seed_groups(['bm25', 'ds:lr=1e-5', 'ds:lr=1e-5,seed=1', 'ds:lr=1e-5,seed=2']) == {
        'bm25': ['bm25'], 'ds:lr=1e-5': ['ds:lr=1e-5', 'ds:lr=1e-5,seed=1', 'ds:lr=1e-5,seed=2']}
