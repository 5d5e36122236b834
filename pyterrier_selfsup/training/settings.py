"""Every training method's settings, typed, at their shipped values: the one source of them.

A trainer's constructor takes its defaults from here, the named pipelines
(:mod:`~pyterrier_selfsup.harness.pipelines`) and ``selfsup list`` print them from here, and a
model's cache key covers them (:func:`~pyterrier_selfsup.harness.trained.model_dir`), so that
``selfsup run -p distill`` and ``Distillation(encoder, collection, teacher).fit(queries)`` train
with the same settings. ``tests/test_settings.py`` fails where a constructor's default differs
from its method's.

A setting here that a trainer's constructor does not take is the pipeline's own: where the
queries come from (``queries``, ``n_queries``, ``generator``), which model starts
(``model_name``, ``start``), how the teacher is built (``teacher``, ``fusion_depth``). A
constructor's setting of another name is in :data:`CONSTRUCTOR_NAMES`.

Each class's fields are the pipeline's settings (listed in their order) and the keys of its
model's digest: a field added later changes every model's key unless it is left out at its old
behaviour (:data:`LEGACY_KEYS`); ``tests/test_settings.py`` pins the keys of the shipped settings.
"""
import dataclasses
from dataclasses import dataclass
from typing import Dict, Optional, Type

from pyterrier_selfsup.models.generator import MAX_PASSAGE_LENGTH
from pyterrier_selfsup.retrieval.dense import MINILM


@dataclass(frozen=True)
class MethodSettings:
    """The settings of one training method (a subclass a method)."""

    def asdict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def defaults(cls) -> dict:
        return cls().asdict()


@dataclass(frozen=True)
class DistantSupervisionSettings(MethodSettings):
    """``ds``: BM25's top-1 passage a training query its positive (thesis §4.2.3)."""
    model_name: str = MINILM
    queries: str = 'sentences'
    n_queries: int = 5000
    negatives: str = 'none'
    epochs: int = 1
    batch_size: int = 32
    lr: float = 2e-5
    dim: Optional[int] = None
    seed: int = 0


@dataclass(frozen=True)
class ReconstructionSettings(MethodSettings):
    """What RUMBArt and ACROBArT share: a stale index refreshed every ``refresh_every`` steps,
    its top ``k`` scored by the generator."""
    start: str = 'minilm'
    queries: str = 'sentences'
    n_queries: int = 5000
    k: int = 5
    refresh_every: Optional[int] = 25
    null_document: bool = False
    train_passages: bool = True
    epochs: int = 1
    batch_size: int = 16
    accumulation: int = 1
    lr: float = 2e-5
    generator: str = 'smollm2'
    max_passage_length: int = MAX_PASSAGE_LENGTH
    seed: int = 0


@dataclass(frozen=True)
class RumbartSettings(ReconstructionSettings):
    """``rumbart``: towards the posterior ∝ p_η(z|x)·p_θ(x|z) over the top k."""
    teacher_temperature: float = 1.0


@dataclass(frozen=True)
class AcrobartSettings(ReconstructionSettings):
    """``acrobart``: β·p_η(z_j|x) added to the generator's attention towards passage j."""
    beta: float = 1.0


# all-MiniLM-L6-v2's zero-shot retrieval head: the (layer, head, special tokens) whose r_h
# re-ranks BM25's top 100 best on beir/scifact/train (experiments/reatt_heads.py; layers
# counted from 0, as ReAtt's retrieval_layer: the attention of the second layer)
REATT_HEAD = dict(retrieval_layer=1, head=1, special_tokens=False)


@dataclass(frozen=True)
class CrossDocumentAdjustmentSettings(MethodSettings):
    """``reatt``: an attention head adjusted towards the generator's view of the close documents."""
    model_name: str = MINILM
    retrieval_layer: int = REATT_HEAD['retrieval_layer']
    head: int = REATT_HEAD['head']
    special_tokens: bool = REATT_HEAD['special_tokens']
    queries: str = 'sentences'
    n_queries: int = 5000
    k: int = 8
    epochs: int = 2
    batch_size: int = 8
    lr: float = 2e-5
    alpha: float = 1.0
    target: str = 'likelihood'
    teacher_temperature: float = 1.0
    generator: str = 'smollm2'
    seed: int = 0


@dataclass(frozen=True)
class DistillationSettings(MethodSettings):
    """``distill``: a teacher pipeline (BM25 and the student, fused) distilled into the student.

    2,000 sampled queries: SmolLM2 writes ~2 a second on 2 cores, so that a corpus-only run fits in
    an hour; no round-trip filter: keeping only queries whose passage the teacher ranks in its top
    1, 3 or 10 was no better on scifact train (experiments/results/distill_filter.md). Chosen on
    scifact train, each train query answered by a model trained on the other half's texts
    (query_log_choices{,_2}.md): fp32 (as good as bf16 autocast, and 3x faster to train on a CPU
    with native bf16), passage offsets (+.008), lr 5e-5 for all 5 rounds (+.005; the verdict keeps
    the best round, so no early stop)."""
    model_name: str = MINILM
    queries: str = 'sampled'
    n_queries: int = 2000
    teacher: str = 'bm25+student'
    fusion_depth: int = 100
    depth: int = 30
    teacher_temperature: float = 1.0
    loss: str = 'kl'
    in_batch: bool = True
    train_passages: bool = False
    filter_depth: Optional[int] = None
    rounds: int = 5
    stop_overlap: Optional[float] = None
    passage_offsets: Optional[float] = 1.0
    offset_lr: float = 1e-3
    passage_layers: Optional[int] = None
    source_share: float = 0.0
    batch_size: int = 32
    lr: float = 5e-5
    precision: str = 'fp32'
    generator: str = 'smollm2'
    query_style: str = 'plain'
    query_examples: Optional[str] = None
    verdict_share: float = 0.1
    min_round_steps: int = 0
    seed: int = 0


SETTINGS: Dict[str, Type[MethodSettings]] = {
    'distill': DistillationSettings,
    'ds': DistantSupervisionSettings,
    'rumbart': RumbartSettings,
    'acrobart': AcrobartSettings,
    'reatt': CrossDocumentAdjustmentSettings,
}

# a method's setting that its trainer's constructor takes under another name
CONSTRUCTOR_NAMES = {'distill': {'rounds': 'epochs'}}


@dataclass(frozen=True)
class LegacyKey:
    """A cache key kept as it was for what was built before a change, and the date it goes."""
    what: str
    since: str  # when the change was made (YYYY-MM-DD)
    until: str  # after this date the special case is removed (tests/test_settings.py says so)


# Every special case that keeps an old cache key alive, in one place. A model's key leaves out
# a setting a method gained later at the value that trains as before (``settings`` below).
LEGACY_KEYS: Dict[str, LegacyKey] = {
    'distill settings added': LegacyKey(
        "distill's passage_layers=None and source_share=0.0 stay out of its model key, so that "
        'models trained before those settings existed are found (harness/trained.py model_dir)',
        since='2026-11-25', until='2027-05-31'),
    'torch index key': LegacyKey(
        "a dense index of the torch backend is keyed without 'backend' (retrieval/dense.py), as it "
        'was before the OpenVINO backend', since='2026-11-24', until='2027-05-31'),
    'tied passage fingerprint': LegacyKey(
        "a tied encoder's passage fingerprint is its whole fingerprint (models/dual_encoder.py), as "
        'it was before untied passage towers', since='2026-11-22', until='2027-05-31'),
}
# the settings that ``distill settings added`` leaves out of the key at these values
ADDED_SETTINGS = {'distill': {'passage_layers': None, 'source_share': 0.0}}


def parse_teacher(spec: str) -> Dict[str, float]:
    """A teacher named by its parts and their weights: ``bm25+student`` (1:1),
    ``2*bm25+student``, ``bm25+student+gen``... Parts: :data:`TEACHER_PARTS`."""
    weights = {}
    for term in spec.split('+'):
        weight, _, part = term.strip().rpartition('*')
        if part not in TEACHER_PARTS or part in weights:
            raise ValueError(f'teacher {spec!r}: {part!r} is not one of {", ".join(TEACHER_PARTS)} '
                             f'(or is named twice); e.g. bm25+student or 2*bm25+student+gen')
        weights[part] = float(weight) if weight else 1.0
    return weights


# bm25: BM25; student: the student as it is at each round; minilm: the start model, frozen;
# gen: the generator's query likelihood on the fused top ``rerank_depth`` (its scores cached)
TEACHER_PARTS = ('bm25', 'student', 'minilm', 'gen')
