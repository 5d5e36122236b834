#!/usr/bin/env bash
# The reconstruction scorer as a re-ranker: BM25's top 100 re-ranked by SmolLM2-135M-Instruct's
# log p(query | document), against BM25 and all-MiniLM-L6-v2, on the five collections.
# Writes experiments/results/reconstruction_scorer.{md,csv,png}. About an hour on 2 CPU cores
# from a cold cache ('wall time' in the results header); the generator's scores are cached,
# so a second run takes seconds.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/bootstrap.sh
selfsup run -c beir/scifact/test cranfield vaswani classic/cisi classic/adi -p bm25 minilm recon \
    --save reconstruction_scorer "$@"
