"""The attention masks of the Hugging Face models, as booleans for ``scaled_dot_product_attention`` (True: the
query may look at the key)."""
from __future__ import annotations

import minidl

__all__ = ["causal_mask", "padding_mask"]


def causal_mask(attention_mask, query_length: int, past_length: int, device):
    """(batch or 1, 1, queries, keys): query i (the (past_length + i)-th token) sees keys 0 .. past_length + i that
    ``attention_mask`` (batch, keys; 1 = a token, 0 = padding; None = all tokens) keeps."""
    keys = past_length + query_length
    rows = minidl.arange(past_length, keys, device=device).reshape(-1, 1)
    mask = (minidl.arange(keys, device=device).reshape(1, -1) <= rows).reshape(1, 1, query_length, keys)
    if attention_mask is None:
        return mask
    return mask & padding_mask(attention_mask, keys)


def padding_mask(attention_mask, keys: int):
    """(batch, 1, 1, keys): the keys ``attention_mask`` (batch, keys) keeps."""
    if attention_mask.ndim != 2 or attention_mask.shape[-1] != keys:
        raise ValueError(f"attention_mask must be (batch, {keys}) (one entry per token, cached ones included), "
                         f"got {list(attention_mask.shape)}")
    return (attention_mask != 0).reshape(attention_mask.shape[0], 1, 1, keys)
