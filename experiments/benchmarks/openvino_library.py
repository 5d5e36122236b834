"""sentence-transformers' own OpenVINO backend against the package's, in fp32 on the CPU.

The package compiles each side of its DualEncoder with OpenVINO itself
(`pyterrier_selfsup/models/_openvino.py`, `backend='openvino'`) rather than handing the model to
sentence-transformers' `backend='openvino'`. This measures whether that is faster, and whether
the vectors are the same. Every encoder encodes the first N passages of beir/scifact (title +
text, cut at 256 tokens) with all-MiniLM-L6-v2 in fp32:

- library, torch:    SentenceTransformer(MINILM).encode(texts, batch_size=32)
- library, OpenVINO: SentenceTransformer(MINILM, backend='openvino').encode(texts, batch_size=32),
                     at OpenVINO's default precision (bf16 where the CPU has it) and with
                     INFERENCE_PRECISION_HINT f32, in a virtual environment of its own (`bash scripts/openvino_library_env.sh`
                     makes .venv-openvino-st): optimum-intel, which the backend needs, asks for
                     transformers < 5.6, and the package for 5.24 or newer
- ours, torch:       DualEncoder.from_pretrained(MINILM, backend='torch').encode_docs(texts)
- ours, OpenVINO:    the same with backend='openvino', in fp32 and (where the CPU runs it natively)
                     in bf16

Each is timed as the best of --repeats calls after it is made and has encoded the texts once
(loading, conversion and compilation: reported apart); both environments use this machine's
torch thread count.
The vectors are compared with the library's torch ones.

    bash scripts/openvino_library_env.sh
    python experiments/benchmarks/openvino_library.py [--docs 1000] [--repeats 3]

writes experiments/results/openvino_library.{md,json}.
"""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / 'experiments' / 'results'
LIBRARY_ENV = ROOT / '.venv-openvino-st'
MINILM = 'sentence-transformers/all-MiniLM-L6-v2'
BATCH = 32


def timed(make, texts, repeats: int) -> dict:
    """The seconds to make an encoder (``make()``: its encode function) and encode ``texts`` once
    (loading, conversion and compilation included), the best of ``repeats`` calls after that, and
    the vectors."""
    t0 = time.perf_counter()
    encode = make()
    encode(texts)
    first = time.perf_counter() - t0
    best, vectors = float('inf'), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        vectors = np.asarray(encode(texts), dtype=np.float32)
        best = min(best, time.perf_counter() - t0)
    return {'first s': first, 'best s': best, 'vectors': vectors}


# the library's backend at OpenVINO's default precision (bf16 where the CPU has it) and in f32
LIBRARY_CONFIGS = {'library, OpenVINO (its default precision)': {},
                   'library, OpenVINO f32': {'INFERENCE_PRECISION_HINT': 'f32'}}


def library_openvino(texts_file: str, out: str, repeats: int, threads: int):
    """In the library's environment: sentence-transformers' backend='openvino' in each of
    :data:`LIBRARY_CONFIGS`, timed."""
    import torch
    torch.set_num_threads(threads)
    from importlib.metadata import version

    from sentence_transformers import SentenceTransformer
    texts = json.loads(Path(texts_file).read_text())

    def make(config):
        # export=True: converted from the cached weights (else the library lists the hub's files)
        st = SentenceTransformer(MINILM, device='cpu', backend='openvino', model_kwargs={
            'export': True, 'ov_config': {'INFERENCE_NUM_THREADS': threads, **config}})
        st.max_seq_length = 256
        return lambda x: st.encode(x, batch_size=BATCH)
    runs = {}
    for i, (name, config) in enumerate(LIBRARY_CONFIGS.items()):
        runs[name] = timed(lambda: make(config), texts, repeats)
        np.save(f'{out}-{i}.npy', runs[name].pop('vectors'))
    versions = {name: version(name) for name in ('sentence-transformers', 'transformers',
                                                 'optimum-intel', 'openvino')}
    Path(f'{out}.json').write_text(json.dumps({'runs': runs, 'versions': versions}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--docs', type=int, default=1000)
    parser.add_argument('--repeats', type=int, default=3)
    parser.add_argument('--results-dir', type=Path, default=RESULTS)
    parser.add_argument('--library-openvino', nargs=2, metavar=('TEXTS', 'OUT'),
                        help=argparse.SUPPRESS)  # (the child run in the library's environment)
    parser.add_argument('--threads', type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.library_openvino:
        return library_openvino(*args.library_openvino, args.repeats, args.threads)
    if not (LIBRARY_ENV / 'bin' / 'python').exists():
        sys.exit(f'{LIBRARY_ENV} is missing: make it with bash scripts/openvino_library_env.sh')

    import openvino
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    from pyterrier_selfsup import Collection
    from pyterrier_selfsup.harness import provenance
    from pyterrier_selfsup.machine import cpu_has_native_bf16
    from pyterrier_selfsup.models.dual_encoder import DualEncoder

    texts = []
    for doc in Collection('beir/scifact/test').corpus_iter():
        texts.append(doc['text'])
        if len(texts) == args.docs:
            break
    threads = torch.get_num_threads()
    runs = {}

    def library_torch():
        st = SentenceTransformer(MINILM, device='cpu')
        st.max_seq_length = 256
        return lambda x: st.encode(x, batch_size=BATCH)
    runs['library, torch'] = timed(library_torch, texts, args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / 'texts.json').write_text(json.dumps(texts))
        subprocess.run([str(LIBRARY_ENV / 'bin' / 'python'), __file__, '--library-openvino',
                        f'{tmp}/texts.json', f'{tmp}/library', '--repeats', str(args.repeats),
                        '--threads', str(threads)], check=True)
        child = json.loads(Path(f'{tmp}/library.json').read_text())
        for i, (name, run) in enumerate(child['runs'].items()):
            runs[name] = {**run, 'vectors': np.load(f'{tmp}/library-{i}.npy')}
    library_versions = child['versions']
    ours = [('torch', 'fp32'), ('openvino', 'fp32')] + (
        [('openvino', 'bf16')] if cpu_has_native_bf16() else [])
    for backend, precision in ours:
        name = 'ours, ' + ('torch' if backend == 'torch' else f'OpenVINO {precision}')
        runs[name] = timed(
            lambda: DualEncoder.from_pretrained(MINILM, precision=precision, device='cpu',
                                                backend=backend).encode_docs,
            texts, args.repeats)

    reference = runs['library, torch']['vectors']
    library_ov = runs['library, OpenVINO f32']['best s']
    rows = [{'encoder': name, 'load and first call s': round(run['first s'], 2),
             'best s': round(run['best s'], 2),
             'passages/s': round(len(texts) / run['best s'], 1),
             'vs library OpenVINO f32': round(library_ov / run['best s'], 2),
             'max |diff| vs library torch': float(np.abs(run['vectors'] - reference).max())}
            for name, run in runs.items()]
    same = float(np.abs(runs['ours, OpenVINO fp32']['vectors']
                        - runs['library, OpenVINO f32']['vectors']).max())
    settings = {
        'model': provenance.model_revision(MINILM),
        'data': f'the first {len(texts)} passages of beir/scifact (title + text), cut at 256 '
                'tokens',
        'batch': f'{BATCH} texts for the library; ours: its own token-budget batches',
        'repeats': f'best of {args.repeats} after loading and one call (which converts and '
                   'compiles)',
        'threads': threads,
        'this environment': {'sentence-transformers': sentence_transformers.__version__,
                             'transformers': transformers.__version__,
                             'openvino': openvino.__version__},
        'the library backend\'s environment (.venv-openvino-st)': library_versions,
    }
    args.results_dir.mkdir(parents=True, exist_ok=True)
    payload = {'header': provenance.header(), 'settings': settings, 'rows': rows,
               'ours OpenVINO fp32 vs library OpenVINO f32, max |diff|': same}
    (args.results_dir / 'openvino_library.json').write_text(json.dumps(payload, indent=2) + '\n')
    lines = ['# The package\'s OpenVINO encoder against sentence-transformers\' own', '',
             f'Written by `python experiments/benchmarks/openvino_library.py --docs {len(texts)} '
             f'--repeats {args.repeats}` (after `bash scripts/openvino_library_env.sh`).', '']
    lines += [f'- {k}: {v}' for k, v in {**payload['header'], **settings}.items()] + ['']
    columns = list(rows[0])
    lines += ['| ' + ' | '.join(columns) + ' |', '|' + '---|' * len(columns)]
    lines += ['| ' + ' | '.join(f'{r[c]:.2e}' if c.startswith('max') else str(r[c])
                                for c in columns) + ' |' for r in rows]
    lines += ['', f'Ours through OpenVINO in fp32 against the library through OpenVINO in f32, '
              f'max |diff| of the vectors: {same:.2e}.', '']
    (args.results_dir / 'openvino_library.md').write_text('\n'.join(lines))
    print('\n'.join(lines))


if __name__ == '__main__':
    main()
