"""Elementwise kernels: unary, copy (with conversion), binary, compare and where.

Each has one inlined *item* function (one chunk of one row; a row is the last dim after
``layout.collapse``), driven by a serial loop for small tensors and a ``prange`` loop for large
ones. The op's math comes from formulas.py, picked by its op code; the code is the same for every
element, so the switch costs little next to memory, and packed runs pick it outside the loop.
"""
from numba import njit, prange

from .convert import convert
from .formulas import apply_binary, apply_compare, apply_unary, binary_run, binary_scalar_run, unary_run
from .rows import CHUNK, extent3, item_bounds, row_position, strides3


@njit(inline="always")
def _unary_span(op, x, px, sx, out, po, so, lo, hi):
    if sx == 1 and so == 1:
        unary_run(op, x[px + lo:px + hi], out[po + lo:po + hi])
    else:
        for j in range(lo, hi):
            out[po + j * so] = apply_unary(op, x[px + j * sx])


@njit(inline="always")
def _unary_item(op, x, xo, xs, out, oo, os, shape, t):
    row, lo, hi = item_bounds(t, shape)
    last = shape.size - 1
    _unary_span(op, x, row_position(row, shape, xs, xo), xs[last], out, row_position(row, shape, os, oo),
                os[last], lo, hi)


@njit(cache=True, nogil=True)
def unary_serial(op, x, xo, xs, out, oo, os, shape, items):
    if shape.size > 3:
        for t in range(items):
            _unary_item(op, x, xo, xs, out, oo, os, shape, t)
        return
    n0, n1, inner = extent3(shape)
    x0, x1, x2 = strides3(xs)
    o0, o1, o2 = strides3(os)
    for i in range(n0):
        for j in range(n1):
            for lo in range(0, inner, CHUNK):    # exp makes three passes: keep them in cache
                _unary_span(op, x, xo + i * x0 + j * x1, x2, out, oo + i * o0 + j * o1, o2, lo,
                            min(inner, lo + CHUNK))


@njit(cache=True, nogil=True, parallel=True)
def unary_parallel(op, x, xo, xs, out, oo, os, shape, items):
    for t in prange(items):
        _unary_item(op, x, xo, xs, out, oo, os, shape, t)


@njit(inline="always")
def _copy_span(x, px, sx, out, po, so, lo, hi):
    if sx == 1 and so == 1:
        dst, src = out[po + lo:po + hi], x[px + lo:px + hi]
        for j in range(hi - lo):       # a loop, not slice assignment, which Numba makes 3x slower
            dst[j] = convert(src[j], dst)  # (it guards against overlap; the wrappers never overlap)
    else:
        for j in range(lo, hi):
            out[po + j * so] = convert(x[px + j * sx], out)


@njit(inline="always")
def _copy_item(x, xo, xs, out, oo, os, shape, t):
    row, lo, hi = item_bounds(t, shape)
    last = shape.size - 1
    _copy_span(x, row_position(row, shape, xs, xo), xs[last], out, row_position(row, shape, os, oo), os[last],
               lo, hi)


@njit(cache=True, nogil=True)
def copy_serial(x, xo, xs, out, oo, os, shape, items):
    if shape.size > 3:
        for t in range(items):
            _copy_item(x, xo, xs, out, oo, os, shape, t)
        return
    n0, n1, inner = extent3(shape)
    x0, x1, x2 = strides3(xs)
    o0, o1, o2 = strides3(os)
    for i in range(n0):
        for j in range(n1):
            _copy_span(x, xo + i * x0 + j * x1, x2, out, oo + i * o0 + j * o1, o2, 0, inner)


@njit(cache=True, nogil=True, parallel=True)
def copy_parallel(x, xo, xs, out, oo, os, shape, items):
    for t in prange(items):
        _copy_item(x, xo, xs, out, oo, os, shape, t)


# ----------------------------------------------------------------------------- binary / compare
@njit(inline="always")
def _binary_span(op, a, pa, sa, b, pb, sb, out, po, so, lo, hi):
    if sa == 1 and sb == 1 and so == 1:
        binary_run(op, a[pa + lo:pa + hi], b[pb + lo:pb + hi], out[po + lo:po + hi])
    elif sa == 1 and sb == 0 and so == 1:
        binary_scalar_run(op, a[pa + lo:pa + hi], b[pb], out[po + lo:po + hi])
    else:
        for j in range(lo, hi):
            out[po + j * so] = apply_binary(op, a[pa + j * sa], b[pb + j * sb])


@njit(inline="always")
def _binary_item(op, a, ao, as_, b, bo, bs, out, oo, os, shape, t):
    row, lo, hi = item_bounds(t, shape)
    last = shape.size - 1
    _binary_span(op, a, row_position(row, shape, as_, ao), as_[last], b, row_position(row, shape, bs, bo),
                 bs[last], out, row_position(row, shape, os, oo), os[last], lo, hi)


@njit(cache=True, nogil=True)
def binary_serial(op, a, ao, as_, b, bo, bs, out, oo, os, shape, items):
    if shape.size > 3:
        for t in range(items):
            _binary_item(op, a, ao, as_, b, bo, bs, out, oo, os, shape, t)
        return
    n0, n1, inner = extent3(shape)
    a0, a1, a2 = strides3(as_)
    b0, b1, b2 = strides3(bs)
    o0, o1, o2 = strides3(os)
    if a2 == 1 and o2 == 1 and b2 == 0:        # one value of b per row (a bias), decided once:
        for i in range(n0):                     # a branch per row would keep LLVM from unswitching
            for j in range(n1):
                pa, po = ao + i * a0 + j * a1, oo + i * o0 + j * o1
                binary_scalar_run(op, a[pa:pa + inner], b[bo + i * b0 + j * b1], out[po:po + inner])
        return
    for i in range(n0):
        for j in range(n1):
            _binary_span(op, a, ao + i * a0 + j * a1, a2, b, bo + i * b0 + j * b1, b2, out, oo + i * o0 + j * o1, o2,
                         0, inner)


@njit(cache=True, nogil=True, parallel=True)
def binary_parallel(op, a, ao, as_, b, bo, bs, out, oo, os, shape, items):
    for t in prange(items):
        _binary_item(op, a, ao, as_, b, bo, bs, out, oo, os, shape, t)


@njit(inline="always")
def _compare_span(op, a, pa, sa, b, pb, sb, out, po, so, lo, hi):
    for j in range(lo, hi):
        out[po + j * so] = apply_compare(op, a[pa + j * sa], b[pb + j * sb])


@njit(inline="always")
def _compare_item(op, a, ao, as_, b, bo, bs, out, oo, os, shape, t):
    row, lo, hi = item_bounds(t, shape)
    last = shape.size - 1
    _compare_span(op, a, row_position(row, shape, as_, ao), as_[last], b, row_position(row, shape, bs, bo),
                  bs[last], out, row_position(row, shape, os, oo), os[last], lo, hi)


@njit(cache=True, nogil=True)
def compare_serial(op, a, ao, as_, b, bo, bs, out, oo, os, shape, items):
    for t in range(items):                      # masks are rarely on a hot path: no row walk here
        _compare_item(op, a, ao, as_, b, bo, bs, out, oo, os, shape, t)


@njit(cache=True, nogil=True, parallel=True)
def compare_parallel(op, a, ao, as_, b, bo, bs, out, oo, os, shape, items):
    for t in prange(items):
        _compare_item(op, a, ao, as_, b, bo, bs, out, oo, os, shape, t)


# ----------------------------------------------------------------------------- where
@njit(inline="always")
def _where_item(c, co, cs, a, ao, as_, b, bo, bs, out, oo, os, shape, t):
    row, lo, hi = item_bounds(t, shape)
    last = shape.size - 1
    pc = row_position(row, shape, cs, co)
    pa = row_position(row, shape, as_, ao)
    pb = row_position(row, shape, bs, bo)
    po = row_position(row, shape, os, oo)
    sc, sa, sb, so = cs[last], as_[last], bs[last], os[last]
    for j in range(lo, hi):
        out[po + j * so] = a[pa + j * sa] if c[pc + j * sc] else b[pb + j * sb]


@njit(cache=True, nogil=True)
def where_serial(c, co, cs, a, ao, as_, b, bo, bs, out, oo, os, shape, items):
    for t in range(items):
        _where_item(c, co, cs, a, ao, as_, b, bo, bs, out, oo, os, shape, t)


@njit(cache=True, nogil=True, parallel=True)
def where_parallel(c, co, cs, a, ao, as_, b, bo, bs, out, oo, os, shape, items):
    for t in prange(items):
        _where_item(c, co, cs, a, ao, as_, b, bo, bs, out, oo, os, shape, t)
