"""Scaled-dot-product attention on the GPU (csrc/attention.cu): a thread per query row for out, lse and dq,
a thread per key row for dk and dv; the same checks and results as the CPU kernels."""
import numpy as np

from .... import kernels
from ...checks import attention_dropout, attention_geometry, random_stream
from .. import runtime
from .common import FLOATS, kernel, require_dtype

FILE = "attention"


def _operands(name, q, ql, k, kl, v, vl, mask, ml, packed):
    """The checked geometry and the kernels' leading arguments (each operand with its Layout struct)."""
    geo = attention_geometry(name, q, ql, k, kl, v, vl, mask, ml, packed)
    require_dtype(q.dtype, FLOATS, name)
    lay = [runtime.layout_arg(l.shape, l.strides, l.offset, name) for l in (ql, kl, vl)]
    if mask is None:
        mask, mlay = runtime.NULL, runtime.layout_arg((1,), (0,), 0, name)
    else:
        mlay = runtime.layout_arg(ml.shape, ml.strides, ml.offset, name)
    return geo, (q, lay[0], k, lay[1], v, lay[2], mask, mlay)


def _tail(name, q, geo, scale, causal, has_mask, dropout_p, seed, offset):
    p = attention_dropout(name, dropout_p)
    if p:
        runtime.refuse_during_capture("attention with dropout", "the generator's state is a kernel argument, so "
                                      "every replay would repeat the dropout drawn at capture")
    return (*(runtime.i64(n) for n in geo), q.dtype.type(scale), runtime.i32(bool(causal)),
            runtime.i32(has_mask), np.float64(p), *random_stream(seed, offset))


@kernels.register("attention", "cuda")
def attention(q, ql, k, kl, v, vl, mask, ml, out, lse, scale, causal, dropout_p, seed, offset):
    rows = ql.shape[0] * ql.shape[1] * ql.shape[2]
    geo, operands = _operands("attention", q, ql, k, kl, v, vl, mask, ml,
                              (("out", out, rows * vl.shape[3]), ("lse", lse, rows)))
    runtime.launch(kernel(FILE, "attention", q.dtype), rows, *operands, out, lse,
                   *_tail("attention", q, geo, scale, causal, mask is not None, dropout_p, seed, offset))


@kernels.register("attention_backward", "cuda")
def attention_backward(q, ql, k, kl, v, vl, mask, ml, out, lse, g, dq, dk, dv, scale, causal, dropout_p, seed,
                       offset):
    (B, H, L, E), (S, Ev), Hkv = ql.shape, vl.shape[2:], kl.shape[1]
    rows = B * H * L
    geo, operands = _operands("attention_backward", q, ql, k, kl, v, vl, mask, ml, (
        ("out", out, rows * Ev), ("lse", lse, rows), ("gradient", g, rows * Ev), ("dq", dq, rows * E),
        ("dk", dk, B * Hkv * S * E), ("dv", dv, B * Hkv * S * Ev)))
    tail = _tail("attention_backward", q, geo, scale, causal, mask is not None, dropout_p, seed, offset)
    runtime.launch(kernel(FILE, "attention_dq", q.dtype), rows, *operands, out, lse, g, dq, *tail)
    runtime.launch(kernel(FILE, "attention_dkv", q.dtype), B * Hkv * S, *operands, out, lse, g, dk, dv, *tail)
