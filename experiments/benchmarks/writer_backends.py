"""Where the query writer's time goes, and whether another engine writes faster (issue 30 item 4).

The same passages as `query_generation.py` (drawn with seed 0 from scifact's corpus) at its
settings (SmolLM2-135M-Instruct, the plain completion prompt, 256 passage tokens, 3 samples a
passage, temperature 1.0, top-k 50, top-p 0.95, at most 32 new tokens, the first line kept),
one process, each row run ``--repeats`` times (3), the rows in turn round after round, the
table giving each row's median:

- ``generate``: ``Generator.generate`` on each passage repeated once a sample (the rate of x before);
- ``QueryWriter``: the writer (torch, 64 passages a batch, one prefill a passage, each weight
  cast once a write), with transformers' ``DynamicCache`` (each prompt's keys and values copied
  to its samples, SDPA) and with its own shared-prompt cache (shipped: each prompt held once and
  read by its samples through cascade attention, prefills of 4,096 tokens with their attention
  in chunks of 32 positions); one run each, in that order. In fp32 the two write the same
  queries (``tests/test_writing.py``); in bf16 their attention rounds differently, so the draws
  part at the first token that differs (the table counts the queries that are the same);
- ``prefill only``: the writer's prompt forward passes alone, batch for batch as it runs them
  (and again with their attention in one SDPA call a layer rather than in chunks of 32 positions,
  and with a batch's prompts in one forward rather than in forwards of 4,096 tokens):
  a floor under any writer that runs this arithmetic on this machine (what the passages'
  tokens cost before a single query token is written), with its rate in prompt tokens a second
  and the arithmetic it implies (2 x the non-embedding weights a token);
- ``openvino-genai``: OpenVINO GenAI's ``LLMPipeline`` reading the same GGUF file (its own
  weights' format and kernels), the same prompt texts (the table counts the prompts its
  tokenizer makes into the writer's token ids), ``num_return_sequences=3`` (its samples of
  a prompt share the prompt's prefill), no stop (each sample runs to 32 new tokens: a stop at a
  line break would end the samples that begin with one before any text), the first non-empty line
  kept, every prompt in one call.

Each row's label-free quality is measured as in `query_generation.py` (distinct fraction, mean
words, where the teacher and BM25 rank the passage a query was written for), so that a faster
engine is not read as better when it writes other queries.

    python experiments/benchmarks/query_generation.py is the wider table; this one:
    python experiments/benchmarks/writer_backends.py [--passages 48] [--skip-generate] [--repeats 3]
writes experiments/results/writer_backends.{md,json}.
"""
import argparse
import random
import statistics
import time
from pathlib import Path

import torch
from query_generation import PER_PASSAGE, SAMPLING, quality, write_table

from pyterrier_selfsup import BM25, Collection
from pyterrier_selfsup.data.queries.cut import reservoir_sample, text_if_any
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.harness.methods import teacher_pipeline
from pyterrier_selfsup.models import writer_cache
from pyterrier_selfsup.models.generator import GENERATORS, load_generator
from pyterrier_selfsup.models.writing import QueryWriter, casts_kept

RESULTS = Path(__file__).resolve().parents[1] / 'results'
TOP_K = 50  # what generate and the writer apply for SmolLM2 (its generation config sets none)


def prefill_only(writer: QueryWriter, passages) -> tuple:
    """Seconds of the writer's prompt forward passes alone (``QueryWriter.prefill``, in its
    batches and order, its weight casts kept), and the prompt tokens they ran (padding excluded)."""
    gen = writer.generator
    ids = writer.prompt_ids(passages)
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    tokens, t0 = 0, time.perf_counter()
    with gen.inference(), casts_kept(gen.model):
        for start in range(0, len(order), writer.batch_size):
            _, _, mask = writer.prefill([ids[i] for i in order[start:start + writer.batch_size]], 32)
            tokens += int(mask.sum())
    return time.perf_counter() - t0, tokens


def openvino_writer(writer: QueryWriter, passages, seed: int = 0):
    """Queries from OpenVINO GenAI's LLMPipeline over the generator's GGUF file (load seconds,
    write seconds, queries a passage)."""
    import openvino_genai as ov_genai
    from huggingface_hub import hf_hub_download
    repo, gguf_file = GENERATORS['smollm2']
    t0 = time.perf_counter()
    pipe = ov_genai.LLMPipeline(hf_hub_download(repo, gguf_file), 'CPU')
    load = time.perf_counter() - t0
    ids = writer.prompt_ids(passages)
    prompts = [writer.tokenizer.decode(x) for x in ids]
    # the same prompts? OpenVINO tokenizes the texts with the GGUF's own tokenizer, special tokens as it adds them
    theirs = [list(pipe.get_tokenizer().encode(p).input_ids.data[0]) for p in prompts]
    same_prompts = sum(a == b for a, b in zip(ids, theirs))
    config = ov_genai.GenerationConfig()
    config.max_new_tokens, config.do_sample, config.num_return_sequences = 32, True, PER_PASSAGE
    config.temperature, config.top_p, config.top_k = SAMPLING['temperature'], SAMPLING['top_p'], TOP_K
    config.rng_seed = seed
    # no stop string: SmolLM2 often starts its answer with a line break (' \nWhat is ...'), and a stop at '\n' ends
    # those with nothing written, where the writer skips a line break before any text; each sample runs to
    # max_new_tokens and its first non-empty line is kept, as the writer keeps it
    config.apply_chat_template = False  # the prompt is the plain completion prompt, already whole
    t0 = time.perf_counter()
    result = pipe.generate(prompts, config)
    seconds = time.perf_counter() - t0
    texts = list(result.texts)
    per = [[t.strip().split('\n')[0].strip() for t in texts[i * PER_PASSAGE:(i + 1) * PER_PASSAGE]]
           for i in range(len(prompts))]
    return load, seconds, per, f'{same_prompts} of {len(ids)}'


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--passages', type=int, default=48)
    parser.add_argument('--skip-generate', action='store_true', help='leave out the slow reference row')
    parser.add_argument('--repeats', type=int, default=3, help='runs of each row (the table: their median)')
    args = parser.parse_args()
    coll = Collection('beir/scifact/train')
    header = provenance.header()
    docs = reservoir_sample(coll.corpus_iter(), args.passages, random.Random(0), text_if_any)
    docnos, passages = [d for d, _ in docs], [t for _, t in docs]
    bm25 = BM25.from_collection(coll, num_results=100)
    teacher = teacher_pipeline(coll, 'bm25+minilm', depth=100)
    gen = load_generator('smollm2')
    dtype = str(gen.compute_dtype()).split('.')[1]
    non_embedding = sum(p.numel() for n, p in gen.model.named_parameters() if 'embed' not in n and 'lm_head' not in n)
    writer = QueryWriter(gen, style='plain', max_passage_length=256)
    writer.token_kinds  # (read once a model: not the writing's cost)
    rows = []
    extra = {'generator': 'smollm2', 'dtype': dtype, 'prompt': 'plain', 'passage tokens': 256}
    shipped_chunk, shipped_tokens = writer_cache.PREFILL_CHUNK, writer.prefill_tokens
    prefills = (('prefill only (the writer\'s prompt forwards)', shipped_chunk, shipped_tokens),
                ('prefill only, its attention in one SDPA call a layer', 1 << 30, shipped_tokens),
                ('prefill only, a batch\'s prompts in one forward', shipped_chunk, 1 << 30))
    runs = {}  # a row's label: (what its first run wrote or counted, the seconds of each run)

    def timed(label, fn):
        t0 = time.perf_counter()
        out = fn()
        runs.setdefault(label, (out, []))[1].append(time.perf_counter() - t0)
        print(label, f'{runs[label][1][-1]:.2f} s', flush=True)

    def generate():
        torch.manual_seed(0)
        flat = gen.generate([p for p in passages for _ in range(PER_PASSAGE)], max_new_tokens=32, **SAMPLING)
        return [flat[i:i + PER_PASSAGE] for i in range(0, len(flat), PER_PASSAGE)]

    def write(preallocated):
        writer.preallocated_cache = preallocated
        return writer.write(passages, PER_PASSAGE, max_new_tokens=32, generator=torch.Generator().manual_seed(0),
                            **SAMPLING)

    def prefill(chunk, forward):
        writer_cache.PREFILL_CHUNK, writer.prefill_tokens = chunk, forward
        try:
            return prefill_only(writer, passages)[1]
        finally:
            writer_cache.PREFILL_CHUNK, writer.prefill_tokens = shipped_chunk, shipped_tokens

    # the rows in turn, round after round: a machine that slows for a while slows every row alike
    labels = {False: 'QueryWriter (torch), DynamicCache',
              True: 'QueryWriter (torch), its shared-prompt cache (shipped)'}
    for _ in range(args.repeats):
        if not args.skip_generate:
            timed('generate, prompt repeated a sample', generate)
        for preallocated in (False, True):  # DynamicCache, then the shared-prompt cache (shipped)
            timed(labels[preallocated], lambda: write(preallocated))
        for label, chunk, forward in prefills:
            timed(label, lambda: prefill(chunk, forward))
        result = openvino_writer(writer, passages)  # (its writing timed, its loading apart)
        runs.setdefault('openvino-genai LLMPipeline (GGUF), shared prefill', (result, []))[1].append(result[1])

    def median_of(label):
        times = runs[label][1]
        return statistics.median(times), ', '.join(f'{t:.2f}' for t in times)

    for label, (out, _) in runs.items():
        seconds, each = median_of(label)
        if label.startswith('prefill'):
            tokens = out
            rows.append({'writer': label, **extra, 'seconds': seconds, 'runs (s)': each,
                         'queries/s': PER_PASSAGE * len(passages) / seconds, 'prompt tokens': tokens,
                         'prompt tokens/s': tokens / seconds, 'GFLOP/s': 2 * non_embedding * tokens / seconds / 1e9})
        elif label.startswith('openvino'):
            quality(rows, label, out[2], docnos, seconds, teacher, bm25,
                    {**extra, 'dtype': 'its own (CPU plug-in default)', 'load seconds': out[0],
                     'same prompt tokens as the writer': out[3], 'runs (s)': each})
        else:
            quality(rows, label, out, docnos, seconds, teacher, bm25, {**extra, 'runs (s)': each})
        if label == labels[True]:
            same = [a == b for x, y in zip(runs[labels[False]][0], out) for a, b in zip(x, y)]
            rows[-1]['same queries as DynamicCache'] = f'{sum(same)} of {len(same)}'
    before = next((r for r in rows if r['writer'].startswith('generate')), None)
    shipped = next(r for r in rows if r['writer'].startswith('QueryWriter') and 'shipped' in r['writer'])
    for r in rows:
        if before and r.get('queries/s'):
            r['x before'] = r['queries/s'] / before['queries/s']
        if r.get('queries/s'):
            r['x QueryWriter'] = r['queries/s'] / shipped['queries/s']
    settings = {'data': f'beir/scifact corpus: {len(passages)} passages drawn with seed 0; {PER_PASSAGE} samples a '
                        f'passage, temperature {SAMPLING["temperature"]}, top-k {TOP_K}, top-p {SAMPLING["top_p"]}, '
                        '32 new tokens, the first line kept',
                'generator': f'SmolLM2-135M-Instruct ({GENERATORS["smollm2"][1]}; torch rows: its fp32 conversion, '
                             f'computed in {dtype}); {non_embedding / 1e6:.1f}M non-embedding weights',
                'teacher': 'BM25 (PISA) + all-MiniLM-L6-v2, each top 100, per-query z-scores summed 1:1',
                'torch threads': torch.get_num_threads(),
                'timing': f'{args.repeats} runs of each row, the rows in turn round after round; seconds: their median '
                          '(queries/s and the ratios from it); what a row wrote: its first run\'s'}
    cols = ['writer', 'dtype', 'seconds', 'runs (s)', 'queries/s', 'x before', 'x QueryWriter', 'prompt tokens/s',
            'GFLOP/s', 'distinct fraction', 'mean words', 'teacher MRR@10', 'teacher top-10', 'BM25 MRR@10',
            'same queries as DynamicCache', 'same prompt tokens as the writer']
    write_table('writer_backends', 'The query writer: where its time goes, and another engine', header, settings, rows,
                cols, lambda r: r['writer'])

if __name__ == '__main__':
    main()
