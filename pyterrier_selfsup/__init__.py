"""pyterrier-selfsup: self-supervised neural retrieval for PyTerrier.

The layers, each importing only from those before it:
``data`` (collections, training queries) → ``models`` (dual encoder, generator, ReAtt)
→ ``retrieval`` (BM25, dense and token indexes) → ``training`` (one loop, the methods)
→ ``harness`` (named pipelines, experiments, the command line; imported on first use);
beneath them all, ``progress`` (how long stages report: :func:`set_progress`), and under it
``_kernel_caches`` (imported first: bounds on PyTorch's CPU kernel caches); ``context`` holds
:class:`RunContext`, what a run reads besides its settings.
"""
import importlib

from pyterrier_selfsup import _kernel_caches  # (first: before torch builds a kernel)
from pyterrier_selfsup._distributed import join_process_group
from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.data.classic import register_classic
from pyterrier_selfsup.data.collections import Collection, UnknownCollectionError
from pyterrier_selfsup.data.queries import (Query, corpus_sentences, cropped_spans, folds,
                                            generated_queries, given_topics, query_log,
                                            sampled_queries)
from pyterrier_selfsup.models._base import quiet_offline_hub
from pyterrier_selfsup.models.dual_encoder import DualEncoder, DualEncoderModel
from pyterrier_selfsup.models.generator import QWEN, QWEN_GGUF, SMOLLM2, SMOLLM2_GGUF, Generator
from pyterrier_selfsup.models.reranker import ReconstructionScorer
from pyterrier_selfsup.models.offsets import PassageOffsets
from pyterrier_selfsup.models.reatt import ReAtt
from pyterrier_selfsup.models.reatt_t5 import ReAttT5
from pyterrier_selfsup.models.writing import QueryWriter
from pyterrier_selfsup.progress import set_progress
from pyterrier_selfsup.retrieval.bm25 import BM25, pisa_index
from pyterrier_selfsup.retrieval.dense import MINILM, DenseRetriever, flex_index, sbert_encoder
from pyterrier_selfsup.retrieval.fusion import Fusion
from pyterrier_selfsup.retrieval.token_index import ReAttIndex, reatt_index
from pyterrier_selfsup.training.adjustment import CrossDocumentAdjustment
from pyterrier_selfsup.training.distant import DistantSupervision, in_batch_loss
from pyterrier_selfsup.training.distill import Distillation, listwise_kl, margin_mse
from pyterrier_selfsup.training.loop import Trainer
from pyterrier_selfsup.training.reconstruction import Acrobart, Rumbart, marginal_nll
from pyterrier_selfsup.training.settings import (REATT_HEAD, AcrobartSettings,
                                                 CrossDocumentAdjustmentSettings,
                                                 DistantSupervisionSettings, DistillationSettings,
                                                 MethodSettings, RumbartSettings)

__version__ = '0.1.0'

register_classic()  # classic/cisi and classic/adi, read from $SELFSUP_CLASSIC_DATA
quiet_offline_hub()  # offline mode (HF_HUB_OFFLINE=1) is normal here: no warning a model load

# the harness (named pipelines, experiments) is imported when one of its names is first used
_HARNESS = {'PIPELINES': 'pipelines', 'PipelineSpec': 'pipelines', 'register': 'pipelines',
            'CrossFold': 'pipelines', 'run_experiment': 'experiment',
            'write_results': 'experiment', 'plot_training_curve': 'plots'}


def __getattr__(name):
    if name in _HARNESS:
        return getattr(importlib.import_module(f'pyterrier_selfsup.harness.{_HARNESS[name]}'), name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


__all__ = [
    'join_process_group', 'set_progress', 'RunContext', 'MethodSettings', 'register_classic',
    'Collection', 'UnknownCollectionError', 'Query', 'corpus_sentences', 'cropped_spans',
    'generated_queries', 'given_topics', 'sampled_queries', 'query_log', 'folds',
    'DualEncoder', 'DualEncoderModel', 'SMOLLM2', 'SMOLLM2_GGUF', 'QWEN', 'QWEN_GGUF', 'Generator',
    'ReconstructionScorer',
    'ReAtt', 'ReAttT5', 'PassageOffsets', 'QueryWriter',
    'BM25', 'pisa_index', 'MINILM', 'DenseRetriever', 'flex_index', 'sbert_encoder', 'Fusion',
    'ReAttIndex', 'reatt_index',
    'Trainer', 'DistantSupervision', 'in_batch_loss', 'Distillation', 'listwise_kl', 'margin_mse',
    'Rumbart', 'Acrobart', 'marginal_nll', 'CrossDocumentAdjustment',
    'DistillationSettings', 'DistantSupervisionSettings', 'RumbartSettings', 'AcrobartSettings',
    'CrossDocumentAdjustmentSettings', 'REATT_HEAD',
    'PIPELINES', 'PipelineSpec', 'register', 'CrossFold',
    'run_experiment', 'write_results', 'plot_training_curve',
]
