"""ACROBArT (thesis §4.3.2, Algorithm 3): the generator reads all k retrieved passages at once,
β·p_η(z_j|x) added to its attention logits towards passage j's tokens, so that the
reconstruction loss reaches the retriever; the shared retrieval and refreshes are
:class:`~pyterrier_selfsup.training.reconstruction.RetrieveAndReconstruct`'s.

    trainer = Acrobart(DualEncoder.from_pretrained(MINILM),
                       Generator.from_pretrained(SMOLLM2, gguf_file=SMOLLM2_GGUF), 'classic/adi')
"""
import logging
from pathlib import Path

import numpy as np
import torch

from pyterrier_selfsup.data.queries.source import Query
from pyterrier_selfsup.models.reading import biased_log_likelihood, checkpointed_layers
from pyterrier_selfsup.training.reconstruction import RetrieveAndReconstruct
from pyterrier_selfsup.training.settings import AcrobartSettings

logger = logging.getLogger(__name__)


GENERATOR_BATCH = 4


class _Computed(torch.autograd.Function):
    """A loss whose gradient towards ``inputs`` was computed already: its value, and in the
    backward pass that gradient times the one that reaches the loss."""

    @staticmethod
    def forward(ctx, inputs, value, gradient):
        ctx.save_for_backward(gradient)
        return value.clone()

    @staticmethod
    def backward(ctx, grad_output):
        gradient, = ctx.saved_tensors
        return gradient * grad_output, None, None


class Acrobart(RetrieveAndReconstruct):
    """ACROBArT: the k passages go to the generator together, the retrieval scores bias its
    attention (thesis §4.3.2). β is trainable (initial value ``beta``); the reconstruction loss
    reaches the retriever through the bias.

    ``generator_batch``: the batch's queries go through the generator this many at a time, each
    group's backward pass run at once, so that a step holds the activations of that many queries
    (None: the whole batch). Each row is padded as the whole batch pads it, so the loss and
    gradients are the whole batch's (on a CPU bit for bit where ``accumulation`` is a power of 2,
    else up to rounding). A generator that trains takes the whole batch at once."""
    description = 'ACROBArT'

    Settings = AcrobartSettings

    def __init__(self, *args, generator_batch: int | None = GENERATOR_BATCH, **kwargs):
        super().__init__(*args, **kwargs)
        self.generator_batch = generator_batch
        self.beta = torch.nn.Parameter(torch.tensor(float(self.settings.beta),
                                                    device=self.encoder.device))

    def parameters(self):
        yield from super().parameters()
        yield self.beta

    def on_fit_start(self):
        super().on_fit_start()
        # the generator's activations (k passages a row, with gradients) are most of a step's
        checkpointed_layers(self.generator, self.uses_gradient_checkpointing)

    def on_fit_end(self):
        super().on_fit_end()
        checkpointed_layers(self.generator, False)

    def save_extra(self, path: Path):
        super().save_extra(path)
        torch.save({'beta': self.beta.detach().cpu()}, path / 'acrobart.pt')

    def load_extra(self, path: Path):
        super().load_extra(path)
        with torch.no_grad():
            self.beta.copy_(torch.load(path / 'acrobart.pt')['beta'])

    def loss(self, batch: list[Query], rng: np.random.Generator) -> torch.Tensor:
        mine = self.local_batch(batch)
        docnos, texts, logits = self.candidates(mine)
        self.record('beta', self.beta.item())  # the value this step uses, before its update
        weights = self.beta * torch.softmax(logits, dim=-1)
        queries = [q.query for q in mine]
        # (a generator that trains takes the whole batch, for the step's backward)
        chunk = len(mine) if self.generator.trainable else self.generator_batch or len(mine)
        if chunk >= len(mine):  # this process's share of the batch's mean
            return (-biased_log_likelihood(self.generator, queries, texts, weights).sum()
                    / len(batch))
        # a few rows at a time through the generator, each backward at once: the gradients
        # reach the weights, which carry them to β and the retriever in the step's backward
        held, rows_logp = weights.detach().requires_grad_(), []
        for start in range(0, len(mine), chunk):
            rows = slice(start, start + chunk)
            logp = biased_log_likelihood(self.generator, queries, texts, held[rows], rows=rows)
            (-logp.sum() / len(batch)).backward()
            rows_logp.append(logp.detach())
        # (summed as the whole batch's pass sums it)
        value = -torch.cat(rows_logp).sum() / len(batch)
        return _Computed.apply(weights, value, held.grad)
