"""Named pipelines, for the command line and the experiment harness.

A :class:`PipelineSpec` holds a factory and the settings it is called with, so that
what a results file reports as the settings is exactly what built the pipeline.
Later components add themselves with :func:`register`.
"""
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Union

import pyterrier as pt

from pyterrier_selfsup.bm25 import BM25
from pyterrier_selfsup.collections import Collection
from pyterrier_selfsup.dense import MINILM, DenseRetriever


@dataclass(frozen=True)
class PipelineSpec:
    name: str
    description: str
    factory: Callable[..., pt.Transformer]  # factory(collection, cache_dir=, verbose=, **settings)
    settings: Dict[str, Any] = field(default_factory=dict)

    def build(self, collection: Collection, *, cache_dir: Optional[Union[str, Path]] = None,
              verbose: bool = False) -> pt.Transformer:
        return self.factory(collection, cache_dir=cache_dir, verbose=verbose, **self.settings)

    @property
    def models(self) -> list:
        return [self.settings['model_name']] if 'model_name' in self.settings else []


PIPELINES: Dict[str, PipelineSpec] = {}


class UnknownPipelineError(ValueError):
    pass


def register(spec: PipelineSpec) -> PipelineSpec:
    PIPELINES[spec.name] = spec
    return spec


def get_pipeline(name: str) -> PipelineSpec:
    if name not in PIPELINES:
        raise UnknownPipelineError(f'unknown pipeline {name!r}; known: {", ".join(sorted(PIPELINES))}')
    return PIPELINES[name]


register(PipelineSpec(
    'bm25', 'BM25 over a PISA index of title + text',
    BM25.from_collection, dict(k1=0.9, b=0.4, stemmer='porter2', stops='terrier', num_results=1000)))

register(PipelineSpec(
    'minilm', 'all-MiniLM-L6-v2 zero-shot: mean pooling, L2-normalised, exact dot-product search',
    DenseRetriever.from_collection, dict(model_name=MINILM, max_length=256, batch_size=32, num_results=1000)))
