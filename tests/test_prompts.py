"""The prompts a starting encoder's texts begin with, against replicas of the hub's e5 and bge
(:mod:`tests.hub_replicas`): the model's own, else its family's model card's, and a user's
above both; kept through training, indexing and the sentence-transformers export."""
import logging

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from pyterrier_selfsup import Collection, DualEncoder
from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.harness.pipelines import get_pipeline
from pyterrier_selfsup.models.names import BGE_QUERY_INSTRUCTION, MINILM
from pyterrier_selfsup.retrieval.dense import DenseRetriever, flex_index
from tests.hub_replicas import REPLICAS

E5, BGE = 'intfloat/e5-small-v2', 'BAAI/bge-small-en-v1.5'
CARDS = {E5: {'query': 'query: ', 'passage': 'passage: '},
         BGE: {'query': BGE_QUERY_INSTRUCTION, 'passage': ''}}
QUERIES = ['computer indexing of documents', 'information retrieval evaluation']


def test_e5_and_bge_take_their_model_cards_prompts_and_say_so(replicas_on_the_hub, caplog):
    for name in REPLICAS:
        with caplog.at_level(logging.INFO, logger='pyterrier_selfsup'):
            encoder = DualEncoder.from_pretrained(name, device='cpu', precision='fp32')
        assert encoder.prompts == CARDS[name]
        assert f'{name} declares no prompts: its model card\'s apply' in caplog.text
        caplog.clear()
    # a model of no such family, and one that declares prompts, keep their own
    assert DualEncoder.from_pretrained(MINILM).prompts == {'query': '', 'passage': ''}
    # and the -instruct variants, whose instructions are a task's own, take none
    from pyterrier_selfsup.models.dual_encoder_model import model_card_prompts
    assert model_card_prompts('intfloat/multilingual-e5-small') == CARDS[E5]
    assert model_card_prompts('intfloat/multilingual-e5-large-instruct') is None
    assert model_card_prompts('BAAI/bge-base-en-v1.5') == CARDS[BGE]
    assert model_card_prompts('BAAI/bge-base-en') is None


def test_a_users_prompts_win_over_the_model_cards(replicas_on_the_hub, tmp_path):
    encoder = DualEncoder.from_pretrained(E5, prompts={'query': 'search: '}, device='cpu')
    assert encoder.prompts == {'query': 'search: ', 'passage': 'passage: '}
    assert DualEncoder.from_pretrained(BGE, prompts={'query': '', 'document': 'doc: '}
                                       ).prompts == {'query': '', 'passage': 'doc: '}
    with pytest.raises(ValueError, match='query and passage'):
        DualEncoder.from_pretrained(E5, prompts={'queries': 'q: '})
    # typed on the command line, a training method's and a zero-shot pipeline's
    spec = get_pipeline(f'distill:model_name={E5},query_prompt=search: ,passage_prompt=')
    assert (spec.settings['query_prompt'], spec.settings['passage_prompt']) == ('search: ', '')
    from pyterrier_selfsup.harness.methods import METHODS
    from pyterrier_selfsup.training.settings import DistillationSettings
    trainer, _ = METHODS['distill'](Collection('classic/adi'), DistillationSettings(
        model_name=E5, query_prompt='search: ', passage_prompt='', queries='sentences',
        n_queries=8), RunContext(cache_dir=tmp_path))
    assert trainer.encoder.prompts == {'query': 'search: ', 'passage': ''}


def test_a_zero_shot_pipeline_indexes_with_the_passage_prompt(replicas_on_the_hub, tmp_path):
    retriever = get_pipeline(f'minilm:model_name={E5},query_prompt=search: ').build(
        Collection('classic/adi'), RunContext(cache_dir=tmp_path))
    assert retriever.encoder.prompts == {'query': 'search: ', 'passage': 'passage: '}
    docnos, vectors, _ = retriever.index.payload()
    text = Collection('classic/adi').texts([docnos[0]])
    st = SentenceTransformer(E5, device='cpu')
    np.testing.assert_allclose(vectors[0], st.encode(['passage: ' + text[0]])[0], atol=1e-5)
    assert np.abs(vectors[0] - st.encode(text)[0]).max() > 1e-3  # (the prompt changes it)


@pytest.mark.parametrize('name', list(REPLICAS))
def test_a_replica_trains_indexes_exports_and_loads_back_with_its_prompts(
        name, replicas_on_the_hub, tmp_path):
    run = RunContext(cache_dir=tmp_path)
    adi = Collection('classic/adi')
    spec = get_pipeline(f'distill:model_name={name},queries=sentences,n_queries=16,batch_size=8')
    final = spec.train(adi, run)
    adapted = DualEncoder.from_pretrained(str(final), device='cpu', precision='fp32')
    assert adapted.prompts == CARDS[name]
    start = DualEncoder.from_pretrained(name, device='cpu', precision='fp32')
    assert not np.allclose(start.encode_queries(QUERIES), adapted.encode_queries(QUERIES),
                           atol=1e-4)  # (it trained)
    # the export: sentence-transformers reads the prompts and gives the package's vectors
    exported = SentenceTransformer(str(final), device='cpu')
    docs = adi.texts(['1', '2', '3'])
    np.testing.assert_allclose(exported.encode_query(QUERIES), adapted.encode_queries(QUERIES),
                               atol=1e-5)
    np.testing.assert_allclose(exported.encode_document(docs), adapted.encode_docs(docs),
                               atol=1e-5)
    # the index the trained model searches holds passages encoded with their prompt
    retriever = DenseRetriever.from_dual_encoder(adi, str(final), precision='fp32',
                                                 backend='torch', cache_dir=tmp_path)
    docnos, vectors, _ = flex_index(adi, retriever.encoder, cache_dir=tmp_path).payload()
    at = list(docnos).index('1')
    np.testing.assert_allclose(vectors[at], exported.encode_document(docs[:1])[0], atol=1e-5)
