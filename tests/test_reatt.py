import numpy as np
import pandas as pd
import pyterrier as pt
import pytest
import torch

from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.models.reatt import ReAtt, retrieval_attention
from tests.helpers import DOCS, QUERIES


def captured_projections(model, layer, texts, tokenizer):
    """The query and key vectors that ``model``'s own layer ``layer`` computes in a full
    forward pass of each text alone (hooks on its projections), (L, H, e) each."""
    att = retrieval_attention(model, layer)
    seen = {}
    hooks = [att.query.register_forward_hook(lambda m, i, o: seen.__setitem__('q', o)),
             att.key.register_forward_hook(lambda m, i, o: seen.__setitem__('k', o))]
    out = []
    try:
        for text in texts:
            ids = tokenizer([text], return_tensors='pt')
            with torch.no_grad():
                model(input_ids=ids['input_ids'], attention_mask=ids['attention_mask'])
            out.append({s: seen[s][0].view(-1, att.heads, att.head_dim) for s in 'qk'})
    finally:
        for h in hooks:
            h.remove()
    return out, att.scaling


@pytest.mark.parametrize('kind,layer', [('bert', 0), ('bert', 1), ('t5', 1)])
def test_head_scores_equal_a_manual_computation_from_the_models_own_attention(
        tiny_reatt, tiny_dir, tiny_generator_dir, kind, layer):
    path = tiny_dir if kind == 'bert' else tiny_generator_dir['t5']
    r = tiny_reatt(layer, path=path)
    got = r.score_texts([QUERIES[0]] * len(DOCS) + [QUERIES[1]] * len(DOCS), DOCS * 2,
                        per_head=True)
    q_seen, scaling = captured_projections(r.model.encoder, layer, QUERIES, r.tokenizer)
    d_seen, _ = captured_projections(r.model.encoder, layer, DOCS, r.tokenizer)
    expected = []
    for q in q_seen:
        for d in d_seen:
            a = torch.einsum('qhe,dhe->hqd', q['q'], d['k']) * scaling  # pre-softmax attention
            expected.append(a.max(dim=2).values.mean(dim=1).numpy())  # avg over query tokens of max
    expected = np.stack(expected)  # fp32 sums: exact to ~1e-7 of the largest magnitude involved
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6 * np.abs(expected).max())
    # the documents score differently
    assert got.shape == (8, 2) and np.ptp(got[:4], axis=0).min() > 1e-4


def test_the_projections_are_the_ones_the_model_attends_with(tiny_reatt):
    """softmax(Q Kᵀ · scaling) of a text with itself is the model's own attention map at that
    layer."""
    r = tiny_reatt(1)
    ids = r.tokenizer([QUERIES[0]], return_tensors='pt')
    r.model.encoder.set_attn_implementation('eager')
    with torch.no_grad():
        own = r.model.encoder(**ids, output_attentions=True).attentions[1][0]  # layer 1, (H, L, L)
        q = r.model.project(r.model.states(ids['input_ids'], ids['attention_mask']), 'query')[0]
        k = r.model.project(r.model.states(ids['input_ids'], ids['attention_mask']), 'passage')[0]
    torch.testing.assert_close(torch.softmax(q @ k.transpose(1, 2) * r.model.attention.scaling, -1),
                               own, rtol=1e-5, atol=1e-6)


def test_a_pairs_score_does_not_depend_on_its_batch(tiny_reatt):
    r = tiny_reatt()
    alone = [r.score_texts([QUERIES[0]], [d])[0] for d in DOCS]
    together = r.score_texts([QUERIES[0]] * len(DOCS), DOCS)  # padded to the longest document
    np.testing.assert_allclose(together, alone, rtol=1e-5, atol=1e-6)


def test_head_weights_mix_the_heads_and_save_and_load(tiny_reatt, tmp_path):
    r = tiny_reatt()
    per_head = r.score_texts([QUERIES[0]] * 4, DOCS, per_head=True)
    np.testing.assert_allclose(r.score_texts([QUERIES[0]] * 4, DOCS), per_head.mean(1),
                               rtol=1e-5)  # uniform
    r.model.select_head(1, margin=1.0)  # τ=0.1: weight e^10 / (e^10 + 1) on head 1
    assert (r.model.retrieval_head == 1
            and r.model.head_weights[1].item() == pytest.approx(1 / (1 + np.exp(-10))))
    mixed = r.score_texts([QUERIES[0]] * 4, DOCS)
    np.testing.assert_allclose(mixed, per_head @ r.model.head_weights.detach().numpy(), rtol=1e-5)
    r.save_pretrained(tmp_path / 'saved')
    again = ReAtt.from_pretrained(str(tmp_path / 'saved'), device='cpu', precision='fp32')
    assert again.model.retrieval_layer == 1 and again.fingerprint() == r.fingerprint()
    np.testing.assert_allclose(again.score_texts([QUERIES[0]] * 4, DOCS), mixed, rtol=1e-6)


def test_scorer_reranks_by_the_mixed_heads(tiny_reatt):
    r = tiny_reatt()
    frame = pd.DataFrame({'qid': ['1'] * 4 + ['2'] * 4,
                          'query': [QUERIES[0]] * 4 + [QUERIES[1]] * 4,
                          'docno': [f'd{i}' for i in range(4)] * 2, 'text': DOCS * 2})
    out = r.scorer()(frame)
    assert set(out.columns) >= {'score', 'rank'} and len(out) == 8
    heads = r.score_texts(frame['query'].tolist(), frame['text'].tolist(), per_head=True)
    np.testing.assert_allclose(out['score'], heads.mean(axis=1), rtol=1e-5)
    assert out.groupby('qid')['rank'].apply(sorted).tolist() == [[0, 1, 2, 3]] * 2
    assert r.scorer()(frame.head(0)).empty


def test_bad_input_empty_texts_and_out_of_range_layer(tiny_reatt):
    r = tiny_reatt()
    scores = r.score_texts(['', QUERIES[0]], ['', ''])  # special tokens alone still score
    assert np.isfinite(scores).all()
    # without special tokens, an empty document has no token to match: it ranks last
    r = tiny_reatt(special_tokens=False)
    scores = r.score_texts([QUERIES[0]] * 3, ['', DOCS[0], None])
    assert np.isneginf(scores[[0, 2]]).all() and np.isfinite(scores[1])
    assert r.score_texts([''], [DOCS[0]])[0] == 0.0  # an empty query: nothing to average
    # and the text's own tokens score as they did with the special tokens around them
    with_special = tiny_reatt().score_texts([QUERIES[0]], [DOCS[0]], per_head=True)
    assert not np.allclose(r.score_texts([QUERIES[0]], [DOCS[0]], per_head=True), with_special)
    with pytest.raises(ValueError, match='retrieval_layer'):
        tiny_reatt(layer=2)


@pytest.fixture(scope='module')
def adi_index(tiny_reatt, tmp_path_factory):
    from pyterrier_selfsup import Collection
    from pyterrier_selfsup.retrieval.token_index import reatt_index
    r = tiny_reatt()
    r.model.select_head(1, margin=1.0)
    coll = Collection('classic/adi')
    return r, coll, reatt_index(coll, r, nlist=8, cache_dir=tmp_path_factory.mktemp('reatt-cache'))


def test_token_index_exhaustive_scores_equal_the_retrieval_heads_scores(adi_index):
    r, coll, index = adi_index
    assert (len(index) == 82 and index.meta['retrieval_head'] == 1
            and index.meta['tokens'] == index.offsets[-1])
    topics = coll.topics().head(3)
    results = index.exhaustive(r, num_results=5)(topics)
    assert (len(results) == 15
            and results.groupby('qid')['rank'].apply(list).tolist() == [[0, 1, 2, 3, 4]] * 3)
    expected = r.score_texts(results['query'].tolist(), coll.texts(results['docno'].tolist()),
                             per_head=True)[:, 1]
    # keys stored in fp16
    np.testing.assert_allclose(results['score'], expected, rtol=2e-3, atol=2e-3)
    # and these are the top 5 of all 82 documents under the retrieval head
    every = r.score_texts([topics['query'].iloc[0]] * 82, coll.texts(list(index.docnos)),
                          per_head=True)[:, 1]
    assert (set(results[results['qid'] == topics['qid'].iloc[0]]['docno'])
            == set(index.docnos[np.argsort(-every)[:5]]))


def test_two_stage_search_is_exact_with_every_token_and_on_its_candidates_otherwise(adi_index):
    r, coll, index = adi_index
    topics = coll.topics()
    exact = index.exhaustive(r, num_results=10)(topics)
    covering = index.retriever(r, num_results=10, candidate_tokens=int(index.meta['tokens']),
                               nprobe=8)(topics)
    pd.testing.assert_frame_equal(covering, exact)
    narrow = index.retriever(r, num_results=10, candidate_tokens=2, nprobe=1)(topics)
    merged = narrow.merge(exact[['qid', 'docno', 'score']], on=['qid', 'docno'], how='left',
                          suffixes=('', '_exact'))
    found = merged['score_exact'].notna()  # a document in both lists has the same score in both
    np.testing.assert_allclose(merged.loc[found, 'score'], merged.loc[found, 'score_exact'],
                               rtol=1e-6)
    assert 0.2 < found.mean() < 1  # 2 tokens per query token, one list of 8: an approximation


def test_approximate_scores_are_exact_with_every_token_and_impute_the_lowest_otherwise(
        adi_index):
    r, coll, index = adi_index
    q = index.query_vectors(r, [coll.topics()['query'].iloc[0]])[0]
    index.ivf.nprobe = 8  # every list: FAISS returns every token
    token_scores, tokens = index.ivf.search(np.ascontiguousarray(q), int(index.meta['tokens']))
    docs, approximate = index.approximate_scores(token_scores, tokens)
    np.testing.assert_array_equal(docs, np.arange(len(index)))
    np.testing.assert_allclose(approximate, index.exact_scores(q, docs), rtol=1e-5, atol=1e-5)
    # two query tokens, three documents' tokens retrieved: the missing maxima are imputed
    offsets = index.offsets
    t = lambda d, i=0: offsets[d] + i  # noqa: E731  (token i of document d)
    tokens = np.array([[t(0), t(0, 1), t(2)], [t(2, 1), t(5), -1]])
    scores = np.array([[3.0, 2.5, 1.0], [4.0, 0.5, np.nan]], dtype=np.float32)
    docs, approximate = index.approximate_scores(scores, tokens)
    np.testing.assert_array_equal(docs, [0, 2, 5])
    # document 0: 3.0 and (query token 2 imputed) 0.5; 2: 1.0 and 4.0; 5: (imputed) 1.0 and 0.5
    np.testing.assert_allclose(approximate, [(3.0 + 0.5) / 2, (1.0 + 4.0) / 2, (1.0 + 0.5) / 2])


def test_rescoring_the_best_approximate_candidates_keeps_the_exact_top_k(adi_index):
    r, coll, index = adi_index
    topics = coll.topics()
    exact = index.exhaustive(r, num_results=10)(topics)
    covering = index.retriever(r, num_results=10, candidate_tokens=int(index.meta['tokens']),
                               nprobe=8, rescore=10)
    # approximate = exact: its top 10 is the top 10
    pd.testing.assert_frame_equal(covering(topics), exact)
    pruned = index.retriever(r, num_results=10, candidate_tokens=16, nprobe=2, rescore=12)(topics)
    assert pruned.groupby('qid').size().max() == 10
    merged = pruned.merge(exact[['qid', 'docno', 'score']], on=['qid', 'docno'], how='left',
                          suffixes=('', '_exact'))
    found = merged['score_exact'].notna()
    np.testing.assert_allclose(merged.loc[found, 'score'], merged.loc[found, 'score_exact'],
                               rtol=1e-6)
    assert 0.5 < found.mean() < 1
def test_token_index_reopens_and_refuses_another_model(tiny_reatt, adi_index):
    from pyterrier_selfsup.retrieval.token_index import ReAttIndex
    r, coll, index = adi_index
    again = pt.Artifact.load(str(index.path))  # through the pyterrier.artifact entry point
    assert isinstance(again, ReAttIndex)
    topics = coll.topics().head(2)
    pd.testing.assert_frame_equal(again.exhaustive(r, num_results=3)(topics),
                                  index.exhaustive(r, num_results=3)(topics))
    other = tiny_reatt()  # uniform head weights: another fingerprint
    with pytest.raises(ValueError, match='another model'):
        index.retriever(other)


def test_a_reatt_checkpoints_config_names_its_retrieval_layer_and_head(tiny_generator_dir,
                                                                       tmp_path):
    """As neulab/reatt-large-nq's config does (retrieval_layer counted from 0, retrieval_head)."""
    import json
    import shutil
    path = tmp_path / 'reatt-t5'
    shutil.copytree(tiny_generator_dir['t5'], path)
    config = json.loads((path / 'config.json').read_text())
    (path / 'config.json').write_text(json.dumps(dict(config, retrieval_layer=1, retrieval_head=1)))
    r = ReAtt.from_pretrained(str(path), device='cpu', precision='fp32')
    assert (r.model.retrieval_layer == 1 and r.model.retrieval_head == 1
            and r.model.head_weights[1] > 0.99)
    assert ReAtt.from_pretrained(str(tiny_generator_dir['t5']),
                                 device='cpu').model.retrieval_layer == 1  # depth // 2


def test_the_reatt_pipeline_retrieves_with_minilms_chosen_head(tmp_path):
    from pyterrier_selfsup import Collection
    from pyterrier_selfsup.harness.pipelines import REATT_HEAD, get_pipeline
    coll = Collection('classic/adi')
    retriever = get_pipeline('reatt:num_results=10').build(coll, run=RunContext(cache_dir=tmp_path))
    topics = coll.topics().head(3)
    results = retriever(topics)
    assert len(results) == 30 and (results.groupby('qid')['score'].diff().dropna() <= 0).all()
    minilm = ReAtt.from_pretrained('sentence-transformers/all-MiniLM-L6-v2',
                                   retrieval_layer=REATT_HEAD['retrieval_layer'],
                                   special_tokens=REATT_HEAD['special_tokens'])
    expected = minilm.score_texts(results['query'].tolist(), coll.texts(results['docno'].tolist()),
                                  per_head=True)[:, REATT_HEAD['head']]
    # keys stored in fp16
    np.testing.assert_allclose(results['score'], expected, rtol=5e-3, atol=5e-3)
