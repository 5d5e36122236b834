import pytest

from pyterrier_selfsup import Collection
from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.data.queries.cut import (
    corpus_sentences,
    cropped_spans,
    document_titles,
    sentences,
)
from pyterrier_selfsup.data.queries.logs import given_topics


def test_sentence_split():
    assert sentences('One sentence here. Another one? Yes! e.g. not split. 3 ends') == [
        'One sentence here.', 'Another one?', 'Yes! e.g. not split.', '3 ends']
    # a lowercased, tokenised text (cranfield, ADI): punctuation that stands alone ends one
    assert sentences('the flow was measured . e.g. a jet ? then 3 more . ') == [
        'the flow was measured .', 'e.g. a jet ?', 'then 3 more .']
    assert sentences('Upper case . stays as it was') == ['Upper case . stays as it was']


def test_corpus_sentences_are_deterministic_and_from_their_document():
    coll = Collection('classic/cisi')
    texts = {d['docno']: d['text'] for d in coll.corpus_iter()}
    a = corpus_sentences(coll, 50, seed=1)
    assert a.equals(corpus_sentences(coll, 50, seed=1))
    assert not a['query'].equals(corpus_sentences(coll, 50, seed=2)['query'])
    assert len(a) == 50 and a['qid'].is_unique and a['source_docno'].is_unique
    for docno, query in zip(a['source_docno'], a['query']):
        assert query in texts[docno] and 5 <= len(query.split()) <= 40


def test_cropped_spans():
    coll = Collection('classic/adi')
    texts = {d['docno']: ' '.join(d['text'].split()) for d in coll.corpus_iter()}
    spans = cropped_spans(coll, 20, seed=0, min_words=4, max_words=8)
    assert spans.equals(cropped_spans(coll, 20, seed=0, min_words=4, max_words=8))
    for docno, query in zip(spans['source_docno'], spans['query']):
        assert query in texts[docno] and 4 <= len(query.split()) <= 8
    spans = cropped_spans(coll, 500, seed=0)  # more than ADI's 82 documents: several a document
    assert len(spans) == 500 and spans['source_docno'].nunique() == 82


def test_document_titles_are_each_documents_own_title_once():
    from pyterrier_selfsup.data.queries import CUT_FROM_CORPUS
    from pyterrier_selfsup.data.queries.source import QuerySource
    from pyterrier_selfsup.harness.methods import source_topics
    coll = Collection('classic/adi')
    titles = {d.doc_id: ' '.join(d.title.split()) for d in coll.irds.docs_iter()}
    some = document_titles(coll, 30, seed=0)
    assert some.equals(source_topics(coll, QuerySource('titles', 30, seed=0)))
    assert not some['query'].equals(document_titles(coll, 30, seed=1)['query'])
    assert len(some) == 30 and some['source_docno'].is_unique
    assert all(titles[d] == q and len(q.split()) >= 3
               for d, q in zip(some['source_docno'], some['query']))
    # all ADI has: one a document, a repeated title once
    every = document_titles(coll, 1000, seed=0)
    distinct = {t.lower() for t in titles.values() if len(t.split()) >= 3}
    assert (len(every) == len(distinct) and every['query'].str.lower().is_unique
            and 70 <= len(every) <= 82)
    assert 'titles' in CUT_FROM_CORPUS  # a title is in its document's text: not its own candidate
    with pytest.raises(ValueError, match='no document of vaswani has a title'):
        document_titles(Collection('vaswani'), 10)


def test_given_topics_keep_only_text():
    topics = Collection('classic/adi').topics().assign(label=1)
    assert list(given_topics(topics).columns) == ['qid', 'query']


def test_generated_queries_come_from_the_generator_with_their_source(tiny_generator_dir):
    from pyterrier_selfsup.data.queries.written import generated_queries
    from pyterrier_selfsup.models.generator import Generator
    coll = Collection('classic/adi')
    gen = Generator.from_pretrained(str(tiny_generator_dir['llama']), device='cpu',
                                    precision='fp32', max_passage_length=32)
    topics = generated_queries(coll, gen, 6, seed=1, max_new_tokens=4)
    assert list(topics.columns) == ['qid', 'query', 'source_docno'] and 0 < len(topics) <= 6
    assert topics['query'].tolist() == [
        t for t in gen.generate(coll.texts(list(topics['source_docno'])), max_new_tokens=4) if t]
    assert generated_queries(coll, gen, 6, seed=1, max_new_tokens=4).equals(topics)  # deterministic


def test_generated_training_topics_are_written_once_and_shared_by_every_trainer(
        tiny_dir, tiny_generator_dir, tmp_path, monkeypatch):
    from pyterrier_selfsup.data.queries.source import QuerySource
    from pyterrier_selfsup.data.queries.written import generated_queries
    from pyterrier_selfsup.harness import methods, trained
    from pyterrier_selfsup.harness.methods import source_topics
    from pyterrier_selfsup.models.generator import Generator
    from pyterrier_selfsup.training.distant import DistantSupervision
    coll = Collection('classic/adi')
    gen = Generator.from_pretrained(str(tiny_generator_dir['llama']), device='cpu',
                                    precision='fp32', max_passage_length=32)
    first = source_topics(coll, QuerySource('generated', 8, seed=3),
                          generator=gen, run=RunContext(cache_dir=tmp_path))
    assert first.equals(generated_queries(coll, gen, 8, seed=3)) and len(first) > 0
    assert first['source_docno'].map(type).eq(str).all()  # '12' stays a docno, not a number

    def never(*args, **kwargs):
        raise AssertionError('generated again')
    monkeypatch.setattr(gen, 'generate', never)
    assert source_topics(coll, QuerySource('generated', 8, seed=3),
                         generator=gen, run=RunContext(cache_dir=tmp_path)).equals(first)
    # the distant-supervision pipeline reads the same file
    # (its generator is SmolLM2's; here the tiny one)
    monkeypatch.setattr(methods, 'load_generator', lambda *args, **kwargs: gen)
    class Trained(Exception):
        pass

    def fit(self, topics, **kwargs):
        raise Trained(topics)
    monkeypatch.setattr(DistantSupervision, 'fit', fit)
    with pytest.raises(Trained) as raised:
        trained.train(coll, 'ds',
                      dict(model_name=str(tiny_dir), queries='generated', n_queries=8, seed=3),
                      run=RunContext(cache_dir=tmp_path))
    assert raised.value.args[0].equals(first)
    with pytest.raises(ValueError, match='needs a generator'):
        QuerySource('generated', 8).topics(coll)
    assert list(source_topics(coll, QuerySource('classic/adi', 0)).columns) == ['qid', 'query']


class EchoOrGeneric:
    """A stand-in generator: the passage's first words for every other passage (a query
    BM25 finds its passage with), a generic question for the rest."""
    calls = 0

    def fingerprint(self):
        return 'echo-or-generic'

    def generate(self, passages, **kwargs):
        EchoOrGeneric.calls += 1
        return [' '.join(p.split()[:8]) if i % 2 == 0 else 'What is the purpose of the study?'
                for i, p in enumerate(passages)]


def test_round_trip_queries_keep_only_queries_that_find_their_passage(tmp_path):
    from pyterrier_selfsup import BM25
    from pyterrier_selfsup.data.queries.source import QuerySource
    from pyterrier_selfsup.data.queries.written import generated_queries
    from pyterrier_selfsup.harness.methods import source_topics
    coll = Collection('classic/adi')
    bm25 = BM25.from_collection(coll, cache_dir=tmp_path) % 10
    plain = generated_queries(coll, EchoOrGeneric(), 20, seed=0)
    assert (plain['query'] == 'What is the purpose of the study?').sum() == 10
    kept = source_topics(coll, QuerySource('roundtrip', 20, seed=0),
                         generator=EchoOrGeneric(), run=RunContext(cache_dir=tmp_path))
    assert len(kept) == 20 and kept['query'].is_unique
    generic = kept['query'] == 'What is the purpose of the study?'
    # kept once at most, and only where BM25 happens to find its passage with it
    assert generic.sum() <= 1
    run = bm25(kept[['qid', 'query']])
    top = set(zip(run['qid'], run['docno']))
    assert all((q, d) in top for q, d in zip(kept['qid'], kept['source_docno']))
    texts = dict(zip(kept['source_docno'], coll.texts(list(kept['source_docno']))))
    assert all(texts[d].split()[:8] == q.split()
               for d, q in zip(kept['source_docno'][~generic], kept['query'][~generic]))
    calls = EchoOrGeneric.calls
    assert source_topics(coll, QuerySource('roundtrip', 20, seed=0),
                         generator=EchoOrGeneric(), run=RunContext(cache_dir=tmp_path)).equals(kept)
    assert EchoOrGeneric.calls == calls  # read from the cache
    # ADI has 82 documents: asking for more than pass the check keeps all that do
    assert len(source_topics(coll, QuerySource('roundtrip', 60, seed=0),
                             generator=EchoOrGeneric(), run=RunContext(cache_dir=tmp_path))) < 60


def test_masked_spans_hide_one_salient_span_of_a_sentence_of_their_source():
    import random

    from pyterrier_selfsup.data.queries.cut import MASK, masked_spans, salient_span, sentences
    coll = Collection('classic/cisi')  # ADI's abstracts have no sentence boundaries to split at
    spans = masked_spans(coll, 12, seed=0)
    assert len(spans) == 12 and spans['qid'].is_unique
    for query, answer, source in zip(spans['query'], spans['answer'], spans['source_docno']):
        assert query.count(MASK) == 1 and answer.strip()
        assert query.replace(MASK, answer) in sentences(coll.texts([source])[0])
    # numbers and names before long words; None when nothing qualifies
    rng = random.Random(0)
    s = 'Vitamin C deficiency causes scurvy in 1747 sailors'
    assert s[slice(*salient_span(s, rng))] == '1747'
    s = 'deficiency of Vitamin causes scurvy'
    assert s[slice(*salient_span(s, rng))] == 'Vitamin'
    assert salient_span('a b c', rng) is None


def test_queries_cut_from_their_sources_and_not_excluded_are_said(caplog):
    from pyterrier_selfsup.data.queries.source import query_sources
    coll = Collection('classic/adi')
    cut = corpus_sentences(coll, 20, seed=0)
    with caplog.at_level('WARNING'):
        sources = query_sources(cut, coll, excluded=True)
    assert len(sources) == 20 and 'word for word' not in caplog.text
    with caplog.at_level('WARNING'):
        query_sources(cut, coll, excluded=False)
    assert "queries='sentences'" in caplog.text
    caplog.clear()
    written = cut.assign(query=[f'what is said about topic {i}' for i in range(20)])
    with caplog.at_level('WARNING'):
        query_sources(written, coll, excluded=False)
    assert 'word for word' not in caplog.text


def test_queries_kept_from_a_short_corpus_are_spread_over_its_passages(tiny_generator_dir,
                                                                        tmp_path, monkeypatch):
    # 7 queries, 1 a passage, asked of 6 passages with text (and 1 empty document): each writes
    # 2, and the 7 kept cover all 6, where the first 7 written would cover 4
    import json

    from pyterrier_selfsup.data.queries.source import QuerySource
    from pyterrier_selfsup.data.queries.written import spread
    from pyterrier_selfsup.harness.methods import source_topics
    from pyterrier_selfsup.models.generator import Generator
    docs = [{'_id': f'd{i}', 'title': '', 'text': '' if i == 3 else f'passage {i} about topic {i}'}
            for i in range(7)]
    (tmp_path / 'docs.jsonl').write_text(''.join(json.dumps(d) + '\n' for d in docs))
    coll = Collection.from_files(tmp_path / 'docs.jsonl')
    gen = Generator.from_pretrained(str(tiny_generator_dir['llama']), device='cpu',
                                    precision='fp32', max_passage_length=32)
    topics = source_topics(coll, QuerySource('sampled', 7, per_passage=1),
                           generator=gen, run=RunContext(cache_dir=tmp_path / 'cache'))
    assert len(topics) == 7 and topics['source_docno'].nunique() == 6
    assert spread([('a', 1), ('a', 2), ('b', 3), ('c', 4), ('c', 5)], 4) == [
        ('a', 1), ('a', 2), ('b', 3), ('c', 4)]


def test_sampled_queries_cover_as_many_passages_as_per_passage_asks(tiny_generator_dir, tmp_path):
    from pyterrier_selfsup.data.queries.source import QuerySource
    from pyterrier_selfsup.harness.methods import source_topics
    from pyterrier_selfsup.models.generator import Generator
    coll = Collection('classic/adi')
    gen = Generator.from_pretrained(str(tiny_generator_dir['llama']), device='cpu',
                                    precision='fp32', max_passage_length=32)
    run = RunContext(cache_dir=tmp_path)
    three = source_topics(coll, QuerySource('sampled', 12), generator=gen, run=run)
    one = source_topics(coll, QuerySource('sampled', 12, per_passage=1), generator=gen, run=run)
    assert three['source_docno'].nunique() == 4 and three.groupby('source_docno').size().max() == 3
    assert one['source_docno'].nunique() == len(one) == 12
    # each is written once and kept under its own key
    assert len([p for p in (tmp_path / 'queries').glob('classic_adi.sampled-*')
                if p.suffix != '.lock']) == 2


def test_a_stopped_writing_of_training_queries_resumes_after_its_last_batch(tiny_generator_dir,
                                                                           tmp_path, monkeypatch):
    """Sampled training queries are written with a checkpoint in the build's staging directory:
    a run stopped after its first batch writes only the two batches left, and the same queries
    as a run never stopped."""
    import pandas as pd

    from pyterrier_selfsup.data.queries.source import QuerySource
    from pyterrier_selfsup.harness.methods import source_topics
    from pyterrier_selfsup.models.generator import Generator
    from pyterrier_selfsup.models.writing import QueryWriter
    monkeypatch.setitem(QueryWriter.__init__.__kwdefaults__, 'batch_size', 4)
    coll = Collection('classic/adi')
    gen = Generator.from_pretrained(str(tiny_generator_dir['llama']), device='cpu',
                                    precision='fp32', max_passage_length=32)

    def topics(cache):
        return source_topics(coll, QuerySource('sampled', 12, per_passage=1),
                             generator=gen, run=RunContext(cache_dir=tmp_path / cache))

    whole = topics('whole')
    batches, sample = [], QueryWriter._sample

    def stopped_at_the_second(self, prompts, *args, **kwargs):
        batches.append(len(prompts))
        if batches == [4, 4]:
            raise KeyboardInterrupt
        return sample(self, prompts, *args, **kwargs)
    monkeypatch.setattr(QueryWriter, '_sample', stopped_at_the_second)
    with pytest.raises(KeyboardInterrupt):
        topics('stopped')
    staging, = (tmp_path / 'stopped' / 'queries').glob('*.partial')
    assert (staging / 'writing.pt').exists()
    batches.clear()
    batches.append('resumed')
    pd.testing.assert_frame_equal(topics('stopped'), whole)
    assert batches == ['resumed', 4, 4]
    built, = [p for p in (tmp_path / 'stopped' / 'queries').iterdir()
              if p.is_dir() and not p.name.endswith('.partial')]
    assert (built / 'topics.jsonl').exists() and not (built / 'writing.pt').exists()
    assert not staging.exists()
