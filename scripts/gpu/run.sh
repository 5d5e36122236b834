#!/usr/bin/env bash
# On the lent GPU machine, once the four parts are staged (scripts/gpu/README.md), to $OUT
# (what the device tool brings back), or to experiments/results/gpu elsewhere:
#   bash scripts/gpu/run.sh          the suite's CUDA tests and the one-device benchmark
#   bash scripts/gpu/run.sh adapt    one scifact adaptation end to end with the shipped settings
#                                    (the `distill` pipeline: queries sampled from SmolLM2, the
#                                    teacher ranked, the student trained; all evaluated on test)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
environment="$(bash scripts/gpu/stage.sh env)" || exit 1
eval "$environment"
out="${OUT:-$root/experiments/results/gpu}"
mkdir -p "$out"
if [ "${1:-checks}" = adapt ]; then
  python3 -m pyterrier_selfsup run -q -c beir/scifact/test -p bm25 minilm distill --save gpu_scifact_distill \
    --results-dir "$out" 2>&1 | tee "$out/gpu_scifact_distill.log" | grep -v '^\[INFO\]' | tail -25
  exit
fi
nvidia-smi -L | tee "$out/nvidia-smi.txt"
python3 -m pytest -p no:cacheprovider -m cuda -q -rA tests/test_cuda.py 2>&1 | tee "$out/cuda_tests.txt" | tail -20
python3 experiments/gpu_benchmark.py --results-dir "$out" 2>&1 | tee "$out/gpu_benchmark.log" | grep -v '^\[INFO\]' | tail -25
