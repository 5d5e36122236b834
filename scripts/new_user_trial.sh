#!/usr/bin/env bash
# What a new user sees, tried on a fresh clone of HEAD in an empty model cache:
#     bash scripts/new_user_trial.sh [OUT]
# clones HEAD into ../new-user (a sibling, so that ../shared is beside it, as on CI), and there
#   1. runs the main job (`make run`: the set-up, then BM25 against MiniLM on scifact);
#   2. adapts MiniLM to a JSON lines file of documents through the command line, without and
#      with a query log, and loads each result with `SentenceTransformer(dir)` (the documents
#      are ADI's, written out as a user's file would be; the queries are five of its topics);
#   3. reproduces RUMBArt on ADI with one command and compares it with the expected numbers.
# Writes OUT (default experiments/results/new_user_trial-REV.txt): each command, its wall
# time and its output.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rev="$(git rev-parse --short HEAD)"
out="$(pwd)/${1:-experiments/results/new_user_trial-$rev.txt}"
clone="$(cd .. && pwd)/new-user"
rm -rf "$clone"
git clone -q . "$clone"
cd "$clone"
export SELFSUP_CACHE="$clone/.trial-cache"  # empty: every index and model is built here

source scripts/trial_step.sh  # step TITLE COMMAND... (the clone's copy)

{
  echo "# A new user's first steps on a fresh clone at $rev"
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "command: bash scripts/new_user_trial.sh"
  echo
} > "$out"
step 'The main job' make run
source scripts/bootstrap.sh
echo "machine: $(python -c \
  'from pyterrier_selfsup.harness.provenance import machine; print(machine())')" >> "$out"
echo >> "$out"
python - <<'EOF'
import json
import pyterrier_selfsup as selfsup
adi = selfsup.Collection('classic/adi')
with open('docs.jsonl', 'w') as out:
    for doc in adi.corpus_iter():
        out.write(json.dumps({'docno': doc['docno'], 'text': doc['text']}) + '\n')
with open('queries.txt', 'w') as out:
    out.write('\n'.join(adi.topics()['query'].head(5)) + '\n')
EOF
step 'Adapting to a file of documents, corpus only' \
  selfsup train distill -c docs.jsonl --output my-model
step 'Adapting to a file of documents, with a query log' \
  selfsup train "distill:queries=queries.txt" -c docs.jsonl --output my-model-with-log
step 'Loading both with sentence-transformers' python -c "
from sentence_transformers import SentenceTransformer
for name in ('my-model', 'my-model-with-log'):
    model = SentenceTransformer(name)
    query = model.encode_query(['the retrieval of information from computer files'])
    document = model.encode_document(['Information retrieval finds documents for a query.'])
    print(name, type(model).__name__, query.shape, 'similarity', model.similarity(query, document))"
step 'Nothing to evaluate without judgements' selfsup run -c docs.jsonl -p bm25
step 'Reproducing RUMBArt on ADI' python experiments/reproduce/reproduce.py rumbart -q
echo "wrote $out"
