"""How long a generator's first use takes to convert its GGUF file to fp32, for two copies of
the code, each in a process of its own with an empty cache; and whether the two write the same
weights.

    python experiments/probes/gguf_conversion.py --before DIR [--runs 2]

``DIR`` is a checkout of the code to compare with (``git worktree add /tmp/before COMMIT``);
the code that runs this script is the other copy. Each run times the whole first use as a user
meets it: a fresh process that imports the generator module and calls the conversion (which
starts its own child process). Results: ``experiments/results/gguf_conversion.md``.
"""
import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pyterrier_selfsup.harness import provenance

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / 'experiments' / 'results' / 'gguf_conversion.md'

CONVERT = ('import sys\n'
           'from pyterrier_selfsup.models.generator import SMOLLM2, SMOLLM2_GGUF\n'
           'from pyterrier_selfsup.models.gguf_conversion import dequantised as _dequantised\n'
           'print(_dequantised(SMOLLM2, SMOLLM2_GGUF, sys.argv[1]))\n')


def first_use(code: Path) -> tuple:
    """Seconds the conversion took with the code in ``code``, and a digest of what it wrote."""
    with tempfile.TemporaryDirectory() as cache:
        started = time.time()
        done = subprocess.run([sys.executable, '-c', CONVERT, cache], cwd=code, check=True,
                              capture_output=True, text=True,
                              env={**os.environ, 'PYTHONPATH': str(code)})
        seconds = time.time() - started
        written = Path(done.stdout.strip().splitlines()[-1])
        digest = hashlib.sha1()
        for name in ('model.safetensors', 'tokenizer.json'):
            digest.update((written / name).read_bytes())
        return seconds, digest.hexdigest()[:16]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--before', required=True, type=Path,
                        help='a checkout of the code to compare with')
    parser.add_argument('--runs', type=int, default=2, help='runs of each copy, alternated')
    args = parser.parse_args()
    copies = {'before': args.before.resolve(), 'this code': ROOT}
    revision = {name: subprocess.run(['git', 'rev-parse', '--short=12', 'HEAD'], cwd=path,
                                     capture_output=True, text=True).stdout.strip()
                for name, path in copies.items()}
    seconds = {name: [] for name in copies}
    digests = {name: set() for name in copies}
    for _ in range(args.runs):
        for name, path in copies.items():
            took, digest = first_use(path)
            seconds[name].append(took)
            digests[name].add(digest)
            print(f'{name} ({revision[name]}): {took:.1f} s, weights {digest}', flush=True)
    header = provenance.header(' '.join(['python', *sys.argv]))
    lines = ['# A generator\'s first use: converting SmolLM2\'s GGUF file to fp32', '']
    lines += [f'- {key}: {value}' for key, value in header.items()]
    lines += ['', 'Each run is a fresh process with an empty cache, timed from its start to the '
              'converted model on disk (the conversion runs in a child process of its own).', '',
              '| code | commit | runs (s) | weights |', '|---|---|---|---|']
    for name in copies:
        runs = ', '.join(f'{s:.1f}' for s in seconds[name])
        lines.append(f'| {name} | {revision[name]} | {runs} | {", ".join(sorted(digests[name]))} |')
    same = digests['before'] == digests['this code'] and len(digests['before']) == 1
    lines += ['', 'The two copies write the same weights and tokenizer, byte for byte.' if same else
              'The two copies write DIFFERENT weights or tokenizers.', '']
    RESULTS.write_text('\n'.join(lines))
    print(f'wrote {RESULTS}')
    return 0 if same else 1


if __name__ == '__main__':
    sys.exit(main())
