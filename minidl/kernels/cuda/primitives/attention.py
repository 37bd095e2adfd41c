"""Scaled-dot-product attention on the GPU (csrc/attention.cu): a thread per query row for out, lse and dq,
a thread per key row for dk and dv; the same checks and results as the CPU kernels."""

from .... import kernels
from ...checks import attention_geometry
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


def _tail(q, geo, scale, causal, has_mask):
    return (*(runtime.i64(n) for n in geo), q.dtype.type(scale), runtime.i32(bool(causal)),
            runtime.i32(has_mask))


@kernels.register("attention", "cuda")
def attention(q, ql, k, kl, v, vl, mask, ml, out, lse, scale, causal):
    rows = ql.shape[0] * ql.shape[1] * ql.shape[2]
    geo, operands = _operands("attention", q, ql, k, kl, v, vl, mask, ml,
                              (("out", out, rows * vl.shape[3]), ("lse", lse, rows)))
    runtime.launch(kernel(FILE, "attention", q.dtype), rows, *operands, out, lse,
                   *_tail(q, geo, scale, causal, mask is not None))


@kernels.register("attention_backward", "cuda")
def attention_backward(q, ql, k, kl, v, vl, mask, ml, out, lse, g, dq, dk, dv, scale, causal):
    (B, H, L, E), (S, Ev), Hkv = ql.shape, vl.shape[2:], kl.shape[1]
    rows = B * H * L
    geo, operands = _operands("attention_backward", q, ql, k, kl, v, vl, mask, ml, (
        ("out", out, rows * Ev), ("lse", lse, rows), ("gradient", g, rows * Ev), ("dq", dq, rows * E),
        ("dk", dk, B * Hkv * S * E), ("dv", dv, B * Hkv * S * Ev)))
    tail = _tail(q, geo, scale, causal, mask is not None)
    runtime.launch(kernel(FILE, "attention_dq", q.dtype), rows, *operands, out, lse, g, dq, *tail)
    runtime.launch(kernel(FILE, "attention_dkv", q.dtype), B * Hkv * S, *operands, out, lse, g, dk, dv, *tail)
