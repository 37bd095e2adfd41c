"""Conversion of one element between dtypes, bfloat16 included.

Float to integer is undefined in C (and LLVM) outside the target's range, and the vectorised and
scalar loops then disagree. minidl's rule is PyTorch's result on x86: truncate toward zero into
int32 (signed targets of up to 32 bits) or int64 (the others), where NaN and values outside that
range become its minimum; then keep the low bits. Everything else is C's conversion.
"""
import math

import numpy as np
from numba import types
from numba.extending import intrinsic, overload

from .... import _bfloat16


INT32_MIN = -(1 << 31)
INT64_MIN = -(1 << 63)


def convert(x, out):
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
float32_from_bits = _bitcast(types.uint32, types.float32)
float64_bits = _bitcast(types.float64, types.uint64)
float64_from_bits = _bitcast(types.uint64, types.float64)


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
    return lambda bits: float32_from_bits(np.uint32(np.uint32(bits) << 16))


@overload(convert)
def convert_impl(x, out):
    to = out.dtype
    if x == types.uint16 and to == types.uint16:
        return lambda x, out: x
    if to == types.uint16:
        return lambda x, out: _to_bfloat16(x)
    if x == types.uint16:
        return lambda x, out: convert(_from_bfloat16(x), out)
    if not (isinstance(x, types.Float) and isinstance(to, types.Integer)):
        return lambda x, out: x  # the store converts
    if to.signed and to.bitwidth <= 32:
        return lambda x, out: np.int32(x) if -2147483649.0 < x < 2147483648.0 else np.int32(INT32_MIN)
    return lambda x, out: (np.int64(x) if -9223372036854775808.0 <= x < 9223372036854775808.0
                           else np.int64(INT64_MIN))
