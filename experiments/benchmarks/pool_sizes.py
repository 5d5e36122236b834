"""How many passages a user grades to judge 30 queries: the start (`minilm`) and the adapted
model (`distill`, corpus only) pooled at depth 10, as `selfsup judge` pools them, on each of the
five local collections.

Thirty of each collection's topic texts, drawn at random (seed 0), are pooled by
`harness.judging.Campaign` (each pipeline's top 10, ties at the 10th score included, once
each). `distill` is the shipped corpus-only setting: trained on first use, or read from the cache
(`$SELFSUP_CACHE`) where it was trained before. No relevance label is read.

    python experiments/benchmarks/pool_sizes.py
writes experiments/results/pool_sizes.md and .json, then runs `scripts/docs_sections.py --write`,
which writes the sentence of docs/adapting.md between its `pool-sizes` markers
(`tests/test_readme.py` checks that the guide holds it).
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from pyterrier_selfsup import Collection, RunContext
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.harness.judging import Campaign
from pyterrier_selfsup.harness.pipelines import get_pipeline

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / 'experiments' / 'results'
COLLECTIONS = ['beir/scifact/test', 'cranfield', 'vaswani', 'classic/cisi', 'classic/adi']
PIPELINES, QUERIES, DEPTH, SEED = ['minilm', 'distill'], 30, 10, 0


def main():
    run = RunContext()
    rows = []
    for name in COLLECTIONS:
        collection = Collection(name)
        pipelines = {p: get_pipeline(p).build(collection, run) for p in PIPELINES}
        topics = collection.topics()
        queries = topics.sample(n=min(QUERIES, len(topics)), random_state=SEED).sort_index()
        with tempfile.TemporaryDirectory() as directory:
            campaign = Campaign.create(Path(directory) / 'campaign', collection, pipelines,
                                       queries, depth=DEPTH, seed=SEED)
            sizes = np.array([len(campaign.passages(q)) for q in campaign.queries['qid']])
        rows.append({'collection': name, 'queries': len(sizes), 'passages': int(sizes.sum()),
                     'mean a query': float(sizes.mean()), 'fewest': int(sizes.min()),
                     'most': int(sizes.max()),
                     # (20 a query is two top 10s with nothing in common)
                     'shared of each top 10': float(np.mean(2 * DEPTH - sizes) / DEPTH)})
        print(rows[-1], flush=True)
    header = provenance.header()
    settings = {'pipelines': ', '.join(PIPELINES) + ' (distill: the shipped corpus-only setting)',
                'queries': f'{QUERIES} topic texts a collection, drawn at random (seed {SEED})',
                'depth': f'{DEPTH}, as selfsup judge pools (ties at the 10th score included)'}
    columns = list(rows[0])
    md = ['# Pool sizes: the passages a user grades for 30 queries', '']
    md += [f'- {k}: {v}' for k, v in {**header, **settings}.items()]
    md += ['', '| ' + ' | '.join(columns) + ' |', '|---|' + '---|' * (len(columns) - 1)]
    for row in rows:
        md.append('| ' + ' | '.join(f'{row[c]:.2f}' if isinstance(row[c], float) else str(row[c])
                                    for c in columns) + ' |')
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / 'pool_sizes.md').write_text('\n'.join(md) + '\n')
    (RESULTS / 'pool_sizes.json').write_text(json.dumps({'header': {**header, **settings},
                                                         'rows': rows}, indent=2) + '\n')
    print('\n'.join(md))
    # the guide's sentence, from the file just written
    subprocess.run([sys.executable, str(ROOT / 'scripts' / 'docs_sections.py'), '--write'],
                   check=True)


if __name__ == '__main__':
    main()
