"""The query writer with the prompts' common head prefilled once a call, against each prompt
prefilled whole, in one process on the same passages.

Every prompt begins with the same tokens: the system prompt and the instruction, and, for a
writer shown example pairs, three passages with their queries. ``QueryWriter(share_prefix=True)``
prefills them once and each prompt from its passage on; ``share_prefix=False`` prefills each
prompt whole, as the writer did before. Both write the same passages (drawn with seed 0 from the
corpus, as ``sampled_queries`` draws them) with the same random stream, 3 a passage, at the
shipped sampling settings, each way twice (the faster kept). Where the generator runs in fp32
the two write the same queries; under bf16 their rounding differs, and so may their draws: the
table says how many passages were given the same queries.

    python experiments/benchmarks/shared_prefix.py [--passages 64] [--collection vaswani]

writes experiments/results/shared_prefix.{md,json}.
"""
import argparse
import json
import random
import time
from pathlib import Path

import torch

from pyterrier_selfsup import Collection
from pyterrier_selfsup.data.queries.cut import reservoir_sample, text_if_any
from pyterrier_selfsup.data.queries.written import SAMPLING, example_pairs
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.models.generator import load_generator
from pyterrier_selfsup.models.writing import QueryWriter

RESULTS = Path(__file__).resolve().parents[1] / 'results'
PER_PASSAGE = 3
# (label, style, the collection whose example pairs are shown)
WRITERS = [('chat, shown 3 of cranfield\'s pairs', 'chat', 'cranfield'),
           ('chat', 'chat', None),
           ('plain (the default)', 'plain', None)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--passages', type=int, default=64)
    parser.add_argument('--collection', default='vaswani')
    args = parser.parse_args()
    header = provenance.header()
    docs = reservoir_sample(Collection(args.collection).corpus_iter(), args.passages, random.Random(0),
                   text_if_any)
    passages = [text for _, text in docs]
    gen = load_generator('smollm2')
    sampling = dict(do_sample=True, temperature=SAMPLING['temperature'], top_p=SAMPLING['top_p'])
    rows = []
    for label, style, pairs in WRITERS:
        written, seconds, writers = {}, {False: [], True: []}, {}
        for share in (False, True):
            writers[share] = QueryWriter(gen, style=style, pairs=example_pairs(pairs),
                                         share_prefix=share)
            writers[share].token_kinds  # (built once a writer, not timed)
        # each way twice, in the order whole, shared, shared, whole; the faster of its two kept
        for share in (False, True, True, False):
            start = time.perf_counter()
            written[share] = writers[share].write(passages, PER_PASSAGE, **sampling,
                                                  generator=torch.Generator().manual_seed(0))
            seconds[share].append(time.perf_counter() - start)
        seconds = {share: min(times) for share, times in seconds.items()}
        prompt = sum(map(len, writers[True].prompt_ids(passages))) / len(passages)
        shared = writers[True]._prefix_shared()
        rows.append({'writer': label, 'head tokens': len(writers[True].head_ids),
                     'prompt tokens (mean)': round(prompt, 1), 'head shared': shared,
                     'passages/s whole': len(passages) / seconds[False],
                     'passages/s shared': len(passages) / seconds[True],
                     'speed-up': seconds[False] / seconds[True],
                     'same queries': sum(a == b for a, b in zip(written[False], written[True])),
                     'examples': [q for qs in written[True][:2] for q in qs]})
        print(rows[-1], flush=True)
    settings = {'data': f'{args.collection}: {len(passages)} passages drawn with seed 0',
                'generator': f'smollm2 ({str(gen.compute_dtype()).split(".")[1]}), '
                             f'{PER_PASSAGE} queries a passage, {sampling}, batch of 64 passages',
                'torch threads': torch.get_num_threads()}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / 'shared_prefix.json').write_text(
        json.dumps({'header': header, 'settings': settings, 'rows': rows}, indent=2))
    cols = ['writer', 'head tokens', 'prompt tokens (mean)', 'head shared', 'passages/s whole',
            'passages/s shared', 'speed-up', 'same queries']
    fmt = lambda v: f'{v:.3g}' if isinstance(v, float) else str(v)  # noqa: E731
    md = ['# The query writer: the prompts\' common head prefilled once, or with each prompt', '']
    md += [f'- {k}: {v}' for k, v in {**header, **settings}.items()] + ['']
    md += ['| ' + ' | '.join(cols) + ' |', '|' + '---|' * len(cols)]
    md += ['| ' + ' | '.join(fmt(r[c]) for c in cols) + ' |' for r in rows]
    md += ['', f'"same queries" counts the passages (of {len(passages)}) whose {PER_PASSAGE} '
           'queries are the same both ways. A head shorter than the writer\'s MIN_SHARED_PREFIX '
           'is not shared: both columns then run the same code.', '']
    for r in rows:
        md += [f'**{r["writer"]}** (shared):', ''] + [f'- {q}' for q in r['examples']] + ['']
    (RESULTS / 'shared_prefix.md').write_text('\n'.join(md) + '\n')
    print('\n'.join(md))


if __name__ == '__main__':
    main()
