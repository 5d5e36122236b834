#!/usr/bin/env bash
# `make run` as a new user meets it: a fresh clone of this commit, an empty model cache, and the
# set-up (the virtual environment's install, from pip's cache) timed apart from the run itself.
# Writes experiments/results/make_run-<commit>.txt.
#
#     bash experiments/tools/make_run_time.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rev="$(git -C "$root" rev-parse --short HEAD)"
# (beside this checkout, where a fresh clone finds ../shared as CI's does)
clone="$(dirname "$root")/make-run-check-$rev"
rm -rf "$clone"
out="$root/experiments/results/make_run-$rev.txt"
git clone -q "$root" "$clone"
cd "$clone"
export SELFSUP_CACHE="$clone/.cache-empty"
start=$(date +%s.%N)
# (the set-up: bootstrap installs the package and its dependencies into the clone's .venv)
bash -c 'source scripts/bootstrap.sh' > setup.log 2>&1
setup_done=$(date +%s.%N)
make run > run.log 2>&1 && status=0 || status=$?
end=$(date +%s.%N)
machine="$(cd "$root" && .venv/bin/python -c \
  'from pyterrier_selfsup.harness import provenance; print(provenance.machine())')"
{
  printf '# make run on a fresh clone at %s, in an empty model cache (exit status %s)\n' \
    "$rev" "$status"
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "machine: $machine"
  echo "command: bash experiments/tools/make_run_time.sh"
  printf 'set-up (the virtual environment installed from pip'"'"'s cache): %.0f s\n' \
    "$(echo "$setup_done - $start" | bc)"
  printf 'make run itself (indexes built, MiniLM encoded, both evaluated): %.0f s\n' \
    "$(echo "$end - $setup_done" | bc)"
  printf 'in all: %.0f s\n\n' "$(echo "$end - $start" | bc)"
  cat run.log
} > "$out"
cat "$out"
rm -rf "$clone"
