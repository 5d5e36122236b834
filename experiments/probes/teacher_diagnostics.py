"""How good a teacher is SmolLM2 for RUMBArt on scifact? Measured on the train split only
(the split on which choices may be made), from the same candidates RUMBArt trains on.

For each train query: the start encoder's (all-MiniLM-L6-v2 through the DualEncoder) top k
passages, the generator's log p(query | passage) for each (from the teacher-score cache
that RUMBArt fills, so nothing is scored twice), and the retriever's p(z|x). Over those k
it reports how often the relevant passage (train qrels) is first under:
  - the retriever alone (the student)
  - the generator alone (the teacher's likelihood)
  - the posterior p(z|x) p(x|z) that RUMBArt trains the retriever towards, at teacher
    temperatures 1 (the thesis) and larger (a softer teacher)
and how often the relevant passage is among the k at all (the ceiling any reordering has).

    python experiments/probes/teacher_diagnostics.py [--k 5]
writes experiments/results/teacher_diagnostics.{md,json}.
"""
import argparse
import json
from pathlib import Path

import numpy as np
import torch

from pyterrier_selfsup import MINILM, Collection
from pyterrier_selfsup.harness import provenance
from pyterrier_selfsup.models.generator import SMOLLM2, SMOLLM2_GGUF, Generator
from pyterrier_selfsup.models.score_cache import score_cache_dir
from pyterrier_selfsup.retrieval.dense import DenseRetriever

RESULTS = Path(__file__).resolve().parents[1] / 'results'


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--k', type=int, default=5)
    args = parser.parse_args()
    train = Collection('beir/scifact/train')
    topics, qrels = train.topics(), train.qrels()
    relevant = qrels[qrels['label'] > 0].groupby('qid')['docno'].apply(set).to_dict()

    retriever = DenseRetriever.from_dual_encoder(train, MINILM, num_results=args.k)
    candidates = (retriever >> train.text_loader())(topics)
    gen = Generator.from_pretrained(SMOLLM2, gguf_file=SMOLLM2_GGUF)
    teacher = gen.scorer(normalise='sum', cache=score_cache_dir(train.corpus_id, gen))
    scored = teacher(candidates.drop(columns=['score', 'rank'])).rename(columns={'score': 'teacher'})
    frame = candidates.merge(scored[['qid', 'docno', 'teacher']], on=['qid', 'docno'])
    frame['retriever'] = frame['score'] / retriever.encoder.temperature  # its scores are raw dot products

    def first_is_relevant(column):
        top = frame.loc[frame.groupby('qid')[column].idxmax(), ['qid', 'docno']]
        return float(np.mean([d in relevant.get(q, ()) for q, d in zip(top['qid'], top['docno'])]))

    rows = {'relevant among the k (ceiling)': float(np.mean(
                [bool(set(g['docno']) & relevant.get(q, set())) for q, g in frame.groupby('qid')])),
            'retriever alone: P@1': first_is_relevant('retriever'),
            'generator alone: P@1': first_is_relevant('teacher')}
    for temperature in (1, 4, 16):
        log_eta = frame.groupby('qid')['retriever'].transform(lambda s: torch.log_softmax(
            torch.tensor(s.to_numpy()), 0).numpy())
        frame[f'posterior T={temperature}'] = log_eta + frame['teacher'] / temperature
        rows[f'posterior p(z|x) p(x|z)^(1/{temperature}): P@1'] = first_is_relevant(f'posterior T={temperature}')
    spread = frame.groupby('qid')['teacher'].agg(lambda s: s.max() - np.sort(s.to_numpy())[-2])
    rows['teacher: mean gap between its best and second-best log p(x|z) (nats)'] = float(spread.mean())

    header = provenance.header()
    settings = {'data': f'beir/scifact/train: {len(topics)} queries, their qrels (evaluation only)',
                'candidates': f'top {args.k} of {MINILM} through the DualEncoder', 'generator': f'{SMOLLM2}/{SMOLLM2_GGUF}',
                'prompt': repr(gen.prompt)}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / 'teacher_diagnostics.json').write_text(json.dumps({'header': header, 'settings': settings,
                                                                   'rows': rows}, indent=2))
    md = ['# Teacher diagnostics (scifact train)', ''] + [f'- {k}: {v}' for k, v in {**header, **settings}.items()]
    md += ['', '| quantity | value |', '|---|---|'] + [f'| {k} | {v:.4f} |' for k, v in rows.items()]
    (RESULTS / 'teacher_diagnostics.md').write_text('\n'.join(md) + '\n')
    print('\n'.join(md))


if __name__ == '__main__':
    main()
