"""Every Numba-compiled function of the CPU backend, in one module.

Numba's on-disk cache keys a compiled kernel on the source of *its own file*;
helpers inlined from another file could change without invalidating it. Keeping
all jitted code here means any edit recompiles everything that could depend on it.
The Python wrappers that plan layouts and pick kernels live beside this file.

Kernel shape: each primitive has one inlined *item* function (one chunk of one
row; a row is the last dim after ``layout.collapse``), driven by a serial loop
for small tensors and a ``prange`` loop for large ones. Elementwise scalar
functions are selected by op code (the op's index in ``minidl.kernels``); the
code is the same for every element, so the branch costs little next to memory.
"""
import math

import numpy as np
from numba import njit, prange, types
from numba.extending import intrinsic, overload

from .. import _bfloat16


# ----------------------------------------------------------------------------- scalar functions
# Float-only branches go through these helpers, overloaded per argument type, so that integer
# kernels never see a float expression: numba unifies the types of all ``return``s, and a float
# branch would make int64 results round-trip through float64 (losing values beyond 2**53).
def _float_unary(op, x):
    """Plain-Python twin of the overload below (runs only with NUMBA_DISABLE_JIT=1)."""
    return x if isinstance(x, (int, np.integer)) else _float_unary_body(op, x)


@overload(_float_unary)
def _float_unary_impl(op, x):
    if isinstance(x, types.Integer):
        return lambda op, x: x  # floor/ceil/round/trunc of an integer; float-only ops never get ints
    return lambda op, x: _float_unary_body(op, x)


@njit(inline="always")
def _float_unary_body(op, x):
    if op == 3:
        return math.exp(x)
    elif op == 4:
        return math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)
    elif op == 5:
        return math.log1p(x) if x > -1 else (-math.inf if x == -1 else math.nan)
    elif op == 6:
        return math.expm1(x)
    elif op == 7:
        return math.sqrt(x) if x >= 0 else math.nan
    elif op == 8:
        return 1 / math.sqrt(x) if x > 0 else (math.inf if x == 0 else math.nan)
    elif op == 9:
        return 1 / x if x != 0 else math.copysign(math.inf, x)
    elif op == 10:
        return math.sin(x)
    elif op == 11:
        return math.cos(x)
    elif op == 12:
        return math.tan(x)
    elif op == 13:
        return math.tanh(x)
    elif op == 14:
        if x >= 0:
            return 1 / (1 + math.exp(-x))
        e = math.exp(x)
        return e / (1 + e)
    elif op == 16:
        return math.erf(x)
    elif op == 17:
        return np.floor(x)
    elif op == 18:
        return np.ceil(x)
    elif op == 19:
        return np.rint(x)
    else:
        return np.trunc(x)


def _float_divide(op, x, y):
    """Plain-Python twin of the overload below (runs only with NUMBA_DISABLE_JIT=1)."""
    if isinstance(x, (int, np.integer)) and isinstance(y, (int, np.integer)):
        return x // y
    return _float_divide_body(op, x, y)


@overload(_float_divide)
def _float_divide_impl(op, x, y):
    if isinstance(x, types.Integer) and isinstance(y, types.Integer):
        return lambda op, x, y: x // y  # unused: true division always computes in floating point
    return lambda op, x, y: _float_divide_body(op, x, y)


@njit(inline="always")
def _float_divide_body(op, x, y):
    """x / y (op 3), x // y (op 4), x % y (op 5) for floats; IEEE results for y == 0, as in PyTorch."""
    if y != 0:
        if op == 3:
            return x / y
        return x // y if op == 4 else x % y
    if op == 5 or x != x or x == 0:
        return math.nan
    return math.copysign(math.inf, x) * math.copysign(1.0, y)


@njit(inline="always")
def apply_unary(op, x):
    if op == 0:
        return -x
    elif op == 1:
        return abs(x)
    elif op == 2:
        return (x > 0) - (x < 0)  # 0 for NaN, as in PyTorch
    elif op == 15:
        return x if not x < 0 else 0  # keeps NaN; +0 (x * 0 was -0, and NaN for -inf)
    elif op == 21:
        return x * x
    else:
        return _float_unary(op, x)


@njit(inline="always")
def apply_binary(op, x, y):
    if op == 0:
        return x + y
    elif op == 1:
        return x - y
    elif op == 2:
        return x * y
    elif op == 3 or ((op == 4 or op == 5) and y == 0):
        return _float_divide(op, x, y)
    elif op == 4:
        return x // y
    elif op == 5:
        return x % y
    elif op == 6:
        return x ** y
    elif op == 7:
        return x if (x >= y or x != x) else y
    elif op == 8:
        return x if (x <= y or x != x) else y
    elif op == 10:
        return _atan2(x, y)
    else:
        return x if y > 0 else x * 0


@njit(inline="always")
def apply_compare(op, x, y):
    if op == 0:
        return x == y
    elif op == 1:
        return x != y
    elif op == 2:
        return x < y
    elif op == 3:
        return x <= y
    elif op == 4:
        return x > y
    elif op == 5:
        return x >= y
    elif op == 6:
        return bool(x) and bool(y)
    elif op == 7:
        return bool(x) or bool(y)
    else:
        return bool(x) != bool(y)


# ----------------------------------------------------------------------------- work splitting
CHUNK = 4096


@njit(inline="always")
def row_position(row, shape, strides, offset):
    """Buffer position of element 0 of the ``row``-th row (rows run over all dims but the last)."""
    pos = offset
    rest = row + 0  # a new value: ``row`` may be a prange index, which Numba forbids overwriting
    for d in range(shape.size - 2, -1, -1):
        n = shape[d]
        pos += (rest % n) * strides[d]
        rest //= n
    return pos


@njit(inline="always")
def item_bounds(t, shape):
    """(row, first column, end column) of work item ``t``."""
    inner = shape[shape.size - 1]
    nchunks = (inner + CHUNK - 1) // CHUNK
    row = t // nchunks
    lo = (t % nchunks) * CHUNK
    return row, lo, min(inner, lo + CHUNK)


# ----------------------------------------------------------------------------- packed runs
# The unit-stride fast path works on slices cut to the run, indexed from 0 by a range
# loop, and decides the op *outside* the loop: both let LLVM vectorise (SIMD) the common
# ops. Ops without a loop of their own go element by element through apply_*.
def _exp_run(x, out):
    """Plain-Python twin of the overload below (runs only with NUMBA_DISABLE_JIT=1)."""
    for j in range(out.size):
        out[j] = math.exp(x[j])


@overload(_exp_run)
def _exp_run_impl(x, out):
    if x.dtype == types.float32:
        return lambda x, out: _exp_float32(x, out)
    return lambda x, out: _exp_libm(x, out)


@njit(inline="always")
def _exp_libm(x, out):
    for j in range(out.size):
        out[j] = math.exp(x[j])


@njit(inline="always")
def _exp_float32(x, out):
    """exp in float32 without libm calls, so that LLVM vectorises it (about 1 ulp).

    x = n*ln2 + r with |r| <= ln2/2; exp(r) by a degree-6 polynomial (Cephes' expf
    coefficients); 2**n built directly as exponent bits. Inputs outside the normal range
    (overflow, subnormal results, nan) are redone with libm in a rarely taken pass.
    """
    m = out.size
    bits = np.empty(m, np.int32)
    lo, hi = np.float32(-87.0), np.float32(88.5)
    for j in range(m):
        v = x[j]
        v = v if v > lo else lo
        v = v if v < hi else hi
        n = np.floor(v * np.float32(1.44269504088896341) + np.float32(0.5))
        r = v - n * np.float32(0.693359375) - n * np.float32(-2.12194440e-4)
        p = np.float32(1.9875691500e-4) * r + np.float32(1.3981999507e-3)
        p = p * r + np.float32(8.3334519073e-3)
        p = p * r + np.float32(4.1665795894e-2)
        p = p * r + np.float32(1.6666665459e-1)
        p = p * r + np.float32(5.0000001201e-1)
        out[j] = p * (r * r) + r + np.float32(1.0)
        bits[j] = (np.int32(n) + np.int32(127)) << np.int32(23)
    scale = bits.view(np.float32)
    for j in range(m):
        out[j] = out[j] * scale[j]
    for j in range(m):
        v = x[j]
        if not (v > lo and v < hi):
            out[j] = math.exp(v)


@njit(inline="always")
def _unary_run(op, x, out):
    if op == 0:
        for j in range(out.size):
            out[j] = -x[j]
    elif op == 1:
        for j in range(out.size):
            out[j] = abs(x[j])
    elif op == 3:
        _exp_run(x, out)
    elif op == 15:
        for j in range(out.size):
            out[j] = x[j] if not x[j] < 0 else 0
    elif op == 21:
        for j in range(out.size):
            out[j] = x[j] * x[j]
    else:
        for j in range(out.size):
            out[j] = apply_unary(op, x[j])


@njit(inline="always")
def _binary_run(op, a, b, out):
    if op == 0:
        for j in range(out.size):
            out[j] = a[j] + b[j]
    elif op == 1:
        for j in range(out.size):
            out[j] = a[j] - b[j]
    elif op == 2:
        for j in range(out.size):
            out[j] = a[j] * b[j]
    elif op == 9:
        for j in range(out.size):
            out[j] = a[j] if b[j] > 0 else a[j] * 0
    else:
        for j in range(out.size):
            out[j] = apply_binary(op, a[j], b[j])


@njit(inline="always")
def _binary_scalar_run(op, a, y, out):
    if op == 0:
        for j in range(out.size):
            out[j] = a[j] + y
    elif op == 1:
        for j in range(out.size):
            out[j] = a[j] - y
    elif op == 2:
        for j in range(out.size):
            out[j] = a[j] * y
    else:
        for j in range(out.size):
            out[j] = apply_binary(op, a[j], y)


# ----------------------------------------------------------------------------- serial row loops
# Parallel kernels find each work item's row with row_position (a division per dim and operand).
# Serial kernels loop over rows directly: layouts collapse to at most three dims almost always,
# so they walk (outer, middle) rows with every extent and stride held in a local scalar. (Read
# from the stride arrays inside the loop, LLVM reloads them after every store to the output,
# and short rows, such as a (64, 64, 121) permute's 4096 rows, run 5x slower.)
@njit(inline="always")
def _extent3(shape):
    """(outer, middle, inner) extents of a layout of at most three dims."""
    n = shape.size
    return (shape[0] if n == 3 else 1), (shape[n - 2] if n >= 2 else 1), shape[n - 1]


@njit(inline="always")
def _strides3(strides):
    """(outer, middle, inner) strides, matching _extent3 (0 for the dims it adds)."""
    n = strides.size
    return (strides[0] if n == 3 else 0), (strides[n - 2] if n >= 2 else 0), strides[n - 1]


# ----------------------------------------------------------------------------- unary / copy
@njit(inline="always")
def _unary_span(op, x, px, sx, out, po, so, lo, hi):
    if sx == 1 and so == 1:
        _unary_run(op, x[px + lo:px + hi], out[po + lo:po + hi])
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
    n0, n1, inner = _extent3(shape)
    x0, x1, x2 = _strides3(xs)
    o0, o1, o2 = _strides3(os)
    for i in range(n0):
        for j in range(n1):
            for lo in range(0, inner, CHUNK):    # exp makes three passes: keep them in cache
                _unary_span(op, x, xo + i * x0 + j * x1, x2, out, oo + i * o0 + j * o1, o2, lo,
                            min(inner, lo + CHUNK))


@njit(cache=True, nogil=True, parallel=True)
def unary_parallel(op, x, xo, xs, out, oo, os, shape, items):
    for t in prange(items):
        _unary_item(op, x, xo, xs, out, oo, os, shape, t)


# ----------------------------------------------------------------------------- dtype conversion
# Float to integer is undefined in C (and LLVM) outside the target's range, and the vectorised and
# scalar loops then disagree. minidl's rule is PyTorch's result on x86: truncate toward zero into
# int32 (signed targets of up to 32 bits) or int64 (the others), where NaN and values outside that
# range become its minimum; then keep the low bits. Everything else is C's conversion.
INT32_MIN = -(1 << 31)
INT64_MIN = -(1 << 63)


def _convert(x, out):
    """``x`` converted to ``out``'s dtype. Plain-Python twin of the overload below (runs only with
    NUMBA_DISABLE_JIT=1)."""
    to = out.dtype
    if to == np.uint16:
        return x if isinstance(x, np.uint16) else _to_bfloat16(x)
    if isinstance(x, np.uint16):
        x = _from_bfloat16(x)
    if isinstance(x, (float, np.floating)) and to.kind in "iu":
        via32 = to.kind == "i" and to.itemsize <= 4
        inside = -2.0 ** 31 - 1 < x < 2.0 ** 31 if via32 else -2.0 ** 63 <= x < 2.0 ** 63
        whole = math.trunc(float(x)) if inside else (INT32_MIN if via32 else INT64_MIN)
        return np.array(whole).astype(to)  # keeps the low bits
    return np.array(x).astype(to)


def _bitcast(source, target):
    """An intrinsic that reads a ``source`` scalar's bits as a ``target`` (a reinterpretation, no conversion)."""
    @intrinsic
    def cast(typingctx, x):
        if x != source:
            return None
        return target(x), lambda context, builder, sig, args: builder.bitcast(args[0],
                                                                              context.get_value_type(target))
    return cast


_float32_bits = _bitcast(types.float32, types.uint32)
_float32_from_bits = _bitcast(types.uint32, types.float32)


# bfloat16 is stored as its bits, in uint16 (the only uint16 arrays minidl has); the formulas are
# those of minidl/_bfloat16.py, whose functions are the plain-Python twins.
def _to_bfloat16(x):
    return _bfloat16.from_values(x)[()]


@overload(_to_bfloat16)
def _to_bfloat16_impl(x):
    def impl(x):
        u = _float32_bits(np.float32(x))  # integers and float64 by way of float32, as in PyTorch
        if (u & 0x7FFFFFFF) > 0x7F800000:
            return np.uint16((u >> 16) | 0x40)  # NaN: stays one, quiet, with its sign
        return np.uint16((u + 0x7FFF + ((u >> 16) & 1)) >> 16)  # round to nearest, ties to even
    return impl


def _from_bfloat16(bits):
    return _bfloat16.to_float32(bits)[()]


@overload(_from_bfloat16)
def _from_bfloat16_impl(bits):
    return lambda bits: _float32_from_bits(np.uint32(np.uint32(bits) << 16))


@overload(_convert)
def _convert_impl(x, out):
    to = out.dtype
    if x == types.uint16 and to == types.uint16:
        return lambda x, out: x
    if to == types.uint16:
        return lambda x, out: _to_bfloat16(x)
    if x == types.uint16:
        return lambda x, out: _convert(_from_bfloat16(x), out)
    if not (isinstance(x, types.Float) and isinstance(to, types.Integer)):
        return lambda x, out: x  # the store converts
    if to.signed and to.bitwidth <= 32:
        return lambda x, out: np.int32(x) if -2147483649.0 < x < 2147483648.0 else np.int32(INT32_MIN)
    return lambda x, out: (np.int64(x) if -9223372036854775808.0 <= x < 9223372036854775808.0
                           else np.int64(INT64_MIN))


@njit(inline="always")
def _copy_span(x, px, sx, out, po, so, lo, hi):
    if sx == 1 and so == 1:
        dst, src = out[po + lo:po + hi], x[px + lo:px + hi]
        for j in range(hi - lo):       # a loop, not slice assignment, which Numba makes 3x slower
            dst[j] = _convert(src[j], dst)  # (it guards against overlap; the wrappers never overlap)
    else:
        for j in range(lo, hi):
            out[po + j * so] = _convert(x[px + j * sx], out)


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
    n0, n1, inner = _extent3(shape)
    x0, x1, x2 = _strides3(xs)
    o0, o1, o2 = _strides3(os)
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
        _binary_run(op, a[pa + lo:pa + hi], b[pb + lo:pb + hi], out[po + lo:po + hi])
    elif sa == 1 and sb == 0 and so == 1:
        _binary_scalar_run(op, a[pa + lo:pa + hi], b[pb], out[po + lo:po + hi])
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
    n0, n1, inner = _extent3(shape)
    a0, a1, a2 = _strides3(as_)
    b0, b1, b2 = _strides3(bs)
    o0, o1, o2 = _strides3(os)
    if a2 == 1 and o2 == 1 and b2 == 0:        # one value of b per row (a bias), decided once:
        for i in range(n0):                     # a branch per row would keep LLVM from unswitching
            for j in range(n1):
                pa, po = ao + i * a0 + j * a1, oo + i * o0 + j * o1
                _binary_scalar_run(op, a[pa:pa + inner], b[bo + i * b0 + j * b1], out[po:po + inner])
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


# ----------------------------------------------------------------------------- reductions and scans
@njit(fastmath={"reassoc"})
def _sum_run(v, zero):
    """Sum of a packed run. ``reassoc`` (and nothing else: NaN and inf keep their meaning) lets
    LLVM split the one chain of dependent adds into vector accumulators: 3x faster, and closer to
    the exact sum than one running total."""
    acc = zero
    for j in range(v.size):
        acc += v[j]
    return acc


@njit(inline="always")
def _reduce_one(op, x, base, ishape, istrides, init):
    last = ishape.size - 1
    inner = ishape[last]
    rows = 1
    for d in range(last):
        rows *= ishape[d]
    s = istrides[last]
    if op == 0 and s == 1:
        acc = init
        for r in range(rows):
            p = row_position(r, ishape, istrides, base)
            acc += _sum_run(x[p:p + inner], init)
        return acc
    if op == 0 or op == 1:
        acc = init
        for r in range(rows):
            p = row_position(r, ishape, istrides, base)
            for j in range(inner):
                acc = acc + x[p + j * s] if op == 0 else acc * x[p + j * s]
        return acc
    acc2 = x[base]
    for r in range(rows):
        p = row_position(r, ishape, istrides, base)
        for j in range(inner):
            v = x[p + j * s]
            if op == 2:
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


@njit(cache=True, nogil=True)
def reduce_serial(op, x, xo, oshape, ostrides, ishape, istrides, init, out):
    for o in range(out.size):
        _reduce_kernel_body(op, x, xo, oshape, ostrides, ishape, istrides, init, out, o)


@njit(cache=True, nogil=True, parallel=True)
def reduce_parallel(op, x, xo, oshape, ostrides, ishape, istrides, init, out):
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
    for o in range(out.size):
        base = row_position(o, oshape, ostrides, xo)
        best = x[base]
        at = 0
        for j in range(1, n):
            if best != best:
                break
            v = x[base + j * s]
            if (v > best if op == 0 else v < best) or v != v:
                best = v
                at = j
        out[o] = at


@njit(cache=True, nogil=True)
def scan_kernel(op, x, xo, xstrides, out, oo, ostrides, oshape, n, xs, os):
    for o in range(out.size // max(n, 1) if n else 0):
        px = row_position(o, oshape, xstrides, xo)
        po = row_position(o, oshape, ostrides, oo)
        acc = x[px]
        out[po] = acc
        for j in range(1, n):
            acc = acc + x[px + j * xs] if op == 0 else acc * x[px + j * xs]
            out[po + j * os] = acc


# ----------------------------------------------------------------------------- gather / scatter
@njit(inline="always")
def _flat_position(flat, shape, strides, offset):
    pos = offset
    rest = flat + 0
    for d in range(shape.size - 1, -1, -1):
        n = shape[d]
        pos += (rest % n) * strides[d]
        rest //= n
    return pos


# take and put check every flat index against the element count n and skip bad ones, returning
# how many there were (the wrapper raises IndexError); put checks them all before writing any.
@njit(inline="always")
def _take_one(src, so, shape, strides, n, index, out, i):
    """Gather element i; 1 when its index is out of range (then nothing is read), else 0."""
    f = index[i]
    if f < 0 or f >= n:
        return 1
    out[i] = src[_flat_position(f, shape, strides, so)]
    return 0


@njit(cache=True, nogil=True)
def take_serial(src, so, shape, strides, n, index, out):
    bad = 0
    for i in range(index.size):
        bad += _take_one(src, so, shape, strides, n, index, out, i)
    return bad


@njit(cache=True, nogil=True, parallel=True)
def take_parallel(src, so, shape, strides, n, index, out):
    bad = 0
    for i in prange(index.size):
        bad += _take_one(src, so, shape, strides, n, index, out, i)
    return bad


@njit(cache=True, nogil=True)
def check_index_kernel(index, size, stride, wrap, out):
    """out = stride * index (+ size where negative, when wrap); the position of the first index
    out of range, or -1."""
    bad = -1
    for i in range(index.size):
        v = index[i]
        w = v + size if wrap and v < 0 else v
        if (w < 0 or w >= size) and bad < 0:
            bad = i
        out[i] = w * stride
    return bad


@njit(cache=True, nogil=True)
def put_kernel(dst, do, shape, strides, n, index, values, accumulate):
    """Serial on purpose: duplicate indices must accumulate without races."""
    for i in range(index.size):
        if index[i] < 0 or index[i] >= n:
            return 1
    for i in range(index.size):
        p = _flat_position(index[i], shape, strides, do)
        if accumulate:
            dst[p] += values[i]
        else:
            dst[p] = values[i]
    return 0


@njit(cache=True, nogil=True)
def nonzero_kernel(x, xo, shape, strides, n):
    count = 0
    for i in range(n):
        if x[_flat_position(i, shape, strides, xo)]:
            count += 1
    out = np.empty(count, np.int64)
    k = 0
    for i in range(n):
        if x[_flat_position(i, shape, strides, xo)]:
            out[k] = i
            k += 1
    return out


# ----------------------------------------------------------------------------- convolution / pooling
# Planes are the (batch, channel) pairs of a contiguous (N, C, H, W) input, numbered p = n*C + c.
# A column buffer is (C*kh*kw, N, oh*ow) for ``chans`` = C: row c*kh*kw + ki*kw + kj, image n,
# window position i*ow + j. With chans = planes (N taken as 1) that is the (N, C*kh*kw, oh*ow)
# layout of unfold, where plane p owns rows p*kh*kw ... (p+1)*kh*kw - 1.
# The wrapper validated every size, so no index here can leave its buffer.

@njit(inline="always")
def _valid_columns(off, w, sw, ow):
    """The window columns j with 0 <= j*sw + off < w, as a range [lo, hi)."""
    lo = 0 if off >= 0 else (sw - 1 - off) // sw
    hi = (w - 1 - off) // sw + 1
    hi = min(max(hi, 0), ow)
    return min(lo, hi), hi


@njit(inline="always")
def _im2col_plane(x, out, p, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    L = oh * ow
    images = planes // chans
    rstride = images * L                                   # from one column row to the next
    base = ((p % chans) * kh * kw * images + p // chans) * L
    xbase = p * h * w
    for ki in range(kh):
        for kj in range(kw):
            row = base + (ki * kw + kj) * rstride
            off = kj * dw - pw
            lo, hi = _valid_columns(off, w, sw, ow)
            for i in range(oh):
                y = i * sh - ph + ki * dh
                o = row + i * ow
                if y < 0 or y >= h:
                    for j in range(ow):
                        out[o + j] = 0
                    continue
                src = xbase + y * w + off
                for j in range(lo):
                    out[o + j] = 0
                if sw == 1:
                    for j in range(lo, hi):
                        out[o + j] = x[src + j]
                else:
                    for j in range(lo, hi):
                        out[o + j] = x[src + j * sw]
                for j in range(hi, ow):
                    out[o + j] = 0


@njit(inline="always")
def _im2col_plane_dense(x, out, p, chans, planes, h, w, kh, kw, oh, ow):
    """_im2col_plane for stride 1, no padding, no dilation: each tap is a sub-block of the image.
    (2-D views indexed by loop counters: no index can be negative, so the copies vectorise.)"""
    L = oh * ow
    images = planes // chans
    rstride = images * L
    base = ((p % chans) * kh * kw * images + p // chans) * L
    img = x[p * h * w:(p + 1) * h * w].reshape(h, w)
    for ki in range(kh):
        for kj in range(kw):
            row = base + (ki * kw + kj) * rstride
            dst = out[row:row + L].reshape(oh, ow)
            src = img[ki:ki + oh, kj:kj + ow]
            for i in range(oh):
                for j in range(ow):
                    dst[i, j] = src[i, j]


@njit(inline="always")
def _im2col_any(x, out, p, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    if sh == 1 and sw == 1 and ph == 0 and pw == 0 and dh == 1 and dw == 1:
        _im2col_plane_dense(x, out, p, chans, planes, h, w, kh, kw, oh, ow)
    else:
        _im2col_plane(x, out, p, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)


@njit(cache=True, nogil=True)
def im2col_serial(x, out, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    for p in range(planes):
        _im2col_any(x, out, p, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)


@njit(cache=True, nogil=True, parallel=True)
def im2col_parallel(x, out, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    for p in prange(planes):
        _im2col_any(x, out, p, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)


@njit(inline="always")
def _col2im_plane(col, out, p, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    """out[plane p] = the sum of the column entries that im2col read from it (one plane: no races)."""
    L = oh * ow
    images = planes // chans
    rstride = images * L
    base = ((p % chans) * kh * kw * images + p // chans) * L
    img = out[p * h * w:(p + 1) * h * w]       # slices indexed from 0 by loop counters vectorise
    for q in range(h * w):
        img[q] = 0
    for ki in range(kh):
        for kj in range(kw):
            row = base + (ki * kw + kj) * rstride
            off = kj * dw - pw
            lo, hi = _valid_columns(off, w, sw, ow)
            for i in range(oh):
                y = i * sh - ph + ki * dh
                if y < 0 or y >= h:
                    continue
                c = col[row + i * ow + lo:row + i * ow + hi]
                if sw == 1:
                    d = img[y * w + off + lo:y * w + off + hi]
                    for j in range(hi - lo):
                        d[j] += c[j]
                else:
                    d = img[y * w:(y + 1) * w]
                    for j in range(hi - lo):
                        d[(j + lo) * sw + off] += c[j]


@njit(cache=True, nogil=True)
def col2im_serial(col, out, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    for p in range(planes):
        _col2im_plane(col, out, p, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)


@njit(cache=True, nogil=True, parallel=True)
def col2im_parallel(col, out, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    for p in prange(planes):
        _col2im_plane(col, out, p, chans, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)


@njit(inline="always")
def _max_pool_plane(x, out, idx, p, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    """Max over each window (padding never wins); idx is the flat h*w position in the plane.
    The first maximum wins; NaN propagates (it is taken and kept)."""
    xbase = p * h * w
    obase = p * oh * ow
    for i in range(oh):
        for j in range(ow):
            best = x[xbase]
            at = -1
            for ki in range(kh):
                y = i * sh - ph + ki * dh
                if y < 0 or y >= h:
                    continue
                for kj in range(kw):
                    xx = j * sw - pw + kj * dw
                    if xx < 0 or xx >= w:
                        continue
                    v = x[xbase + y * w + xx]
                    if at < 0 or v > best or (v != v and best == best):
                        best = v
                        at = y * w + xx
            out[obase + i * ow + j] = best
            idx[obase + i * ow + j] = at


@njit(inline="always")
def _max_pool_plane_dense(x, out, idx, p, h, w, kh, kw, sh, sw, oh, ow):
    """_max_pool_plane without padding or dilation (every tap lies in the image), ignoring NaN;
    returns whether the plane holds a NaN (then the caller redoes it with _max_pool_plane)."""
    xbase = p * h * w
    obase = p * oh * ow
    nan = False
    for i in range(oh):
        y0 = i * sh
        o = obase + i * ow
        for j in range(ow):
            x0 = j * sw
            at = y0 * w + x0
            best = x[xbase + at]
            for ki in range(kh):
                r = (y0 + ki) * w + x0
                for kj in range(kw):
                    v = x[xbase + r + kj]
                    nan |= v != v
                    if v > best:
                        best = v
                        at = r + kj
            out[o + j] = best
            idx[o + j] = at
    return nan


@njit(inline="always")
def _max_pool_plane_2x2(x, out, idx, p, h, w, sh, sw, oh, ow):
    """_max_pool_plane_dense for the common 2x2 window: with the four taps written out, the
    comparisons compile to selects instead of branches that random data mispredicts (3x faster).
    NaN shows up in the sum of the taps (so may inf - inf: then the exact path just redoes it)."""
    xbase = p * h * w
    obase = p * oh * ow
    nan = False
    for i in range(oh):
        r = i * sh * w
        o = obase + i * ow
        for j in range(ow):
            at = r + j * sw
            a = x[xbase + at]
            b = x[xbase + at + 1]
            c = x[xbase + at + w]
            d = x[xbase + at + w + 1]
            best = a
            if b > best:
                best = b
                at = r + j * sw + 1
            if c > best:
                best = c
                at = r + j * sw + w
            if d > best:
                best = d
                at = r + j * sw + w + 1
            total = a + b + c + d
            nan |= total != total
            out[o + j] = best
            idx[o + j] = at
    return nan


@njit(inline="always")
def _max_pool_any(x, out, idx, p, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    if ph == 0 and pw == 0 and dh == 1 and dw == 1:
        if kh == 2 and kw == 2:
            if not _max_pool_plane_2x2(x, out, idx, p, h, w, sh, sw, oh, ow):
                return
        elif not _max_pool_plane_dense(x, out, idx, p, h, w, kh, kw, sh, sw, oh, ow):
            return
    _max_pool_plane(x, out, idx, p, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)


@njit(cache=True, nogil=True)
def max_pool2d_serial(x, out, idx, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    for p in range(planes):
        _max_pool_any(x, out, idx, p, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)


@njit(cache=True, nogil=True, parallel=True)
def max_pool2d_parallel(x, out, idx, planes, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow):
    for p in prange(planes):
        _max_pool_any(x, out, idx, p, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)


@njit(inline="always")
def _max_pool_backward_plane(g, idx, out, p, hw, L):
    """out[plane p] = 0, then out[plane p][idx] += g (indices outside the plane are skipped)."""
    obase = p * hw
    gbase = p * L
    for q in range(hw):
        out[obase + q] = 0
    for k in range(L):
        q = idx[gbase + k]
        if q >= 0 and q < hw:
            out[obase + q] += g[gbase + k]


@njit(cache=True, nogil=True)
def max_pool2d_backward_serial(g, idx, out, planes, hw, L):
    for p in range(planes):
        _max_pool_backward_plane(g, idx, out, p, hw, L)


@njit(cache=True, nogil=True, parallel=True)
def max_pool2d_backward_parallel(g, idx, out, planes, hw, L):
    for p in prange(planes):
        _max_pool_backward_plane(g, idx, out, p, hw, L)


# ----------------------------------------------------------------------------- fused optimizer steps
# One pass per parameter instead of one per elementwise op; each item updates elements [lo, hi).
# Factors such as 1 - dampening arrive precomputed (in float64, then rounded) as PyTorch does it.
@njit(inline="always")
def _sgd_range(p, g, buf, lr, wd, momentum, keep, nesterov, sign, first, lo, hi):
    # sign (-1 to maximize) has the parameters' dtype, so float32 math stays float32. The flags
    # reach the loop as constants (one inlined copy per case), so that no loop selects on one: a
    # target without AVX (NUMBA_CPU_NAME=generic) vectorises no such loop, and ran 7x slower.
    ps, gs, bs = p[lo:hi], g[lo:hi], buf[lo:hi]
    if momentum == 0:
        if wd == 0:
            _sgd_loop(ps, gs, bs, lr, wd, momentum, keep, False, sign, False, False, False)
        else:
            _sgd_loop(ps, gs, bs, lr, wd, momentum, keep, False, sign, False, True, False)
    elif first:
        _sgd_loop(ps, gs, bs, lr, wd, momentum, keep, nesterov, sign, True, wd != 0, True)
    elif nesterov:
        if wd == 0:
            _sgd_loop(ps, gs, bs, lr, wd, momentum, keep, True, sign, False, False, True)
        else:
            _sgd_loop(ps, gs, bs, lr, wd, momentum, keep, True, sign, False, True, True)
    elif wd == 0:
        _sgd_loop(ps, gs, bs, lr, wd, momentum, keep, False, sign, False, False, True)
    else:
        _sgd_loop(ps, gs, bs, lr, wd, momentum, keep, False, sign, False, True, True)


@njit(inline="always")
def _sgd_loop(ps, gs, bs, lr, wd, momentum, keep, nesterov, sign, first, decays, has_momentum):
    """``torch.optim.SGD``'s update of each element (see minidl.kernels); ``first``: the momentum
    buffer starts as the gradient (taken once per parameter, so it may select)."""
    for i in range(ps.size):
        d = gs[i] * sign
        if decays:
            d = d + wd * ps[i]
        if has_momentum:
            b = d if first else bs[i] * momentum + keep * d
            bs[i] = b
            d = d + momentum * b if nesterov else b
        ps[i] = ps[i] - lr * d


@njit(cache=True, nogil=True)
def sgd_serial(p, g, buf, lr, wd, momentum, keep, nesterov, sign, first, items):
    for t in range(items):
        _sgd_range(p, g, buf, lr, wd, momentum, keep, nesterov, sign, first,
                   t * CHUNK, min(p.size, (t + 1) * CHUNK))


@njit(cache=True, nogil=True, parallel=True)
def sgd_parallel(p, g, buf, lr, wd, momentum, keep, nesterov, sign, first, items):
    for t in prange(items):
        _sgd_range(p, g, buf, lr, wd, momentum, keep, nesterov, sign, first,
                   t * CHUNK, min(p.size, (t + 1) * CHUNK))


@njit(inline="always")
def _adam_moments(p, g, m, v, c1, beta2, c2, wd, decay, sign, i):
    """Decay p (AdamW), then update the moments of element i; returns (new p, m, v)."""
    pi = p[i] * decay
    d = g[i] * sign
    d = d + wd * pi if wd != 0 else d
    mi = m[i] + c1 * (d - m[i])
    vi = v[i] * beta2 + c2 * d * d
    m[i] = mi
    v[i] = vi
    return pi, mi, vi


@njit(inline="always")
def _adam_range(p, g, m, v, vmax, c1, beta2, c2, eps, wd, decay, amsgrad, sign, step_size, bc2_sqrt,
                lo, hi):
    ps, gs, ms, vs = p[lo:hi], g[lo:hi], m[lo:hi], v[lo:hi]
    if amsgrad:
        vm = vmax[lo:hi]
        for i in range(ps.size):
            pi, mi, vi = _adam_moments(ps, gs, ms, vs, c1, beta2, c2, wd, decay, sign, i)
            top = vm[i] if vm[i] >= vi else vi  # a NaN in v is kept
            vm[i] = top
            ps[i] = pi - step_size * (mi / (math.sqrt(top) / bc2_sqrt + eps))
    else:
        for i in range(ps.size):
            pi, mi, vi = _adam_moments(ps, gs, ms, vs, c1, beta2, c2, wd, decay, sign, i)
            ps[i] = pi - step_size * (mi / (math.sqrt(vi) / bc2_sqrt + eps))


@njit(cache=True, nogil=True)
def adam_serial(p, g, m, v, vmax, c1, beta2, c2, eps, wd, decay, amsgrad, sign, step_size, bc2_sqrt,
                items):
    for t in range(items):
        _adam_range(p, g, m, v, vmax, c1, beta2, c2, eps, wd, decay, amsgrad, sign, step_size, bc2_sqrt,
                    t * CHUNK, min(p.size, (t + 1) * CHUNK))


@njit(cache=True, nogil=True, parallel=True)
def adam_parallel(p, g, m, v, vmax, c1, beta2, c2, eps, wd, decay, amsgrad, sign, step_size, bc2_sqrt,
                  items):
    for t in prange(items):
        _adam_range(p, g, m, v, vmax, c1, beta2, c2, eps, wd, decay, amsgrad, sign, step_size, bc2_sqrt,
                    t * CHUNK, min(p.size, (t + 1) * CHUNK))


# ----------------------------------------------------------------------------- atan2 / sorting
def _atan2(y, x):
    """Plain-Python twin of the overload below (runs only with NUMBA_DISABLE_JIT=1)."""
    return math.atan2(y, x)


@overload(_atan2)
def _atan2_impl(y, x):
    if isinstance(y, types.Integer) and isinstance(x, types.Integer):
        return lambda y, x: y  # unused: atan2 always computes in floating point
    return lambda y, x: math.atan2(y, x)


@njit(inline="always")
def _argsort_row(x, px, n, s, descending, out, po, so):
    """The stable sort order of the n values x[px + j*s], written to out[po + j*so]: ascending with
    NaNs last, or descending with NaNs first (NaN counts as the largest value, as in PyTorch).
    Descending reads the row backwards, sorts ascending and writes backwards, so ties keep their order."""
    keys = np.empty(n, x.dtype)
    pos = np.empty(n, np.int64)
    m = 0
    for j in range(n):
        i = n - 1 - j if descending else j
        v = x[px + i * s]
        if v == v:
            keys[m] = v
            pos[m] = i
            m += 1
    order = np.argsort(keys[:m], kind="mergesort")
    first = n - m if descending else 0
    for j in range(m):
        out[po + (first + j) * so] = pos[order[m - 1 - j]] if descending else pos[order[j]]
    k = 0 if descending else m
    for i in range(n):
        v = x[px + i * s]
        if v != v:
            out[po + k * so] = i
            k += 1


@njit(cache=True, nogil=True)
def argsort_serial(x, xo, oshape, xstrides, out, ostrides, n, xs, os, descending):
    for r in range(out.size // n):
        _argsort_row(x, row_position(r, oshape, xstrides, xo), n, xs, descending, out,
                     row_position(r, oshape, ostrides, 0), os)


@njit(cache=True, nogil=True, parallel=True)
def argsort_parallel(x, xo, oshape, xstrides, out, ostrides, n, xs, os, descending):
    for r in prange(out.size // n):
        _argsort_row(x, row_position(r, oshape, xstrides, xo), n, xs, descending, out,
                     row_position(r, oshape, ostrides, 0), os)


# ----------------------------------------------------------------------------- softmax
# Packed rows of n elements; the rows r0 .. r1 - 1 of a block at a time, so that exp runs as one
# vectorised pass over the block (``tmp`` is a scratch buffer of the same size as ``out``).
@njit(fastmath={"reassoc"})
def _dot_run(a, b, zero):
    """sum(a * b) of two packed runs, vectorised like _sum_run."""
    acc = zero
    for j in range(a.size):
        acc += a[j] * b[j]
    return acc


@njit(inline="always")
def _row_max(x):
    """Max of a row; NaN if it holds one (then the whole row's softmax is NaN, as in PyTorch)."""
    m = x[0]
    for j in range(1, x.size):
        v = x[j]
        if v > m or v != v:
            m = v
    return m


@njit(inline="always")
def _softmax_rows(x, out, tmp, r0, r1, n, log, zero):
    for r in range(r0, r1):
        row, shifted = x[r * n:(r + 1) * n], out[r * n:(r + 1) * n]
        m = _row_max(row)
        for j in range(n):
            shifted[j] = row[j] - m
    _exp_run(out[r0 * n:r1 * n], tmp[r0 * n:r1 * n])
    for r in range(r0, r1):
        e, y = tmp[r * n:(r + 1) * n], out[r * n:(r + 1) * n]
        s = _sum_run(e, zero)
        if log:
            ls = math.log(s)
            for j in range(n):
                y[j] = y[j] - ls
        else:
            for j in range(n):
                y[j] = e[j] / s


@njit(inline="always")
def _softmax_backward_rows(y, g, out, tmp, r0, r1, n, log, zero):
    if log:
        _exp_run(y[r0 * n:r1 * n], tmp[r0 * n:r1 * n])
    for r in range(r0, r1):
        yr, gr, o = y[r * n:(r + 1) * n], g[r * n:(r + 1) * n], out[r * n:(r + 1) * n]
        if log:
            s = _sum_run(gr, zero)
            e = tmp[r * n:(r + 1) * n]
            for j in range(n):
                o[j] = gr[j] - e[j] * s
        else:
            s = _dot_run(gr, yr, zero)
            for j in range(n):
                o[j] = yr[j] * (gr[j] - s)


@njit(cache=True, nogil=True)
def softmax_serial(x, out, tmp, rows, n, log, zero, blocks):
    step = max(1, CHUNK // n)                   # blocks of rows that stay in cache across passes
    for r in range(0, rows, step):
        _softmax_rows(x, out, tmp, r, min(rows, r + step), n, log, zero)


@njit(cache=True, nogil=True, parallel=True)
def softmax_parallel(x, out, tmp, rows, n, log, zero, blocks):
    for b in prange(blocks):
        _softmax_rows(x, out, tmp, rows * b // blocks, rows * (b + 1) // blocks, n, log, zero)


@njit(cache=True, nogil=True)
def softmax_backward_serial(y, g, out, tmp, rows, n, log, zero, blocks):
    step = max(1, CHUNK // n)
    for r in range(0, rows, step):
        _softmax_backward_rows(y, g, out, tmp, r, min(rows, r + step), n, log, zero)


@njit(cache=True, nogil=True, parallel=True)
def softmax_backward_parallel(y, g, out, tmp, rows, n, log, zero, blocks):
    for b in prange(blocks):
        _softmax_backward_rows(y, g, out, tmp, rows * b // blocks, rows * (b + 1) // blocks, n, log, zero)
