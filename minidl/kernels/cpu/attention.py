"""Scaled-dot-product attention on the CPU (kernels in ``jit/attention.py``): one blocked pass with an online
softmax instead of the scores, their softmax and two products over the whole (L, S) matrix."""
import numpy as np

from ... import kernels
from ..checks import attention_dropout, attention_geometry, random_stream
from .jit.attention import (SPAN, attention_backward_parallel, attention_backward_serial, attention_parallel,
                            attention_serial)
from .strided import launch


def _addressing(layout, columns=False):
    """(offset, batch, head, row[, column] strides) of a 4-D layout, as the kernels take them."""
    strides = layout.strides if columns else layout.strides[:3]
    return np.array((layout.offset,) + tuple(strides), np.int64)


def _operands(name, q, ql, k, kl, v, vl, mask, ml, packed):
    geo = attention_geometry(name, q, ql, k, kl, v, vl, mask, ml, packed)
    has_mask = mask is not None
    if not has_mask:
        mask, mo = np.zeros(1, q.dtype), np.zeros(5, np.int64)
    else:
        mo = _addressing(ml, columns=True)
    return geo, (q, _addressing(ql), k, _addressing(kl), v, _addressing(vl), mask, mo), has_mask


def _dropout(name, p, seed, offset):
    """The kernels' ``drop`` argument, of one type for every call (so one compilation)."""
    return (attention_dropout(name, p), *random_stream(seed, offset, name))


def _work(geo):
    """Multiply-adds of the pass, which decide whether threads pay (``launch``)."""
    B, H, G, L, S, E, Ev = geo
    return B * H * L * S * (E + Ev)


@kernels.register("attention")
def attention(q, ql, k, kl, v, vl, mask, ml, out, lse, scale, causal, dropout_p, seed, offset):
    B, H, L = ql.shape[0], ql.shape[1], ql.shape[2]
    rows = B * H * L
    geo, operands, has_mask = _operands("attention", q, ql, k, kl, v, vl, mask, ml,
                                        (("out", out, rows * vl.shape[3]), ("lse", lse, rows)))
    items = B * H * ((L + SPAN - 1) // SPAN)
    launch(attention_serial, attention_parallel, _work(geo), *operands, out, lse, np.array(geo, np.int64),
           q.dtype.type(scale), bool(causal), has_mask, _dropout("attention", dropout_p, seed, offset), items)


@kernels.register("attention_backward")
def attention_backward(q, ql, k, kl, v, vl, mask, ml, out, lse, g, dq, dk, dv, scale, causal, dropout_p, seed,
                       offset):
    (B, H, L, E), (S, Ev), Hkv = ql.shape, vl.shape[2:], kl.shape[1]
    rows = B * H * L
    geo, operands, has_mask = _operands("attention_backward", q, ql, k, kl, v, vl, mask, ml, (
        ("out", out, rows * Ev), ("lse", lse, rows), ("gradient", g, rows * Ev), ("dq", dq, rows * E),
        ("dk", dk, B * Hkv * S * E), ("dv", dv, B * Hkv * S * Ev)))
    launch(attention_backward_serial, attention_backward_parallel, 2 * _work(geo), *operands, out, lse, g, dq, dk,
           dv, np.array(geo, np.int64), q.dtype.type(scale), bool(causal), has_mask,
           _dropout("attention_backward", dropout_p, seed, offset), B * Hkv)
