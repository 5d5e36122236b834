"""Does the sentence-transformers export score what the pipeline scores? (issue 70, item 4)

Each shipped setting's model is evaluated twice on each collection's topics:

- through the package's pipeline (``distill``'s retriever: the package's encoder over its index,
  with the passage offsets the query-log setting trains);
- through ``SentenceTransformer(final)`` alone, as a user who loads the export meets it:
  ``encode_document`` over the whole corpus, ``encode_query`` over the topics, and an exact search
  by the model's own similarity. A query-log model of two folds answers each topic with its
  fold's export, as the pipeline does.

The table gives each one's nDCG@10 and the export's paired change from the pipeline, with its 95%
bootstrap interval over the topics (* where the interval is clear of 0).

    python experiments/reproduce/export_check.py
    python experiments/reproduce/export_check.py --settings corpus_only --collections classic/adi

Writes ``experiments/results/export_check.md`` and ``.json`` (``--out`` names them otherwise).
"""
import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import pandas as pd
import pyterrier as pt
from ir_measures import nDCG

from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.harness.pipelines import CrossFold, get_pipeline

RESULTS = Path(__file__).resolve().parents[1] / 'results'
sys.path.insert(0, str(RESULTS.parent / 'tools'))
from change_table import interval  # noqa: E402

FIVE = ['beir/scifact/test', 'cranfield', 'vaswani', 'classic/cisi', 'classic/adi']
# the shipped settings, as the README's table runs them (label_free and label_free_log*)
SETTINGS: dict[str, dict[str, str]] = {
    'corpus_only': {c: 'distill' for c in FIVE},
    'query_log': {'beir/scifact/test': 'distill:queries=beir/scifact/train',
                  **{c: 'distill:queries=crossfold' for c in FIVE[1:]}},
}
MEASURE = nDCG @ 10


class ExportedRetriever(pt.Transformer):
    """A trained model's sentence-transformers export alone: the corpus encoded by its
    ``encode_document``, each query by its ``encode_query``, and the top ``k`` by the model's
    similarity, searched exactly. The corpus's vectors are kept in ``vectors`` (a dict) under a
    digest of the document side's files, so that exports whose document side is the same bytes
    (the start encoder's) encode the corpus once."""

    def __init__(self, model_dir: Path, collection: Collection, vectors: dict, k: int = 1000):
        from sentence_transformers import SentenceTransformer
        self.model = SentenceTransformer(str(model_dir), device='cpu')
        self.k = k
        key = (collection.corpus_id, document_side_digest(model_dir))
        if key not in vectors:
            docs = list(collection.corpus_iter())
            started = time.time()
            matrix = self.model.encode_document([d['text'] for d in docs], batch_size=32,
                                                convert_to_tensor=True, show_progress_bar=True)
            vectors[key] = ([d['docno'] for d in docs], matrix, time.time() - started)
        self.docnos, self.matrix, _ = vectors[key]

    def transform(self, topics: pd.DataFrame) -> pd.DataFrame:
        queries = self.model.encode_query(list(topics['query']), convert_to_tensor=True)
        scores = self.model.similarity(queries, self.matrix)
        top = scores.topk(min(self.k, scores.shape[1]), dim=1)
        rows = []
        for qid, query, values, indices in zip(topics['qid'], topics['query'],
                                               top.values.tolist(), top.indices.tolist()):
            rows += [(qid, query, self.docnos[i], v, rank)
                     for rank, (v, i) in enumerate(zip(values, indices))]
        return pd.DataFrame(rows, columns=['qid', 'query', 'docno', 'score', 'rank'])


def document_side_digest(model_dir: Path) -> str:
    """A digest of the files the export's document side reads: a Router's ``document_*``
    modules, or every file of a model of one stack."""
    files = sorted(p for p in Path(model_dir).rglob('*') if p.is_file())
    routed = any(p.relative_to(model_dir).parts[0].startswith('document_') for p in files)
    digest = hashlib.sha1()
    for path in files:
        first = path.relative_to(model_dir).parts[0]
        if routed and not first.startswith('document_'):
            continue
        if path.suffix in ('.safetensors', '.bin', '.json', '.txt', '.model'):
            digest.update(str(path.relative_to(model_dir)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def check(setting: str, collection_name: str, run: RunContext, vectors: dict) -> dict:
    spec = get_pipeline(SETTINGS[setting][collection_name])
    collection = Collection(collection_name)
    started = time.time()
    pipeline = spec.build(collection, run)
    trained_at = time.time() - started
    finals = [Path(d) / 'final' for d in spec.model_dirs(collection, run)]
    exports = [ExportedRetriever(final, collection, vectors) for final in finals]
    export = exports[0] if len(exports) == 1 else CrossFold(collection, exports)
    topics, qrels = collection.topics(), collection.qrels()
    per = pt.Experiment([pipeline, export], topics, qrels, [MEASURE], names=['pipeline', 'export'],
                        perquery=True)
    per = per.pivot_table(index='qid', columns='name', values='value')
    change, low, high = interval((per['export'] - per['pipeline']).to_numpy())
    return {'setting': setting, 'collection': collection_name, 'pipeline': spec.name,
            'models': [str(f) for f in finals], 'topics': len(per),
            'nDCG@10 pipeline': float(per['pipeline'].mean()),
            'nDCG@10 export': float(per['export'].mean()),
            'change': change, 'low': low, 'high': high,
            'seconds (training or reopening)': trained_at}


def write(rows: list[dict], header: dict, out: Path):
    lines = [f'# {out.name}', '', 'Each shipped setting\'s model through the package\'s pipeline, '
             'and through `SentenceTransformer(final)` alone (`encode_document` over the corpus, '
             '`encode_query`, exact search by the model\'s similarity). Change: the export\'s '
             'nDCG@10 less the pipeline\'s, with its 95% paired bootstrap interval over the '
             'topics (* where it is clear of 0).', '']
    lines += [f'- {k}: {v}' for k, v in header.items()]
    lines += ['- settings: ' + '; '.join(f'{s}: ' + ', '.join(
        f'{c} `{p}`' for c, p in pipelines.items()) for s, pipelines in SETTINGS.items()), '']
    lines += ['| setting | collection | topics | pipeline | export | export − pipeline |',
              '|---|---|---|---|---|---|']
    for r in rows:
        clear = '*' if r['low'] > 0 or r['high'] < 0 else ''
        lines.append(f"| {r['setting']} | {r['collection']} | {r['topics']} | "
                     f"{r['nDCG@10 pipeline']:.4f} | {r['nDCG@10 export']:.4f} | "
                     f"{r['change']:+.4f} [{r['low']:+.4f}, {r['high']:+.4f}]{clear} |")
    out.with_suffix('.md').write_text('\n'.join(lines) + '\n')
    out.with_suffix('.json').write_text(json.dumps({'header': header, 'rows': rows}, indent=2))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--settings', nargs='+', default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument('--collections', nargs='+', default=FIVE, choices=FIVE)
    parser.add_argument('--out', type=Path, default=RESULTS / 'export_check')
    args = parser.parse_args(argv)
    header = provenance.header()
    run, vectors, rows = RunContext(verbose=True), {}, []
    for setting in args.settings:
        for collection in args.collections:
            rows.append(check(setting, collection, run, vectors))
            print(json.dumps(rows[-1]), flush=True)
            write(rows, header, args.out)  # (after each: a stopped run keeps what it measured)
    return rows


if __name__ == '__main__':
    main()
