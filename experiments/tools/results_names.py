"""What the pipeline names in the committed results files meant when each was written.

distill's passage side and rounds once did not follow the queries, and the verdict once chose the
round (CHANGELOG.md). A results file written at a commit before that names its distill and hybrid
pipelines without the settings that were then the defaults; the probes that read such a file
(``experiments/probes/verdict_agreement.py`` and ``verdict_signals.py``, at 27d427a) name them in full through
:func:`as_written`, so that they find the training logs committed under those names.

This reads the repository's history (``git merge-base``), so it runs in a clone, not from an
installed package: the package itself never reinterprets a name.

    as_written('distill', results_code('experiments/results/label_free.csv'))
"""
import functools
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# What distill's pipeline names meant before its passage side and rounds followed the queries
# and the last round shipped (CHANGELOG.md): the names in results files written before then
FORMER_DISTILL = {'passages': 'offsets', 'rounds': 5, 'keep': 'verdict'}
_SIDE = ('passages', 'passage_offsets', 'train_passages')  # (the passage side's spellings)


def results_code(path: str | Path) -> str:
    """The commit a results file (``.md`` or ``.csv``) names in its header's ``code:`` line
    (``''`` where it names none)."""
    for line in Path(path).read_text().splitlines()[:12]:
        if 'code: ' in line:
            return line.split('code: ', 1)[1].split()[-1].split('+')[0]
    return ''


def as_written(name: str, code: str) -> str:
    """Pipeline ``name`` as a results file written at commit ``code`` meant it: a distill or
    hybrid pipeline of a file written before distill's defaults moved is named with the former
    defaults it did not name (:data:`FORMER_DISTILL`), so that it finds the model it trained
    and the training log copied under that name. Other names, and names of later files, are
    returned as they are.

        as_written('distill', 'c25cdcd3d220')   # 'distill:passages=offsets,rounds=5,keep=verdict'
    """
    method, _, overrides = name.partition(':')
    if method not in ('distill', 'hybrid') or not _written_before_the_move(code):
        return name
    named = {item.partition('=')[0] for item in overrides.split(',') if item}
    named |= set(_SIDE) if named & set(_SIDE) else set()
    named |= {'rounds'} if 'epochs' in named else set()
    extra = [f'{k}={v}' for k, v in FORMER_DISTILL.items() if k not in named]
    return f'{method}:{",".join(filter(None, [overrides] + extra))}' if extra else name


# the last commit whose distill defaults were the former ones
LAST_FORMER = '0614091'


@functools.cache
def _written_before_the_move(code: str) -> bool:
    """Whether commit ``code`` is :data:`LAST_FORMER` or one of its ancestors, so that the
    package at it had distill's former defaults. A commit git cannot find (or no git) counts
    as written since."""
    try:
        return bool(code) and subprocess.run(
            ['git', 'merge-base', '--is-ancestor', code, LAST_FORMER], cwd=ROOT,
            capture_output=True).returncode == 0
    except OSError:
        return False
