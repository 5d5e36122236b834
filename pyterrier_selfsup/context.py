"""Where a run keeps what it builds and what it shows: one object, passed whole.

A :class:`RunContext` holds what never changes the model a run trains: the directory of its
checkpoints and log, the cache, whether progress is shown, and the figure drawn beside the
training log. Trainers and the harness's functions take it as ``run=``; the library's building
blocks take ``cache_dir=``.

    from pyterrier_selfsup import RunContext
    run = RunContext(output_dir='runs/distill', cache_dir='/data/cache')
    Distillation(encoder, collection, teacher, run=run).fit(topics)
"""
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

# every environment variable the package reads: paths and machine knobs only (a setting that
# changes what is trained is a field of a settings class)
ENVIRONMENT = {
    'SELFSUP_CACHE': 'Where indexes, teacher scores, written queries and trained models are cached '
                     '(default ~/.cache/pyterrier-selfsup; --cache-dir and RunContext.cache_dir '
                     'override it).',
    'SELFSUP_CLASSIC_DATA': 'The folder whose Glasgow/SMART collections are read as '
                            'classic/NAME (--classic-data overrides it). Unset: CISI and ADI are '
                            'downloaded from the University of Glasgow on first use, into the '
                            'cache.',
    'SELFSUP_CLASSIC_MIRROR': 'Where CISI and ADI are downloaded from, in place of the University '
                              'of Glasgow\'s address (a mirror of its test_collections folder).',
    'SELFSUP_PROGRESS': 'How progress is shown: auto (bars on a terminal, lines elsewhere), bars, '
                        'lines or off (-v and -q override it).',
    'SELFSUP_PROGRESS_SECONDS': 'Seconds between two progress lines where progress is shown as '
                                'lines.',
    'SELFSUP_CODE_REVISION': 'The commit a results header names, for a copy of the code that git '
                             'cannot read.',
    'SELFSUP_CPU_FLAGS': 'CPU flags (space-separated) that stand in for the CPU\'s own, so that '
                         'the package chooses its precision as on another kind of CPU (avx2: '
                         'fp32 where it would choose bf16); for testing.',
}


@dataclass(frozen=True)
class RunContext:
    """What a run reads besides its settings.

    Args:
        output_dir: where checkpoints, the final model (``final/``) and the training log go
            (None: nowhere; the model is trained in memory).
        cache_dir: the cache of indexes, teacher scores and written queries (None:
            ``$SELFSUP_CACHE`` or ``~/.cache/pyterrier-selfsup``).
        verbose: show the progress of each stage (how it is shown:
            :func:`~pyterrier_selfsup.set_progress`).
        keep_checkpoints: how many of the latest step checkpoints stay on disk (None: all).
        draw_curve: draws the training curve beside the log, called as
            ``draw_curve(log, path, title=, key=, ylabel=, marker=)`` (the harness passes
            :func:`~pyterrier_selfsup.harness.plots.plot_training_curve`; None: no figure).
    """
    output_dir: Path | None = None
    cache_dir: str | Path | None = None
    verbose: bool = True
    keep_checkpoints: int | None = None
    draw_curve: Callable[..., None] | None = None

    def __post_init__(self):
        if self.output_dir is not None and not isinstance(self.output_dir, Path):
            object.__setattr__(self, 'output_dir', Path(self.output_dir))

    @classmethod
    def names(cls) -> set:
        return {f.name for f in dataclasses.fields(cls)}

    def replace(self, **changes) -> 'RunContext':
        return dataclasses.replace(self, **changes) if changes else self


# what the harness's functions run with when given no context: no progress shown
SILENT = RunContext(verbose=False)
