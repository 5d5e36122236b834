"""What the training loop needs of a model: :class:`TrainableModel`, the contract every trainer
trains through. A wrapper subclasses it and lists its modules in ``torch_modules``.
"""
from pathlib import Path

import torch

from pyterrier_selfsup.models.precision import TorchModel


class TrainableModel(TorchModel):
    """What :class:`~pyterrier_selfsup.training.Trainer` needs of a model."""

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        """Each parameter that trains, once (modules may share weights)."""
        return list({id(p): p for module in self.torch_modules() for p in module.parameters()
                     if p.requires_grad}.values())

    def train_mode(self, on: bool = True):
        for m in self.torch_modules():
            m.train(on)

    def gradient_checkpointing(self, on: bool = True):
        """Transformers' gradient checkpointing on (or off) in every pretrained transformer of the
        model (the same gradients, a second forward pass of each layer); in training mode only."""
        from transformers import PreTrainedModel
        for module in self.torch_modules():
            for m in module.modules():
                if not isinstance(m, PreTrainedModel) or not m.supports_gradient_checkpointing:
                    continue
                if on and not m.is_activation_checkpointing:
                    m.activation_checkpointing_enable({'use_reentrant': False})
                elif not on and m.is_activation_checkpointing:
                    m.activation_checkpointing_disable()

    def save_pretrained(self, path: str | Path) -> Path:
        raise NotImplementedError

    def load_weights(self, path: str | Path):
        """Loads the weights that :meth:`save_pretrained` wrote at ``path`` into this model, in
        place."""
        raise NotImplementedError
