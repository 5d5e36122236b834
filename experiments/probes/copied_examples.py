"""How many of a writer's distinct queries are its example queries, word for word (issue 50 item 1).

For each written query set of the writer_realism group that was shown another collection's topic
texts (`query_examples=COLLECTION`), counts the distinct queries (as cached, repeats already dropped)
equal to one of that collection's topic texts, case, spacing and a final '.' or '?' aside. Reads the
query sets from this machine's cache (the same settings give the same key); writes nothing.

    python experiments/probes/copied_examples.py
"""
from pyterrier_selfsup import Collection
from pyterrier_selfsup.data.queries.source import QuerySource
from pyterrier_selfsup.data.queries.written import example_texts
from pyterrier_selfsup.harness.methods import source_topics

SETS = [(generator, examples) for examples in ('cranfield', 'classic/cisi') for generator in ('qwen', 'smollm2')]


def normal(text: str) -> str:
    return ' '.join(text.lower().split()).rstrip(' .?')


def main():
    corpus = Collection('beir/scifact/train')
    for generator, examples in SETS:
        topics = {normal(q) for q in example_texts(examples)}
        written = source_topics(corpus, QuerySource('sampled', 2000, style='chat', examples=examples), generator=generator)
        copied = sum(normal(q) in topics for q in written['query'])
        print(f'{generator} shown {examples}: {len(written)} distinct queries, {copied} of them its topics word for word')


if __name__ == '__main__':
    main()
