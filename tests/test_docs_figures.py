"""The pages' figures against the results files they cite: every results file a page names
exists, and a figure that a page calls shipped comes from a run whose settings are what the
pipeline it names means today (`docs/` and the README; the research notes under
`experiments/` name their settings and commits instead).

A results file records each pipeline's settings in its header (``- pipeline NAME: ... (k=v,
...)``). Today's meaning of NAME is `get_pipeline(NAME)`'s settings, typed as its method types
them, with the defaults that follow other settings chosen. The search-time settings (``search``,
``backend``) are left out: they choose how an index is searched and encoded, not what trained.
A setting removed since is read as today's behaviour only at the value that did what the
package does now (:data:`REMOVED_AS_TODAY`).
"""
import re
from pathlib import Path

import pytest

from pyterrier_selfsup.harness.pipelines import UnknownPipelineError, get_pipeline
from pyterrier_selfsup.harness.trained import SEARCH_SETTINGS, typed_settings

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / 'experiments' / 'results'
PAGES = [ROOT / 'README.md', *sorted((ROOT / 'docs').glob('*.md'))]
# settings removed since, at the value that did what the package does now
REMOVED_AS_TODAY = {'keep': 'last', 'filter_depth': 'None', 'stop_overlap': 'None',
                    'min_round_steps': '0', 'source_share': '0.0', 'passage_layers': 'None',
                    'null_document': 'False', 'bm25_depth': '30', 'target': 'likelihood'}
# files a run writes, which the pages name as a user meets them (not results of this repository)
RUNTIME_FILES = {'model.json', 'pt_meta.json', 'stage-rates.json', 'campaign.json'}
FIGURE = re.compile(r'(?<![\d.])0?(\.\d{4})\b')
# a results file as the pages name one: a table, its data or its figure, or anything under results/
CITED = re.compile(r'[\w./-]*results/[\w./-]+\.\w+|[\w./-]+\.(?:md|json|csv|png)\b')


def resolve(name: str, page: Path) -> Path | None:
    """The file a page names by ``name``: from the page, from the repository's root, under the
    results, or (a bare name) a file of that name in the repository."""
    for base in (page.parent, ROOT, RESULTS):
        if (base / name.lstrip('/')).is_file():
            return (base / name.lstrip('/')).resolve()
    if '/' not in name:
        found = sorted(p for p in ROOT.rglob(name) if '.venv' not in p.parts)
        return found[0] if found else None
    return None


def cited_results(text: str, page: Path) -> dict[str, Path | None]:
    """Each file that ``text`` names, but the files a run writes (:data:`RUNTIME_FILES`), with
    the file it resolves to (None: it exists nowhere in the repository)."""
    out = {}
    for name in CITED.findall(text):
        name = name.rstrip('.')
        if Path(name).name not in RUNTIME_FILES:
            out[name] = resolve(name, page)
    return out


def recorded_settings(results: Path) -> dict[str, dict[str, str]]:
    """Each pipeline's settings as its results file's header records them."""
    out = {}
    for line in results.read_text().splitlines():
        head = re.match(r'^- pipeline (\S+?): .*\(([^()]*=[^()]*)\)\s*$', line)
        if head:
            out[head.group(1)] = dict(item.split('=', 1) for item in head.group(2).split(', '))
    return out


def todays_settings(pipeline: str) -> dict[str, str] | None:
    """What ``pipeline`` means today, as strings (None: a name that no longer parses)."""
    try:
        spec = get_pipeline(pipeline)
    except UnknownPipelineError:
        return None
    settings = dict(spec.settings)
    if spec.method:
        settings.update(typed_settings(spec.method, settings).asdict())
    return {k: str(v) for k, v in settings.items()}


def same(a: str, b: str) -> bool:
    try:
        return float(a) == float(b)
    except ValueError:
        return a == b


def differences(recorded: dict[str, str], today: dict[str, str] | None) -> list[str]:
    """How a recorded run's settings differ from what its pipeline means today."""
    if today is None:
        return ['its pipeline name no longer parses']
    out = []
    for key, value in recorded.items():
        if key in SEARCH_SETTINGS:
            continue
        if key in today:
            if not same(value, today[key]):
                out.append(f'{key}={value} where today it is {today[key]}')
        elif not same(value, REMOVED_AS_TODAY.get(key, '\0')):
            out.append(f'{key}={value}, a setting removed since')
    return out


def rows_with(results: Path, figure: str) -> list[str]:
    """The pipelines whose table rows in ``results`` hold ``figure`` (``.6579`` or
    ``0.6579``)."""
    names = []
    for line in results.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip('|').split('|')]
        if line.startswith('|') and len(cells) > 1 and any(
                re.match(rf'^0?{re.escape(figure)}\b', c) for c in cells[1:]):
            names.append(cells[0])
    return names


def shipped_figures(page: Path, text: str) -> list[str]:
    """Each figure that a paragraph of ``text`` calls shipped, checked against the results
    files the paragraph cites: a problem a line."""
    problems = []
    for paragraph in re.split(r'\n\s*\n', text):
        if 'shipped' not in paragraph:
            continue
        figures = {f for f in FIGURE.findall(paragraph)}
        files = [p for p in cited_results(paragraph, page).values()
                 if p and p.suffix == '.md' and RESULTS in p.parents]
        for figure in sorted(figures):
            for results in files:
                recorded = recorded_settings(results)
                for name in rows_with(results, figure):
                    if name in recorded and trains_a_model(name):
                        for why in differences(recorded[name], todays_settings(name)):
                            problems.append(f'{page.name}: {figure} is called shipped, but '
                                            f'{results.relative_to(ROOT)} ran {name} with {why}')
    return problems


def trains_a_model(name: str) -> bool:
    """Whether the pipeline ``name`` trains a model (its figures depend on its settings)."""
    try:
        return get_pipeline(name).method is not None
    except UnknownPipelineError:
        return True


def test_every_results_file_a_page_cites_exists():
    missing = [f'{page.name} cites {name}' for page in PAGES
               for name, path in cited_results(page.read_text(), page).items() if path is None]
    assert not missing, '\n'.join(missing)


def test_every_figure_a_page_calls_shipped_ran_at_todays_settings():
    problems = [p for page in PAGES for p in shipped_figures(page, page.read_text())]
    assert not problems, '\n'.join(problems)


def test_a_five_round_figure_called_shipped_is_caught():
    stale = ('Trained on the corpus only, the shipped setting reaches .6497, against the '
             "start's .6451 (`gpu/gpu_scifact_distill.md`).")
    problems = shipped_figures(ROOT / 'docs' / 'gpus-and-scaling.md', stale)
    assert any('rounds=5 where today it is 1' in p for p in problems), problems


@pytest.mark.parametrize('group', ['label_free', 'label_free_log', 'label_free_log_scifact'])
def test_the_readmes_shipped_rows_ran_at_todays_settings(group):
    recorded = recorded_settings(RESULTS / f'{group}.md')
    adapted = [name for name in recorded if name.split(':')[0] in ('distill', 'hybrid')]
    assert adapted
    for name in adapted:
        assert not differences(recorded[name], todays_settings(name)), (group, name)


# Claims the pages once made against their results files or each other (issue 70), each with
# what is true: a page that makes one again fails, with the reason
STALE = [
    (r'58b90f5', 'the second H200 lease ran bae234a (and 45b05ac for the CUDA tests); its '
                 'headers name 58b90f5 in error (experiments/results/gpu/README.md)'),
    (r'does not time', 'the GPU indexing benchmark times fp32: 4,525 passages a second '
                       '(gpu/2026-11-27-h200/c3ad151/encoding_benchmark_gpu.md)'),
    (r'4,967', 'a single encode_docs call after a warm-up of 64 passages (gpu_benchmark.md); '
               'the pages give the indexing benchmark: 4,525 in fp32, 6,049 in bf16'),
    (r'\b7\.38\b', 'no committed file holds it (generator_batch.md: 3.01 against 3.99 GiB)'),
    (r'against 216\b|216 s a step', 'no committed file holds it (generator_batch.md: 37.8 s '
                                     'against 46.9)'),
    (r'under 6 GiB', 'every peak measured is under 5 GiB (memory_scaling.md: 4.85 at most)'),
    (r'it took\s+7 \(`rumbart_frozen', 'frozen RUMBArt took 53 minutes from a cold cache '
                                         '(rumbart_frozen_rerun.md); 7 reused cached scores'),
    (r"the student mines|student's top 50|student's own top",
     "the gpl pipeline mines with GPL's two MS MARCO miners, not the student"),
    (r'GPL trains with mixed precision', "GPL's use_amp is off: it trains in fp32"),
]


def stale_claims(page: str, text: str) -> list[str]:
    """Each claim of :data:`STALE` that ``text`` (a page's) makes, with what is true."""
    flat = ' '.join(text.split())
    return [f'{page}: "{re.search(pattern, flat).group(0)}": {why}'
            for pattern, why in STALE if re.search(pattern, flat)]


def test_no_page_makes_a_claim_its_results_files_contradict():
    problems = [p for page in PAGES + [ROOT / 'experiments' / 'README.md']
                for p in stale_claims(page.name, page.read_text())]
    assert not problems, '\n'.join(problems)


@pytest.mark.parametrize('sentence', [
    'On one H200, the package encodes MiniLM at 4,967 passages a second in bfloat16, which that '
    'benchmark does not time.',
    'On scifact ACROBArT peaks at 4.11 GiB against 7.38, at 164 s a step against 216.',
    "The `gpl` pipeline: the student's top 50 are the candidates (GPL trains with mixed "
    'precision).',
    'With the passage tower frozen as well, it took 7 (`rumbart_frozen.md`).',
    'So every run stays under 6 GiB; 3 runs, at 58b90f5, 6fd7b1a.'])
def test_a_stale_claim_put_back_is_caught(sentence):
    assert stale_claims('page', sentence)
