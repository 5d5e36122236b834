#!/usr/bin/env bash
# What `make run` shows a person at a terminal on a fresh machine (issue 15): progress while
# it builds and encodes, one line for offline mode, no library chatter. Runs it under a
# pseudo-terminal (script(1), 100 columns) with an empty cache and writes the transcript,
# each progress bar's updates folded to its last state, to
# experiments/results/make_run_terminal.txt. Arguments go to `selfsup run` (default: the
# main job, BM25 vs all-MiniLM-L6-v2 on beir/scifact/test).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cache="$(mktemp -d)"
trap 'rm -rf "$cache"' EXIT
args="${*:-}"
raw="$(mktemp)"
script -qec "stty cols 100 rows 40; make run ARGS='--cache-dir $cache $args'" "$raw" > /dev/null
{
  echo "# make run ARGS='--cache-dir <empty> $args' at a 100-column terminal, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "# (each carriage-return-updated progress line shown in its last state)"
  sed -e '1d' -e '$d' "$raw" | sed -e 's/\x1b\[[0-9;]*[A-Za-z]//g' -e 's/\r$//' | awk -F'\r' '{ print $NF }' | grep -v '^\s*$' || true
} > experiments/results/make_run_terminal.txt
rm -f "$raw"
cat experiments/results/make_run_terminal.txt
