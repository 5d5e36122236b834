#!/usr/bin/env bash
# On the lent GPU machine: unpacks one part of scripts/gpu/bundle.py's bundle into
# /tmp/selfsup (kept while the machine stays warm), or, with `env`, prints the exports
# that make the package, its wheels, models and data load there offline.
#   bash scripts/gpu/stage.sh a|b|c|d     (in the call that carries .gpu/<part>)
#   environment="$(bash scripts/gpu/stage.sh env)" && eval "$environment"   (fails if a part is missing)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
home="${SELFSUP_GPU_HOME:-/tmp/selfsup}"
part="${1:?a part (a, b, c, d) or env}"

exports() {
  cat <<EOF
export PYTHONPATH="$home/site:$root\${PYTHONPATH:+:\$PYTHONPATH}"
export LD_LIBRARY_PATH="$home/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export HF_HUB_CACHE="$home/hf" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export IR_DATASETS_HOME="$home/irds" SELFSUP_CLASSIC_DATA="$home/classic" SELFSUP_CACHE="$home/cache"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export SELFSUP_CODE_REVISION="$(cat "$home/REVISION" 2>/dev/null || echo unknown)"
EOF
}

mkdir -p "$home"
case "$part" in
  env)
    missing=""
    for p in a b c d; do [ -f "$home/.staged-$p" ] || missing="$missing $p"; done
    if [ -n "$missing" ]; then
      echo "not staged on this machine:$missing (a cold machine starts bare: stage every part again)" >&2
      exit 1
    else
      exports
    fi
    ;;
  a)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$home/site" \
      "$root"/.gpu/a/whl/*.whl
    # pip --target drops a wheel's data files: tbb's libtbb.so.2, which PISA's extension links
    # against, is one (found on the first H100 run, 2026-11-25)
    mkdir -p "$home/lib"
    python3 - "$home/lib" "$root"/.gpu/a/whl/*.whl <<'EOF'
import sys, zipfile
from pathlib import Path
for wheel in sys.argv[2:]:
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if '.data/data/lib/' in name and '.so' in name:
                (Path(sys.argv[1]) / name.rsplit('/', 1)[1]).write_bytes(z.read(name))
EOF
    mkdir -p "$home/irds"
    cp -r "$root"/.gpu/a/irds/. "$home/irds/"
    mkdir -p "$home/classic"
    cp -r "$root"/.gpu/a/classic/. "$home/classic/"
    touch "$home/.staged-a"
    ;;
  b)
    mkdir -p "$home/hf"
    cp -r "$root"/.gpu/b/hf/. "$home/hf/"
    # the weights travelled in fp16 to halve them: back to the fp32 they were published in
    python3 - "$home/hf" <<'EOF'
import sys
from pathlib import Path
from safetensors import safe_open
from safetensors.torch import load_file, save_file
for f in Path(sys.argv[1]).glob('models--*/snapshots/*/model.safetensors'):
    with safe_open(f, 'pt') as fh:
        if (fh.metadata() or {}).get('selfsup_fp16_of') != 'float32':
            continue
    save_file({k: v.float() if v.is_floating_point() else v for k, v in load_file(f).items()}, f,
              metadata={'format': 'pt'})
EOF
    touch "$home/.staged-b"
    ;;
  c|d)
    cp "$root"/.gpu/$part/*.part "$home/gguf.$part"
    [ ! -f "$root/.gpu/$part/REVISION" ] || cp "$root/.gpu/$part/REVISION" "$home/REVISION"
    if [ -f "$home/gguf.c" ] && [ -f "$home/gguf.d" ]; then
      python3 - "$home" "$root/.gpu/$part/gguf.json" <<'EOF'
import hashlib, json, sys
from pathlib import Path
home, meta = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text())
data = (home / 'gguf.c').read_bytes() + (home / 'gguf.d').read_bytes()
assert hashlib.sha1(data).hexdigest() == meta['sha1'], 'the GGUF halves do not make the file bundle.py cut'
repo = home / 'hf' / f"models--{meta['repo'].replace('/', '--')}"
(repo / 'refs').mkdir(parents=True, exist_ok=True)
(repo / 'refs' / 'main').write_text(meta['revision'])
(repo / 'snapshots' / meta['revision']).mkdir(parents=True, exist_ok=True)
(repo / 'snapshots' / meta['revision'] / meta['file']).write_bytes(data)
print('SmolLM2 GGUF staged:', len(data), 'bytes')
EOF
      touch "$home/.staged-c" "$home/.staged-d"  # (only once the file is whole and checked)
    fi
    ;;
  *)
    echo "unknown part $part" >&2; exit 2 ;;
esac
[ "$part" = env ] || echo "staged $part" >&2
