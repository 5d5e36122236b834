"""How many passages a user grades to judge 30 queries: the start (`minilm`) and the adapted
model (`distill`, corpus only) pooled at depth 10, as `selfsup judge` pools them, on each of the
five local collections.

Thirty of each collection's topic texts, drawn at random (seed 0), are pooled by
`harness.judging.Campaign` (each pipeline's top 10, ties at the 10th score included, once
each). `distill` is the shipped corpus-only setting: trained on first use, or read from the cache
(`$SELFSUP_CACHE`) where it was trained before. No relevance label is read.

    python experiments/probes/pool_sizes.py            # measures, and writes the guide's line
    python experiments/probes/pool_sizes.py --write    # the guide's line from the results alone
writes experiments/results/pool_sizes.md and .json, and the sentence of docs/adapting.md between
its `pool-sizes` markers (`tests/test_docs_figures.py` checks that the guide holds it).
"""
import json
import re
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np

from pyterrier_selfsup import Collection, RunContext
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.harness.judging import Campaign
from pyterrier_selfsup.harness.pipelines import get_pipeline

RESULTS = Path(__file__).resolve().parents[1] / 'results'
GUIDE = Path(__file__).resolve().parents[2] / 'docs' / 'adapting.md'
MARKERS = ('<!-- pool-sizes: begin -->', '<!-- pool-sizes: end -->')
NAMES = {'beir/scifact/test': 'scifact', 'cranfield': 'cranfield', 'vaswani': 'vaswani',
         'classic/cisi': 'CISI', 'classic/adi': 'ADI'}
COLLECTIONS = ['beir/scifact/test', 'cranfield', 'vaswani', 'classic/cisi', 'classic/adi']
PIPELINES, QUERIES, DEPTH, SEED = ['minilm', 'distill'], 30, 10, 0


def sentence(rows) -> str:
    """The guide's sentence: the passages a user grades on each collection."""
    each = ', '.join(f"{r['passages']:,}{' passages to grade' if not i else ''} on "
                     f"{NAMES[r['collection']]}" for i, r in enumerate(rows))
    return (f'Thirty queries pooled from the start and the adapted model at depth 10 come to '
            f'{each} (`pool_sizes.md`): the two top 10s share about '
            f"{min(r['shared of each top 10'] for r in rows):.0%} to "
            f"{max(r['shared of each top 10'] for r in rows):.0%} of their passages.")


def written_into(text: str, rows) -> str:
    """``text`` (the guide) with the sentence between its markers."""
    begin, end = MARKERS
    return re.sub(f'{re.escape(begin)}.*?{re.escape(end)}',
                  lambda _: f'{begin}\n{textwrap.fill(sentence(rows), 96)}\n{end}', text,
                  flags=re.S)


def main():
    if sys.argv[1:] == ['--write']:
        rows = json.loads((RESULTS / 'pool_sizes.json').read_text())['rows']
        GUIDE.write_text(written_into(GUIDE.read_text(), rows))
        return
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
    GUIDE.write_text(written_into(GUIDE.read_text(), rows))
    print('\n'.join(md))


if __name__ == '__main__':
    main()
