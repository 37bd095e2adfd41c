"""Scaled-dot-product attention on the GPU (csrc/attention.cu): blocks of ROWS query rows (out, lse, dq) or key
rows (dk, dv), a thread per row, over tiles of the other side staged in shared memory; the same checks and
results as the CPU kernels."""
import numpy as np

from .... import kernels
from ...checks import attention_dropout, attention_geometry
from .. import runtime
from .common import FLOATS, kernel, require_dtype
from .random import stream

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


ROWS = 64                 # rows of a block: a thread each
SHARED_BYTES = 48 * 1024  # the shared memory a block may take without opting in to more


def _tile(name, q, E, Ev):
    """Rows per staged tile: as many as fit in a block's shared memory (a key and a value row per staged key in
    the forward and dq; a query row, a gradient row, lse and D per staged query in dk/dv), up to ROWS."""
    per_row = (E + Ev + 2) * q.dtype.itemsize
    if per_row > SHARED_BYTES:
        raise ValueError(f"{name}: head dims E={E}, Ev={Ev} need {per_row} bytes of shared memory per staged row "
                         f"({q.dtype.name}); the CUDA kernels hold at most {SHARED_BYTES}")
    return min(ROWS, SHARED_BYTES // per_row)


def _tail(name, q, geo, scale, causal, has_mask, dropout_p, seed, offset):
    p = attention_dropout(name, dropout_p)
    philox = stream(f"{name} with dropout", seed, offset) if p else (np.uint64(0), np.uint64(0), runtime.NULL)
    B, H, G, L, S, E, Ev = geo
    tile = _tile(name, q, E, Ev)
    return tile, (*(runtime.i64(n) for n in geo), q.dtype.type(scale), runtime.i32(bool(causal)),
                  runtime.i32(has_mask), np.float64(p), *philox, runtime.i64(tile))


def _blocks(rows, heads):
    """Blocks of ROWS rows over ``heads`` heads of ``rows`` rows each."""
    return heads * -(-rows // ROWS)


@kernels.register("attention", "cuda")
def attention(q, ql, k, kl, v, vl, mask, ml, out, lse, scale, causal, dropout_p, seed, offset):
    (B, H, L), (E, Ev) = ql.shape[:3], (ql.shape[3], vl.shape[3])
    geo, operands = _operands("attention", q, ql, k, kl, v, vl, mask, ml,
                              (("out", out, B * H * L * Ev), ("lse", lse, B * H * L)))
    tile, tail = _tail("attention", q, geo, scale, causal, mask is not None, dropout_p, seed, offset)
    runtime.launch_rows(kernel(FILE, "attention", q.dtype), _blocks(L, B * H), *operands, out, lse, *tail,
                        block=ROWS, shared_mem=tile * (E + Ev) * q.dtype.itemsize)


@kernels.register("attention_backward", "cuda")
def attention_backward(q, ql, k, kl, v, vl, mask, ml, out, lse, g, dq, dk, dv, scale, causal, dropout_p, seed,
                       offset):
    (B, H, L, E), (S, Ev), Hkv = ql.shape, vl.shape[2:], kl.shape[1]
    rows = B * H * L
    geo, operands = _operands("attention_backward", q, ql, k, kl, v, vl, mask, ml, (
        ("out", out, rows * Ev), ("lse", lse, rows), ("gradient", g, rows * Ev), ("dq", dq, rows * E),
        ("dk", dk, B * Hkv * S * E), ("dv", dv, B * Hkv * S * Ev)))
    tile, tail = _tail("attention_backward", q, geo, scale, causal, mask is not None, dropout_p, seed, offset)
    size = q.dtype.itemsize
    runtime.launch_rows(kernel(FILE, "attention_dq", q.dtype), _blocks(L, B * H), *operands, out, lse, g, dq, *tail,
                        block=ROWS, shared_mem=tile * (E + Ev) * size)
    runtime.launch_rows(kernel(FILE, "attention_dkv", q.dtype), _blocks(S, B * Hkv), *operands, out, lse, g, dk, dv,
                        *tail, block=ROWS, shared_mem=tile * (E + Ev + 2) * size)
