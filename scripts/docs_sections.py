"""The sections of the README and the docs that are read from the committed results files.

Measures nothing. It writes, each between its page's markers:

- the README's "What to expect" table (`what-to-expect`): the nDCG@10 of BM25, MiniLM, the
  fused teacher, the distilled student (`distill`) and its hybrid from the label-free
  distillation groups, and the time each `distill` model took to train;
- `docs/adapting.md`'s first run, stage by stage (`how-long`), and the passages a user grades
  to judge 30 queries (`pool-sizes`, from `pool_sizes.json`);
- `experiments/README.md`'s table of the one-command reproductions (`reproduction`, from
  `experiments/results/reproduce/`).

`tests/test_readme.py` checks that each page holds exactly this text, so a rerun that changes
a number changes the pages with it.

    python scripts/docs_sections.py            # prints the sections
    python scripts/docs_sections.py --write    # writes them into their pages

The groups behind the table and the first run: `SELFSUP_CACHE=$(mktemp -d) python
experiments/reproduce/label_free.py label_free` (corpus only, run on an empty cache: a first
run's times) and `python experiments/reproduce/label_free.py label_free_log_scifact
label_free_log` (a query log); the GPU times come from `bash scripts/gpu/run.sh querylog`
(experiments/results/gpu/); the pool sizes from `python experiments/benchmarks/pool_sizes.py`; the
reproductions from `python experiments/reproduce/reproduce.py all --expected`.
"""
import json
import re
import sys
import textwrap
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / 'experiments' / 'results'
README = ROOT / 'README.md'
BEGIN, END = '<!-- what-to-expect: begin -->', '<!-- what-to-expect: end -->'
# the adapting guide's table of a first run's time, stage by stage
ADAPTING = ROOT / 'docs' / 'adapting.md'
HOW_LONG = ('<!-- how-long: begin -->', '<!-- how-long: end -->')
SCIFACT, ONE_HUNDRED_THOUSAND = 'beir/scifact/test', 100_000  # (the guide's worked example)
COLLECTIONS = {'beir/scifact/test': 'scifact', 'cranfield': 'cranfield', 'vaswani': 'vaswani',
               'classic/cisi': 'CISI', 'classic/adi': 'ADI'}
# a row of the table: its label, the group it is read from, the pipeline's name in that group
# (on scifact, the query log is scifact's train split; elsewhere the collection's own topic
# texts, two-fold)
LOG = {'beir/scifact/test': 'queries=beir/scifact/train'}
# every group a figure of the README or the guide is read from
GROUPS = ['label_free', 'label_free_seeds', 'label_free_log_scifact', 'label_free_log']
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
    frames = [pd.read_csv(RESULTS / f'{group}.perquery.csv', dtype={'qid': str})
              for group in groups]
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
            for collection, stages in re.findall(
                r'^- (\S+): \d+ s set-up and training \((.*)\)(?:; \d+ s in all)?$', text,
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


def first_run(group: str = 'label_free') -> dict:
    """Each collection's times on a first run, from a group run on an empty cache: seconds of
    each pipeline's set-up (its index built, its queries written, its model trained), and
    ``'in all'``, with every pipeline's retrieval and evaluation."""
    text = (RESULTS / f'{group}.md').read_text()
    if not re.search(r'^- cache: empty at the start', text, flags=re.M):
        raise ValueError(f'{group}.md did not run on an empty cache, so its times are not a first '
                         f"run's: run it again as its script's docstring says")
    found = {}
    for collection, body in sections(text):
        said = re.search(r'Set-up \(building or reopening indexes, loading models\): (.*?)\. '
                         r'In all, with retrieval and evaluation: (\d+) s\.', body)
        if said:
            found[collection] = {**{name: int(s) for name, s in re.findall(r'(\S+) (\d+) s',
                                                                          said.group(1))},
                                 'in all': int(said.group(2))}
    return found


def sections(text: str) -> list:
    """(collection, the text of its section) for each collection of a results file's text."""
    return re.findall(r'^## (\S+)\n(.*?)(?=^## |\Z)', text, flags=re.M | re.S)


def minutes(seconds: float) -> str:
    return f'{seconds / 60:.1f} min'


def machine(group: str) -> str:
    line = re.search(r'^# machine: (.*)$', (RESULTS / f'{group}.csv').read_text(), flags=re.M)
    return line.group(1)


def cpu(group: str) -> str:
    """The CPU, its cores and memory, that ran ``group``."""
    return machine(group).split(', ', 1)[1].split(', GPU')[0]


# Headers that name the wrong commit, and the commit that ran (gpu/README.md, the second lease:
# the device copy carried a .git older than its tree)
RAN_AT = {'58b90f5': 'bae234a'}


def gpu_seconds() -> list:
    """(GPU, seconds, commit) to train `distill` on scifact's train texts, one for each GPU
    run (the commit that ran, where a header names another: :data:`RAN_AT`)."""
    found = []
    for path in sorted(RESULTS.glob('gpu/**/gpu_query_log.md')):
        text = path.read_text()
        gpu = re.search(r'GPU: NVIDIA (\S+)', text).group(1)
        spent = re.search(r'distill:queries=beir/scifact/train (\d+) s', text).group(1)
        commit = re.search(r'^- code: pyterrier-selfsup ([0-9a-f]{7})', text, flags=re.M).group(1)
        found.append((gpu, int(spent), RAN_AT.get(commit, commit)))
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
    exported = export_figures()
    for label, group, name in ROWS:
        cells = [cell(groups[group], c, query_log_name(c, name) if group == 'log' else name,
                      starts[group, c]) for c in COLLECTIONS]
        lines.append(f'| {label} | ' + ' | '.join(cells) + ' |')
        if exported and group == 'log' and name == 'distill':  # (its export, just below it)
            lines.append('| the same, its sentence-transformers export | ' + ' | '.join(
                f"{exported[c]:.4f}".lstrip('0') if c in exported else '–'
                for c in COLLECTIONS) + ' |')
    times = {'corpus only': training_seconds('label_free'),
             'with a query log': {**training_seconds('label_free_log_scifact'),
                                  **training_seconds('label_free_log')}}
    for setting, seconds in times.items():
        cells = [minutes(seconds[c]) if c in seconds else '–' for c in COLLECTIONS]
        lines.append(f'| adapting time, {setting}, 2 CPU cores | ' + ' | '.join(cells) + ' |')
    first = first_run()
    lines.append('| **first run in all**, corpus only, 2 CPU cores | '
                 + ' | '.join(minutes(first[c]['in all']) for c in COLLECTIONS) + ' |')
    runs = gpu_seconds()
    seconds, gpus = sorted(s for _, s, _ in runs), ' and '.join(sorted({g for g, _, _ in runs}))
    commits = ', '.join(sorted({commit for _, _, commit in runs}))
    cpus = {group: cpu(group) for group in GROUPS}
    where = (f'Everything was measured on an {cpus["label_free"]}.'
             if len(set(cpus.values())) == 1 else
             'Measured on ' + '; '.join(f'an {c} ({", ".join(g for g in cpus if cpus[g] == c)})'
                                        for c in dict.fromkeys(cpus.values())) + '.')
    note = ('`*`: significantly different from BM25, and `†` from MiniLM, the start (paired '
            't-tests on the per-query nDCG@10, Holm correction, alpha 0.05). The query '
            "log is scifact's train split for scifact, and elsewhere the collection's own topic "
            'texts, two-fold (`queries=crossfold`). Adapting corpus only includes writing the '
            'queries (2,000, fewer on a corpus of under 667 passages such as ADI). The first run '
            'starts from an empty cache: it builds the BM25 and MiniLM indexes, writes the '
            'queries, trains `distill` and evaluates the first five rows (the models and '
            'collections were already downloaded; the collections ran in this order in one '
            "cache, so SmolLM2's one-time conversion to GGUF falls in scifact's time). "
            f'{where} On one GPU ({gpus}; {len(runs)} runs, at {commits}), '
            f'`distill` with the query log trained on scifact in {seconds[0]} to {seconds[-1]} s; '
            'those runs kept the round a label-free verdict chose, where today the last round '
            'is kept.')
    if exported:
        note += (' The export row is that model through `SentenceTransformer` alone, which has '
                 'no passage offsets (`export_check.md`); corpus-only models export exactly.')
    lines += ['', *textwrap.wrap(note, 92, break_on_hyphens=False)]
    return '\n'.join(lines)


def export_figures() -> dict:
    """The query-log models' nDCG@10 through their sentence-transformers export alone, by
    collection (export_check.json; empty where it has not run)."""
    path = RESULTS / 'export_check.json'
    if not path.is_file():
        return {}
    rows = json.loads(path.read_text())['rows']
    return {r['collection']: r['nDCG@10 export'] for r in rows if r['setting'] == 'query_log'}


def spent(seconds: float) -> str:
    return '<1 s' if seconds < 1 else f'{seconds:.0f} s' if seconds < 90 else minutes(seconds)


def documents(group: str = 'label_free') -> dict:
    """Each collection's number of documents, from its section of the group's results."""
    found = {}
    for collection, body in sections((RESULTS / f'{group}.md').read_text()):
        said = re.search(r'^(\d+) documents,', body, flags=re.M)
        if said:
            found[collection] = int(said.group(1))
    return found


def how_long() -> str:
    """The adapting guide's table of a first run's stages on 2 CPU cores, collections by size,
    and where a GPU stands."""
    first, sizes = first_run(), documents()
    order = sorted(COLLECTIONS, key=sizes.get)
    rows = [('passages', lambda c: f'{sizes[c]:,}'),
            ('the BM25 index', lambda c: spent(first[c]['bm25'])),
            ('the MiniLM index', lambda c: spent(first[c]['minilm'])),
            # (a rate from whole seconds: none where the index took under 10)
            ('MiniLM: passages a second', lambda c: f"{sizes[c] / first[c]['minilm']:.0f}"
             if first[c]['minilm'] >= 10 else '–'),
            ('`distill`: its queries written, the model trained',
             lambda c: spent(first[c]['distill'])),
            ('**in all**, the five retrievers evaluated too', lambda c: spent(first[c]['in all']))]
    lines = ['| first run, 2 CPU cores | ' + ' | '.join(COLLECTIONS[c] for c in order) + ' |',
             '|---' * (len(order) + 1) + '|']
    lines += [f'| {label} | ' + ' | '.join(value(c) for c in order) + ' |' for label, value in rows]
    indexing, indexing_machine, path = newest_gpu_indexing()
    gpu = re.search(r'GPU: NVIDIA (\S+)', indexing_machine).group(1)
    runs = gpu_seconds()
    scifact, gpu_rate = sizes[SCIFACT] / first[SCIFACT]['minilm'], indexing['fp32']
    from pyterrier_selfsup.harness.trained import DEFAULTS
    written, each = DEFAULTS['distill']['n_queries'], DEFAULTS['distill']['per_passage']
    note = (f"Measured on an {cpu('label_free')} from an empty cache (`label_free.md`). "
            'The MiniLM index '
            f'grows with the corpus, in tokens more than in passages. `distill` writes {written:,} '
            f'queries, {each} for each of {-(-written // each)} passages, on any corpus larger '
            'than that, so its time '
            "follows the passages' length, not their number. At scifact's "
            f'{scifact:.0f} passages a second, an index of {ONE_HUNDRED_THOUSAND:,} such passages '
            f'would take about {ONE_HUNDRED_THOUSAND / scifact / 60:.0f} minutes on these 2 cores. '
            f"On one {gpu}, the package indexes MiniLM at {gpu_rate:,.0f} passages a second in "
            f"fp32, the pipelines' precision, and {indexing['bf16']:,.0f} in bf16, tokenization "
            f'included (`{path}`): about {ONE_HUNDRED_THOUSAND / gpu_rate:.0f} s for as many in '
            'fp32. `distill` with a query log trained on scifact in '
            f'{min(s for _, s, _ in runs)} to {max(s for _, s, _ in runs)} s at '
            f"{', '.join(sorted({commit for _, _, commit in runs}))}, which kept the round a "
            'label-free verdict chose where today the last round is kept '
            '([What to expect](../README.md#what-to-expect)).')
    writing, avx2, avx2_file = writer_rates()
    note += (f" On a CPU without AVX-512 or bf16 (an {avx2_file[1]}), SmolLM2 writes in fp32 at "
             f"{avx2:.1f} passages a second (`{avx2_file[0]}`, vaswani's passages), against "
             f"{writing:.1f} on the Intel Xeon above (vaswani's first run): `distill`'s "
             f"{-(-written // each)} passages take about {-(-written // each) / avx2 / 60:.0f} "
             f"minutes of writing there, not {-(-written // each) / writing / 60:.0f}.")
    return '\n'.join(lines + ['', *textwrap.wrap(note, 96, break_on_hyphens=False)])


def writer_rates():
    """SmolLM2's default writer on vaswani's passages: its rate in the first run here (the
    training log of label_free's vaswani model), and on an AVX2-only CPU
    (shared_prefix.json's plain writer), with that file and its CPU."""
    import gzip
    log = RESULTS / 'distill_curves' / 'vaswani' / 'distill' / 'training_log.jsonl.gz'
    stage = next(r for r in map(json.loads, gzip.open(log, 'rt'))
                 if r.get('stage') == 'writing queries')
    shared = json.loads((RESULTS / 'shared_prefix.json').read_text())
    plain = next(r for r in shared['rows'] if r['writer'].startswith('plain'))
    cpu = shared['header']['machine'].split(', ', 1)[1].split(', 2 cores')[0]
    cpu = cpu.replace(' (avx2)', ' with AVX2 alone')
    return stage['done'] / stage['seconds'], plain['passages/s whole'], ('shared_prefix.md', cpu)


def newest_gpu_indexing():
    """The newest committed GPU indexing benchmark (``encoding_benchmark_gpu.json``: the package's
    encoder indexing scifact through a FlexIndex, tokenization included, after a warm-up of 256
    passages), as ``({dtype: passages / s}, machine, path under the results)``, or (None, None,
    None) where none is committed. It is the one GPU encoding rate the docs quote: the benchmark
    gpu_benchmark.py times a single encode_docs call after a shorter warm-up, a rate of its own."""
    runs = [(json.loads(p.read_text()), p)
            for p in RESULTS.glob('gpu/**/encoding_benchmark_gpu.json')]
    if not runs:
        return None, None, None
    data, path = max(runs, key=lambda run: run[0]['header']['date'])
    rates = {r['dtype']: r['docs_per_s'] for r in data['runs'] if r['encoder'].startswith('ours')}
    return rates, data['header']['machine'], path.relative_to(RESULTS)


# -- docs/adapting.md: the passages a user grades (experiments/benchmarks/pool_sizes.py measures) --

POOL_SIZES = ('<!-- pool-sizes: begin -->', '<!-- pool-sizes: end -->')


def pool_rows() -> list:
    """pool_sizes.json's rows: a collection's passages pooled for 30 queries."""
    return json.loads((RESULTS / 'pool_sizes.json').read_text())['rows']


def pool_sentence(rows) -> str:
    """The guide's sentence: the passages a user grades on each collection."""
    each = ', '.join(f"{r['passages']:,}{' passages to grade' if not i else ''} on "
                     f"{COLLECTIONS[r['collection']]}" for i, r in enumerate(rows))
    return (f'Thirty queries pooled from the start and the adapted model at depth 10 come to '
            f'{each} (`pool_sizes.md`): the two top 10s share about '
            f"{min(r['shared of each top 10'] for r in rows):.0%} to "
            f"{max(r['shared of each top 10'] for r in rows):.0%} of their passages.")


# -- experiments/README.md: the one-command reproductions ----------------------------------

EXPERIMENTS_README = ROOT / 'experiments' / 'README.md'
REPRODUCTION = ('<!-- reproduction: begin -->', '<!-- reproduction: end -->')
EXPECTED = RESULTS / 'reproduce'
# the order reproduce.py runs them in
REPRODUCED = ['distant_supervision', 'rumbart', 'acrobart', 'reatt', 'distill', 'distill_log']


def expected_files() -> list:
    """The expected results of reproduce.py, a CSV for each method and collection, in order."""
    return [csv for method in REPRODUCED for csv in sorted(EXPECTED.glob(f'{method}-*.csv'))
            if not csv.name.endswith('.perquery.csv')]


def reproduction_table() -> str:
    """The Markdown table of every expected file: each method's command and nDCG@10 (with the
    p-value against BM25), its wall time and machine."""
    lines = ['| method | one command | nDCG@10 (p against BM25) | wall time |', '|---|---|---|---|']
    machines = set()
    for csv in expected_files():
        method = csv.name.split('-', 1)[0]
        header = csv.read_text()
        machines.add(re.search(r'^# machine: (.*)$', header, flags=re.M).group(1))
        wall = re.search(r'^# wall time: (\d+) s$', header, flags=re.M).group(1)
        rows = pd.read_csv(csv, comment='#')
        cells = []
        for _, row in rows.iterrows():
            p = row.get('nDCG@10 p-value corrected')
            cells.append(f"{row['name']} {row['nDCG@10']:.4f}"
                         + ('' if pd.isna(p) else f' (p={p:.3f})'))
        name = rows['collection'].iloc[0]
        option = '' if name == 'classic/adi' else f' -c {name}'
        command = f'python experiments/reproduce/reproduce.py {method}{option}'
        lines.append(f'| {method} | `{command}` | {"; ".join(cells)} '
                     f'| {int(wall) / 60:.1f} min |')
    lines += ['', 'Measured on ' + '; '.join(sorted(machines)) + ', by `reproduce.py all '
              '--expected`: the methods one after another, in this order, in one cache that '
              'was empty at the start (so the first method pays for the indexes, and the first '
              "to use the generator for its conversion).", ]
    return '\n'.join(lines)


# -- writing them -------------------------------------------------------------------------

def between(text: str, markers: tuple, block: str) -> str:
    start, end = text.index(markers[0]) + len(markers[0]), text.index(markers[1])
    return text[:start] + '\n' + block + '\n' + text[end:]


def written_into(readme: str) -> str:
    return between(readme, (BEGIN, END), table())


def how_long_written_into(guide: str) -> str:
    return between(guide, HOW_LONG, how_long())


def pool_sizes_written_into(guide: str) -> str:
    return between(guide, POOL_SIZES, textwrap.fill(pool_sentence(pool_rows()), 96))


def reproduction_written_into(readme: str) -> str:
    return between(readme, REPRODUCTION, reproduction_table())


# each page: the functions that write its sections
PAGES = {README: [written_into],
         ADAPTING: [how_long_written_into, pool_sizes_written_into],
         EXPERIMENTS_README: [reproduction_written_into]}


if __name__ == '__main__':
    if '--write' in sys.argv:
        for page, writers in PAGES.items():
            text = page.read_text()
            for write in writers:
                text = write(text)
            page.write_text(text)
    else:
        print('\n\n'.join([table(), how_long(), pool_sentence(pool_rows()),
                            reproduction_table()]))
