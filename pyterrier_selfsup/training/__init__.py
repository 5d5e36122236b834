"""One training loop (:class:`~pyterrier_selfsup.training.loop.Trainer`) and the methods that use
it, as siblings: distant supervision, RUMBArt and ACROBArT, ReAtt's cross-document adjustment."""
__all__ = ['Trainer']


def __getattr__(name):
    # (imported when first used, so that the settings, which the command line's help reads,
    # import no model library)
    if name == 'Trainer':
        from pyterrier_selfsup.training.loop import Trainer
        return Trainer
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


def __dir__():
    return sorted(__all__)
