"""Candidates for a same-precision CPU speed-up of encoding and generator scoring (issue 19),
measured against today's fp32 path before any is built into the package.

Every candidate runs in this one process on the same inputs as its fp32 reference, after a
warm-up call (so compilation and session set-up are reported apart, not timed):

- encoder (all-MiniLM-L6-v2, the first N scifact documents, batches of 32 sorted by
  length as `DualEncoder.encode_docs` runs them): torch.compile (fp32, dynamic shapes);
  torch's int8 dynamic quantisation of the linear layers (per-channel weights, per-tensor
  activations) with its default engine's kernels (fbgemm) and with oneDNN's; OpenVINO fp32
  (the package's `backend='openvino'`) and NNCF's static int8 of it (`backend='openvino-int8'`,
  calibrated on these documents); ONNX Runtime fp32 (the same graph exported by torch.onnx), and its int8
  dynamic quantisation (per-channel weights). Quality: cosine of each embedding with fp32's.
- generator (SmolLM2-135M-Instruct, BM25's top 10 for the first Q queries of scifact
  *train*, `Generator.log_likelihoods`): torch.compile (fp32); torchao's int8 dynamic
  activation + int8 weight (per-token activations, not the output layer); torchao's int8
  weight-only; llama.cpp (llama-cpp-python) on the GGUF file itself, Q4_1 weights, one
  passage + target a decode; OpenVINO fp32 and NNCF's static int8 (as the encoder's
  `backend='openvino-int8'`), one sequence a pair. Quality: per-query Spearman of the 10
  scores with fp32's.

ONNX Runtime, torchao and llama-cpp-python are not dependencies of the package: a
candidate whose library is missing is reported as skipped
(`pip install -c constraints.txt onnxruntime onnx torchao`, and llama-cpp-python built from
source for AVX2, about 4 minutes on 2 cores:
`CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" pip install llama-cpp-python`).

To emulate a CPU without AVX-512 for torch's own kernels (oneDNN and MKL read these
variables; fbgemm, ONNX Runtime and llama.cpp dispatch on the CPU itself, so under the caps
their int8 rows still use AVX-512 VNNI where the CPU has it, and only the fp32 rows and
the oneDNN int8 row are AVX2 rows; llama.cpp here was built for AVX2 only):

    ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 python experiments/benchmarks/cpu_speedups.py --tag avx2
    python experiments/benchmarks/cpu_speedups.py [--docs 256] [--queries 12] [--tag native]

writes experiments/results/cpu_speedups_<tag>.{md,json}.
"""
import argparse
import copy
import importlib
import json
import os
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from encoding_benchmark import matmul_peak  # (run as a script: experiments/ is on the path)
from scipy.stats import spearmanr

from pyterrier_selfsup import BM25, MINILM, Collection
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.models.dual_encoder import DualEncoder
from pyterrier_selfsup.models.generator import SMOLLM2, SMOLLM2_GGUF, load_generator

RESULTS = Path(__file__).resolve().parents[1] / 'results'
ISA_VARIABLES = ('ONEDNN_MAX_CPU_ISA', 'MKL_ENABLE_INSTRUCTIONS')


def timed(fn):
    fn()  # warm-up: compilation, session and cache set-up
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


# -- encoder candidates -----------------------------------------------------------------

def onnx_session(encoder: DualEncoder, texts, directory: Path, quantise: bool):
    """The passage side exported by torch.onnx (dynamic batch and length), optionally int8."""
    import onnx
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic

    class PassageSide(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids, attention_mask, 'passage')

    path = directory / 'passage.onnx'
    if not path.exists():
        sample = encoder.tokenize(texts[:2], 'passage')
        torch.onnx.export(PassageSide(encoder.model).eval(), (sample['input_ids'], sample['attention_mask']),
                          str(path), input_names=['input_ids', 'attention_mask'], output_names=['embedding'],
                          dynamic_axes={'input_ids': {0: 'batch', 1: 'length'},
                                        'attention_mask': {0: 'batch', 1: 'length'}, 'embedding': {0: 'batch'}},
                          opset_version=17, dynamo=False)
    if quantise:
        quantised = directory / 'passage.int8.onnx'
        quantize_dynamic(str(path), str(quantised), per_channel=True, weight_type=QuantType.QInt8,
                         extra_options={'DefaultTensorType': onnx.TensorProto.FLOAT})
        path = quantised
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    return ort.InferenceSession(str(path), options, providers=['CPUExecutionProvider'])


def encode_with_session(encoder: DualEncoder, session, texts) -> np.ndarray:
    """`DualEncoder.encode_docs`'s batching (length-sorted, dynamic padding), ONNX Runtime's forward."""
    ids = encoder.tokenize(texts, 'passage', padding=False)['input_ids']
    order = np.argsort([-len(x) for x in ids], kind='stable')
    out = np.empty((len(texts), encoder.model.out_dim), dtype=np.float32)
    for start in range(0, len(order), encoder.batch_size):
        idx = order[start:start + encoder.batch_size]
        batch = encoder.tokenizer.pad({'input_ids': [ids[i] for i in idx]}, return_tensors='np')
        out[idx] = session.run(None, {k: batch[k].astype(np.int64) for k in ('input_ids', 'attention_mask')})[0]
    return out


def encoder_candidates(texts):
    reference = DualEncoder.from_pretrained(MINILM, precision='fp32', device='cpu')

    def compiled():
        enc = copy.deepcopy(reference)
        enc.model.encoder = torch.compile(enc.model.encoder, dynamic=True)
        return lambda: enc.encode_docs(texts)

    def torch_int8(engine):
        def build():
            from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
            torch.backends.quantized.engine = engine  # the kernels are chosen when the layers are built
            enc = copy.deepcopy(reference)
            enc.model = quantize_dynamic(enc.model, {torch.nn.Linear: per_channel_dynamic_qconfig},
                                         dtype=torch.qint8)
            torch.backends.quantized.engine = default_engine
            return lambda: enc.encode_docs(texts)
        return build

    def onnx(quantise):
        def build():
            session = onnx_session(reference, texts, work, quantise)
            return lambda: encode_with_session(reference, session, texts)
        return build

    work = Path(tempfile.mkdtemp(prefix='cpu-speedups-'))
    yield 'torch fp32 (today)', lambda: (lambda: reference.encode_docs(texts))
    yield 'torch.compile fp32', compiled
    default_engine = torch.backends.quantized.engine
    yield (f'torch int8 dynamic (per-channel weights), {default_engine} engine (fbgemm kernels)',
           torch_int8(default_engine))
    yield 'torch int8 dynamic (per-channel weights), onednn engine', torch_int8('onednn')
    yield 'ONNX Runtime fp32', onnx(False)
    yield 'ONNX Runtime int8 dynamic (per-channel weights)', onnx(True)

    def openvino(backend):
        def build():
            importlib.import_module('openvino' if backend == 'openvino' else 'nncf')  # (skipped where not installed)
            enc = DualEncoder.from_pretrained(MINILM, precision='fp32', device='cpu', backend=backend)
            return lambda: enc.encode_docs(texts)
        return build
    yield "OpenVINO fp32 (the package's backend='openvino')", openvino('openvino')
    yield ("OpenVINO int8 static, NNCF calibrated on these documents (the package's backend='openvino-int8')",
           openvino('openvino-int8'))


def measure(candidates, compare):
    """Each candidate built, warmed up and timed; ``compare(output, reference, seconds,
    reference_seconds)`` gives its row's measures against the first candidate (the fp32 path).
    A candidate whose library is missing, or that fails to build, is reported as skipped."""
    rows, reference, base = [], None, None
    for name, build in candidates:
        row = {'candidate': name}
        try:
            t0 = time.perf_counter()
            (output, seconds) = timed(build())
            row['set-up s'] = time.perf_counter() - t0 - seconds
        except ImportError as error:
            rows.append({**row, 'skipped': f'{error.name or error} not installed'})
            continue
        except RuntimeError as error:  # (OpenVINO under ONEDNN_MAX_CPU_ISA=AVX2: no kernel for some nodes)
            rows.append({**row, 'skipped': f'failed: {str(error).strip().splitlines()[-1][:120]}'})
            continue
        if reference is None:
            reference, base = output, seconds
        rows.append({**row, **compare(output, reference, seconds, base)})
        print(rows[-1], flush=True)
    return rows


def encoder_rows(texts):
    def compare(vectors, reference, seconds, base):
        cos = (vectors * reference).sum(1) / np.linalg.norm(vectors, axis=1) / np.linalg.norm(reference, axis=1)
        return {'docs/s': len(texts) / seconds, 'x fp32': base / seconds,
                'min cosine': float(cos.min()), 'mean cosine': float(cos.mean())}
    return measure(encoder_candidates(texts), compare)


# -- generator candidates ---------------------------------------------------------------

def llama_cpp_scorer(gen, gguf_path: str):
    """log p(target | prompt + passage) from llama.cpp on the GGUF itself: the package's own
    token ids (the GGUF's vocabulary), one decode per pair, logits only at target positions."""
    import llama_cpp
    llm = llama_cpp.Llama(model_path=gguf_path, n_ctx=1024, n_batch=1024, n_ubatch=1024,
                          n_threads=torch.get_num_threads(), n_threads_batch=torch.get_num_threads(), verbose=False)
    ctx = llm._ctx.ctx
    n_vocab = llama_cpp.llama_n_vocab(llama_cpp.llama_model_get_vocab(llm._model.model))
    batch = llama_cpp.llama_batch_init(1024, 0, 1)
    memory = llama_cpp.llama_get_memory(ctx)

    def score(prefix, target):
        llama_cpp.llama_memory_clear(memory, True)
        tokens = prefix + target
        batch.n_tokens = len(tokens)
        for i, token in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i >= len(prefix) - 1
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise RuntimeError('llama_decode failed')
        total = 0.0
        for j, token in enumerate(target):
            row = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, len(prefix) - 1 + j),
                                        shape=(n_vocab,)).astype(np.float64)
            top = row.max()
            total += row[token] - top - np.log(np.exp(row - top).sum())
        return total

    def run(targets, passages):
        return np.array([score(p, t) for p, t in zip(gen.passage_ids(passages), gen.target_ids(targets))])
    run.llm = llm  # the context lives as long as the scorer (freed with the Llama object)
    return run


def openvino_scorer(gen, targets, passages, int8: bool):
    """log p(target | prompt + passage) with the decoder compiled by OpenVINO (fp32), one
    sequence per pair, left-padded in batches of 8 sorted by length (as
    `Generator.sequence_logp` runs them); the output layer in torch on target positions only.
    int8: NNCF's static quantisation (ModelType.TRANSFORMER, SmoothQuant), calibrated on
    these pairs. Exported with eager attention: its masked rows stay finite, where the
    traced SDPA graph gave NaN for left padding."""
    import logging

    import nncf
    import openvino as ov

    from pyterrier_selfsup.models.batching import pad
    from pyterrier_selfsup.models.generator import gather_logp as _gather_logp

    class Decoder(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, position_ids):
            return self.model.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                    use_cache=False).last_hidden_state

    p_ids, t_ids = gen.passage_ids(passages), gen.target_ids(targets)
    seqs = [p + t for p, t in zip(p_ids, t_ids)]
    order = np.argsort([-len(x) for x in seqs], kind='stable')
    batches = []
    for start in range(0, len(order), 8):
        idx = order[start:start + 8]
        ids, mask = pad([seqs[i] for i in idx], gen.tokenizer.pad_token_id, left=True)
        batches.append((idx, {'input_ids': ids.numpy(), 'attention_mask': mask.numpy(),
                              'position_ids': (mask.cumsum(-1) - 1).clamp(min=0).numpy()}))
    model = copy.deepcopy(gen.model).eval()
    model.config._attn_implementation = 'eager'
    with torch.no_grad():
        converted = ov.convert_model(Decoder(model), example_input={k: torch.from_numpy(v[:2])
                                                                   for k, v in batches[-1][1].items()},
                                     input=[(k, ov.PartialShape([-1, -1]), ov.Type.i64) for k in batches[0][1]])
    if int8:
        nncf.set_log_level(logging.ERROR)
        converted = nncf.quantize(converted, nncf.Dataset([b for _, b in batches]), subset_size=len(batches),
                                  model_type=nncf.ModelType.TRANSFORMER)
    compiled = ov.Core().compile_model(converted, 'CPU', {'INFERENCE_PRECISION_HINT': 'f32',
                                                          'INFERENCE_NUM_THREADS': torch.get_num_threads()})

    def run():
        out = np.zeros(len(seqs))
        with torch.no_grad():
            for idx, inputs in batches:
                hidden = torch.from_numpy(compiled(inputs)[0])
                rows = [t_ids[i] for i in idx]
                width = max(len(t) for t in rows)
                logits = model.lm_head(hidden[:, -(width + 1):-1])
                goal, goal_mask = pad(rows, gen.tokenizer.pad_token_id, left=True)
                out[idx] = _gather_logp(logits, goal[:, -width:], goal_mask[:, -width:]).double().numpy()
        return out
    return run


def generator_candidates(targets, passages):
    reference = load_generator('smollm2', precision='fp32', device='cpu')

    def compiled():
        gen = copy.deepcopy(reference)
        gen.model.model = torch.compile(gen.model.model, dynamic=True)
        return lambda: gen.log_likelihoods(targets, passages)

    def torchao(config_name):
        def build():
            import torchao.quantization as q
            gen = copy.deepcopy(reference)
            q.quantize_(gen.model, getattr(q, config_name)(),
                        filter_fn=lambda m, fqn: isinstance(m, torch.nn.Linear) and 'lm_head' not in fqn)
            return lambda: gen.log_likelihoods(targets, passages)
        return build

    def llama():
        from huggingface_hub import hf_hub_download
        run = llama_cpp_scorer(reference, hf_hub_download(SMOLLM2, SMOLLM2_GGUF))
        return lambda: run(targets, passages)

    yield 'torch fp32 (today)', lambda: (lambda: reference.log_likelihoods(targets, passages))
    yield 'torch.compile fp32', compiled
    yield 'torchao int8 dynamic activations + int8 weights (not the output layer)', \
        torchao('Int8DynamicActivationInt8WeightConfig')
    yield 'torchao int8 weight-only (not the output layer)', torchao('Int8WeightOnlyConfig')
    yield 'llama.cpp on the GGUF (Q4_1 weights)', llama
    yield 'OpenVINO fp32, one sequence a pair', lambda: openvino_scorer(reference, targets, passages, int8=False)
    yield 'OpenVINO int8 static, NNCF calibrated on these pairs', \
        lambda: openvino_scorer(reference, targets, passages, int8=True)


def generator_rows(targets, passages, per_query: int):
    def compare(scores, reference, seconds, base):
        rho = [spearmanr(scores[i:i + per_query], reference[i:i + per_query])[0]
               for i in range(0, len(scores), per_query)]
        return {'pairs/s': len(scores) / seconds, 'x fp32': base / seconds,
                'mean Spearman': float(np.nanmean(rho)), 'min Spearman': float(np.nanmin(rho)),
                'max |diff| nats': float(np.abs(scores - reference).max())}
    return measure(generator_candidates(targets, passages), compare)


def generator_flops(targets, passages) -> float:
    """Useful forward FLOPs of `log_likelihoods` on these pairs: each distinct passage's
    prompt once and every target, through the decoder's linear layers (2 FLOPs a weight a
    token) and attention (2 x 2 x context x hidden a token a layer), and the output layer
    on target tokens only."""
    gen = load_generator('smollm2', precision='fp32', device='cpu')
    config = gen.model.config
    linear = sum(m.weight.numel() for name, m in gen.model.named_modules()
                 if isinstance(m, torch.nn.Linear) and 'lm_head' not in name)
    distinct = dict(zip(passages, gen.passage_ids(list(passages))))
    prefix = [len(ids) for ids in distinct.values()]
    target = [len(ids) for ids in gen.target_ids(list(targets))]
    context = {p: len(ids) for p, ids in distinct.items()}
    attention = 4 * config.hidden_size * config.num_hidden_layers * (
        sum(n * (n + 1) / 2 for n in prefix) + sum(t * context[p] for t, p in zip(target, passages)))
    return 2 * linear * (sum(prefix) + sum(target)) + attention + 2 * gen.model.lm_head.weight.numel() * sum(target)


def table(rows, columns):
    lines = ['| candidate | ' + ' | '.join(columns) + ' |', '|---|' + '---|' * len(columns)]
    for r in rows:
        cells = [r.get('skipped', '')] + [''] * (len(columns) - 1) if 'skipped' in r else \
            [f'{r[c]:.4f}' if 'cosine' in c or 'Spearman' in c else f'{r[c]:.2f}' for c in columns]
        lines.append(f'| {r["candidate"]} | ' + ' | '.join(cells) + ' |')
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--docs', type=int, default=256)
    parser.add_argument('--queries', type=int, default=12)
    parser.add_argument('--depth', type=int, default=10)
    parser.add_argument('--tag', default='native', help='names the results file (e.g. avx2 under the ISA caps)')
    args = parser.parse_args(argv)
    warnings.filterwarnings('ignore', category=DeprecationWarning)
    started = time.time()

    collection = Collection('beir/scifact/train')
    texts = []
    for doc in collection.corpus_iter():
        texts.append(doc['text'])
        if len(texts) == args.docs:
            break
    encoder = encoder_rows(texts)

    topics = collection.topics().head(args.queries)
    pairs = (BM25.from_collection(collection, num_results=args.depth) >> collection.text_loader())(topics)
    generator = generator_rows(pairs['query'].tolist(), pairs['text'].tolist(), args.depth)
    peak = matmul_peak(torch.float32)
    work = generator_flops(pairs['query'].tolist(), pairs['text'].tolist())
    utilisation = {'fp32 matmul peak GFLOP/s (measured)': round(peak / 1e9, 1),
                   'generator fp32: useful GFLOP/s': round(work * generator[0]['pairs/s'] / len(pairs) / 1e9, 1)}
    utilisation['generator fp32: share of the peak'] = f'{work * generator[0]["pairs/s"] / len(pairs) / peak:.0%}'

    header = provenance.header()
    settings = {
        'ISA caps': ', '.join(f'{k}={os.environ[k]}' for k in ISA_VARIABLES if k in os.environ) or 'none',
        'torch threads': torch.get_num_threads(),
        'encoder': f'{provenance.model_revision(MINILM)}, the first {len(texts)} documents of beir/scifact, '
                   'batches of 32 sorted by length, 256 tokens',
        'generator': f'{SMOLLM2}/{SMOLLM2_GGUF}, BM25 top {args.depth} of the first {args.queries} queries of '
                     f'beir/scifact/train ({len(pairs)} pairs), 256 passage tokens',
        **utilisation,
        'timing': 'the second of two calls (the first compiles, builds sessions, fills caches); set-up s: the '
                  'candidate\'s construction and first call',
        'wall time': f'{time.time() - started:.0f} s',
    }
    out = RESULTS / f'cpu_speedups_{args.tag}'
    out.with_suffix('.json').write_text(json.dumps(
        {'header': header, 'settings': settings, 'encoder': encoder, 'generator': generator}, indent=1))
    md = [f'# CPU speed-up candidates against the fp32 path ({args.tag})', '',
          *(f'- {k}: {v}' for k, v in {**header, **settings}.items()), '',
          '## Encoder (document embeddings)', '',
          *table(encoder, ['docs/s', 'x fp32', 'min cosine', 'mean cosine', 'set-up s']), '',
          '## Generator (log p(query | passage))', '',
          *table(generator, ['pairs/s', 'x fp32', 'mean Spearman', 'min Spearman', 'max |diff| nats', 'set-up s']),
          '']
    out.with_suffix('.md').write_text('\n'.join(md))
    print('\n'.join(md))


if __name__ == '__main__':
    main()
