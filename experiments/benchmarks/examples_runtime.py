"""How long each script in examples/ takes at its defaults (ADI), and its peak memory, as a user first runs them
(issue 21: "runnable as it is on a CPU in minutes"): one after another in a fresh cache,
so the first to need an index, the GGUF conversion or a generator score pays for it and
the later ones find it, as they would for the user. The walkthrough is timed by its own
last cell (examples/walkthrough.ipynb).

    python experiments/benchmarks/examples_runtime.py
writes experiments/results/examples_runtime.{md,json}; each example's own output is kept in
``--logs`` (default: ``$TMPDIR/selfsup-examples-runtime``), one file an example, for reading after.
"""
import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path

from pyterrier_selfsup.harness import provenance

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / 'scripts'))
from measured import run_measured  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / 'experiments' / 'results'
# in the README's order; a trained model's directory feeds load_trained_model.py
RUNS = [['rerank_bm25_with_minilm.py'], ['distant_supervision.py'], ['load_trained_model.py', 'runs/distant-supervision/final'],
        ['distillation.py'], ['reconstruction.py'], ['reconstruction.py', '--method', 'acrobart'],
        ['rerank_with_generator.py'], ['reatt_token_index.py'], ['cross_document_adjustment.py'],
        ['your_own_corpus.py', 'docs.jsonl', 'queries.txt'], ['distill_data_parallel.py']]


def log_name(script: str, args) -> str:
    """An example's log file name: its script and arguments, e.g. ``reconstruction.py_method_acrobart.log``."""
    return re.sub(r'[^\w.]+', '_', ' '.join([script, *args])) + '.log'


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--logs', type=Path, default=Path(tempfile.gettempdir()) / 'selfsup-examples-runtime',
                        help='where each example\'s output is kept (one file an example, replaced by its next run)')
    logs = parser.parse_args().logs
    logs.mkdir(parents=True, exist_ok=True)
    header = provenance.header()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        env = {**os.environ, 'SELFSUP_CACHE': f'{work}/cache'}
        from pyterrier_selfsup import Collection
        adi = Collection('classic/adi')  # your_own_corpus.py's files: ADI's documents under new ids
        with open(f'{work}/docs.jsonl', 'w') as out:
            out.writelines(json.dumps({'docno': f'doc-{d["docno"]}', 'text': d['text']}) + '\n'
                           for d in adi.corpus_iter())
        Path(f'{work}/queries.txt').write_text('\n'.join(adi.topics()['query']) + '\n')
        for script, *args in RUNS:
            with open(logs / log_name(script, args), 'w+') as log:
                run = run_measured([sys.executable, str(ROOT / 'examples' / script), *args], cwd=work,
                                              env=env, log=log)
                rc = run.rc
                rows.append({'example': ' '.join([script, *args]), 'seconds': run.seconds, 'rc': rc,
                             'peak GiB': run.peak_gib})
                print(f'{rows[-1]}', flush=True)
                if rc:
                    log.seek(0)
                    print(log.read()[-3000:], flush=True)
    print(f'each example\'s output: {logs}', flush=True)
    settings = {'collection': 'classic/adi (82 documents, 35 queries), each example at its defaults',
                'cache': 'empty at the start, shared by the examples in this order',
                'memory': "each example's own peak resident memory (scripts/measured.py)"}
    (RESULTS / 'examples_runtime.json').write_text(json.dumps({'header': header, 'settings': settings,
                                                                'rows': rows}, indent=1))
    md = ['# The examples at their defaults: wall time', '',
          *(f'- {k}: {v}' for k, v in {**header, **settings}.items()), '',
          '| example | seconds | peak memory (GiB) | exit |', '|---|---|---|---|',
          *(f'| `{r["example"]}` | {r["seconds"]:.0f} | {r["peak GiB"]:.2f} | {r["rc"]} |' for r in rows), '',
          f'All {len(rows)} in {sum(r["seconds"] for r in rows) / 60:.0f} minutes.', '']
    (RESULTS / 'examples_runtime.md').write_text('\n'.join(md))
    print('\n'.join(md))


if __name__ == '__main__':
    main()
