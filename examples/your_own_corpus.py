"""Your own corpus, no relevance labels: adapt MiniLM to it, search it, save the model.

    python examples/your_own_corpus.py DOCS [QUERIES] [--output DIR] [--settings KEY=VALUE,...]
                                       [--show N]

DOCS: a JSON lines, CSV or TSV file (optionally .gz), one document a record: `docno` and
`text`, optionally `title`. QUERIES: the queries your users ask (`qid` and `query` in the
same formats, or plain text, one a line); without them, the generator writes queries for
passages of the corpus. No relevance judgement is needed, or read.

This trains what the command line trains, with the same call:

    selfsup train distill -c DOCS --output DIR                        (no queries)
    selfsup train distill:queries=QUERIES -c DOCS --output DIR        (a query log)

that is, the shipped `distill` pipeline: MiniLM distilled from a teacher that fuses BM25 and
MiniLM itself. The model is cached under a key of the corpus and the settings (the command
line finds it again), copied to DIR, which sentence-transformers loads too, and searched over
its own index. With no labels to score them by, the runs are compared by how far the adapted
model's top 10 moved from BM25's and from its start's.
"""
import argparse
import shutil

import pandas as pd

import pyterrier_selfsup as selfsup

parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
parser.add_argument('docs')
parser.add_argument('queries', nargs='?')
parser.add_argument('--output', default='runs/my-corpus', help='where the model is copied')
parser.add_argument('--settings', default='',
                    help="changes to distill's settings, as on the command line: key=value,...")
parser.add_argument('--show', type=int, default=3, help='queries whose results are printed')
args = parser.parse_args()

corpus = selfsup.Collection(args.docs)
print(f'{corpus.name}: {corpus.docs_count} documents')
changes = ','.join(filter(None, [f'queries={args.queries}' if args.queries else '',
                                 args.settings]))
distill = selfsup.get_pipeline('distill' + (f':{changes}' if changes else ''))
run = selfsup.RunContext(verbose=True)
final = distill.train(corpus, run)  # the model directory (cached: a second run finds it)
shutil.copytree(final, args.output, dirs_exist_ok=True)

bm25 = selfsup.BM25.from_collection(corpus, num_results=100)
minilm = selfsup.DenseRetriever.from_collection(corpus)
adapted = distill.build(corpus, run)  # the trained model over its own index
# what to look at: your queries, or a few sentences cut from the documents
topics = (selfsup.query_log(args.queries) if args.queries
          else selfsup.corpus_sentences(corpus, args.show))
runs = {'BM25': bm25(topics), 'MiniLM': minilm(topics), 'adapted': adapted(topics)}


def top10(ranking):
    return ranking[ranking['rank'] < 10].groupby('qid')['docno'].apply(set)


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
print(f'\nthe adapted model: {args.output} (SentenceTransformer({args.output!r}) loads it; '
      'examples/load_trained_model.py searches with it)')
