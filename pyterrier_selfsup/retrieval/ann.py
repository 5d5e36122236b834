"""How a dense index is searched: exactly, or through a FAISS structure (IVF, HNSW) built once
beside the index, chosen by the index's size (``search='auto'``).

    stage = search_stage(index, 'auto', num_results=1000)   # query vectors in, results out
"""
import importlib.util
import logging
import math
import os
from pathlib import Path

import numpy as np
import pyterrier as pt
from pyterrier_dr import FlexIndex

from pyterrier_selfsup._cache import check_space, disk_faults

logger = logging.getLogger(__name__)

# vectors a FAISS structure adds at a time (the index's chunk, as it is encoded)
ADD_CHUNK = 4096


SEARCHES = ('auto', 'exact', 'ivf', 'hnsw')
# search='auto' is exact below this many passages and IVF from it on
APPROXIMATE_FROM = 1_000_000
IVF_PROBE_SHARE = 1 / 16  # n_probe = this share of the n_list ≈ √N posting lists FlexIndex builds
HNSW_NEIGHBOURS = 32  # and FAISS's ef_construction 40, as FlexIndex builds it
HNSW_EF_SEARCH = 200


def resolve_search(search: str, index: FlexIndex) -> str:
    """``search`` itself, or for ``'auto'`` the search the index's size calls for: FAISS IVF
    from :data:`APPROXIMATE_FROM` passages where FAISS is installed, exact search otherwise."""
    if search not in SEARCHES:
        raise ValueError(f'search must be one of {", ".join(SEARCHES)}, not {search!r}')
    if search != 'auto':
        return search
    if len(index) < APPROXIMATE_FROM:
        return 'exact'
    if importlib.util.find_spec('faiss') is None:
        global _said_no_faiss
        if not _said_no_faiss:
            _said_no_faiss = True
            logger.warning('FAISS is not installed: %d passages are searched exactly, which is '
                           'slower than IVF (pip install faiss-cpu)', len(index))
        return 'exact'
    return 'ivf'


_said_no_faiss = False  # (the warning above, once a process)


def ivf_n_list(doc_count: int) -> int:
    """FlexIndex's IVF posting lists for a corpus: √N rounded up to a power of 2, at least 4."""
    return max(4, 1 << math.ceil(math.log2(math.ceil(math.sqrt(max(1, doc_count))))))


def ivf_n_probe(doc_count: int) -> int:
    """The posting lists IVF search probes: :data:`IVF_PROBE_SHARE` of :func:`ivf_n_list`."""
    return max(1, round(ivf_n_list(doc_count) * IVF_PROBE_SHARE))


def search_stage(index: FlexIndex, search: str, num_results: int) -> pt.Transformer:
    """FlexIndex's retriever for ``search`` (resolved), query vectors in, ranked results out."""
    search = resolve_search(search, index)
    if search == 'exact':
        # the vectors go to the GPU once (FlexIndex keeps them there), then matrix products
        import torch
        if torch.cuda.is_available():
            return index.torch_retriever(num_results=num_results, device='cuda',
                                         drop_query_vec=True)
        return index.np_retriever(num_results=num_results, drop_query_vec=True)
    prebuild_ann(index, search)
    if search == 'ivf':
        return index.faiss_ivf_retriever(num_results=num_results, n_probe=ivf_n_probe(len(index)),
                                         drop_query_vec=True)
    return index.faiss_hnsw_retriever(HNSW_NEIGHBOURS, num_results=num_results,
                                      ef_search=HNSW_EF_SEARCH, drop_query_vec=True)


def prebuild_ann(index: FlexIndex, search: str) -> Path:
    """The IVF or HNSW structure that FlexIndex's FAISS retrievers read, built here if it is not
    yet, in FlexIndex's file and with its settings.

    Not left to FlexIndex, which writes the file in place and moves the IVF quantiser to CUDA
    (failing with faiss-cpu): here it is built on the CPU, under a lock, into a temporary file
    renamed into place. The HNSW file keeps its copy of the vectors, which FAISS needs to read
    it back."""
    import faiss

    from pyterrier_selfsup._cache import locked
    vectors, _ = index.payload(return_docnos=False)
    n, dim = vectors.shape
    if search == 'ivf':
        n_list = ivf_n_list(n)
        train_sample = n_list * 39  # FlexIndex's defaults (faiss_retr._faiss_ivf_retriever)
        path = Path(index.index_path) / f'ivf_nlist-{n_list}_train-{train_sample}.faiss'
    else:
        path = Path(index.index_path) / f'hnsw_n-{HNSW_NEIGHBOURS}_ef-40.faiss'
    if path.exists():
        return path
    what = f'the {search.upper()} structure of {index.index_path}'
    needed = n * (4 * dim + 8) + (2 * HNSW_NEIGHBOURS * 4 * n if search == 'hnsw'
                                  else 4 * dim * ivf_n_list(n))
    check_space(Path(index.index_path), needed, what)
    with locked(path.with_name(path.name + '.lock')):
        if path.exists():
            return path
        if search == 'ivf':
            quantizer = faiss.IndexFlatIP(dim)
            ann = faiss.IndexIVFFlat(quantizer, dim, n_list, faiss.METRIC_INNER_PRODUCT)
            # FlexIndex's training sample: the same rows, so the file is the one it would write
            sample = np.random.RandomState(0).choice(n, size=min(train_sample, n), replace=False)
            ann.train(np.ascontiguousarray(vectors[sample], dtype=np.float32))
        else:
            ann = faiss.IndexHNSWFlat(dim, HNSW_NEIGHBOURS, faiss.METRIC_INNER_PRODUCT)
        for start in range(0, n, ADD_CHUNK):
            ann.add(np.ascontiguousarray(vectors[start:start + ADD_CHUNK], dtype=np.float32))
        partial = path.with_name(path.name + '.partial')
        with disk_faults(what, partial, undo=lambda: partial.unlink(missing_ok=True)):
            faiss.write_index(ann, str(partial))
            os.replace(partial, path)
    return path
