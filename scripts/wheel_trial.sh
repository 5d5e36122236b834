#!/usr/bin/env bash
# Your own models, tried as a new user would, from a wheel installed outside the repository:
#     bash scripts/wheel_trial.sh [OUT]
# builds the package's wheel (pip wheel), installs it into a fresh virtual environment under
# $TMPDIR (torch pinned by constraints.txt), and there, in an empty directory and model cache,
#   1. makes three small random models of a user's kinds: a sentence-transformers encoder with
#      e5's prompts, a seq2seq doc2query writer (a T5) and a cross-encoder (the models these
#      machines hold are too few to show the three kinds: the weights are random, the paths real);
#   2. adapts the encoder to a JSON lines file of documents (ADI's) with `selfsup train`, its
#      queries written by the T5 and its teacher BM25 fused with the cross-encoder;
#   3. loads the result with `SentenceTransformer(dir)` and shows its prompts and vectors;
#   4. adapts it again with the gpl pipeline (GPL's recipe) and the same three models.
# Writes OUT (default experiments/results/wheel_trial-REV.txt): each command, its wall time and
# its output.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$(pwd)"
rev="$(git rev-parse --short HEAD)"
out="$root/${1:-experiments/results/wheel_trial-$rev.txt}"
work="$(mktemp -d)"
eval "$(../shared/bin/offline-assets 2>/dev/null)"  # (MiniLM's tokenizer and ADI, offline)

STEP_LINES=30
source "$root/scripts/trial_step.sh"  # step TITLE COMMAND...

{
  echo "# Your own models, from a wheel installed outside the repository, at $rev"
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "command: bash scripts/wheel_trial.sh"
  echo
} > "$out"
step 'Building the wheel' "$root/.venv/bin/python" -m pip wheel --no-deps -q -w "$work/wheel" "$root"
python3 -m venv "$work/venv"
step 'Installing it into a fresh virtual environment' "$work/venv/bin/python" -m pip install -q \
  -c "$root/constraints.txt" "$(ls "$work"/wheel/pyterrier_selfsup-*.whl)[cpu]"
cd "$work" && mkdir trial && cd trial
export PATH="$work/venv/bin:$PATH" SELFSUP_CACHE="$work/trial/cache"
echo "machine: $(python -c \
  'from pyterrier_selfsup.harness.provenance import machine; print(machine())')" >> "$out"
echo >> "$out"
step "Making a user's three models and documents" python - <<'EOF'
import json

import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer
from transformers import (AutoModelForSequenceClassification, AutoTokenizer, BertConfig, BertModel,
                          T5Config, T5ForConditionalGeneration)

import pyterrier_selfsup as selfsup

tokenizer = AutoTokenizer.from_pretrained(selfsup.MINILM)
torch.manual_seed(0)
bert = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                  num_attention_heads=2, intermediate_size=64, max_position_embeddings=128)
BertModel(bert).save_pretrained('bert')
tokenizer.save_pretrained('bert')
encoder = Transformer('bert', max_seq_length=64)
SentenceTransformer(modules=[encoder, Pooling(encoder.get_embedding_dimension()), Normalize()],
                    prompts={'query': 'query: ', 'document': 'passage: '}).save('e5-like')
T5ForConditionalGeneration(T5Config(
    vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_token_id, initializer_factor=8.0,
    d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2, eos_token_id=tokenizer.sep_token_id,
    decoder_start_token_id=tokenizer.pad_token_id)).save_pretrained('doc2query')
tokenizer.save_pretrained('doc2query')
bert.num_labels = 1
AutoModelForSequenceClassification.from_config(bert).save_pretrained('cross-encoder')
tokenizer.save_pretrained('cross-encoder')
with open('docs.jsonl', 'w') as out:
    for doc in selfsup.Collection('classic/adi').corpus_iter():
        out.write(json.dumps({'docno': doc['docno'], 'text': doc['text']}) + '\n')
print('made e5-like/, doc2query/, cross-encoder/ and docs.jsonl (82 documents)')
EOF
settings='model_name=e5-like,generator=doc2query,n_queries=60'
settings+=',teacher=bm25+student+ce,cross_encoder=cross-encoder,depth=10'
step 'Adapting the encoder: the T5 writes the queries, BM25 and the cross-encoder teach' \
  selfsup train "distill:$settings" -c docs.jsonl --output my-model
step 'Loading it with sentence-transformers' python -c "
from sentence_transformers import SentenceTransformer
model = SentenceTransformer('my-model')
print('prompts', {k: v for k, v in model.prompts.items() if v})
query = model.encode_query(['the retrieval of information from computer files'])
document = model.encode_document(['Information retrieval finds documents for a query.'])
print(type(model).__name__, query.shape, 'similarity', model.similarity(query, document))"
step 'What the model record says it is' python -c "
import json, pathlib
record, = [json.loads(p.read_text()) for p in pathlib.Path('cache/models').glob('*/model.json')]
print(json.dumps({k: record[k] for k in ('method', 'queries', 'starts')}, indent=1))
print('teacher', record['settings']['teacher'], 'cross_encoder', record['settings']['cross_encoder'])"
step 'GPL'"'"'s recipe with the same three models: the gpl pipeline' \
  selfsup train "gpl:model_name=e5-like,generator=doc2query,cross_encoder=cross-encoder,n_queries=60" \
  -c docs.jsonl --output my-gpl-model
step 'What GPL'"'"'s record says it trained' python -c "
import json, pathlib
for p in sorted(pathlib.Path('cache/models').glob('*/model.json')):
    s = json.loads(p.read_text())['settings']
    if s.get('negatives'):
        print({k: s[k] for k in ('generator', 'teacher', 'cross_encoder', 'loss', 'negatives',
                                 'depth', 'passages', 'per_passage', 'lr', 'precision')})"
rm -rf "$work"
echo "wrote $out"
