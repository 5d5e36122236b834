"""PyTerrier's own check of a transformer (``pt.testing``): the input columns it accepts and
the output columns it gives, inspected on empty frames."""
import tempfile

import pandas as pd
import pyterrier as pt

from pyterrier_selfsup import BM25, DenseRetriever

_CACHE = tempfile.TemporaryDirectory(prefix='selfsup-pt-testing-')


class TestBM25(pt.testing.transformer_test_class(
        lambda: BM25.from_collection('classic/adi', cache_dir=_CACHE.name))):
    test_schematic = None  # it fetches the class's documentation page: no network here


class TestDense(pt.testing.transformer_test_class(
        lambda: DenseRetriever.from_collection('classic/adi', cache_dir=_CACHE.name))):
    test_schematic = None


def _loader_then_generator():
    """ADI's text loader before a tiny random Llama's query-likelihood scorer (the generator's
    re-ranking pipeline; its weights do not matter to what columns it takes)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from pyterrier_selfsup import Collection, Generator
    path = f'{_CACHE.name}/tiny-llama'
    tokenizer = AutoTokenizer.from_pretrained('sentence-transformers/all-MiniLM-L6-v2')
    LlamaForCausalLM(LlamaConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=16, intermediate_size=32,
        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        pad_token_id=tokenizer.pad_token_id)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    generator = Generator.from_pretrained(path, device='cpu', precision='fp32')
    return Collection('classic/adi').text_loader() >> generator.scorer()


class TestTextLoaderThenScorer(pt.testing.transformer_test_class(_loader_then_generator)):
    test_schematic = None


def test_the_text_loader_declares_a_ranking_and_passes_its_columns_through():
    from pyterrier_selfsup import Collection
    loader = Collection('classic/adi').text_loader()
    assert pt.inspect.transformer_inputs(loader)[0] == ['qid', 'query', 'docno', 'score', 'rank']
    assert pt.inspect.transformer_outputs(loader, ['qid', 'query', 'docno']) == [
        'qid', 'query', 'docno', 'text']
    loaded = loader(pd.DataFrame({'docno': ['1', '2']}))  # (docnos alone are loaded too)
    assert loaded['text'].str.len().gt(0).all() and list(loaded.columns) == ['docno', 'text']
