"""Reductions (sum, prod, max, min over any dims), column sums, arg-reductions and scans."""
import numpy as np
from numba import njit, prange

from .op_codes import (ARG_REDUCE_ARGMAX, ARG_REDUCE_ARGMIN, REDUCE_MAX, REDUCE_MIN, REDUCE_PROD, REDUCE_SUM,
                       SCAN_CUMPROD, SCAN_CUMSUM)
from .rows import CHUNK, row_position
from .vector_math import sum_run


@njit(inline="always")
def _reduce_one(op, x, base, ishape, istrides, init):
    last = ishape.size - 1
    inner = ishape[last]
    rows = 1
    for d in range(last):
        rows *= ishape[d]
    s = istrides[last]
    if op == REDUCE_SUM and s == 1:
        acc = init
        for r in range(rows):
            p = row_position(r, ishape, istrides, base)
            acc += sum_run(x[p:p + inner], init)
        return acc
    if op == REDUCE_SUM or op == REDUCE_PROD:
        acc = init
        for r in range(rows):
            p = row_position(r, ishape, istrides, base)
            for j in range(inner):
                acc = acc + x[p + j * s] if op == REDUCE_SUM else acc * x[p + j * s]
        return acc
    acc2 = x[base]
    for r in range(rows):
        p = row_position(r, ishape, istrides, base)
        for j in range(inner):
            v = x[p + j * s]
            if op == REDUCE_MAX:
                if v > acc2 or v != v:
                    acc2 = v
            elif v < acc2 or v != v:
                acc2 = v
            if acc2 != acc2:
                return acc2
    return acc2


@njit(inline="always")
def _reduce_kernel_body(op, x, xo, oshape, ostrides, ishape, istrides, init, out, o):
    base = row_position(o, oshape, ostrides, xo)
    out[o] = _reduce_one(op, x, base, ishape, istrides, init)


@njit(inline="always")
def _check_reduce_code(op):
    """Before the loop: a raise inside a prange loop would keep Numba from parallelising it."""
    if op != REDUCE_SUM and op != REDUCE_PROD and op != REDUCE_MAX and op != REDUCE_MIN:
        raise ValueError("reduce: unknown reduce op code")


@njit(cache=True, nogil=True)
def reduce_serial(op, x, xo, oshape, ostrides, ishape, istrides, init, out):
    _check_reduce_code(op)
    for o in range(out.size):
        _reduce_kernel_body(op, x, xo, oshape, ostrides, ishape, istrides, init, out, o)


@njit(cache=True, nogil=True, parallel=True)
def reduce_parallel(op, x, xo, oshape, ostrides, ishape, istrides, init, out):
    _check_reduce_code(op)
    for o in prange(out.size):
        _reduce_kernel_body(op, x, xo, oshape, ostrides, ishape, istrides, init, out, o)


@njit(inline="always")
def _sum_columns(x, xo, ishape, istrides, init, out, lo, hi):
    acc = np.full(hi - lo, init)
    rows = 1
    for d in range(ishape.size - 1):
        rows *= ishape[d]
    for r in range(rows):
        run = x[row_position(r, ishape, istrides, xo) + lo:]
        for j in range(hi - lo):
            acc[j] += run[j]
    for j in range(hi - lo):
        out[lo + j] = acc[j]


@njit(cache=True, nogil=True)
def sum_columns_serial(x, xo, ishape, istrides, init, out, items):
    """out[j] = sum over the reduced positions of x[position + j]: the kept elements are packed, so
    whole rows are added at once (a bias gradient summed over the batch)."""
    for t in range(items):
        _sum_columns(x, xo, ishape, istrides, init, out, t * CHUNK, min(out.size, (t + 1) * CHUNK))


@njit(cache=True, nogil=True, parallel=True)
def sum_columns_parallel(x, xo, ishape, istrides, init, out, items):
    for t in prange(items):
        _sum_columns(x, xo, ishape, istrides, init, out, t * CHUNK, min(out.size, (t + 1) * CHUNK))


@njit(cache=True, nogil=True)
def arg_reduce_kernel(op, x, xo, oshape, ostrides, n, s, out):
    if op != ARG_REDUCE_ARGMAX and op != ARG_REDUCE_ARGMIN:
        raise ValueError("arg_reduce: unknown arg_reduce op code")
    for o in range(out.size):
        base = row_position(o, oshape, ostrides, xo)
        best = x[base]
        at = 0
        for j in range(1, n):
            if best != best:
                break
            v = x[base + j * s]
            if (v > best if op == ARG_REDUCE_ARGMAX else v < best) or v != v:
                best = v
                at = j
        out[o] = at


@njit(cache=True, nogil=True)
def scan_kernel(op, x, xo, xstrides, out, oo, ostrides, oshape, n, xs, os):
    if op != SCAN_CUMSUM and op != SCAN_CUMPROD:
        raise ValueError("scan: unknown scan op code")
    for o in range(out.size // max(n, 1) if n else 0):
        px = row_position(o, oshape, xstrides, xo)
        po = row_position(o, oshape, ostrides, oo)
        acc = x[px]
        out[po] = acc
        for j in range(1, n):
            acc = acc + x[px + j * xs] if op == SCAN_CUMSUM else acc * x[px + j * xs]
            out[po + j * os] = acc
