#!/usr/bin/env bash
# The reconstruction scorer as a re-ranker: BM25's top 100 re-ranked by SmolLM2-135M-Instruct's
# log p(query | document), against BM25 and all-MiniLM-L6-v2.
#   experiments/reproduce/reconstruction_scorer.sh [collection ...]     (default: the five used here)
# Writes experiments/results/reconstruction_scorer.{md,csv,png}. The generator is the cost
# centre: on 2 CPU cores about 1 hour for scifact (30,000 pairs over ~5,000 passages) and
# about half an hour for the other four together. Its scores are cached on disk, so a second
# run takes seconds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."  # (the repository root)
source scripts/bootstrap.sh
collections=("$@")
if [ ${#collections[@]} -eq 0 ]; then
    collections=(beir/scifact/test cranfield vaswani classic/cisi classic/adi)
fi
selfsup run -c "${collections[@]}" -p bm25 minilm query_likelihood \
  --save reconstruction_scorer --results-dir experiments/results -v
