"""The errors that ``selfsup`` reports in a line, defined apart from the modules that raise them,
so that a command that needs none of those modules (``selfsup judge`` reopening a campaign) does
not import them, and their models, to recognise them."""


class UnknownPipelineError(ValueError):
    """A pipeline name or setting that no registered pipeline has."""


class NothingToEvaluate(ValueError):
    """A collection without relevance judgements was given to evaluate on."""
