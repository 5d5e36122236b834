"""pyterrier-selfsup: self-supervised neural retrieval for PyTerrier."""
from pyterrier_selfsup.classic import register_classic
from pyterrier_selfsup.collections import Collection, UnknownCollectionError
from pyterrier_selfsup.bm25 import BM25, pisa_index
from pyterrier_selfsup.dual_encoder import DualEncoder, DualEncoderModel
from pyterrier_selfsup.dense import MINILM, DenseRetriever, flex_index, sbert_encoder
from pyterrier_selfsup.distant import DistantSupervision, in_batch_loss
from pyterrier_selfsup.queries import corpus_sentences, cropped_spans, generated_queries, given_topics
from pyterrier_selfsup.generator import SMOLLM2, SMOLLM2_GGUF, Generator, ReconstructionScorer
from pyterrier_selfsup.training import Trainer
from pyterrier_selfsup.reconstruction import Acrobart, Rumbart, marginal_nll
from pyterrier_selfsup.reatt import ReAtt
from pyterrier_selfsup.token_index import ReAttIndex, reatt_index
from pyterrier_selfsup.adjustment import CrossDocumentAdjustment
from pyterrier_selfsup.reatt_t5 import ReAttT5
from pyterrier_selfsup.pipelines import PIPELINES, PipelineSpec, register
from pyterrier_selfsup.experiment import run_experiment, write_results

__version__ = '0.1.0'

register_classic()  # classic/cisi and classic/adi, read from $SELFSUP_CLASSIC_DATA

__all__ = [
    'register_classic', 'Collection', 'UnknownCollectionError', 'BM25', 'pisa_index',
    'DualEncoder', 'DualEncoderModel', 'MINILM', 'DenseRetriever', 'flex_index', 'sbert_encoder',
    'DistantSupervision', 'in_batch_loss', 'corpus_sentences', 'cropped_spans', 'generated_queries', 'given_topics',
    'SMOLLM2', 'SMOLLM2_GGUF', 'Generator', 'ReconstructionScorer', 'Trainer', 'Rumbart', 'Acrobart', 'marginal_nll',
    'ReAtt', 'ReAttIndex', 'reatt_index', 'CrossDocumentAdjustment', 'ReAttT5',
    'PIPELINES', 'PipelineSpec', 'register', 'run_experiment', 'write_results',
]
