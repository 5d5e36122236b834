"""pyterrier-selfsup: self-supervised neural retrieval for PyTerrier.

The layers, each importing only from those before it:
``data`` (collections, training queries) → ``models`` (dual encoder, generator, ReAtt)
→ ``retrieval`` (BM25, dense and token indexes) → ``training`` (one loop, the methods)
→ ``harness`` (named pipelines, experiments, the command line); beneath them, ``progress``
(:func:`set_progress`) and ``_kernel_caches``; ``context`` holds :class:`RunContext`.

Each name below is imported from its module when it is first used, so that ``import
pyterrier_selfsup`` is light and a process that needs one layer does not import the others.
"""
import importlib

from pyterrier_selfsup.context import RunContext
from pyterrier_selfsup.data.classic import register_classic
from pyterrier_selfsup.progress import set_progress

__version__ = '0.1.0'

register_classic()  # classic/cisi and classic/adi, read from $SELFSUP_CLASSIC_DATA

# every other public name, by the module it lives in
_MODULES = {
    '_distributed': ['join_process_group'],
    'data.collections': ['Collection', 'UnknownCollectionError'],
    'data.queries.cut': ['corpus_sentences', 'cropped_spans'],
    'data.queries.logs': ['folds', 'given_topics', 'query_log'],
    'data.queries.source': ['Query', 'QuerySource'],
    'data.queries.written': ['generated_queries', 'sampled_queries'],
    'models.dual_encoder': ['DualEncoder', 'DualEncoderModel'],
    'models.generator': ['Generator'],
    'models.names': ['MINILM', 'QWEN', 'QWEN_GGUF', 'SMOLLM2', 'SMOLLM2_GGUF'],
    'models.reranker': ['ReconstructionScorer'],
    'models.offsets': ['PassageOffsets'],
    'models.reatt': ['ReAtt'],
    'models.reatt_t5': ['ReAttT5'],
    'models.writing': ['QueryWriter'],
    'retrieval.bm25': ['BM25', 'pisa_index'],
    'retrieval.dense': ['DenseRetriever', 'flex_index', 'sbert_encoder'],
    'retrieval.fusion': ['Fusion'],
    'retrieval.token_index': ['ReAttIndex', 'reatt_index'],
    'training.adjustment': ['CrossDocumentAdjustment'],
    'training.distant': ['DistantSupervision', 'in_batch_loss'],
    'training.distill': ['Distillation'],
    'training.loop': ['Trainer'],
    'training.acrobart': ['Acrobart'],
    'training.rumbart': ['Rumbart'],
    'training.losses': ['listwise_kl', 'margin_mse', 'marginal_nll', 'reconstruction_kl'],
    'training.settings': ['REATT_HEAD', 'AcrobartSettings', 'CrossDocumentAdjustmentSettings',
                          'DistantSupervisionSettings', 'DistillationSettings', 'MethodSettings',
                          'RumbartSettings'],
    'harness.pipelines': ['PIPELINES', 'PipelineSpec', 'get_pipeline', 'register', 'CrossFold'],
    'harness.experiment': ['run_experiment', 'write_results'],
    'harness.plots': ['plot_training_curve'],
    'harness.judging.campaign': ['Campaign'],
    'harness.judging.server': ['judge'],
}
_HOME = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name):
    if name in _HOME:
        value = getattr(importlib.import_module(f'pyterrier_selfsup.{_HOME[name]}'), name)
        globals()[name] = value  # (looked up once)
        return value
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__():
    return sorted(set(globals()) | set(_HOME))


__all__ = ['RunContext', 'register_classic', 'set_progress', *_HOME]
