#!/usr/bin/env bash
# BM25 vs all-MiniLM-L6-v2 zero-shot on the five collections used in this project.
# Writes experiments/results/baseline.{md,csv,png}. About ten minutes on 2 CPU cores
# from a cold cache ('wall time' in the results header), nearly all of it encoding the
# corpora with MiniLM; indexes are cached, so a second run takes seconds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."  # (the repository root)
source scripts/bootstrap.sh
selfsup run -c beir/scifact/test cranfield vaswani classic/cisi classic/adi -p bm25 minilm --save baseline \
  --results-dir experiments/results "$@"
