"""The README's "What to expect" table, read from the committed results files.

Measures nothing: it reads the nDCG@10 of BM25, MiniLM, the fused teacher, the distilled
student (`distill`) and its hybrid from the label-free distillation groups, and the time each
`distill` model took to train from the same files' wall-time lines, and prints the Markdown
that the README holds between its `what-to-expect` markers. `tests/test_readme.py` checks that
the README holds exactly this text, so a rerun of a group that changes a number changes the
README with it.

    python experiments/tools/what_to_expect.py            # prints the table
    python experiments/tools/what_to_expect.py --write    # writes it into the README

The groups behind it: `python experiments/reproduce/label_free.py label_free label_free_seeds`
(corpus only) and `python experiments/reproduce/label_free.py label_free_log_scifact
label_free_log` (a query log); the GPU times come from `bash scripts/gpu/run.sh querylog`
(experiments/results/gpu/).
"""
import re
import sys
import textwrap
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / 'experiments' / 'results'
README = ROOT / 'README.md'
BEGIN, END = '<!-- what-to-expect: begin -->', '<!-- what-to-expect: end -->'
COLLECTIONS = {'beir/scifact/test': 'scifact', 'cranfield': 'cranfield', 'vaswani': 'vaswani',
               'classic/cisi': 'CISI', 'classic/adi': 'ADI'}
# a row of the table: its label, the group it is read from, the pipeline's name in that group
# (on scifact, the query log is scifact's train split; elsewhere the collection's own topic
# texts, two-fold)
LOG = {'beir/scifact/test': 'queries=beir/scifact/train'}
ROWS = [('BM25', 'label_free', 'bm25'),
        ('MiniLM, zero-shot (the start)', 'label_free', 'minilm'),
        ('teacher: BM25 + MiniLM fused', 'label_free', 'teacher'),
        ('**adapted, corpus only** (`distill`)', 'label_free', 'distill'),
        ('hybrid: adapted + BM25, corpus only', 'label_free', 'hybrid'),
        ('**adapted, with a query log**', 'log', 'distill'),
        ('hybrid: adapted + BM25, with a query log', 'log', 'hybrid')]


def read_group(group: str) -> pd.DataFrame:
    return pd.read_csv(RESULTS / f'{group}.csv', comment='#').set_index(['collection', 'name'])


def read_per_query(groups) -> pd.DataFrame:
    """Each query's nDCG@10, by collection, pipeline and qid, from the groups' per-query files."""
    frames = [pd.read_csv(RESULTS / f'{group}.perquery.csv', dtype={'qid': str}) for group in groups]
    return pd.concat(frames).set_index(['collection', 'name', 'qid'])['nDCG@10'].sort_index()


def above_the_start(per_query: pd.Series, collection: str, names: list) -> set:
    """Which of ``names`` differ significantly from MiniLM zero-shot on ``collection``: paired
    t-tests on the per-query nDCG@10, Holm-corrected over ``names``, alpha 0.05 (as pt.Experiment
    tests against BM25)."""
    from scipy.stats import ttest_rel
    from statsmodels.stats.multitest import multipletests
    start = per_query.loc[(collection, 'minilm')]
    p = [ttest_rel(per_query.loc[(collection, name)].reindex(start.index), start).pvalue
         for name in names]
    reject = multipletests(p, alpha=0.05, method='holm')[0]
    return {name for name, r in zip(names, reject) if r}


def query_log_name(collection: str, pipeline: str) -> str:
    return f"{pipeline}:{LOG.get(collection, 'queries=crossfold')}"


def cell(table: pd.DataFrame, collection: str, name: str, starts: set = frozenset()) -> str:
    row = table.loc[(collection, name)]
    star = '*' if str(row['nDCG@10 reject']) == 'True' else ''
    dagger = '†' if name in starts else ''
    return f"{row['nDCG@10']:.4f}".lstrip('0') + star + dagger


def wall_seconds(text: str) -> list:
    """(collection, pipeline, seconds of set-up and training) for each pipeline of each Wall time
    line in the text of `label_free.py` results files."""
    return [(collection, name, int(s))
            for collection, stages in re.findall(r'^- (\S+): \d+ s set-up and training \((.*)\)$', text,
                                                 flags=re.M)
            for name, s in re.findall(r'(\S+) (\d+) s', stages)]


def training_seconds(group: str) -> dict:
    """Each collection's seconds of training for the group's first `distill` pipeline that
    trained there (another seed of the same settings, where the first was found in the cache)."""
    seconds = {}
    for collection, name, spent in wall_seconds((RESULTS / f'{group}.md').read_text()):
        if name.startswith('distill') and spent > 1:  # (0 or 1 s: found in the cache)
            seconds.setdefault(collection, spent)
    return seconds


def machine(group: str) -> str:
    line = re.search(r'^# machine: (.*)$', (RESULTS / f'{group}.csv').read_text(), flags=re.M)
    return line.group(1)


def gpu_seconds() -> list:
    """(GPU, seconds) to train `distill` on scifact's train texts, one for each GPU run."""
    found = []
    for path in sorted(RESULTS.glob('gpu/**/gpu_query_log.md')):
        text = path.read_text()
        gpu = re.search(r'GPU: NVIDIA (\S+)', text).group(1)
        spent = re.search(r'distill:queries=beir/scifact/train (\d+) s', text).group(1)
        found.append((gpu, int(spent)))
    return found


def table() -> str:
    corpus_only, log = read_group('label_free'), pd.concat(
        [read_group('label_free_log_scifact'), read_group('label_free_log')])
    groups = {'label_free': corpus_only, 'log': log}
    per_query = {'label_free': read_per_query(['label_free']),
                 'log': read_per_query(['label_free_log_scifact', 'label_free_log'])}
    named = {(group, c): [query_log_name(c, name) if group == 'log' else name
                          for _, g, name in ROWS if g == group and name not in ('bm25', 'minilm')]
             for group in groups for c in COLLECTIONS}
    starts = {key: above_the_start(per_query[key[0]], key[1], names)
              for key, names in named.items()}
    lines = ['| nDCG@10 | ' + ' | '.join(COLLECTIONS.values()) + ' |',
             '|---' * (len(COLLECTIONS) + 1) + '|']
    for label, group, name in ROWS:
        cells = [cell(groups[group], c, query_log_name(c, name) if group == 'log' else name,
                      starts[group, c]) for c in COLLECTIONS]
        lines.append(f'| {label} | ' + ' | '.join(cells) + ' |')
    times = {'corpus only': {**training_seconds('label_free'),
                             **training_seconds('label_free_seeds')},
             'with a query log': {**training_seconds('label_free_log_scifact'),
                                  **training_seconds('label_free_log')}}
    for setting, seconds in times.items():
        cells = [f'{seconds[c] / 60:.1f} min' if c in seconds else '–' for c in COLLECTIONS]
        lines.append(f'| training time, {setting}, 2 CPU cores | ' + ' | '.join(cells) + ' |')
    runs = gpu_seconds()
    seconds, gpus = sorted(s for _, s in runs), ' and '.join(sorted({gpu for gpu, _ in runs}))
    cpu = machine('label_free').split(', ', 1)[1].split(', GPU')[0]
    note = ('`*`: significantly different from BM25, and `†` from MiniLM, the start (paired '
            't-tests on the per-query nDCG@10, Holm correction, alpha 0.05). The query '
            "log is scifact's train split for scifact, and elsewhere the collection's own topic "
            f'texts, two-fold (`queries=crossfold`). The CPU times were measured on an {cpu}. '
            f'On one GPU ({gpus}; {len(runs)} runs), `distill` with the query log trains on '
            f'scifact in {seconds[0]} to {seconds[-1]} s.')
    lines += ['', *textwrap.wrap(note, 92)]
    return '\n'.join(lines)


def written_into(readme: str) -> str:
    start, end = readme.index(BEGIN) + len(BEGIN), readme.index(END)
    return readme[:start] + '\n' + table() + '\n' + readme[end:]


if __name__ == '__main__':
    if '--write' in sys.argv:
        README.write_text(written_into(README.read_text()))
    else:
        print(table())
