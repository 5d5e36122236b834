"""Where a distilled model's gain lands: test queries whose relevant passages training moved,
and the others (issue 30, a diagnostic read with the labels after training).

Passage offsets move only the passages a training query met among its teacher's candidates
(`PassageOffsets.docnos`); a passage never met keeps its start vector. So a model's gain may
sit on the test queries whose relevant passages were moved. On scifact this matters for the
query-log setting: its training queries (the train split's texts) and the test queries cite
many of the same papers (printed below from the qrels of both splits: a property of the
data, never read in training). For each distill pipeline of the results groups named, the
test queries are split by whether any of their relevant passages has an offset, and the
mean nDCG@10 of the pipeline and of its zero-shot start is given for each part.

    python experiments/probes/offset_reach.py [results group ...]   (default: label_free_log_scifact corpus_only_levers)
writes experiments/results/offset_reach.md.
"""
import sys
from pathlib import Path

import ir_datasets
import pandas as pd

from pyterrier_selfsup import Collection
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.harness.pipelines import get_pipeline
from pyterrier_selfsup.models.offsets import PassageOffsets

RESULTS = Path(__file__).resolve().parents[1] / 'results'
GROUPS = ['label_free_log_scifact', 'corpus_only_levers']
COLLECTION = 'beir/scifact/test'


def relevant(dataset: str) -> dict:
    out = {}
    for q in ir_datasets.load(dataset).qrels_iter():
        if q.relevance > 0:
            out.setdefault(q.query_id, set()).add(q.doc_id)
    return out


def main(groups):
    test = relevant(COLLECTION)
    train_docs = set().union(*relevant('beir/scifact/train').values())
    test_docs = set().union(*test.values())
    header = provenance.header()
    md = ['# Where the gain lands: test queries whose relevant passages training moved', '']
    md += [f'- {k}: {v}' for k, v in header.items()]
    md += [f'- data: {COLLECTION}, {len(test)} queries with a relevant passage; per-query nDCG@10 from each group\'s '
           '.perquery.csv; a passage "moved": it has a row in the model\'s passage_offsets.pt (met by training)',
           f'- the splits\' qrels (read here only): {len(test_docs & train_docs)} of the {len(test_docs)} passages '
           f'relevant to a test query are relevant to a train query too '
           f'({len(test_docs & train_docs) / len(test_docs):.2f})',
           '', '| group | pipeline | passages moved | test queries reached | nDCG@10 reached: start -> model | '
           'not reached: start -> model | relevant to a train query too: start -> model | the others |',
           '|---|---|---|---|---|---|---|---|']
    coll = Collection(COLLECTION)
    for group in groups:
        path = RESULTS / f'{group}.perquery.csv'
        if not path.exists():
            continue
        per = pd.read_csv(path, dtype={'qid': str})
        per = per[per['collection'] == COLLECTION]
        start_name = next(n for n in ('minilm', 'dual') if n in set(per['name']))
        start = per[per['name'] == start_name].set_index('qid')['nDCG@10']
        for name in dict.fromkeys(per['name']):
            if not name.startswith('distill'):
                continue
            dirs = get_pipeline(name).model_dirs(coll)
            offsets = PassageOffsets.load(dirs[0] / 'final') if len(dirs) == 1 else None  # (the model: final/)
            if offsets is None:
                continue
            moved = set(offsets.docnos)
            model = per[per['name'] == name].set_index('qid')['nDCG@10']
            qids = [q for q in test if q in model.index]
            reached = [q for q in qids if test[q] & moved]
            others = [q for q in qids if not test[q] & moved]
            shared = [q for q in qids if test[q] & train_docs]
            unshared = [q for q in qids if not test[q] & train_docs]

            def change(part):
                if not part:
                    return '-'
                return f'{start[part].mean():.4f} -> {model[part].mean():.4f} ({len(part)})'
            md.append(f'| {group} | {name} | {len(moved)} | {len(reached) / len(qids):.2f} | {change(reached)} | '
                      f'{change(others)} | {change(shared)} | {change(unshared)} |')
    (RESULTS / 'offset_reach.md').write_text('\n'.join(md) + '\n')
    print('\n'.join(md))


if __name__ == '__main__':
    main(sys.argv[1:] or GROUPS)
