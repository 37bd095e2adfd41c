"""Attention's own op: the split of a packed projection into per-head views."""
from __future__ import annotations

from ..autograd import Function
from .registry import op
from .shape_ops import stack


class SplitHeads(Function):
    """Views of a projection as (N, heads, seq, head_dim) per part (query, key, value). The backward
    writes all parts' gradients into one packed tensor in a single pass, where slicing views would
    zero-fill and add a full-size gradient per part, then copy the sum back to packed order."""

    @staticmethod
    def forward(ctx, x, parts, heads, batch_first):
        ctx.meta = (tuple(x.shape), batch_first)
        split = x.reshape(tuple(x.shape[:2]) + (parts, heads, x.shape[2] // (parts * heads)))
        return split.permute(2, 0, 3, 1, 4).unbind(0) if batch_first else split.permute(2, 1, 3, 0, 4).unbind(0)

    @staticmethod
    def backward(ctx, *grads):
        shape, batch_first = ctx.meta
        order = (0, 2, 1, 3) if batch_first else (2, 0, 1, 3)   # back to (N, seq, ...) or (seq, N, ...)
        return stack([g.permute(order) for g in grads], 2).reshape(shape), None, None, None


@op("_split_heads", method=False, namespace="nn.functional", samples=lambda t: [
    t.S("split_heads-batch-first", lambda x: [h * (i + 1) for i, h in enumerate(split_heads(x, 3, 2, True))],
        t.rn(2, 3, 12)),
    t.S("split_heads-seq-first", lambda x: split_heads(x, 1, 2, False)[0].exp(), t.NC(t.rn(3, 2, 4), "gap")),
])
def split_heads(x, parts, heads, batch_first):
    """(N, seq, parts*E), or (seq, N, parts*E) when not ``batch_first``: ``parts`` views
    (N, heads, seq, E // heads), as MultiheadAttention needs its query, key and value."""
    return SplitHeads.apply(x, parts, heads, batch_first)
