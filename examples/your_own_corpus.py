"""Your own corpus, no relevance labels: adapt MiniLM to it, index it, search it, save the model.

    python examples/your_own_corpus.py DOCS [QUERIES] [--output-dir DIR] [--rounds R] [--show N]

DOCS: a JSON lines, CSV or TSV file (optionally .gz), one document a record: `docno` and
`text`, optionally `title`. QUERIES: the queries your users ask (`qid` and `query` in the
same formats, or plain text, one a line); without them, training uses sentences cut from
the documents. No relevance judgement is needed, or read.

MiniLM is distilled from a teacher that fuses BM25 and MiniLM itself (label-free
distillation); the result is saved under DIR/final (also loadable by sentence-transformers)
and searched over its own index. With no labels to score them by, the runs are compared
by how far the adapted model's top 10 moved from BM25's and from its start's.
"""
import argparse

import pandas as pd
import torch

import pyterrier_selfsup as selfsup

parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
parser.add_argument('docs')
parser.add_argument('queries', nargs='?')
parser.add_argument('--output-dir', default='runs/my-corpus')
parser.add_argument('--rounds', type=int, default=selfsup.DistillationSettings.rounds)
parser.add_argument('--show', type=int, default=3, help='queries whose results are printed')
args = parser.parse_args()

corpus = selfsup.Collection.from_files(args.docs, args.queries)
print(f'{corpus.name}: {corpus.docs_count} documents')
bm25 = selfsup.BM25.from_collection(corpus, num_results=100)
minilm = selfsup.DenseRetriever.from_collection(corpus)
# what the model trains on: your queries' texts, or sentences from your documents
queries = (selfsup.given_topics(corpus.topics()) if args.queries
           else selfsup.corpus_sentences(corpus, 2000))

torch.manual_seed(0)
adapted = selfsup.Distillation(selfsup.DualEncoder.from_pretrained(selfsup.MINILM), corpus,
                               lambda student: selfsup.Fusion({'bm25': bm25, 'student': student}),
                               queries=args.queries or 'sentences', rounds=args.rounds,
                               output_dir=args.output_dir).fit(queries)

topics = (corpus.topics() if args.queries
          else pd.DataFrame({'qid': ['1'], 'query': [queries['query'].iloc[0]]}))
runs = {'BM25': bm25(topics), 'MiniLM': minilm(topics), 'adapted': adapted(topics)}


def top10(run):
    return run[run['rank'] < 10].groupby('qid')['docno'].apply(set)


for name in ('BM25', 'MiniLM'):
    overlap = pd.concat([top10(runs['adapted']), top10(runs[name])], axis=1,
                        keys=['a', 'b']).dropna()
    share = overlap.apply(lambda row: len(row['a'] & row['b']) / 10, axis=1).mean()
    print(f'top 10 shared by the adapted model and {name}: {share:.2f} a query')
for qid, query in topics[['qid', 'query']].head(args.show).itertuples(index=False):
    best = runs['adapted'][runs['adapted']['qid'] == qid].head(3)
    print(f'\n{query}')
    for docno, text in zip(best['docno'], corpus.texts(list(best['docno']))):
        print(f'  {docno}: {text[:100]}')
print(f'\nthe adapted model: {args.output_dir}/final '
      '(examples/load_trained_model.py searches with it)')
