"""What int8 costs the encoder in retrieval quality (issue 19): all-MiniLM-L6-v2 in fp32
against the same model quantised to int8 two ways, each ranking the whole of scifact by
exact dot product:

- torch's int8 dynamic quantisation of the linear layers (per-channel weights, per-tensor
  dynamic activations: the fastest torch candidate of `cpu_speedups.py`);
- the package's ``backend='openvino-int8'``: NNCF's static post-training quantisation,
  calibrated on the corpus's first 256 documents (no label, no query), the queries left in fp32.

nDCG@10 on scifact train (where a choice would be made) and test (the issue's bound:
within .005 of fp32), with the paired t-test over queries, and the encoding rate of each.

    python experiments/probes/encoder_int8_quality.py
writes experiments/results/encoder_int8_quality.{md,json}.
"""
import copy
import json
import time
import warnings
from pathlib import Path

import ir_measures
import numpy as np
import pandas as pd
import torch
from ir_measures import nDCG
from scipy.stats import ttest_rel

from pyterrier_selfsup import MINILM, Collection
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.models.dual_encoder import DualEncoder

RESULTS = Path(__file__).resolve().parents[1] / 'results'
SPLITS = ('beir/scifact/train', 'beir/scifact/test')


def int8(encoder: DualEncoder) -> DualEncoder:
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    quantised = copy.deepcopy(encoder)
    quantised.model = quantize_dynamic(quantised.model, {torch.nn.Linear: per_channel_dynamic_qconfig},
                                       dtype=torch.qint8)
    return quantised


def per_query_ndcg(encoder: DualEncoder, docnos, doc_vectors, collection: Collection) -> pd.Series:
    topics = collection.topics()
    scores = encoder.encode_queries(topics['query'].tolist()) @ doc_vectors.T
    top = np.argsort(-scores, axis=1)[:, :10]
    run = pd.DataFrame([{'query_id': qid, 'doc_id': docnos[j], 'score': float(scores[i, j])}
                        for i, qid in enumerate(topics['qid']) for j in top[i]])
    qrels = collection.qrels().rename(columns={'qid': 'query_id', 'docno': 'doc_id', 'label': 'relevance'})
    values = {m.query_id: m.value for m in ir_measures.iter_calc([nDCG @ 10], qrels, run)}
    judged = qrels['query_id'].unique()
    return pd.Series({q: values.get(q, 0.0) for q in judged})


def main():
    warnings.filterwarnings('ignore', category=DeprecationWarning)
    started = time.time()
    reference = DualEncoder.from_pretrained(MINILM, precision='fp32', device='cpu')
    encoders = {'fp32': reference, 'torch int8 dynamic': int8(reference),
                'openvino-int8': DualEncoder.from_pretrained(MINILM, precision='fp32', device='cpu',
                                                             backend='openvino-int8')}
    docs = list(Collection(SPLITS[0]).corpus_iter())
    docnos, texts = np.array([d['docno'] for d in docs]), [d['text'] for d in docs]
    rates, per_query = {}, {}
    for name, encoder in encoders.items():
        t0 = time.perf_counter()
        vectors = encoder.encode_docs(texts)
        rates[name] = len(texts) / (time.perf_counter() - t0)
        for split in SPLITS:
            per_query[name, split] = per_query_ndcg(encoder, docnos, vectors, Collection(split))
    rows = []
    for name in list(encoders)[1:]:
        for split in SPLITS:
            a, b = per_query['fp32', split], per_query[name, split].reindex(per_query['fp32', split].index)
            rows.append({'int8': name, 'split': split, 'queries': len(a), 'fp32': a.mean(), 'int8 nDCG@10': b.mean(),
                         'difference': b.mean() - a.mean(), 'p (paired t)': float(ttest_rel(b, a).pvalue)})
    header = provenance.header()
    settings = {'model': provenance.model_revision(MINILM), 'corpus': f'beir/scifact ({len(texts)} documents, '
                'title + text, 256 tokens)', 'search': 'exact dot product, top 10',
                'torch int8 dynamic': 'torch.ao.quantization.quantize_dynamic, nn.Linear, per_channel_dynamic_qconfig '
                '(qint8)', 'openvino-int8': "DualEncoder(backend='openvino-int8'): nncf.quantize, ModelType.TRANSFORMER, "
                'calibrated on the first 256 documents of the corpus; queries in OpenVINO fp32',
                'quantised engine': torch.backends.quantized.engine, 'torch threads': torch.get_num_threads(),
                'encoding docs/s (whole corpus, batches of 32; openvino-int8 including its calibration)': {k: round(v, 1) for k, v in rates.items()},
                'wall time': f'{time.time() - started:.0f} s'}
    (RESULTS / 'encoder_int8_quality.json').write_text(json.dumps(
        {'header': header, 'settings': settings, 'rows': rows}, indent=1))
    md = ['# Encoder int8: retrieval quality against fp32', '',
          *(f'- {k}: {v}' for k, v in {**header, **settings}.items()), '',
          '| int8 | split | queries | nDCG@10 fp32 | nDCG@10 int8 | int8 - fp32 | p (paired t) |',
          '|---|---|---|---|---|---|---|',
          *(f'| {r["int8"]} | {r["split"]} | {r["queries"]} | {r["fp32"]:.4f} | {r["int8 nDCG@10"]:.4f} | '
            f'{r["difference"]:+.4f} | '
            f'{r["p (paired t)"]:.3g} |' for r in rows), '']
    (RESULTS / 'encoder_int8_quality.md').write_text('\n'.join(md))
    print('\n'.join(md))


if __name__ == '__main__':
    main()
