"""A token-level index for ReAtt retrieval (ReAtt §2.2 "End-to-end Retrieval with
Attention"; ColBERT's two-stage search).

The retrieval head's key vector of every document token is stored (fp16, with offsets), and
the same vectors go into a FAISS IVF index. A query:

1. each query token's vector fetches its top K' document tokens from the IVF index;
2. the documents those tokens belong to are the candidates;
3. optionally (``rescore=R``), the candidates are ranked by an approximate r from the
   retrieved tokens alone (XTR's missing-similarity imputation: a query token that retrieved
   none of a document's tokens contributes its lowest retrieved score); only the top R go on;
4. each remaining candidate is scored exactly, r(q, d) = mean over query tokens of the max
   over its tokens, from the stored keys.

:meth:`ReAttIndex.exhaustive` scores every document exactly, the reference this approximates.
The index serves the model's retrieval head only, as the paper does at test time.
"""
import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd
import pyterrier as pt
from more_itertools import chunked

from pyterrier_selfsup._cache import build_once, cache_key, cache_root
from pyterrier_selfsup._distributed import SHARD_CHUNK, build_sharded, chunk_order
from pyterrier_selfsup.data.collections import Collection
from pyterrier_selfsup.models.reatt import ReAtt
from pyterrier_selfsup.progress import progress
from pyterrier_selfsup.retrieval.base import Retriever

META_FILE = 'pt_meta.json'
KEYS_FILE = 'keys.f16'
TOKEN_OFFSETS_FILE = 'offsets.npy'
DOCNOS_FILE = 'docnos.json'
IVF_FILE = 'tokens.faiss'
CHUNK = 2048  # documents encoded at a time


def _join_shards(path: Path, parts: list['ReAttIndex'], chunk: int):
    """One keys-only index at ``path`` from the shards of :meth:`ReAttIndex.build_sharded`,
    in corpus order (:func:`~pyterrier_selfsup._distributed.chunk_order`)."""
    path.mkdir(parents=True, exist_ok=True)
    docnos, offsets = [], [0]
    with open(path / KEYS_FILE, 'wb') as out:
        for rank, start, end in chunk_order([len(part) for part in parts], chunk):
            part = parts[rank]
            out.write(np.ascontiguousarray(part.keys[part.offsets[start]:part.offsets[end]])
                      .tobytes())
            docnos.extend(part.docnos[start:end].tolist())
            offsets.extend((offsets[-1] + np.diff(part.offsets[start:end + 1]).cumsum()).tolist())
    np.save(path / TOKEN_OFFSETS_FILE, np.asarray(offsets, dtype=np.int64))
    (path / DOCNOS_FILE).write_text(json.dumps(docnos))
    meta = dict(parts[0].meta, documents=len(docnos), tokens=int(offsets[-1]),
                encode_seconds=max(p.meta['encode_seconds'] for p in parts))
    (path / META_FILE).write_text(json.dumps(meta, indent=2))


def build_ivf(path: Path, dim: int, *, nlist: int | None = None, train_sample: int = 256,
              seed: int = 0) -> int:
    """The FAISS IVF index over the keys of the index at ``path`` (its ``keys.f16``), written
    beside them; returns its number of lists (default :func:`default_nlist`)."""
    import faiss
    keys = np.fromfile(Path(path) / KEYS_FILE, dtype=np.float16).reshape(-1, dim).astype(np.float32)
    nlist = min(nlist or default_nlist(len(keys)), max(1, len(keys)))
    index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
    rng = np.random.default_rng(seed)
    index.cp.seed = seed
    index.train(keys[rng.choice(len(keys), min(len(keys), train_sample * nlist), replace=False)])
    index.add(keys)
    faiss.write_index(index, str(Path(path) / IVF_FILE))
    return nlist


def default_nlist(n_tokens: int) -> int:
    """FAISS' guidance for an IVF index: about 4·√N lists (a power of two), at least 1."""
    return max(1, 2 ** int(round(np.log2(max(1.0, 4 * np.sqrt(n_tokens))))))


class ReAttIndex(pt.Artifact):
    """The retrieval head's key vectors of every token of a corpus; build with :meth:`build`
    or :func:`reatt_index`, search with :meth:`retriever`."""

    def __init__(self, path: str | Path):
        super().__init__(path)
        self.meta = json.loads((self.path / META_FILE).read_text())
        self.offsets = np.load(self.path / TOKEN_OFFSETS_FILE)
        self.docnos = np.array(json.loads((self.path / DOCNOS_FILE).read_text()), dtype=object)
        shape = (int(self.offsets[-1]), self.meta['dim'])  # (an empty file cannot be mapped)
        self.keys = (np.memmap(self.path / KEYS_FILE, dtype=np.float16, mode='r', shape=shape)
                     if shape[0] else np.zeros(shape, dtype=np.float16))
        self._ivf = None
        self._keys32 = None

    def __len__(self) -> int:
        return len(self.docnos)

    @staticmethod
    def damage(path: Path) -> str | None:
        """The files checked against the recorded counts; a problem's description, or None."""
        try:
            meta = json.loads((path / META_FILE).read_text())
            offsets = np.load(path / TOKEN_OFFSETS_FILE, mmap_mode='r')
            keys = (path / KEYS_FILE).stat().st_size
        except (OSError, ValueError, EOFError) as error:
            return f'its files cannot be read ({error})'
        tokens, documents = int(meta.get('tokens', -1)), int(meta.get('documents', -1))
        if offsets.shape != (documents + 1,) or (documents >= 0 and int(offsets[-1]) != tokens):
            return f'{TOKEN_OFFSETS_FILE} does not match {documents} documents of {tokens} tokens'
        if keys != tokens * int(meta['dim']) * 2:
            return (f'{KEYS_FILE} is {keys:,} bytes, where {tokens:,} keys of {meta["dim"]} fp16 '
                    f'take {tokens * meta["dim"] * 2:,}')
        if meta.get('nlist') and not (path / IVF_FILE).is_file():
            return f'{IVF_FILE} is missing'
        return None

    @property
    def ivf(self):
        if self._ivf is None:
            import faiss
            if not (self.path / IVF_FILE).is_file():
                raise ValueError(f'{self.path} was built without its IVF index (ivf=False): '
                                 'search it exhaustively')
            self._ivf = faiss.read_index(str(self.path / IVF_FILE))
        return self._ivf

    @property
    def keys32(self) -> np.ndarray:
        """All keys in fp32, in memory (for exhaustive scoring and large candidate sets)."""
        if self._keys32 is None:
            self._keys32 = np.asarray(self.keys, dtype=np.float32)
        return self._keys32

    # -- building ---------------------------------------------------------------------

    @classmethod
    def build(cls, path: str | Path, reatt, docs: Iterable[dict[str, str]], *,
              nlist: int | None = None, train_sample: int = 256, seed: int = 0, ivf: bool = True,
              verbose: bool = False) -> 'ReAttIndex':
        """Encodes ``docs`` (``{'docno', 'text'}``) with ``reatt`` and writes the index at
        ``path``. ``nlist``: IVF lists (default :func:`default_nlist`), trained on ``train_sample``
        tokens a list at most; ``ivf=False``: keys only, for exhaustive search."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        head = reatt.model.retrieval_head
        docnos, offsets = [], [0]
        t0 = time.time()
        done = progress(desc='ReAtt token index', unit='doc', enabled=verbose)
        with done, open(path / KEYS_FILE, 'wb') as out:
            for chunk in chunked(docs, CHUNK):
                vectors = reatt.token_vectors([d['text'] for d in chunk], 'passage')
                for doc, v in zip(chunk, vectors):
                    keys = v[:, head].cpu().numpy().astype(np.float16)
                    out.write(keys.tobytes())
                    docnos.append(doc['docno'])
                    offsets.append(offsets[-1] + len(keys))
                done.update(len(chunk))
                done.set_postfix(tokens=f'{offsets[-1]:,}')
        encode_seconds = time.time() - t0
        offsets = np.asarray(offsets, dtype=np.int64)
        np.save(path / TOKEN_OFFSETS_FILE, offsets)
        (path / DOCNOS_FILE).write_text(json.dumps(docnos))
        dim = reatt.model.attention.head_dim
        t0 = time.time()
        nlist = (build_ivf(path, dim, nlist=nlist, train_sample=train_sample, seed=seed) if ivf
                 else None)
        meta = {'type': 'token_index', 'format': 'reatt', 'package_hint': 'pyterrier-selfsup',
                'model': reatt.name, 'fingerprint': reatt.fingerprint(),
                'retrieval_layer': reatt.model.retrieval_layer, 'retrieval_head': head, 'dim': dim,
                'documents': len(docnos), 'tokens': int(offsets[-1]), 'nlist': nlist,
                'special_tokens': reatt.special_tokens,
                'encode_seconds': encode_seconds, 'ivf_seconds': time.time() - t0}
        (path / META_FILE).write_text(json.dumps(meta, indent=2))
        return cls(path)

    @classmethod
    def build_sharded(cls, path: str | Path, reatt, docs: Iterable[dict[str, str]], *,
                      rank: int, world_size: int, chunk: int = SHARD_CHUNK) -> 'ReAttIndex':
        """:meth:`build` (keys only) with the encoding split over the ``world_size`` processes of a
        torch.distributed group (:func:`~pyterrier_selfsup._distributed.build_sharded`). Every rank
        returns the index."""
        path = Path(path)
        build_sharded(docs, [path.with_name(f'{path.name}.rank-{r}') for r in range(world_size)],
                      lambda shard, mine: cls.build(shard, reatt, mine, ivf=False),
                      lambda shards: _join_shards(path, [cls(shard) for shard in shards], chunk),
                      rank=rank, world_size=world_size, chunk=chunk)
        return cls(path)

    # -- scoring ----------------------------------------------------------------------

    def check(self, reatt):
        if reatt.fingerprint() != self.meta['fingerprint']:
            raise ValueError(f'{self.path} was built with another model ({self.meta["model"]}, '
                             f'fingerprint {self.meta["fingerprint"]}): rebuild it for this one')

    def query_vectors(self, reatt, queries: list[str]) -> list[np.ndarray]:
        """Each query's retrieval-head vectors (L_q, e), times the layer's attention scaling,
        so that q·k is the pre-softmax attention."""
        head, scaling = self.meta['retrieval_head'], reatt.model.attention.scaling
        return [v[:, head].cpu().numpy().astype(np.float32) * np.float32(scaling)
                for v in reatt.token_vectors(queries, 'query')]

    def exact_scores(self, q: np.ndarray, docs: np.ndarray) -> np.ndarray:
        """r(q, d) for the documents at positions ``docs`` (sorted), from the stored keys."""
        if len(q) == 0:
            return np.zeros(len(docs), dtype=np.float32)
        starts, ends = self.offsets[docs], self.offsets[docs + 1]
        if len(docs) == len(self):
            keys, bounds = self.keys32, starts
        else:  # the candidates' tokens, gathered into one block
            lengths = ends - starts
            bounds = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
            index = (np.arange(int(lengths.sum()), dtype=np.int64) +
                     np.repeat(starts - bounds, lengths))
            keys = (self.keys32[index] if self._keys32 is not None
                    else np.asarray(self.keys[index], dtype=np.float32))
        scores = q @ keys.T  # (L_q, tokens)
        out = np.full(len(docs), -np.inf, dtype=np.float32)
        nonempty = ends > starts
        if nonempty.any():
            best = np.maximum.reduceat(scores, bounds[nonempty], axis=1)
            out[nonempty] = best.mean(axis=0)
        return out

    def approximate_scores(self, token_scores: np.ndarray, tokens: np.ndarray):
        """(candidate positions, approximate r) from each query token's retrieved ``tokens`` and
        their ``token_scores`` (both (L_q, K'), FAISS' -1 for none)."""
        found = tokens >= 0
        owner = np.searchsorted(self.offsets, np.where(found, tokens, 0), side='right') - 1
        docs, column = np.unique(owner[found], return_inverse=True)
        low = np.where(found, token_scores, np.inf).min(axis=1)
        # a query token that retrieved nothing adds the same to every candidate
        low[~np.isfinite(low)] = 0.0
        best = np.repeat(low[:, None], len(docs), axis=1).astype(np.float32)
        rows = np.broadcast_to(np.arange(len(tokens))[:, None], tokens.shape)[found]
        np.maximum.at(best, (rows, column), token_scores[found])
        return docs, best.mean(axis=0)

    def search(self, q: np.ndarray, num_results: int, candidate_tokens: int | None, nprobe: int,
               rescore: int | None = None):
        """(document positions, scores) of one query's top ``num_results``; exhaustive when
        ``candidate_tokens`` is None; ``rescore``: only that many candidates scored exactly."""
        if candidate_tokens is None or len(q) == 0:
            docs = np.arange(len(self))
        else:
            self.ivf.nprobe = nprobe
            token_scores, tokens = self.ivf.search(np.ascontiguousarray(q), candidate_tokens)
            docs, approximate = self.approximate_scores(token_scores, tokens)
            if rescore is not None and len(docs) > rescore:
                keep = np.argpartition(-approximate, rescore - 1)[:rescore]
                docs = np.sort(docs[keep])
        scores = self.exact_scores(q, docs)
        top = np.argsort(-scores, kind='stable')[:num_results]
        top = top[np.isfinite(scores[top])]  # a document without tokens is never retrieved
        return docs[top], scores[top]

    def retriever(self, reatt, *, num_results: int = 1000, candidate_tokens: int | None = 128,
                  nprobe: int = 32, rescore: int | None = None,
                  verbose: bool = False) -> 'ReAttRetriever':
        """Two-stage retrieval: each query token's ``candidate_tokens`` (K') nearest document
        tokens (``nprobe`` IVF lists searched) give the candidates, scored exactly (only the
        ``rescore`` best when given); ``candidate_tokens=None``: :meth:`exhaustive`."""
        self.check(reatt)
        return ReAttRetriever(self, reatt, num_results=num_results,
                              candidate_tokens=candidate_tokens, nprobe=nprobe,
                              rescore=rescore, verbose=verbose)

    def exhaustive(self, reatt, *, num_results: int = 1000,
                   verbose: bool = False) -> 'ReAttRetriever':
        """Every document scored exactly: the reference the two-stage search approximates."""
        return self.retriever(reatt, num_results=num_results, candidate_tokens=None,
                              verbose=verbose)

    def __repr__(self):
        return f'ReAttIndex({str(self.path)!r})'


class ReAttRetriever(Retriever):
    """Searches a :class:`ReAttIndex` with a ReAtt model's query vectors (see
    :meth:`ReAttIndex.retriever`); ``verbose``: its queries reported on as a stage."""

    def __init__(self, index: ReAttIndex, reatt, *, num_results: int = 1000,
                 candidate_tokens: int | None = 128, nprobe: int = 32,
                 rescore: int | None = None, verbose: bool = False):
        self.index = index
        self.reatt = reatt
        self.num_results = num_results
        self.candidate_tokens = candidate_tokens
        self.nprobe = nprobe
        self.rescore = rescore
        self.verbose = verbose

    def retrieve(self, topics: pd.DataFrame) -> pd.DataFrame:
        vectors = self.index.query_vectors(self.reatt, topics['query'].tolist())
        frames = []
        for (_, topic), q in progress(zip(topics.iterrows(), vectors), total=len(topics),
                                      desc='ReAtt search', unit='query', enabled=self.verbose):
            docs, scores = self.index.search(q, self.num_results, self.candidate_tokens,
                                             self.nprobe, self.rescore)
            frame = pd.DataFrame({'docno': self.index.docnos[docs],
                                  'score': scores.astype(np.float64),
                                  'rank': np.arange(len(docs))})
            for column, value in topic.items():
                frame[column] = value
            frames.append(frame)
        return pd.concat(frames, ignore_index=True)[list(topics.columns) +
                                                    ['docno', 'score', 'rank']]

    def fuse_rank_cutoff(self, k: int) -> Optional['ReAttRetriever']:
        if k < self.num_results:
            return ReAttRetriever(self.index, self.reatt, num_results=k,
                                  candidate_tokens=self.candidate_tokens,
                                  nprobe=self.nprobe, rescore=self.rescore, verbose=self.verbose)
        return None

    def __repr__(self):
        how = 'exhaustive' if self.candidate_tokens is None else \
            f"K'={self.candidate_tokens}, nprobe={self.nprobe}, rescore={self.rescore}"
        return f'ReAttRetriever({self.index!r}, {how}, num_results={self.num_results})'


def reatt_index(collection, reatt, *, nlist: int | None = None, cache_dir=None,
                verbose: bool = False) -> ReAttIndex:
    """``collection``'s token index for ``reatt``, built on first use under
    ``<cache>/reatt/<corpus>.<model>-<hash>``."""
    collection = Collection.of(collection)
    settings = {'model': reatt.fingerprint(), 'head': reatt.model.retrieval_head, 'nlist': nlist}
    name = f'{collection.corpus_id}.{reatt.name.rstrip("/").rsplit("/", 1)[-1]}'
    path = cache_root(cache_dir) / 'reatt' / cache_key(name, collection.cache_settings(settings))
    built = build_once(path,
                       lambda staging: ReAttIndex.build(staging, reatt, collection.corpus_iter(),
                                                        nlist=nlist, verbose=verbose),
                       what=f'the ReAtt token index of {collection.name}',
                       needs=lambda: token_index_size(collection, reatt), check=ReAttIndex.damage)
    return ReAttIndex(built)


def token_index_size(collection: Collection, reatt, ivf: bool = True) -> int | None:
    """About the bytes of ``collection``'s token index: fp16 keys, and with ``ivf`` the IVF's
    fp32 copy of them; None where the corpus's size is unknown."""
    text = collection.text_bytes()
    tokens = text and collection.docs_count * min(
        reatt.max_length, text / collection.docs_count / 4)  # (~4 B a token)
    dim = reatt.model.attention.head_dim
    return tokens and int(tokens * (dim * 2 + (dim * 4 if ivf else 0) + 8))


def reatt_retriever(collection, *, model_name: str, retrieval_layer: int, head: int,
                    special_tokens: bool = True, candidate_tokens: int | None = 128,
                    nprobe: int = 32, rescore: int | None = None, num_results: int = 1000,
                    cache_dir=None, verbose: bool = False) -> ReAttRetriever:
    """``model_name``'s attention head ``head`` at layer ``retrieval_layer`` (from 0) as a
    zero-shot ReAtt retriever over ``collection``'s token index (built on first use, cached);
    ``candidate_tokens=None``: exhaustive exact scoring."""
    reatt = ReAtt.from_pretrained(model_name, retrieval_layer=retrieval_layer, head=head,
                                  special_tokens=special_tokens, verbose=verbose)
    index = reatt_index(collection, reatt, cache_dir=cache_dir, verbose=verbose)
    return index.retriever(reatt, num_results=num_results, candidate_tokens=candidate_tokens,
                           nprobe=nprobe, rescore=rescore)
