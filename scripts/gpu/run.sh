#!/usr/bin/env bash
# On the lent GPU machine, once the bundle's parts are staged (scripts/gpu/README.md), to $OUT
# (what the device tool brings back), or to experiments/results/gpu elsewhere:
#   bash scripts/gpu/run.sh          the suite's CUDA tests, the one-device benchmark and one ACROBArT
#                                    step with the generator's whole batch and 4 queries at a time
#                                    (experiments/benchmarks/generator_batch.py: GPU memory, and whether equal)
#   bash scripts/gpu/run.sh benchmark the benchmarks alone
#   bash scripts/gpu/run.sh speed    issue 49 first: the encoders side by side with a profile
#                                    (experiments/benchmarks/encoding_benchmark.py), the one-device benchmark
#                                    with the generator's plain-loop peer, then the CUDA tests
#   bash scripts/gpu/run.sh encoding the encoders side by side and the generator against its peer
#   bash scripts/gpu/run.sh adapt    one scifact adaptation end to end, corpus only: the shipped
#                                    `distill` (queries sampled from SmolLM2, the teacher ranked, the
#                                    query tower and passage offsets trained) and the GPU setting,
#                                    both towers whole (issue 30 item 7); all evaluated on test.
#                                    About 11 min on an H100: past one call's 10, so a second call
#                                    finishes it from the cached queries, models and checkpoints
#   bash scripts/gpu/run.sh querylog the same two from scifact train's query texts (a log), ~5 min
#   bash scripts/gpu/run.sh million  a million passages made from scifact's and cranfield's sentences,
#                                    encoded into a FlexIndex and searched with scifact's test queries
#                                    (experiments/benchmarks/million_passages.py), issue 49 item 5
#   bash scripts/gpu/run.sh methods  scifact adapted by RUMBArt, then ACROBArT, at their shipped settings,
#                                    each evaluated on test with its wall time (one results file each; a
#                                    second call goes on from the cached models); the cross-document
#                                    adjustment too where FAISS is installed (the image has none)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
environment="$(bash scripts/gpu/stage.sh env)" || exit 1
eval "$environment"
out="${OUT:-$root/experiments/results/gpu}"
mkdir -p "$out"
both_towers=train_passages=true,passage_offsets=none
if [ "${1:-checks}" = adapt ]; then
  python3 -m pyterrier_selfsup run -q -c beir/scifact/test -p bm25 minilm distill "distill:$both_towers" \
    --save gpu_scifact_distill --results-dir "$out" 2>&1 | tee "$out/gpu_scifact_distill.log" \
    | grep -v '^\[INFO\]\|checkpoint' | tail -25
  exit
fi
if [ "${1:-checks}" = querylog ]; then
  log=queries=beir/scifact/train
  python3 -m pyterrier_selfsup run -q -c beir/scifact/test -p bm25 minilm "distill:$log" "distill:$log,$both_towers" \
    --save gpu_query_log --results-dir "$out" 2>&1 | tee "$out/gpu_query_log.log" \
    | grep -v '^\[INFO\]\|checkpoint' | tail -25
  exit
fi
if [ "${1:-checks}" = methods ]; then
  methods="rumbart acrobart"
  python3 -c 'import faiss' 2>/dev/null && methods="$methods reatt_adjusted"
  for method in $methods; do
    python3 -m pyterrier_selfsup run -q -c "${COLLECTION:-beir/scifact/test}" -p bm25 minilm "$method" \
      --save "gpu_scifact_$method" --results-dir "$out" 2>&1 | tee "$out/gpu_scifact_$method.log" \
      | grep -v '^\[INFO\]\|checkpoint' | tail -12
  done
  exit
fi
nvidia-smi -L | tee "$out/nvidia-smi.txt"
if [ "${1:-checks}" = million ]; then
  python3 experiments/benchmarks/million_passages.py --results-dir "$out" 2>&1 \
    | tee "$out/million_passages.log" | grep -v '^\[INFO\]' | tail -14
  exit
fi
if [ "${1:-checks}" = speed ] || [ "${1:-checks}" = encoding ]; then
  python3 experiments/benchmarks/encoding_benchmark.py --results-dir "$out" 2>&1 | tee "$out/encoding_benchmark_gpu.log" \
    | grep -v '^\[INFO\]' | tail -22
  runs=warm-up,on; [ "$1" = speed ] || runs=none
  python3 experiments/benchmarks/gpu_benchmark.py --results-dir "$out" --rumbart-runs $runs 2>&1 \
    | tee "$out/gpu_benchmark.log" | grep -v '^\[INFO\]' | tail -12
  [ "$1" = speed ] || exit 0
  python3 -m pytest -p no:cacheprovider -m cuda -q -rA tests/test_cuda.py 2>&1 | tee "$out/cuda_tests.txt" | tail -8
  exit
fi
[ "${1:-checks}" = benchmark ] ||
python3 -m pytest -p no:cacheprovider -m cuda -q -rA tests/test_cuda.py 2>&1 | tee "$out/cuda_tests.txt" | tail -20
python3 experiments/benchmarks/gpu_benchmark.py --results-dir "$out" 2>&1 | tee "$out/gpu_benchmark.log" | grep -v '^\[INFO\]' | tail -25
python3 experiments/benchmarks/generator_batch.py --results-dir "$out" 2>&1 | tee "$out/generator_batch.log" | grep -v '^\[INFO\]' | tail -8
