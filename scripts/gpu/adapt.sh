#!/usr/bin/env bash
# On the lent GPU machine, once the four parts are staged: one scifact adaptation end to end
# with the shipped settings (the `distill` pipeline: its queries sampled from SmolLM2, the
# teacher ranked, the student trained, all three evaluated on scifact test), to $OUT.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
environment="$(bash scripts/gpu/stage.sh env)" || exit 1
eval "$environment"
out="${OUT:-$root/experiments/results/gpu}"
mkdir -p "$out"
python3 -m pyterrier_selfsup run -q -c beir/scifact/test -p bm25 minilm distill --save gpu_scifact_distill \
  --results-dir "$out" 2>&1 | tee "$out/gpu_scifact_distill.log" | grep -v '^\[INFO\]' | tail -25
