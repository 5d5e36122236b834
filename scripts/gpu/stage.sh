#!/usr/bin/env bash
# On the lent GPU machine: unpacks one part of scripts/gpu/bundle.py's bundle into
# /tmp/selfsup (kept while the machine stays warm), or, with `env`, prints the exports
# that make the package, its wheels, models and data load there offline.
#   bash scripts/gpu/stage.sh N           (in the call that carries .gpu/N; the last part unpacks them all)
#   environment="$(bash scripts/gpu/stage.sh env)" && eval "$environment"   (fails if a part is missing)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
home="${SELFSUP_GPU_HOME:-/tmp/selfsup}"
part="${1:?a part (1, 2, ...) or env}"

exports() {
  cat <<EOF
export PYTHONPATH="$home/site:$root\${PYTHONPATH:+:\$PYTHONPATH}"
export LD_LIBRARY_PATH="$home/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export HF_HUB_CACHE="$home/hf" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export IR_DATASETS_HOME="$home/irds" SELFSUP_CLASSIC_DATA="$home/classic" SELFSUP_CACHE="$home/cache"
export PYTHONUNBUFFERED=1
export SELFSUP_CODE_REVISION="$(cat "$home/REVISION" 2>/dev/null || echo unknown)"
EOF
}

mkdir -p "$home"
case "$part" in
  env)
    if [ -f "$home/.staged" ]; then
      exports
    else
      echo "not staged on this machine (parts here: $(ls "$home/parts" 2>/dev/null | tr '\n' ' ')); a cold machine starts bare: stage every part again" >&2
      exit 1
    fi
    ;;
  [0-9]*)
    mkdir -p "$home/parts"
    cp "$root/.gpu/$part/piece" "$home/parts/$part"
    cp "$root/.gpu/$part/manifest.json" "$home/manifest.json"
    wanted=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["parts"])' "$home/manifest.json")
    come=0
    for i in $(seq 1 "$wanted"); do [ ! -f "$home/parts/$i" ] || come=$((come + 1)); done
    echo "part $part staged ($come of $wanted)" >&2
    [ "$come" -eq "$wanted" ] || exit 0
    rm -f "$home/.staged"  # (a warm machine staged before: not staged until this unpacking ends)
    # all here: check the whole, unpack it, install the wheels, restore MiniLM's fp32
    python3 - "$home" <<'EOF'
import hashlib, io, json, sys, tarfile
from pathlib import Path
home = Path(sys.argv[1])
meta = json.loads((home / 'manifest.json').read_text())
data = b''.join((home / 'parts' / str(i + 1)).read_bytes() for i in range(meta['parts']))
assert hashlib.sha1(data).hexdigest() == meta['sha1'], 'the parts do not make the bundle bundle.py cut'
with tarfile.open(fileobj=io.BytesIO(data), mode='r:gz') as tar:
    tar.extractall(home, filter='data')
EOF
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$home/site" \
      "$home"/whl/*.whl
    # pip --target drops a wheel's data files: tbb's libtbb.so.2, which PISA's extension links
    # against, is one (found on the first H100 run, 2026-11-25)
    mkdir -p "$home/lib"
    python3 - "$home/lib" "$home"/whl/*.whl <<'EOF'
import sys, zipfile
from pathlib import Path
for wheel in sys.argv[2:]:
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if '.data/data/lib/' in name and '.so' in name:
                (Path(sys.argv[1]) / name.rsplit('/', 1)[1]).write_bytes(z.read(name))
EOF
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
    rm -rf "$home/parts" "$home/whl"
    touch "$home/.staged"
    echo "staged: wheels, data, MiniLM, SmolLM2; code $(cat "$home/REVISION")" >&2
    ;;
  *)
    echo "unknown part $part" >&2; exit 2 ;;
esac
