"""Copies of the training curves and logs of the models a reproduce script trained, into the
results folder the docs cite (:func:`copy_training_curves`); the scripts beside it import it.
"""
import gzip
import shutil
from collections.abc import Sequence
from pathlib import Path

from pyterrier_selfsup import Collection, RunContext
from pyterrier_selfsup._cache import written_whole
from pyterrier_selfsup.context import SILENT
from pyterrier_selfsup.harness.experiment import LOG, LOG_GZ
from pyterrier_selfsup.harness.pipelines import get_pipeline


def curves_folder(target: str | Path, pipeline: str, fold: int = 0, folds: int = 1) -> Path:
    """Where `copy_training_curves` puts a pipeline's curve and log under ``target``: a folder
    named by the pipeline, and ``fold-<k>/`` in it for each model of a two-fold pipeline."""
    folder = Path(target) / pipeline.replace(':', '_').replace(',', '_').replace('/', '-')
    return folder / f'fold-{fold}' if folds > 1 else folder


def copy_training_curves(pipelines: Sequence[str], collection: str, target: str | Path,
                         run: RunContext = SILENT) -> list[Path]:
    """Copies the training curve and log (gzipped) of every pipeline that trained a model on
    ``collection`` into ``target/<pipeline name>/``."""
    corpus = Collection(collection)
    copied = []
    for spec in map(get_pipeline, pipelines):
        sources = spec.model_dirs(corpus, run)
        for fold, source in enumerate(sources):  # (one a fold with queries=crossfold)
            folder = curves_folder(target, spec.name, fold, len(sources))
            folder.mkdir(parents=True, exist_ok=True)
            what = f'the {spec.name} training curve'
            with written_whole(folder / 'training_curve.png', what, 'choose another target') as out:
                shutil.copy(source / 'training_curve.png', out)
            with written_whole(folder / LOG_GZ, what, 'choose another target') as out:
                with open(source / LOG, 'rb') as log, gzip.GzipFile(out, 'wb', mtime=0) as packed:
                    shutil.copyfileobj(log, packed)
            (folder / LOG).unlink(missing_ok=True)  # (a plain copy left by an older run)
            copied.append(folder)
    return copied
