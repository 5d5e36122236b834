"""One training loop (:class:`~pyterrier_selfsup.training.loop.Trainer`) and the methods that use
it, as siblings: distant supervision, RUMBArt and ACROBArT, ReAtt's cross-document adjustment."""
from pyterrier_selfsup.training.loop import Trainer

__all__ = ['Trainer']
