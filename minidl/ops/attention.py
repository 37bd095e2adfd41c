"""Attention's own ops: the split of a packed projection into per-head views, and scaled-dot-product
attention as one blocked kernel each way (the ``attention`` primitives)."""
from __future__ import annotations

import math

import numpy as np

from .. import _dtype as dt
from ..autograd import Function
from .core import buf, contiguous_data, grad_enabled, kernel, new_like_shape, packed_buffer
from .random import Generator, device_generator, draw
from .registry import op
from .shape_ops import stack
from .views import broadcast_shapes


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


# ----------------------------------------------------------------------------- fused attention
def _unit_rows(t):
    """``t``, or a packed copy when its last dim is not unit-strided (the kernels read rows as runs)."""
    return t if t.shape[-1] == 1 or t._layout.strides[-1] == 1 else contiguous_data(t)


class Attention(Function):
    """softmax(q k^T * scale + mask) v over (B, H, L, E) queries and (B, Hkv, S, E|Ev) keys and values, with
    the L x S scores never stored: the forward saves each row's log-sum-exp, the backward recomputes the
    weights from it. ``mask`` (additive, (B, H, L, S), any strides) takes no gradient. ``drop`` = (p, seed,
    offset): dropout on the weights, drawn in the kernels from the generator state (seed, offset)."""

    @staticmethod
    def forward(ctx, q, k, v, mask, scale, causal, drop):
        inputs = q, k, v
        q, k, v = _unit_rows(q), _unit_rows(k), _unit_rows(v)
        B, H, L = q.shape[:3]
        out = new_like_shape((B, H, L, v.shape[-1]), q.dtype, q)
        lse = new_like_shape((B, H, L), q.dtype, q)
        kernel("attention", q)(buf(q), q._layout, buf(k), k._layout, buf(v), v._layout,
                               None if mask is None else buf(mask), None if mask is None else mask._layout,
                               buf(out), buf(lse), scale, causal, *drop)
        ctx.save_for_backward(*inputs, out, lse)         # (the inputs as given: create_graph differentiates them)
        ctx.mask, ctx.scale, ctx.causal, ctx.drop = mask, scale, causal, drop
        return out

    @staticmethod
    def backward(ctx, g):
        q, k, v, out, lse = ctx.saved_tensors
        mask = ctx.mask
        if grad_enabled():
            return _differentiable_backward(q, k, v, mask, ctx.scale, ctx.causal, ctx.drop, lse, g) + (None,) * 4
        q, k, v = _unit_rows(q), _unit_rows(k), _unit_rows(v)
        dq, dk, dv = (new_like_shape(t.shape, t.dtype, t) for t in (q, k, v))
        kernel("attention_backward", q)(buf(q), q._layout, buf(k), k._layout, buf(v), v._layout,
                                        None if mask is None else buf(mask), None if mask is None else mask._layout,
                                        packed_buffer(out), packed_buffer(lse), packed_buffer(g.to(q.dtype)),
                                        buf(dq), buf(dk), buf(dv), ctx.scale, ctx.causal, *ctx.drop)
        return dq, dk, dv, None, None, None, None


def _differentiable_backward(q, k, v, mask, scale, causal, drop, lse, g):
    """The kernel's gradients written with differentiable ops (under create_graph): the weights P are
    recomputed whole, dV = (P Z)^T g, dS = P (Z g V^T - rowsum(P Z g V^T)) scale, dQ = dS K, dK = dS^T Q, with
    Z dropout's factors drawn again from the forward's generator state (1 without dropout)."""
    B, H, L, E = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    groups = H // Hkv

    def heads(t):   # key/value heads repeated for the query heads they serve
        return t.unsqueeze(2).expand(B, Hkv, groups, S, t.shape[-1]).reshape(B, H, S, t.shape[-1])

    kh, vh = heads(k), heads(v)
    scores = (q @ kh.mT) * scale
    if mask is not None:
        scores = scores + mask
    if causal:
        scores = scores.masked_fill(new_like_shape((L, S), dt.bool_, q).fill_(True).tril().logical_not(), -math.inf)
    dead = (lse == -math.inf).unsqueeze(-1)
    weights = scores.masked_fill(dead, 0.0).softmax(-1).masked_fill(dead, 0.0)
    dp = g @ vh.mT
    if drop[0] > 0:
        factors = _dropout_factors(tuple(weights.shape), weights, drop)
        dp = dp * factors
        kept = weights * factors
    else:
        kept = weights
    ds = weights * (dp - (weights * dp).sum(-1, keepdim=True)) * scale
    dk, dv = ds.mT @ q, kept.mT @ g
    if groups > 1:
        dk, dv = (t.reshape(B, Hkv, groups, S, t.shape[-1]).sum(2) for t in (dk, dv))
    return ds @ kh, dk, dv


def _dropout_factors(shape, like, drop):
    """Dropout's factors (0, or 1 / (1 - p) where kept) over the weights of ``shape``, drawn as F.dropout
    draws them, from the state (seed, offset) the kernels drew from."""
    p, seed, offset = drop
    wide = like.dtype is dt.float64
    u = draw("uniform", shape, dt.float64 if wide else dt.float32, like.device, 0.0, 1.0,
             Generator.at(like.device, seed, offset))
    return (u < 1.0 - p).to(like.dtype) * (1.0 / (1.0 - p))


def _additive(mask, dtype):
    """A bool mask (True = take part) as 0 / -inf of ``dtype``, in the mask's own shape; a float one cast."""
    if mask.dtype is dt.bool_:
        return new_like_shape(tuple(mask.shape), dtype, mask).zero_().masked_fill(mask.logical_not(), -math.inf)
    return mask.to(dtype)


def _mask_samples(t):
    """A bool mask over (L, S) = (3, 5) and an additive one broadcast over heads, (2, 1, 5)."""
    return (t.const(np.arange(15).reshape(3, 5) % 4 > 0), t.const(np.linspace(-1.0, 1.0, 10).reshape(2, 1, 5)))


@op("_fused_attention", method=False, namespace="nn.functional", samples=lambda t: [
    t.S("fused_attention", lambda q, k, v: fused_attention(q, k, v, None, 0.5, False, False),
        t.rn(2, 3, 4), t.rn(2, 5, 4), t.rn(2, 5, 3)),
    t.S("fused_attention-causal-gqa", lambda q, k, v: fused_attention(q, k, v, None, 0.7, True, True),
        t.rn(1, 4, 5, 3), t.rn(1, 2, 3, 3), t.rn(1, 2, 3, 2)),
    t.S("fused_attention-masks", lambda q, k, v: sum(fused_attention(q, k, v, m, 0.5, False, False)
                                                     for m in _mask_samples(t)),
        t.rn(2, 3, 4), t.rn(5, 4), t.rn(2, 5, 3)),
])
def fused_attention(query, key, value, attn_mask, scale: float, is_causal: bool, enable_gqa: bool,
                    dropout_p: float = 0.0):
    """``F.scaled_dot_product_attention`` as the ``attention`` primitives: arguments as checked there
    (``attn_mask`` bool or float, broadcastable to the scores; key/value heads dividing the query heads under
    ``enable_gqa``; dropout_p below 1). float16/bfloat16 are computed in float32. Dropout claims the draws of
    the whole weights tensor from the device's generator, as ``F.dropout`` on the weights would, and the
    kernels keep exactly the elements that draw keeps."""
    (L, E), (S, Ev) = tuple(query.shape[-2:]), tuple(value.shape[-2:])
    if enable_gqa:
        outer = tuple(broadcast_shapes(tuple(query.shape[:-3]), tuple(key.shape[:-3]), tuple(value.shape[:-3])))
        heads, kv_heads = query.shape[-3], key.shape[-3]
        batch = outer + (heads,)
    else:
        batch = tuple(broadcast_shapes(tuple(query.shape[:-2]), tuple(key.shape[:-2]), tuple(value.shape[:-2])))
        outer, heads = batch[:-1], (batch[-1] if batch else 1)
        kv_heads = heads
    compute = dt.compute_dtype(query.dtype)

    def four(t, h, rows, cols):   # (outer..., h, rows, cols) -> (B, h, rows, cols), a view where it can be
        return t.to(compute).expand(outer + (h, rows, cols)).reshape(-1, h, rows, cols)

    mask = None if attn_mask is None else four(_additive(attn_mask, compute), heads, L, S)
    drop = (0.0, 0, 0)
    if dropout_p > 0:
        drop = (float(dropout_p),) + device_generator(query.device).claim(math.prod(batch) * L * S)
    out = Attention.apply(four(query, heads, L, E), four(key, kv_heads, S, E), four(value, kv_heads, S, Ev), mask,
                          float(scale), bool(is_causal), drop)
    return out.reshape(batch + (L, Ev)).to(query.dtype)
