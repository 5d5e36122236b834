#!/usr/bin/env bash
# The test suite's wall time and its slowest tests at a revision, on this machine:
#     bash scripts/suite_durations.sh [REV] [OUT]
# checks REV (default HEAD) out in a temporary worktree, runs its pytest (the project's
# virtual environment, the offline assets, the worktree's code first on the path) with every
# test's duration, and writes OUT (default experiments/results/suite_durations-REV.txt): the
# machine, the revision, pytest's summary line, its 20 slowest tests, seconds a file and every
# test's durations. (A fresh clone's
# `bash .ci/run` runs the same tests; this keeps the comparison of two revisions on one machine.)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rev="$(git rev-parse --short "${1:-HEAD}")"
out="${2:-experiments/results/suite_durations-$rev.txt}"
source scripts/bootstrap.sh >/dev/null
work="$(mktemp -d)"
trap 'git worktree remove --force "$work/tree" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add -q --detach "$work/tree" "$rev"
started=$(date +%s)
(cd "$work/tree" && PYTHONPATH="$work/tree" python -m pytest -q -p no:cacheprovider --durations=0 \
   > "$work/log" 2>&1) || true
grep -E '^[0-9.]+s (call|setup|teardown) ' "$work/log" > "$work/durations" || true
{
  echo "# pytest at $rev: $(( $(date +%s) - started )) s of wall time"
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "machine: $(python -c 'from pyterrier_selfsup.harness.provenance import machine; print(machine())')"
  echo "command: bash scripts/suite_durations.sh $rev"
  echo
  tail -n 1 "$work/log"
  grep -E '^(FAILED|ERROR) ' "$work/log" || true
  echo
  echo "the 20 slowest:"
  sed -n '1,20p' "$work/durations"
  echo
  echo "by file (call + setup + teardown, seconds):"
  awk '{split($3, p, "::"); t[p[1]] += $1} END {for (f in t) printf "%8.1f %s\n", t[f], f}' "$work/durations" | sort -rn
  echo
  echo "every test's:"
  cat "$work/durations"
} > "$out"
cat "$out"
