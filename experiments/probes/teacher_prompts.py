"""Does the prompt make SmolLM2 a better teacher? Measured on scifact's train split only (the
split on which choices may be made), on the candidates RUMBArt trains on.

SmolLM2-135M-Instruct is the only generator here, and as a query-likelihood ranker it is
below BM25 on four collections of five (``reconstruction_scorer.md``), so the prompt is
the one lever left on the teacher. Each prompt below is generic (no collection's wording):
the one used so far, two plain ones, and the model's own chat format with an instruction.

For a seeded sample of train queries: all-MiniLM-L6-v2's top k passages (through the
DualEncoder, as RUMBArt's start retrieves them) and, per prompt, log p(query | passage).
Per prompt it reports P@1 and MRR@k of the teacher's ordering of those k, and of the
posterior p(z|x) p(x|z)^(1/4) that RUMBArt at T=4 trains towards, with a paired t-test of
each prompt's per-query reciprocal rank against the current prompt's.

    python experiments/probes/teacher_prompts.py [--queries 200] [--k 5]
writes experiments/results/teacher_prompts.{md,json}. Scores are cached per prompt.
"""
import argparse
import json
from pathlib import Path

import numpy as np
import torch
from scipy import stats

from pyterrier_selfsup import MINILM, Collection
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.models.generator import SMOLLM2, SMOLLM2_GGUF, Generator
from pyterrier_selfsup.models.prompts import PASSAGE_QUESTION as CAUSAL_PROMPT
from pyterrier_selfsup.models.score_cache import score_cache_dir
from pyterrier_selfsup.retrieval.dense import DenseRetriever

RESULTS = Path(__file__).resolve().parents[1] / 'results'
INSTRUCTION = 'Write a search query that this passage answers.\n\nPassage: {passage}'


def prompts(tokenizer) -> dict:
    chat = tokenizer.apply_chat_template([{'role': 'user', 'content': INSTRUCTION}], tokenize=False,
                                         add_generation_prompt=True)
    return {'question (so far)': CAUSAL_PROMPT,
            'query': 'Passage: {passage}\nQuery:',
            'search query': 'Document: {passage}\nA search query for which this document is relevant:',
            'chat instruction': chat}


def reciprocal_ranks(frame, column, relevant):
    """Per query: 1 / rank of the first relevant passage when the k are ordered by ``column``
    (0 where none of the k is relevant)."""
    out = {}
    for qid, group in frame.groupby('qid'):
        order = group.sort_values(column, ascending=False)['docno'].tolist()
        ranks = [i + 1 for i, d in enumerate(order) if d in relevant.get(qid, ())]
        out[qid] = 1 / ranks[0] if ranks else 0.0
    return out


def summary(rr: dict, k: int) -> dict:
    return {'P@1': float(np.mean([v == 1 for v in rr.values()])), f'MRR@{k}': float(np.mean(list(rr.values())))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--queries', type=int, default=200)
    parser.add_argument('--k', type=int, default=5)
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args()
    train = Collection('beir/scifact/train')
    topics, qrels = train.topics(), train.qrels()
    topics = topics.sample(n=min(args.queries, len(topics)), random_state=args.seed).sort_values('qid')
    relevant = qrels[qrels['label'] > 0].groupby('qid')['docno'].apply(set).to_dict()

    retriever = DenseRetriever.from_dual_encoder(train, MINILM, num_results=args.k)
    candidates = (retriever >> train.text_loader())(topics)
    candidates['retriever'] = candidates['score'] / retriever.encoder.temperature  # raw dot products / temperature
    candidates['log_eta'] = candidates.groupby('qid')['retriever'].transform(
        lambda s: torch.log_softmax(torch.tensor(s.to_numpy()), 0).numpy())

    base = Generator.from_pretrained(SMOLLM2, gguf_file=SMOLLM2_GGUF)
    candidate_prompts = prompts(base.tokenizer)
    rows, per_query = {}, {}
    for name, prompt in candidate_prompts.items():
        gen = Generator(base.model, base.tokenizer, name=base.name, prompt=prompt,
                        max_passage_length=base.max_passage_length)
        teacher = gen.scorer(normalise='sum', cache=score_cache_dir(train.corpus_id, gen))
        scored = teacher(candidates.drop(columns=['score', 'rank', 'retriever', 'log_eta']))
        frame = candidates.merge(scored[['qid', 'docno', 'score']].rename(columns={'score': 'teacher'}),
                                 on=['qid', 'docno'])
        frame['posterior'] = frame['log_eta'] + frame['teacher'] / 4
        for column in ('teacher', 'posterior'):
            rr = reciprocal_ranks(frame, column, relevant)
            per_query[name, column] = rr
            rows[name, column] = summary(rr, args.k)
        print(name, rows[name, 'teacher'], rows[name, 'posterior'], flush=True)
    student = summary(reciprocal_ranks(candidates, 'retriever', relevant), args.k)
    ceiling = float(np.mean([bool(set(g['docno']) & relevant.get(q, set())) for q, g in candidates.groupby('qid')]))

    first = next(iter(candidate_prompts))
    for (name, column), rr in per_query.items():
        reference = per_query[first, column]
        qids = sorted(rr)
        rows[name, column]['p vs so far'] = (float(stats.ttest_rel([rr[q] for q in qids],
                                                                   [reference[q] for q in qids]).pvalue)
                                             if name != first else float('nan'))

    header = provenance.header()
    settings = {'data': f'beir/scifact/train: {len(topics)} queries sampled with seed {args.seed}, '
                        'their qrels (evaluation only)',
                'candidates': f'top {args.k} of {MINILM} through the DualEncoder',
                'generator': f'{SMOLLM2}/{SMOLLM2_GGUF}, {base.max_passage_length} passage tokens, '
                             'log p(query | passage) summed over query tokens',
                'posterior': 'log softmax of the retriever\'s k logits + log p(x|z) / 4 (RUMBArt at T=4)'}
    RESULTS.mkdir(exist_ok=True)
    table = [{'prompt': name, 'ordering': column, **values} for (name, column), values in rows.items()]
    (RESULTS / 'teacher_prompts.json').write_text(json.dumps(
        {'header': header, 'settings': settings, 'prompts': candidate_prompts, 'rows': table,
         'retriever alone': student, 'relevant among the k (ceiling)': ceiling}, indent=2))
    md = ['# Teacher prompts (scifact train)', ''] + [f'- {k}: {v}' for k, v in {**header, **settings}.items()]
    md += ['', 'Prompts (`{passage}` is the passage):', '']
    md += [f'- {name}: `{prompt!r}`' for name, prompt in candidate_prompts.items()]
    md += ['', f'| prompt | ordering | P@1 | MRR@{args.k} | p (RR vs the prompt so far, paired t-test) |',
           '|---|---|---|---|---|']
    md += [f'| {r["prompt"]} | {r["ordering"]} | {r["P@1"]:.4f} | {r[f"MRR@{args.k}"]:.4f} | '
           f'{"" if np.isnan(r["p vs so far"]) else format(r["p vs so far"], ".3g")} |' for r in table]
    md += [f'| (retriever alone) | MiniLM | {student["P@1"]:.4f} | {student[f"MRR@{args.k}"]:.4f} | |',
           '', f'Relevant passage among the k (the ceiling of any reordering): {ceiling:.4f}.']
    (RESULTS / 'teacher_prompts.md').write_text('\n'.join(md) + '\n')
    print('\n'.join(md))


if __name__ == '__main__':
    main()
