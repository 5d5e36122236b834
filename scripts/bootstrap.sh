# Sourced by the Makefile before every target: a virtual environment with the
# project installed (re-installed only when setup.py or constraints.txt change),
# and, on machines with no route to the model hub, the offline assets seeded.
set -eo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${SELFSUP_VENV:-$root/.venv}"

if [ ! -x "$venv/bin/python" ]; then
  "${PYTHON:-python3}" -m venv "$venv"
fi

# faiss-cpu and faiss-gpu install the same module: pick the one this machine can use.
extra=cpu
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  extra=gpu
fi

want="$(cat "$root/setup.py" "$root/constraints.txt" | sha1sum | cut -c1-40)-$extra"
if [ "$(cat "$venv/.selfsup-installed" 2>/dev/null)" != "$want" ]; then
  echo "installing pyterrier-selfsup[$extra,test] into $venv (log: $venv/install.log)" >&2
  # No bytecode is compiled at install (pip compiles every file, one at a time: most of the
  # install's time on 2 cores); Python writes it for the modules that are imported, as they
  # are first imported (the Makefile's targets clear PYTHONDONTWRITEBYTECODE for that).
  if ! { "$venv/bin/python" -m pip install --upgrade pip &&
         "$venv/bin/python" -m pip install --no-compile -c "$root/constraints.txt" \
           -e "$root[$extra,test]"; } \
       > "$venv/install.log" 2>&1; then
    tail -n 40 "$venv/install.log" >&2
    return 1 2>/dev/null || exit 1
  fi
  echo "$want" > "$venv/.selfsup-installed"
fi
export PATH="$venv/bin:$PATH"

# The commit the results headers name (pyterrier_selfsup.harness.provenance reads it; the package
# itself never runs git), unless a copy was told its commit already (scripts/gpu/stage.sh).
if [ -z "${SELFSUP_CODE_REVISION:-}" ] &&
   rev="$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null)"; then
  if [ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    rev="$rev+uncommitted"
  fi
  export SELFSUP_CODE_REVISION="$rev"
fi

# Our own machines have no model hub: ../shared/bin/offline-assets seeds the
# standard caches there. Elsewhere the models and data download as usual.
if [ -x "$root/../shared/bin/offline-assets" ]; then
  eval "$(PYTHON="$venv/bin/python" "$root/../shared/bin/offline-assets" 2>/dev/null)"
fi
