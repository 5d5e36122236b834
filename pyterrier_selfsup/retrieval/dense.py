"""Zero-shot dense retrieval with a sentence-transformers model, through pyterrier-dr.

all-MiniLM-L6-v2 is the starting point that the trainers adapt to a corpus. Its
sentence-transformers configuration does what its model card asks: mean pooling and
L2 normalisation, so a dot product is a cosine. Documents are encoded once into a
:class:`~pyterrier_dr.FlexIndex` and searched exactly.
"""
import tempfile
from pathlib import Path
from typing import Optional, Union

import pandas as pd
from pyterrier_dr import BiEncoder, FlexIndex, SBertBiEncoder

from pyterrier_selfsup._cache import build_once, cache_key, cache_root
from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.models.dual_encoder import DualEncoder
from pyterrier_selfsup.retrieval.base import Retriever

MINILM = 'sentence-transformers/all-MiniLM-L6-v2'


def sbert_encoder(model_name: str = MINILM, *, max_length: Optional[int] = None,
                  batch_size: int = 32, device: Optional[str] = None) -> SBertBiEncoder:
    """A pyterrier-dr bi-encoder for a sentence-transformers model; ``max_length`` (in
    tokens) overrides the model's own truncation length."""
    encoder = SBertBiEncoder(model_name, batch_size=batch_size, device=device)
    if max_length is not None:
        encoder.model.max_seq_length = max_length
    return encoder


# Documents reach the encoder in chunks of this many: large enough that sorting a chunk
# by length leaves little padding, small enough that memory stays bounded on any corpus.
INDEX_CHUNK = 4096


def flex_index(collection: Union[str, Collection], encoder: BiEncoder, *,
               cache_dir: Optional[Union[str, Path]] = None, verbose: bool = False) -> FlexIndex:
    """``collection``'s documents (title + text) encoded by ``encoder``, built on first use
    under ``<cache>/flex/<collection>.<model>-<hash>``, the hash covering the model's
    identity (a :class:`DualEncoder`'s passage side, a sentence-transformers model's name)."""
    collection = Collection(collection) if isinstance(collection, str) else collection
    if isinstance(encoder, DualEncoder):
        model = encoder.name
        settings = {'weights': encoder.passage_fingerprint(), 'dtype': str(encoder.compute_dtype())}
    else:
        model, settings = encoder.model_name, {'model': encoder.model_name, 'max_length': encoder.model.max_seq_length}
    settings['text'] = 'default_text'
    name = f'{collection.corpus_id}.{model.rstrip("/").rsplit("/", 1)[-1]}'
    path = cache_root(cache_dir) / 'flex' / cache_key(name, settings)

    def build(staging: Path):
        encode_into(staging, collection, encoder, verbose=verbose)

    return FlexIndex(str(build_once(path, build)), verbose=False)


def encode_into(path: Union[str, Path], collection: Collection, encoder: BiEncoder, *,
                verbose: bool = False) -> FlexIndex:
    """A new FlexIndex at ``path`` holding ``collection``'s documents encoded by ``encoder``."""
    index = FlexIndex(str(path), verbose=False)
    docs = collection.corpus_iter(verbose=verbose, desc=f'encoding {collection.name}')
    (encoder.doc_encoder(verbose=False) >> index).index(docs, batch_size=INDEX_CHUNK)
    return index


class DenseRetriever(Retriever):
    """Exhaustive (exact) dot-product search of a FlexIndex with a bi-encoder's query vectors."""

    def __init__(self, encoder: BiEncoder, index: FlexIndex, *, num_results: int = 1000):
        self.encoder = encoder
        self.index = index
        self.num_results = num_results
        self._pipeline = (encoder.query_encoder()
                          >> index.np_retriever(num_results=num_results, drop_query_vec=True))

    @classmethod
    def from_collection(cls, collection: Union[str, Collection], model_name: str = MINILM, *,
                        max_length: Optional[int] = None, batch_size: int = 32, num_results: int = 1000,
                        cache_dir: Optional[Union[str, Path]] = None, verbose: bool = False) -> 'DenseRetriever':
        encoder = sbert_encoder(model_name, max_length=max_length, batch_size=batch_size)
        return cls(encoder, flex_index(collection, encoder, cache_dir=cache_dir, verbose=verbose),
                   num_results=num_results)

    @classmethod
    def from_dual_encoder(cls, collection: Union[str, Collection], model_name: str = MINILM, *,
                          dim: Optional[int] = None, num_results: int = 1000,
                          cache_dir: Optional[Union[str, Path]] = None, verbose: bool = False) -> 'DenseRetriever':
        """The project's own :class:`DualEncoder` loaded from ``model_name``, over ``collection``."""
        encoder = DualEncoder.from_pretrained(model_name, dim=dim)
        return cls(encoder, flex_index(collection, encoder, cache_dir=cache_dir, verbose=verbose),
                   num_results=num_results)

    def retrieve(self, topics: pd.DataFrame) -> pd.DataFrame:
        return self._pipeline(topics)

    def fuse_rank_cutoff(self, k: int) -> Optional['DenseRetriever']:
        if k < self.num_results:
            fused = DenseRetriever(self.encoder, self.index, num_results=k)
            fused._tmp = getattr(self, '_tmp', None)  # a fresh index's directory lives as long as either
            return fused
        return None

    def __repr__(self):
        return f'DenseRetriever({self.encoder!r}, {self.index!r}, num_results={self.num_results})'


def dense_retriever(collection: Collection, encoder: BiEncoder, *, fresh: bool = False,
                    cache_dir=None) -> DenseRetriever:
    """Exact search of ``collection`` with ``encoder`` as it is now: over its cached index, or
    (``fresh``) over one encoded into a temporary directory that lives as long as the retriever."""
    if not fresh:
        return DenseRetriever(encoder, flex_index(collection, encoder, cache_dir=cache_dir))
    tmp = tempfile.TemporaryDirectory(prefix='selfsup-index-')
    retriever = DenseRetriever(encoder, encode_into(f'{tmp.name}/index.flex', collection, encoder))
    retriever._tmp = tmp  # removed with the retriever
    return retriever
