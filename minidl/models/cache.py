"""The key-value cache of a decoder: each layer's keys and values of every token seen so far, so that a generation
step computes attention for its new tokens only (one token's work a step, not the whole prefix's).

transformers 5.24's ``DynamicCache``, its names and semantics: a list of ``layers`` (:class:`DynamicLayer`, made as
``update`` first reaches them, or one per decoder layer up front from a ``config``); ``update`` appends a step's keys
and values and returns the layer's whole history; ``get_seq_length``, ``crop`` (a negative count: that many tokens
off the end), ``batch_select_indices``, ``reorder_cache`` and ``reset`` let a caller shorten it or keep some
sequences of the batch, which is how a server drops finished sequences from a running batch."""
from __future__ import annotations

import minidl

__all__ = ["DynamicCache", "DynamicLayer"]


class DynamicLayer:
    """One layer's keys and values, (batch, key-value heads, tokens, head dim), grown by concatenation; None until
    its first ``update`` (or after ``reset``)."""

    def __init__(self):
        self.keys = self.values = None

    def update(self, key_states, value_states):
        """Append a step's keys and values; return the layer's keys and values so far."""
        if self.keys is None:
            self.keys, self.values = key_states, value_states
        else:
            self.keys = minidl.cat([self.keys, key_states], dim=-2)
            self.values = minidl.cat([self.values, value_states], dim=-2)
        return self.keys, self.values

    def get_seq_length(self) -> int:
        """How many tokens the layer holds."""
        return 0 if self.keys is None else self.keys.shape[-2]

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last ``-tokens_to_remove`` tokens (see :meth:`DynamicCache.crop`)."""
        if tokens_to_remove > 0:
            raise ValueError(f"DynamicCache.crop: tokens_to_remove must be 0 or negative (that many tokens are removed "
                             f"from the end), got {tokens_to_remove}; transformers 5 no longer takes a positive length "
                             f"to keep")
        if tokens_to_remove and self.keys is not None:
            self.keys, self.values = self.keys[..., :tokens_to_remove, :], self.values[..., :tokens_to_remove, :]

    def batch_select_indices(self, indices) -> None:
        """Keep the batch rows ``indices`` selects (indices in that order, or a boolean mask)."""
        if self.get_seq_length():
            self.keys, self.values = self.keys[indices], self.values[indices]

    def reorder_cache(self, beam_idx) -> None:
        """Reorder the batch: row i becomes the sequence ``beam_idx[i]``."""
        if self.get_seq_length():
            self.keys = self.keys.index_select(0, beam_idx.to(self.keys.device))
            self.values = self.values.index_select(0, beam_idx.to(self.values.device))

    def reset(self) -> None:
        """Forget every token (the layer stays, empty)."""
        self.keys = self.values = None


class DynamicCache:
    """A decoder's cache, one :class:`DynamicLayer` a decoder layer.

    ``ddp_cache_data``: (keys, values) pairs (or transformers' (keys, values, sliding window) triples, the window
    None), one a layer, to start from, as iterating a cache gives them; ``config``: a model config whose
    ``num_hidden_layers`` (GPT-2's ``n_layer``) layers are made empty up front. ``offloading`` (keeping the layers in
    host memory between steps) is not supported; ``offload_only_non_sliding`` only qualifies it."""

    def __init__(self, ddp_cache_data=None, config=None, offloading: bool = False,
                 offload_only_non_sliding: bool = False):
        if offloading:
            raise ValueError("DynamicCache: offloading=True is not supported (minidl keeps the cache on the model's "
                             "device)")
        self.layers: list = []
        if config is not None:
            count = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None)
            if count is None:
                raise ValueError(f"DynamicCache: config {type(config).__name__} has no num_hidden_layers (or n_layer) "
                                 f"saying how many layers to cache")
            self.layers = [DynamicLayer() for _ in range(count)]
        for layer_idx, (keys, values, *window) in enumerate(ddp_cache_data or ()):
            if any(w is not None for w in window):
                raise ValueError(f"DynamicCache: ddp_cache_data layer {layer_idx} has a sliding window, which is "
                                 f"not supported")
            if layer_idx == len(self.layers):
                self.layers.append(DynamicLayer())
            if keys is not None and values is not None:
                self.layers[layer_idx].update(keys, values)

    def __iter__(self):
        """Each layer's (keys, values, None): ``ddp_cache_data`` for a copy (None: no sliding window)."""
        for layer in self.layers:
            yield layer.keys, layer.values, None

    def __len__(self) -> int:
        """How many layers the cache has (made so far, or from the config)."""
        return len(self.layers)

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        """Append a step's keys and values to layer ``layer_idx``'s (made, with any before it, if new); return the
        layer's keys and values so far. Further arguments (transformers' ``cache_kwargs``) do not concern a dynamic
        cache and are ignored, as transformers' DynamicLayer ignores them."""
        while len(self.layers) <= layer_idx:
            self.layers.append(DynamicLayer())
        return self.layers[layer_idx].update(key_states, value_states)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """How many tokens layer ``layer_idx`` holds (0 before its first step)."""
        return self.layers[layer_idx].get_seq_length() if layer_idx < len(self.layers) else 0

    def crop(self, tokens_to_remove: int) -> None:
        """Remove the last ``-tokens_to_remove`` tokens of every layer (e.g. ``crop(-2)`` rolls back two steps; 0
        keeps all). A positive value is refused, as transformers 5 refuses it (transformers 4 read it as the length
        to keep)."""
        for layer in self.layers:
            layer.crop(tokens_to_remove)

    def batch_select_indices(self, indices) -> None:
        """Keep only the sequences ``indices`` selects from the batch (indices, in that order, or a boolean mask)."""
        for layer in self.layers:
            layer.batch_select_indices(indices)

    def reorder_cache(self, beam_idx) -> None:
        """Reorder the batch's sequences (``beam_idx``, a tensor: row i becomes the sequence ``beam_idx[i]``), as beam
        search reorders its beams."""
        for layer in self.layers:
            layer.reorder_cache(beam_idx)

    def reset(self) -> None:
        """Empty every layer, keeping the layers (a fresh start for the same model)."""
        for layer in self.layers:
            layer.reset()


def one_cache(cache, past_key_values, where: str):
    """The cache a model's forward was given, as ``cache`` or as ``past_key_values`` (transformers 4's name for it,
    accepted so that callers written for it run unchanged)."""
    if cache is not None and past_key_values is not None:
        raise ValueError(f"{where}: pass the cache as cache or as past_key_values (its transformers 4 name), not both")
    return past_key_values if cache is None else cache
