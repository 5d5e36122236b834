#!/usr/bin/env bash
# On the lent GPU machine, once the four parts are staged (scripts/gpu/README.md): the
# suite's CUDA tests and the one-device benchmark, written to $OUT (what the device tool
# brings back), or to experiments/results/gpu elsewhere.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
environment="$(bash scripts/gpu/stage.sh env)" || exit 1
eval "$environment"
out="${OUT:-$root/experiments/results/gpu}"
mkdir -p "$out"
nvidia-smi -L | tee "$out/nvidia-smi.txt"
python3 -m pytest -p no:cacheprovider -m cuda -q -rA tests/test_cuda.py 2>&1 | tee "$out/cuda_tests.txt" | tail -20
python3 experiments/gpu_benchmark.py --results-dir "$out" 2>&1 | tee "$out/gpu_benchmark.log" | grep -v '^\[INFO\]' | tail -25
