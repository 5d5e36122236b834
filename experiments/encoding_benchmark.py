"""Document encoding throughput: ours against pyterrier-dr / sentence-transformers, and
against this machine's measured matrix-multiplication peak.

All encoders run in this one process on the same documents (the first N of
beir/scifact, title + text, 256 tokens) with the same model (all-MiniLM-L6-v2):

- peer, pyterrier-dr:   SBertBiEncoder's doc encoder in an indexing pipeline into a
                        FlexIndex, as `selfsup run -p minilm` indexes (pt's default chunks)
- peer, s-t encode():   SentenceTransformer.encode() on the whole list at once (it sorts
                        all texts by length: the best case for the peer)
- ours fp32 / ours bf16: DualEncoder in the same FlexIndex pipeline, fp32 and bf16 autocast

Useful FLOPs are counted from each document's real (unpadded) token count, so padding
is work that does not count. Peak: the best of repeated 4096x4096 matrix products in
fp32 and bf16 (torch, all threads).

    python experiments/encoding_benchmark.py [--docs 1000]
writes experiments/results/encoding_benchmark.{md,json}.
"""
import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from pyterrier_dr import FlexIndex
from sentence_transformers import SentenceTransformer

from pyterrier_selfsup import MINILM, Collection, sbert_encoder
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.retrieval.dense import INDEX_CHUNK
from pyterrier_selfsup.models.dual_encoder import DualEncoder

RESULTS = Path(__file__).parent / 'results'


def matmul_peak(dtype, n=4096, repeats=5) -> float:
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b
    best = float('inf')
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n ** 3 / best


def useful_flops(lengths, config) -> float:
    """Forward FLOPs of a BERT encoder over unpadded sequences: the linear layers
    (Q, K, V, output: 4h^2; feed-forward: 2hf per token) and the attention products
    (QK^T and AV: 2 n^2 h per sequence), per layer; 2 FLOPs per multiply-add."""
    h, f, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    n = np.asarray(lengths, dtype=np.float64)
    per_layer = 2 * n.sum() * (4 * h * h + 2 * h * f) + 2 * 2 * (n ** 2).sum() * h
    return layers * per_layer


def index_with(encoder, docs, batch_size=None) -> float:
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        (encoder.doc_encoder() >> FlexIndex(f'{d}/x.flex', verbose=False)).index(iter(docs), batch_size=batch_size)
        return time.perf_counter() - t0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--docs', type=int, default=1000)
    args = parser.parse_args()

    docs = []
    for doc in Collection('beir/scifact/test').corpus_iter():
        docs.append(doc)
        if len(docs) == args.docs:
            break
    texts = [d['text'] for d in docs]

    ours = DualEncoder.from_pretrained(MINILM, precision='fp32', device='cpu')
    lengths = [len(x) for x in ours.tokenize(texts, 'passage', padding=False)['input_ids']]
    flops = useful_flops(lengths, ours.model.encoder.config)
    peak = {'fp32': matmul_peak(torch.float32), 'bf16': matmul_peak(torch.bfloat16)}

    runs = {}
    peer = sbert_encoder(MINILM, max_length=256, device='cpu')
    runs['peer: pyterrier-dr SBertBiEncoder indexing'] = ('fp32', index_with(peer, docs))
    st = SentenceTransformer(MINILM, device='cpu')
    st.max_seq_length = 256
    t0 = time.perf_counter()
    st_vecs = st.encode(texts, batch_size=32, normalize_embeddings=True)
    runs['peer: sentence-transformers encode(all texts)'] = ('fp32', time.perf_counter() - t0)
    runs['ours: DualEncoder indexing, fp32'] = ('fp32', index_with(ours, docs, INDEX_CHUNK))
    fp32_vecs = ours.encode_docs(texts)
    ours.precision = 'bf16'
    runs['ours: DualEncoder indexing, bf16 autocast'] = ('bf16', index_with(ours, docs, INDEX_CHUNK))
    bf16_vecs = ours.encode_docs(texts)

    peer_rate = len(docs) / runs['peer: pyterrier-dr SBertBiEncoder indexing'][1]
    best_peer_rate = len(docs) / runs['peer: sentence-transformers encode(all texts)'][1]
    rows = []
    for name, (dtype, seconds) in runs.items():
        rate = len(docs) / seconds
        rows.append({'encoder': name, 'dtype': dtype, 'seconds': seconds, 'docs_per_s': rate,
                     'vs_pyterrier_dr': rate / peer_rate, 'vs_st_encode': rate / best_peer_rate,
                     'gflops': flops / seconds / 1e9, 'fraction_of_peak': flops / seconds / peak[dtype]})
    quality = {
        'fp32 vs sentence-transformers, max |diff|': float(np.abs(fp32_vecs - st_vecs).max()),
        'bf16 vs fp32, max |diff|': float(np.abs(bf16_vecs - fp32_vecs).max()),
        'bf16 vs fp32, min cosine': float((bf16_vecs * fp32_vecs).sum(1).min()),
    }
    header = provenance.header()
    settings = {'model': provenance.model_revision(MINILM), 'data': f'first {len(docs)} documents of beir/scifact '
                f'(title + text), {int(np.sum(lengths))} tokens after truncation to 256 (mean {np.mean(lengths):.0f})',
                'batch size': 32, 'index chunk (ours)': INDEX_CHUNK, 'torch threads': torch.get_num_threads(),
                'matmul peak GFLOP/s': {k: round(v / 1e9, 1) for k, v in peak.items()}}

    RESULTS.mkdir(exist_ok=True)
    (RESULTS / 'encoding_benchmark.json').write_text(json.dumps(
        {'header': header, 'settings': settings, 'runs': rows, 'quality': quality}, indent=2))
    md = ['# Encoding benchmark', ''] + [f'- {k}: {v}' for k, v in {**header, **settings}.items()] + ['']
    md += ['| encoder | dtype | docs/s | × pyterrier-dr | × s-t encode() | useful GFLOP/s | of peak (same dtype) |',
           '|---|---|---|---|---|---|---|']
    md += [f'| {r["encoder"]} | {r["dtype"]} | {r["docs_per_s"]:.1f} | {r["vs_pyterrier_dr"]:.2f} | '
           f'{r["vs_st_encode"]:.2f} | {r["gflops"]:.0f} | {r["fraction_of_peak"]:.0%} |' for r in rows]
    md += ['', 'Embedding agreement: ' + '; '.join(f'{k} {v:.6g}' for k, v in quality.items()) + '.', '']
    (RESULTS / 'encoding_benchmark.md').write_text('\n'.join(md))
    print('\n'.join(md))


if __name__ == '__main__':
    main()
