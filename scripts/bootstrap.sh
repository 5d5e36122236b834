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
  # The bytecode is compiled by compileall on every core, not by pip one file at a time: most of
  # the install's time on 2 cores. (Compiled here because an environment with
  # PYTHONDONTWRITEBYTECODE set would otherwise compile each module again in every process.)
  if ! { "$venv/bin/python" -m pip install --upgrade pip &&
         "$venv/bin/python" -m pip install --no-compile -c "$root/constraints.txt" \
           -e "$root[$extra,test]"; } \
       > "$venv/install.log" 2>&1; then
    tail -n 40 "$venv/install.log" >&2
    return 1 2>/dev/null || exit 1
  fi
  # (a file that does not compile, as some packages ship, is left to fail only if imported)
  "$venv/bin/python" -m compileall -q -j 0 \
    "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    >> "$venv/install.log" 2>&1 || true
  echo "$want" > "$venv/.selfsup-installed"
fi
export PATH="$venv/bin:$PATH"

# Our own machines have no model hub: ../shared/bin/offline-assets seeds the
# standard caches there. Elsewhere the models and data download as usual.
if [ -x "$root/../shared/bin/offline-assets" ]; then
  eval "$(PYTHON="$venv/bin/python" "$root/../shared/bin/offline-assets" 2>/dev/null)"
fi
