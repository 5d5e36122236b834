"""Key/value caches the package reads its own way, on transformers' public cache classes: a
chunk of targets reading their prompts' prefixes (:class:`PrefixCache`), and which layers a
model's caches may be replaced in.
"""
import torch
from transformers import DynamicCache
from transformers.cache_utils import Cache, DynamicLayer


def full_attention_layers(config) -> int | None:
    """A decoder-only model's number of layers if every one attends to every position, else
    None: where the package's own key/value caches stand in for transformers' per-kind layers."""
    from transformers.cache_utils import get_layer_types_and_kwargs
    if getattr(config, 'is_encoder_decoder', False):
        return None
    text = config.get_text_config(decoder=True)
    kinds, _ = get_layer_types_and_kwargs(text)
    return text.num_hidden_layers if all(kind == 'full_attention' for kind in kinds) else None


class PrefixLayer(DynamicLayer):
    """One layer's keys and values of the prefixes, read by a chunk of targets: at the layer's
    turn, each target's prefix is selected (``rows``) and joined to the target's own keys and
    values, and not stored, so that only one layer's copies are held at a time."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, rows: torch.Tensor):
        super().__init__()
        self.lazy_initialization(keys, values)
        # (prefixes, heads, length, dim): not copied
        self.keys, self.values, self.rows = keys, values, rows

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        return (torch.cat([self.keys.index_select(0, self.rows), key_states], dim=-2),
                torch.cat([self.values.index_select(0, self.rows), value_states], dim=-2))

    def _read_only(self, *args, **kwargs):
        raise NotImplementedError('a PrefixCache is read by one forward of its targets, '
                                  'not changed')

    crop = batch_select_indices = batch_repeat_interleave = reset = _read_only


class PrefixCache(DynamicCache):
    """The prefixes' cache (``cache``, one row a prefix) as read by targets whose prefixes are
    ``rows``: a :class:`PrefixLayer` a layer, for models whose layers all attend to every
    position. Read once, by one forward of the targets (``update`` stores nothing)."""

    def __init__(self, cache: DynamicCache, rows: torch.Tensor):
        Cache.__init__(self, layers=[PrefixLayer(layer.keys, layer.values, rows)
                                     for layer in cache.layers])
