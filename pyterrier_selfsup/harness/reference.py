"""The settings reference: every training method's settings, their defaults and their help,
read from the settings classes (:mod:`~pyterrier_selfsup.training.settings`).

    selfsup settings --markdown > docs/settings.md    # the page in the docs
    selfsup settings distill                          # one method's, as text
"""

from pyterrier_selfsup.context import ENVIRONMENT
from pyterrier_selfsup.training.settings import GPL, GROUPS, SETTINGS

# (a setting of how a run is carried out: the model's record keeps it, its identity does not)
RUN_NOTE = {True: '', False: ' (not in the model\'s identity)'}


def shown(value) -> str:
    return 'None' if value is None else str(value)


def settings_lines(method: str) -> list[str]:
    """``method``'s settings as text: a line each, ``name=default  help``."""
    cls = SETTINGS[method]
    width = min(28, max(len(f"{f.name}={shown(f.default)}") for f in cls.fields()))
    return [f'  {f"{f.name}={shown(f.default)}":{width}}  {f.metadata["help"]}'
            for f in cls.fields()]


def method_section(method: str, cls: type) -> list[str]:
    from pyterrier_selfsup.harness.pipelines import PIPELINES
    summary = ' '.join((cls.__doc__ or '').strip().split('\n\n')[0].split())  # its first paragraph
    trained_by = [name for name, spec in PIPELINES.items() if spec.method == method]
    lines = [f'## `{method}`: {cls.__name__}', '', summary, '',
             'The pipelines that train with these settings: '
             + ', '.join(f'`{name}`' for name in trained_by)
             + f' (`selfsup train {trained_by[0]} -c COLLECTION`).', '']
    for group in GROUPS:
        fields = [f for f in cls.fields() if f.metadata['group'] == group]
        if not fields:
            continue
        lines += [f'**{group.capitalize()}**', '', '| setting | default | what it does |',
                  '|---|---|---|']
        for f in fields:
            choices = f.metadata.get('choices')
            more = f' One of: {", ".join(map(str, choices))}.' if choices else ''
            lines.append(f'| `{f.name}` | `{shown(f.default)}` | {f.metadata["help"]}{more}'
                         f'{RUN_NOTE[f.metadata["trains"]]} |')
        lines.append('')
    return lines


def markdown(methods: list[str] | None = None) -> str:
    """The settings reference as a Markdown page."""
    lines = ['# Settings reference', '',
             'Every training method\'s settings, with their defaults, as '
             '`selfsup settings --markdown` writes them from the settings classes '
             '(`pyterrier_selfsup/training/settings.py`). '
             'Change one on the command line as `PIPELINE:name=value` '
             '(`selfsup train "distill:rounds=3" -c classic/adi`), or in Python as '
             '`DistillationSettings(rounds=3)`.', '',
             'A trained model is stored with every setting its weights depend on (each setting '
             'but those whose row says otherwise), the corpus and its training queries '
             '(`model.json` in its directory): a model asked for with any of these changed is '
             'another model, trained on first use.', '']
    for method in methods or list(SETTINGS):
        lines += method_section(method, SETTINGS[method])
        if method == 'distill':
            lines += ['The `gpl` pipeline is `distill` with GPL\'s recipe (Wang et al., 2022): '
                      + ', '.join(f'`{k}={v}`' for k, v in GPL.items())
                      + '. Change any of them as for distill (`gpl:generator=smollm2`).', '']
    if not methods:
        lines += ['## Environment variables', '', 'They name paths and machine knobs only.', '',
                  '| variable | what it does |', '|---|---|']
        lines += [f'| `{name}` | {text} |' for name, text in ENVIRONMENT.items()]
    return '\n'.join(lines).rstrip() + '\n'
