"""Document encoding throughput: ours against pyterrier-dr / sentence-transformers, and
against this machine's measured matrix-multiplication peak.

All encoders run in this one process on the same documents (the first N of
beir/scifact, title + text, 256 tokens) with the same model (all-MiniLM-L6-v2):

- peer, pyterrier-dr:   SBertBiEncoder's doc encoder in an indexing pipeline into a
                        FlexIndex, as `selfsup run -p minilm` indexes (pt's default chunks)
- peer, s-t encode():   SentenceTransformer.encode() on the whole list at once (it sorts
                        all texts by length: the best case for the peer), with its weights
                        in each precision ours runs in
- ours fp32 / ours bf16: DualEncoder in the same FlexIndex pipeline, fp32 and bf16 autocast
- ours OpenVINO:        the same DualEncoder with backend='openvino' (the same model compiled
                        by OpenVINO at the same precision)
- ours OpenVINO int8:   backend='openvino-int8' (NNCF's static int8, calibrated on the first
                        256 of these documents, as an index is; compared with the fp32 peers)

Only the precisions this CPU runs natively are measured (the package's own detection,
`cpu_has_native_bf16`: bf16 needs AVX512-BF16 or AMX; emulated, it runs hundreds of times
slower than fp32), unless `--precisions` says otherwise. Useful FLOPs are counted from
each document's real (unpadded) token count, so padding is work that does not count.
Peak: the best of repeated square matrix products in each precision (torch, all threads),
sized and repeated within about two seconds (`matmul_peak`). The header's machine line
names the CPU flags.

On a GPU (``--device cuda``, the default where torch sees one) the same encoders run there,
without OpenVINO, over every scifact document by default; each encoder first encodes 256
documents to warm up (CUDA loads kernels on their first use), and the peak is the GPU's.
A torch.profiler summary follows the table: for ours and for sentence-transformers in bf16,
the share of wall time the GPU was busy, and the kernel launches and host-device syncs per
batch.

    python experiments/benchmarks/encoding_benchmark.py [--docs 1000] [--precisions fp32 bf16] [--tag avx2]
                                             [--device cpu|cuda] [--results-dir DIR]
writes experiments/results/encoding_benchmark[_<tag>].{md,json}; under the AVX2 caps of
`cpu_speedups.py` (`ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2`, read by torch's
oneDNN and MKL and by OpenVINO) with `--tag avx2`.
"""
import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from pyterrier_dr import FlexIndex
from sentence_transformers import SentenceTransformer

from pyterrier_selfsup import MINILM, Collection, sbert_encoder
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.machine import cpu_has_native_bf16
from pyterrier_selfsup.models.dual_encoder import DualEncoder
from pyterrier_selfsup.retrieval.dense import INDEX_CHUNK

RESULTS = Path(__file__).resolve().parents[1] / 'results'
DTYPES = {'fp32': torch.float32, 'bf16': torch.bfloat16}


def synchronise(device: str):
    if device == 'cuda':
        torch.cuda.synchronize()


def matmul_peak(dtype, budget_s: float = 2.0, device: str = 'cpu') -> float:
    """The best FLOP/s of square matrix products in ``dtype``, bounded in time: the size
    doubles from 256 while one product takes under 50 ms (up to 4096), then products repeat
    for about ``budget_s``. (A CPU that emulates bf16 multiplies at well under 1 GFLOP/s:
    one 4096 product would take minutes there; a 256 one takes a fraction of a second.)"""
    n = 256
    while True:
        a, b = (torch.randn(n, n, dtype=dtype, device=device) for _ in range(2))
        a @ b
        synchronise(device)
        t0 = time.perf_counter()
        a @ b
        synchronise(device)
        once = time.perf_counter() - t0
        if once >= 0.05 or n >= (16384 if device == 'cuda' else 4096):
            break
        n *= 2
    best, spent = once, 0.0
    while spent < budget_s:
        t0 = time.perf_counter()
        a @ b
        synchronise(device)
        elapsed = time.perf_counter() - t0
        best, spent = min(best, elapsed), spent + elapsed
    return 2 * n ** 3 / best


def useful_flops(lengths, config) -> float:
    """Forward FLOPs of a BERT encoder over unpadded sequences: the linear layers
    (Q, K, V, output: 4h^2; feed-forward: 2hf per token) and the attention products
    (QK^T and AV: 2 n^2 h per sequence), per layer; 2 FLOPs per multiply-add."""
    h, f, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    n = np.asarray(lengths, dtype=np.float64)
    per_layer = 2 * n.sum() * (4 * h * h + 2 * h * f) + 2 * 2 * (n ** 2).sum() * h
    return layers * per_layer


def index_with(encoder, docs, batch_size=None, device='cpu') -> float:
    if device == 'cuda':  # (kernels load on their first use)
        encoder.encode_docs([d['text'] for d in docs[:256]])
        synchronise(device)
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        (encoder.doc_encoder() >> FlexIndex(f'{d}/x.flex', verbose=False)).index(iter(docs), batch_size=batch_size)
        synchronise(device)
        return time.perf_counter() - t0


def st_encode(st, texts, device) -> tuple:
    """(seconds, vectors) of sentence-transformers' own ``encode`` over all ``texts``."""
    if device == 'cuda':
        st.encode(texts[:256], batch_size=32)
        synchronise(device)
    t0 = time.perf_counter()
    vectors = st.encode(texts, batch_size=32, normalize_embeddings=True)
    synchronise(device)
    return time.perf_counter() - t0, vectors


def profile(encode, texts, batches: int) -> dict:
    """What torch.profiler sees of one ``encode(texts)`` on a GPU: the share of wall time some
    kernel ran (the union of kernel intervals), and kernel launches and host-device syncs
    (stream, event and device synchronisations, and blocking copies) per batch."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile
    encode(texts[:256])
    torch.cuda.synchronize()
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        encode(texts)
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    events = prof.events()
    kernels = sorted((e.time_range.start, e.time_range.end) for e in events
                     if e.device_type == torch.autograd.DeviceType.CUDA)
    busy, end = 0.0, -np.inf
    for a, b in kernels:  # the union of the intervals, in microseconds
        if b > end:
            busy += b - max(a, end)
            end = b
    names = [e.name for e in events if e.device_type == torch.autograd.DeviceType.CPU]
    launches = sum(n in ('cudaLaunchKernel', 'cuLaunchKernel', 'cudaLaunchKernelExC', 'cuLaunchKernelEx')
                   for n in names)
    syncs = sum(n in ('cudaStreamSynchronize', 'cudaDeviceSynchronize', 'cudaEventSynchronize',
                      'cudaMemcpy') for n in names)
    return {'wall s (profiled)': round(wall, 3), 'GPU busy share': round(busy / 1e6 / wall, 3),
            'batches': batches, 'kernel launches / batch': round(launches / batches, 1),
            'syncs / batch': round(syncs / batches, 2), 'kernels': len(kernels)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--docs', type=int, help='default: 1000 on a CPU, all 5,183 on a GPU')
    parser.add_argument('--precisions', nargs='+', choices=sorted(DTYPES),
                        help='default: fp32, and bf16 where the device runs it natively')
    parser.add_argument('--tag', default='', help='names the results file (e.g. avx2 under the ISA caps)')
    parser.add_argument('--device', choices=('cpu', 'cuda'),
                        default='cuda' if torch.cuda.is_available() else 'cpu')
    parser.add_argument('--results-dir', type=Path, default=RESULTS)
    args = parser.parse_args()
    device, gpu = args.device, args.device == 'cuda'
    n_docs = args.docs or (10 ** 9 if gpu else 1000)

    docs = []
    for doc in Collection('beir/scifact/test').corpus_iter():
        docs.append(doc)
        if len(docs) == n_docs:
            break
    texts = [d['text'] for d in docs]

    ours = DualEncoder.from_pretrained(MINILM, precision='fp32', device=device)
    lengths = [len(x) for x in ours.tokenize(texts, 'passage', padding=False)['input_ids']]
    flops = useful_flops(lengths, ours.model.encoder.config)
    native = gpu or cpu_has_native_bf16()
    precisions = args.precisions or (['fp32', 'bf16'] if native else ['fp32'])
    peak = {p: matmul_peak(DTYPES[p], device=device) for p in precisions}

    runs, vectors = {}, {}
    peer = sbert_encoder(MINILM, max_length=256, device=device)
    runs['peer: pyterrier-dr SBertBiEncoder indexing'] = ('fp32', index_with(peer, docs, device=device))
    sts = {}
    for precision in precisions:  # the peers at the precision ours runs in
        st = sts[precision] = SentenceTransformer(MINILM, device=device,
                                                  model_kwargs={'dtype': DTYPES[precision]})
        st.max_seq_length = 256
        seconds, vectors[f'sentence-transformers {precision}'] = st_encode(st, texts, device)
        runs[f'peer: sentence-transformers encode(all texts), {precision} weights'] = (precision, seconds)
    for precision in precisions:
        ours.precision = precision
        label = 'fp32' if precision == 'fp32' else f'{precision} autocast'
        runs[f'ours: DualEncoder indexing, {label}'] = (precision, index_with(ours, docs, INDEX_CHUNK, device))
        vectors[f'ours {precision}'] = ours.encode_docs(texts)
    conversion = {}
    for precision in ([] if gpu else precisions):  # the same model through OpenVINO (backend='openvino')
        fast = DualEncoder.from_pretrained(MINILM, precision=precision, device='cpu', backend='openvino')
        t0 = time.perf_counter()
        fast.encode_docs(texts[:2])  # converts and compiles once (timed apart: the weights do not change)
        conversion[precision] = round(time.perf_counter() - t0, 1)
        runs[f'ours: DualEncoder indexing, OpenVINO {precision}'] = (precision, index_with(fast, docs, INDEX_CHUNK))
        vectors[f'ours OpenVINO {precision}'] = fast.encode_docs(texts)
    if not gpu:
        # int8 (backend='openvino-int8'): calibrated on the first 256 documents, as an index's
        # first chunk calibrates it (timed apart, as the conversion); the rest of the model in fp32
        fast = DualEncoder.from_pretrained(MINILM, precision='fp32', device='cpu', backend='openvino-int8')
        t0 = time.perf_counter()
        fast.encode_docs(texts[:256])
        conversion['int8 (with calibration)'] = round(time.perf_counter() - t0, 1)
        runs['ours: DualEncoder indexing, OpenVINO int8'] = ('int8', index_with(fast, docs, INDEX_CHUNK))
        vectors['ours OpenVINO int8'] = fast.encode_docs(texts)
    profiles = {}
    if gpu and 'bf16' in precisions:
        ours.precision = 'bf16'
        budget = ours.batch_size * ours.max_length
        ours_batches = sum(1 for _ in ours._batches(texts, 'passage', budget))
        try:  # (the table above is worth keeping if the profiler fails)
            profiles['ours, bf16'] = profile(ours.encode_docs, texts, ours_batches)
            profiles['sentence-transformers, bf16 weights'] = profile(
                lambda x: sts['bf16'].encode(x, batch_size=32, normalize_embeddings=True), texts,
                -(-len(texts) // 32))
        except Exception as error:  # noqa: BLE001
            profiles['failed'] = {'error': repr(error)}

    peer_rate = len(docs) / runs['peer: pyterrier-dr SBertBiEncoder indexing'][1]
    st_rate = {p: len(docs) / seconds for name, (p, seconds) in runs.items() if 'sentence-transformers' in name}
    rows = []
    for name, (dtype, seconds) in runs.items():
        rate = len(docs) / seconds
        same = 'fp32' if dtype == 'int8' else dtype  # (int8 against the fp32 peers; no int8 peak measured)
        rows.append({'encoder': name, 'dtype': dtype, 'seconds': seconds, 'docs_per_s': rate,
                     'vs_pyterrier_dr': rate / peer_rate, 'vs_st_encode': rate / st_rate[same],
                     'gflops': flops / seconds / 1e9,
                     'fraction_of_peak': flops / seconds / peak[dtype] if dtype in peak else None})
    reference = vectors['ours fp32']
    quality = {f'{name} vs ours fp32, min cosine': float((v * reference).sum(1).min())
               for name, v in vectors.items() if name != 'ours fp32'}
    quality['sentence-transformers fp32 vs ours fp32, max |diff|'] = float(
        np.abs(vectors['sentence-transformers fp32'] - reference).max())
    if 'ours OpenVINO fp32' in vectors:  # (what backend='auto' gives on a CPU: the minilm pipeline's)
        quality['sentence-transformers fp32 vs ours OpenVINO fp32, max |diff|'] = float(
            np.abs(vectors['sentence-transformers fp32'] - vectors['ours OpenVINO fp32']).max())
    header = provenance.header()
    settings = {'model': provenance.model_revision(MINILM), 'data': f'first {len(docs)} documents of beir/scifact '
                f'(title + text), {int(np.sum(lengths))} tokens after truncation to 256 (mean {np.mean(lengths):.0f})',
                'device': device + (f' ({torch.cuda.get_device_name()})' if gpu else ''),
                'batch size': f'32 for the peers; ours: {ours.batch_size} texts of 256 tokens '
                              '(short texts run more to a batch, in the same number of tokens)',
                'index chunk (ours)': INDEX_CHUNK, 'torch threads': torch.get_num_threads(),
                'TOKENIZERS_PARALLELISM': os.environ.get('TOKENIZERS_PARALLELISM', 'unset'),
                'precisions': f'{", ".join(precisions)} ('
                              f'{"given" if args.precisions else "those the device runs natively"})',
                'ISA caps': ', '.join(f'{k}={os.environ[k]}' for k in ('ONEDNN_MAX_CPU_ISA', 'MKL_ENABLE_INSTRUCTIONS')
                                      if k in os.environ) or 'none',
                'matmul peak GFLOP/s': {k: round(v / 1e9, 1) for k, v in peak.items()}}
    if conversion:
        settings['OpenVINO conversion and compilation s (once per model and precision, not in the rates)'] = conversion

    args.results_dir.mkdir(parents=True, exist_ok=True)
    stem = '_'.join(['encoding_benchmark'] + (['gpu'] if gpu else []) + ([args.tag] if args.tag else []))
    (args.results_dir / f'{stem}.json').write_text(json.dumps(
        {'header': header, 'settings': settings, 'runs': rows, 'quality': quality, 'profiles': profiles},
        indent=2))
    md = ['# Encoding benchmark', ''] + [f'- {k}: {v}' for k, v in {**header, **settings}.items()] + ['']
    md += ['| encoder | dtype | docs/s | × pyterrier-dr (fp32) | × s-t encode() (same dtype; int8: fp32) | '
           'useful GFLOP/s | of peak (same dtype) |',
           '|---|---|---|---|---|---|---|']
    md += [f'| {r["encoder"]} | {r["dtype"]} | {r["docs_per_s"]:.1f} | {r["vs_pyterrier_dr"]:.2f} | '
           f'{r["vs_st_encode"]:.2f} | {r["gflops"]:.0f} | '
           f'{"—" if r["fraction_of_peak"] is None else format(r["fraction_of_peak"], ".0%")} |' for r in rows]
    md += ['', 'Embedding agreement: ' + '; '.join(f'{k} {v:.6g}' for k, v in quality.items()) + '.', '']
    if profiles:
        keys = list(dict.fromkeys(k for v in profiles.values() for k in v))
        md += ['torch.profiler, one encode of all the documents (bf16):', '',
               '| encoder | ' + ' | '.join(keys) + ' |', '|---|' + '---|' * len(keys)]
        md += [f'| {name} | ' + ' | '.join(str(v.get(k, '')) for k in keys) + ' |'
               for name, v in profiles.items()]
        md += ['']
    (args.results_dir / f'{stem}.md').write_text('\n'.join(md))
    print('\n'.join(md))


if __name__ == '__main__':
    main()
