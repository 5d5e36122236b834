"""The trainer of a dual encoder: what distant supervision, RUMBArt and ACROBArT, and
distillation share over the loop (:mod:`~pyterrier_selfsup.training.loop`), which knows no
model class."""
from pyterrier_selfsup.models.dual_encoder import DualEncoder
from pyterrier_selfsup.retrieval.dense import DenseRetriever, dense_retriever
from pyterrier_selfsup.training.loop import Trainer


class DualEncoderTrainer(Trainer):
    """A trainer of a :class:`~pyterrier_selfsup.models.dual_encoder.DualEncoder` that retrieves
    from a dense index of its collection: distant supervision, RUMBArt and ACROBArT,
    distillation."""

    @property
    def encoder(self) -> DualEncoder:
        return self.model

    def retriever(self, fresh: bool = False) -> DenseRetriever:
        return dense_retriever(self.collection, self.encoder, fresh=fresh, cache_dir=self.cache_dir,
                               verbose=self.shows)
