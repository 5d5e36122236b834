"""Zero-shot dense retrieval with a sentence-transformers model, through pyterrier-dr.

Documents are encoded once into a :class:`~pyterrier_dr.FlexIndex` and searched exactly, or
on large corpora through FAISS IVF (:mod:`~pyterrier_selfsup.retrieval.ann`), on the CPU.
"""
import logging
import shutil
import tempfile
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd
import pyterrier as pt
from more_itertools import chunked
from pyterrier_dr import BiEncoder, FlexIndex, SBertBiEncoder

from pyterrier_selfsup._cache import build_once, cache_key, cache_root, temporary_build
from pyterrier_selfsup._distributed import (
    SHARD_CHUNK,
    all_or_none,
    build_sharded,
    chunk_order,
    distributed,
)
from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.models.dual_encoder import DualEncoder
from pyterrier_selfsup.models.dual_encoder_model import UnreproducibleModel, is_sentence_transformer
from pyterrier_selfsup.models.names import MINILM
from pyterrier_selfsup.models.offsets import offset_index
from pyterrier_selfsup.progress import progress
from pyterrier_selfsup.retrieval.ann import resolve_search, search_stage
from pyterrier_selfsup.retrieval.base import Retriever

logger = logging.getLogger(__name__)


def sbert_encoder(model_name: str = MINILM, *, max_length: int | None = None,
                  batch_size: int = 32, device: str | None = None) -> SBertBiEncoder:
    """A pyterrier-dr bi-encoder for a sentence-transformers model (texts cut at ``max_length``)."""
    encoder = SBertBiEncoder(model_name, batch_size=batch_size, device=device)
    if max_length is not None:
        encoder.model.max_seq_length = max_length
    return encoder


INDEX_CHUNK = 4096  # documents a chunk, encoded or offset: bounded memory, little padding


def flex_index(collection: str | Collection, encoder: BiEncoder, *,
               cache_dir: str | Path | None = None, verbose: bool = False,
               offsets: bool = True) -> FlexIndex:
    """``collection``'s documents (title + text) encoded by ``encoder``, built on first use
    under ``<cache>/flex/<collection>.<model>-<hash>``, the hash covering the model's identity.

    A :class:`DualEncoder` with learned passage offsets (:mod:`~pyterrier_selfsup.models.offsets`)
    gets its own index, derived from its passage tower's with each offset applied (no passage is
    encoded again); ``offsets=False``: the passage tower's index as it is."""
    collection = Collection.of(collection)
    moved = getattr(encoder, 'passage_offsets', None) if offsets else None
    if moved is not None and len(moved):
        base = flex_index(collection, encoder, cache_dir=cache_dir, verbose=verbose, offsets=False)
        path = Path(base.index_path).with_name(f'{Path(base.index_path).name}'
                                               f'.offsets-{moved.fingerprint()}')
        build = partial(offset_index, base=base, offsets=moved, chunk=INDEX_CHUNK)
        what = f'the index of {collection.name} with passage offsets'
    else:
        backend = (encoder.index_backend(collection.docs_count or 0)
                   if isinstance(encoder, DualEncoder) else None)
        path = cache_root(cache_dir) / 'flex' / index_key(collection, encoder, backend)
        what = f'the {model_name(encoder)} index of {collection.name}'

        def build(staging: Path):
            # (one backend for the whole corpus)
            with encoder.encoding_with(backend) if backend is not None else nullcontext():
                encode_into(staging, collection, encoder, verbose=verbose)

    return FlexIndex(str(build_once(path, build, what=what,
                                    needs=lambda: flex_size(collection, encoder),
                                    check=flex_damage)), verbose=False)


def index_key(collection: Collection, encoder: BiEncoder, backend: str | None = None) -> str:
    """The directory name of ``collection``'s index as ``encoder`` encodes it through
    ``backend``: one key for the same vectors (OpenVINO in fp32 shares torch's index; its bf16
    and int8 are keyed apart)."""
    if isinstance(encoder, DualEncoder):
        settings = {'weights': encoder.passage_fingerprint(), 'dtype': str(encoder.compute_dtype())}
        if backend not in (None, 'torch') and not (
                backend == 'openvino' and settings['dtype'] == 'torch.float32'):
            settings['backend'] = backend
    else:
        settings = {'model': encoder.model_name, 'max_length': encoder.model.max_seq_length}
    settings['text'] = 'default_text'
    short = model_name(encoder).rstrip('/').rsplit('/', 1)[-1]
    return cache_key(f'{collection.corpus_id}.{short}', collection.cache_settings(settings))


def model_name(encoder: BiEncoder) -> str:
    """The name or path of the model ``encoder`` encodes with."""
    return encoder.name if isinstance(encoder, DualEncoder) else encoder.model_name


def flex_size(collection: Collection, encoder: BiEncoder) -> int | None:
    """About the bytes of ``collection``'s FlexIndex (vectors and docnos); None where the
    corpus's size is unknown."""
    return collection.docs_count and collection.docs_count * (4 * vector_size(encoder) + 32)


def vector_size(encoder: BiEncoder) -> int:
    if isinstance(encoder, DualEncoder):
        return encoder.model.out_dim
    model = encoder.model  # (sentence-transformers 5 renamed it)
    return (getattr(model, 'get_embedding_dimension', None) or
            model.get_sentence_embedding_dimension)()


def flex_damage(path: Path) -> str | None:
    """A FlexIndex's vectors checked against its metadata, so that a truncated ``vecs.f4`` is
    found before the index is searched."""
    import json
    try:
        meta = json.loads((path / 'pt_meta.json').read_text())
        expected = int(meta['doc_count']) * int(meta['vec_size']) * 4
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f'pt_meta.json cannot be read ({error})'
    try:
        actual = (path / 'vecs.f4').stat().st_size
    except FileNotFoundError:
        return 'vecs.f4 is missing'
    if actual != expected:
        return (f'vecs.f4 is {actual:,} bytes, where {meta["doc_count"]:,} vectors of '
                f'{meta["vec_size"]} floats take {expected:,}')
    return None


def encode_into(path: str | Path, collection: Collection, encoder: BiEncoder, *,
                verbose: bool = False, chunk: int = INDEX_CHUNK) -> FlexIndex:
    """A new FlexIndex at ``path`` of ``collection``'s documents, encoded by ``encoder`` in one
    process (:func:`encode_sharded`: by several)."""
    index = FlexIndex(str(path), verbose=False)
    with progress(total=collection.docs_count, desc='encoding documents', unit='doc',
                  enabled=verbose) as stage:
        docs = collection.corpus_iter()
        if isinstance(encoder, DualEncoder):  # each batch counted as it is encoded
            with encoder.counting_into(stage):
                (encoder.doc_encoder(verbose=False) >> index).index(docs, batch_size=chunk)
        else:  # (sentence-transformers batches itself: each chunk counted as it is taken)
            (encoder.doc_encoder(verbose=False) >> index).index(stage.counting(docs),
                                                                batch_size=chunk)
    return index


def encode_sharded(path: str | Path, collection: Collection, encoder: BiEncoder, *, rank: int,
                   world_size: int, verbose: bool = False, chunk: int = SHARD_CHUNK) -> FlexIndex:
    """:func:`encode_into` split over ``world_size`` processes, each calling this with its
    ``rank`` (torch.distributed must be initialised). Chunk c of ``chunk`` documents goes to
    rank c mod ``world_size``; each rank writes its vectors to shard files beside ``path`` (a
    filesystem every rank sees), and rank 0 interleaves them into one FlexIndex at ``path``,
    which every rank returns. No vector crosses the network."""
    path = Path(path)
    root = path.with_name(path.name + '.shards')
    doc_encoder = encoder.doc_encoder(verbose=False)
    stage = progress(total=collection.docs_count, desc='encoding documents', unit='doc',
                     enabled=verbose and rank == 0)  # (the group's pace)
    docs = stage.counting(collection.corpus_iter())

    def encode(shard: Path, mine):
        shard.mkdir(parents=True, exist_ok=True)
        with open(shard / 'vecs.f4', 'wb') as vectors, open(shard / 'docnos.txt', 'w') as docnos:
            for batch in chunked(mine, chunk):  # (the batches encode_into makes: the same vectors)
                encoded = doc_encoder(pd.DataFrame(batch))
                vectors.write(np.ascontiguousarray(np.stack(encoded['doc_vec']),
                                                   dtype=np.float32).tobytes())
                docnos.writelines(d + '\n' for d in encoded['docno'])

    def join(shards):
        try:
            FlexIndex(str(path), verbose=False).index(_interleaved(shards, chunk))
        finally:
            shutil.rmtree(root, ignore_errors=True)

    with stage:
        build_sharded(docs, [root / f'rank-{r}' for r in range(world_size)], encode, join,
                      rank=rank, world_size=world_size, chunk=chunk)
    return FlexIndex(str(path), verbose=False)


def _interleaved(shards: list[Path], chunk: int):
    """{'docno', 'doc_vec'} in corpus order from the ranks' shard files (:func:`chunk_order`)."""
    parts = []
    for shard in shards:
        docnos = (shard / 'docnos.txt').read_text().splitlines()
        size = (shard / 'vecs.f4').stat().st_size
        vectors = (np.memmap(shard / 'vecs.f4', dtype=np.float32, mode='r').reshape(len(docnos), -1)
                   if size else np.zeros((0, 0), dtype=np.float32))
        parts.append((docnos, vectors))
    for rank, start, end in chunk_order([len(docnos) for docnos, _ in parts], chunk):
        docnos, vectors = parts[rank]
        for i in range(start, end):
            yield {'docno': docnos[i], 'doc_vec': vectors[i]}


class DenseRetriever(Retriever):
    """Dot-product search of a FlexIndex with a bi-encoder's query vectors: exact, or
    approximate (``search``: ``'ivf'``, ``'hnsw'``, or ``'auto'``: IVF from
    :data:`APPROXIMATE_FROM` passages on). The search it resolved to is ``search_method``.

        DenseRetriever.from_collection('classic/adi').search('information retrieval')
    """

    def __init__(self, encoder: BiEncoder, index: FlexIndex, *, num_results: int = 1000,
                 search: str = 'auto'):
        self.encoder = encoder
        self.index = index
        self.num_results = num_results
        self.search_method = resolve_search(search, index)
        self._pipeline = (encoder.query_encoder()
                          >> search_stage(index, self.search_method, num_results))

    @classmethod
    def from_collection(cls, collection: str | Collection, model_name: str = MINILM, *,
                        max_length: int | None = None, batch_size: int = 32,
                        num_results: int = 1000, search: str = 'auto', backend: str = 'auto',
                        prompts: dict[str, str] | None = None, normalize: bool | None = None,
                        cache_dir: str | Path | None = None,
                        verbose: bool = False) -> 'DenseRetriever':
        """The sentence-transformers model ``model_name`` zero-shot over ``collection``, in
        fp32, encoded by the package's :class:`DualEncoder` (through OpenVINO on a CPU where it is
        installed, ``backend='auto'``), or by sentence-transformers where the DualEncoder cannot
        reproduce the model. ``prompts``: each side's prompt (default: the model's own);
        ``normalize=True``: vectors L2-normalised (None: as the model does).

            DenseRetriever.from_collection('beir/scifact/test', 'intfloat/e5-small-v2')
        """
        encoder = None
        if is_sentence_transformer(model_name):
            try:
                encoder = DualEncoder.from_pretrained(model_name, max_length=max_length,
                                                      batch_size=batch_size, precision='fp32',
                                                      backend=backend, prompts=prompts,
                                                      normalize=normalize)
            except UnreproducibleModel as why:
                if prompts or normalize is not None:
                    raise ValueError(f'{model_name}: prompts or normalize are given, and the '
                                     f'package cannot encode this model itself ({why})') from None
                logger.info('%s: encoded by sentence-transformers (%s)', model_name, why)
        if encoder is None:
            if prompts or normalize is not None:
                raise ValueError(f'{model_name} is not a sentence-transformers model, and '
                                 f'prompts or normalize are given: load it with '
                                 f'from_dual_encoder, which takes them')
            encoder = sbert_encoder(model_name, max_length=max_length, batch_size=batch_size)
        return cls(encoder, flex_index(collection, encoder, cache_dir=cache_dir, verbose=verbose),
                   num_results=num_results, search=search)

    @classmethod
    def from_dual_encoder(cls, collection: str | Collection, model_name: str = MINILM, *,
                          dim: int | None = None, num_results: int = 1000, search: str = 'auto',
                          precision: str = 'auto', backend: str = 'auto',
                          prompts: dict[str, str] | None = None,
                          normalize: bool | None = None,
                          cache_dir: str | Path | None = None,
                          verbose: bool = False) -> 'DenseRetriever':
        """The project's own :class:`DualEncoder` loaded from ``model_name``, over ``collection``
        (``dim``, ``precision``, ``backend``, ``prompts`` and ``normalize`` as
        :meth:`DualEncoder.from_pretrained` takes them, the rest as :meth:`from_collection`
        does)."""
        encoder = DualEncoder.from_pretrained(model_name, dim=dim, precision=precision,
                                              backend=backend, prompts=prompts,
                                              normalize=normalize)
        return cls(encoder, flex_index(collection, encoder, cache_dir=cache_dir, verbose=verbose),
                   num_results=num_results, search=search)

    def retrieve(self, topics: pd.DataFrame) -> pd.DataFrame:
        return self._pipeline(topics)

    def scorer(self) -> 'StoredVectorScorer':
        """A re-ranker of the results it is given (``bm25 % 100 >> minilm.scorer()``) by the
        vectors stored in the index: each query is encoded once and no passage at all."""
        return StoredVectorScorer(self.encoder, self.index)

    def fuse_rank_cutoff(self, k: int) -> Optional['DenseRetriever']:
        # (not HNSW: a smaller k would search a smaller beam, and the top k could change)
        if k < self.num_results and self.search_method != 'hnsw':
            fused = DenseRetriever(self.encoder, self.index, num_results=k,
                                   search=self.search_method)
            # a fresh index's directory lives as long as either
            fused._tmp = getattr(self, '_tmp', None)
            return fused
        return None

    def __repr__(self):
        return (f'DenseRetriever({self.encoder!r}, {self.index!r}, num_results={self.num_results}, '
                f'search={self.search_method!r})')


class StoredVectorScorer(pt.Transformer):
    """Re-ranks results (``qid``, ``query``, ``docno``) by the dot product of the query's
    vector with each document's vector stored in ``index``."""

    def __init__(self, encoder: BiEncoder, index: FlexIndex):
        self.encoder, self.index = encoder, index
        self._pipeline = encoder.query_encoder() >> index.np_scorer()

    def transform(self, results: pd.DataFrame) -> pd.DataFrame:
        pt.validate.result_frame(results, extra_columns=['query'])
        if not len(results):  # (pyterrier-dr's scorer fails on an empty frame)
            return results.assign(score=pd.Series(dtype=float), rank=pd.Series(dtype=int))
        # a first stage's own docids (Terrier's) are not the index's
        return (self._pipeline(results.drop(columns='docid', errors='ignore'))
                .drop(columns='query_vec'))

    def transform_outputs(self, input_columns: list[str]) -> list[str]:
        pt.validate.result_frame(input_columns, extra_columns=['query'])
        return [c for c in input_columns if c not in ('score', 'rank', 'docid')] + ['score', 'rank']

    def __repr__(self):
        return f'StoredVectorScorer({self.encoder!r}, {self.index!r})'


def dense_retriever(collection: Collection, encoder: BiEncoder, *, fresh: bool = False,
                    search: str = 'auto', cache_dir=None, verbose: bool = False) -> DenseRetriever:
    """Search of ``collection`` with ``encoder`` as it is now: over its cached index, or
    (``fresh``) over one encoded into a temporary directory that lives as long as the retriever.
    An encoder with passage offsets is searched over its cached index with its current offsets
    applied, in a temporary directory."""
    moved = getattr(encoder, 'passage_offsets', None)
    if fresh:
        index, tmp = fresh_index(collection, encoder, verbose=verbose)
        retriever = DenseRetriever(encoder, index, search=search)
    elif moved is not None and len(moved):
        base = flex_index(collection, encoder, cache_dir=cache_dir, offsets=False, verbose=verbose)
        with temporary_build('selfsup-index-',
                             f'the index of {collection.name} with passage offsets',
                             flex_size(collection, encoder) or 0) as (directory, tmp):
            # (under torch.distributed the directory is rank 0's: it writes, every rank reads)
            all_or_none(lambda: (offset_index(f'{directory}/index.flex', base, moved, INDEX_CHUNK)
                                 if distributed()[0] == 0 else None))
            retriever = DenseRetriever(encoder, FlexIndex(f'{directory}/index.flex', verbose=False),
                                       search=search)
    else:
        return DenseRetriever(encoder, flex_index(collection, encoder, cache_dir=cache_dir,
                                                  verbose=verbose), search=search)
    retriever._tmp = tmp  # removed with the retriever
    return retriever


def fresh_index(collection: Collection, encoder: BiEncoder, *,
                verbose: bool = False) -> tuple[FlexIndex, tempfile.TemporaryDirectory | None]:
    """``collection`` encoded by ``encoder`` as it is now into a temporary directory, and
    that directory (the index lives as long as the caller keeps it; None: nothing to keep).

    Under torch.distributed every process of the group calls this and encodes its share
    (:func:`encode_sharded`) into rank 0's temporary directory, which rank 0 owns."""
    rank, world_size = distributed()
    # sharded: the shards and the index they are merged into are on disk together
    needed = (flex_size(collection, encoder) or 0) * min(world_size, 2)
    with temporary_build('selfsup-index-', f'the refreshed index of {collection.name}',
                         needed) as (directory, tmp):
        if world_size == 1:
            return encode_into(f'{directory}/index.flex', collection, encoder, verbose=verbose), tmp
        index = encode_sharded(f'{directory}/index.flex', collection, encoder, rank=rank,
                               world_size=world_size, verbose=verbose)
        all_or_none(index.payload)  # mapped now, on every rank, before rank 0 may remove the files
        return index, tmp
