"""The key-value cache of a decoder: each layer's keys and values of every token seen so far, so that a generation
step computes attention for its new tokens only (one token's work a step, not the whole prefix's).

transformers' ``DynamicCache`` names: ``update`` appends a step's keys and values and returns the layer's whole
history; ``get_seq_length``, ``crop``, ``batch_select_indices`` and ``reorder_cache`` let a caller shorten it or keep
some sequences of the batch, which is how a server drops finished sequences from a running batch."""
from __future__ import annotations

import minidl

__all__ = ["DynamicCache"]


class DynamicCache:
    """Per layer, keys and values of shape (batch, key-value heads, tokens, head dim), grown by concatenation."""

    def __init__(self):
        self.keys: list = []
        self.values: list = []

    def update(self, key_states, value_states, layer_idx: int, cache_kwargs=None):
        """Append this step's keys and values to layer ``layer_idx``'s; return the layer's keys and values so far."""
        if layer_idx == len(self.keys):
            self.keys.append(key_states)
            self.values.append(value_states)
        elif layer_idx < len(self.keys):
            self.keys[layer_idx] = minidl.cat([self.keys[layer_idx], key_states], dim=-2)
            self.values[layer_idx] = minidl.cat([self.values[layer_idx], value_states], dim=-2)
        else:
            raise IndexError(f"DynamicCache.update: layer {layer_idx} before layer {len(self.keys)} was cached")
        return self.keys[layer_idx], self.values[layer_idx]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """How many tokens layer ``layer_idx`` holds (0 before the first step)."""
        return self.keys[layer_idx].shape[-2] if layer_idx < len(self.keys) else 0

    def __len__(self) -> int:
        return len(self.keys)

    def crop(self, max_length: int) -> None:
        """Forget every token after the first ``max_length`` (a negative value: that many from the end)."""
        keep = max_length if max_length >= 0 else self.get_seq_length() + max_length
        self.keys = [k[..., :keep, :] for k in self.keys]
        self.values = [v[..., :keep, :] for v in self.values]

    def batch_select_indices(self, indices) -> None:
        """Keep only the sequences at ``indices`` of the batch (in that order)."""
        indices = minidl.as_tensor(indices, dtype=minidl.int64)
        self.keys = [k.index_select(0, indices.to(k.device)) for k in self.keys]
        self.values = [v.index_select(0, indices.to(v.device)) for v in self.values]

    def reorder_cache(self, beam_idx) -> None:
        """Reorder the batch's sequences (``beam_idx[i]``: the sequence that becomes row i)."""
        self.batch_select_indices(beam_idx)

    def reset(self) -> None:
        self.keys, self.values = [], []


def one_cache(cache, past_key_values, where: str):
    """The cache a model's forward was given, as ``cache`` or as ``past_key_values`` (transformers 4's name for it,
    accepted so that callers written for it run unchanged)."""
    if cache is not None and past_key_values is not None:
        raise ValueError(f"{where}: pass the cache as cache or as past_key_values (its transformers 4 name), not both")
    return past_key_values if cache is None else cache
