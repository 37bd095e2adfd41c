"""The formula language's library functions on the CPU (``minidl/formulas/expr.py``: MATH).

Each has one meaning per dtype, the same as the CUDA library's (csrc/scalar_math.cuh). Float-only
math never runs on integers: ``float_only`` formulas give integers back unchanged, and the
functions here that integer kernels do call say what they do for integers. (Numba unifies the
types of all branches of a switch: one float result among them would send int64 values through
float64 and lose those beyond 2**53.)

Functions with per-type bodies are Numba overloads; the plain function beside each is its twin,
which runs only with NUMBA_DISABLE_JIT=1.
"""
import builtins
import math

import numpy as np
from numba import njit, types
from numba.extending import overload

_INTEGRAL = (types.Integer, types.Boolean)


def _is_integral(*values) -> bool:
    return all(isinstance(v, (bool, int, np.integer, np.bool_)) for v in values)


def float_only(codes, unknown):
    """Decorator of a switch over float-only ops, ``switch(op, x(, y))``: for floats, the switch;
    for integers, which never run these ops, the identity (its first operand) for ``codes`` and
    ``unknown(op, x)`` (which raises) for any other code, so integer kernels never type float math."""
    mask = sum(1 << code for code in codes)  # codes below 64: one test for all of them

    def decorate(switch):
        body = njit(inline="always")(switch)

        def known(op):
            return 0 <= op < 64 and (mask >> op) & 1

        known_jit = njit(inline="always")(known)
        if switch.__code__.co_argcount == 2:
            def function(op, x):
                return (x if known(op) else unknown(op, x)) if _is_integral(x) else body(op, x)

            @overload(function)
            def _impl(op, x):
                if isinstance(x, _INTEGRAL):
                    return lambda op, x: x if known_jit(op) else unknown(op, x)
                return lambda op, x: body(op, x)
        else:
            def function(op, x, y):
                return (x if known(op) else unknown(op, x)) if _is_integral(x, y) else body(op, x, y)

            @overload(function)
            def _impl(op, x, y):
                if isinstance(x, _INTEGRAL) and isinstance(y, _INTEGRAL):
                    return lambda op, x, y: x if known_jit(op) else unknown(op, x)
                return lambda op, x, y: body(op, x, y)
        function.__name__ = function.__qualname__ = switch.__name__
        function.__doc__ = switch.__doc__
        return function
    assert max(codes) < 64
    return decorate


def _integers_unchanged(numpy_function):
    """A rounding function: numpy's for floats, the identity for integers."""
    def function(x):
        return x if _is_integral(x) else numpy_function(x)

    @overload(function)
    def _impl(x):
        return (lambda x: x) if isinstance(x, _INTEGRAL) else (lambda x: numpy_function(x))
    function.__name__ = numpy_function.__name__
    return function


floor = _integers_unchanged(np.floor)
ceil = _integers_unchanged(np.ceil)
rint = _integers_unchanged(np.rint)  # half to even
trunc = _integers_unchanged(np.trunc)


# The plain math functions are Python's, which Numba compiles to LLVM's intrinsics or libm calls
# for each float type. (Aliases, not wrappers: every wrapper is one more function to compile.)
exp, log, log1p, expm1, sqrt = math.exp, math.log, math.log1p, math.expm1, math.sqrt
sin, cos, tan, tanh, erf = math.sin, math.cos, math.tan, math.tanh, math.erf
atan, asin, acos, sinh, cosh = math.atan, math.asin, math.acos, math.sinh, math.cosh
asinh, acosh, atanh, erfc, log2, log10 = math.asinh, math.acosh, math.atanh, math.erfc, math.log2, math.log10
copysign, atan2 = math.copysign, math.atan2
abs = builtins.abs  # noqa: A001 (the language's name); -0.0 gives 0.0, NaN stays NaN


def _divided_by_zero(x, y):
    return math.nan if x != x or x == 0 else math.copysign(math.inf, x) * math.copysign(1.0, y)


def floordiv(x, y):
    """Python's x // y (rounded toward -inf). Floats divided by zero: +-inf, NaN for 0 or NaN;
    integers divided by zero: ZeroDivisionError (the CUDA kernels, which cannot raise, give 0)."""
    if y == 0 and not _is_integral(x, y):
        return _divided_by_zero(x, y)
    return x // y


def remainder(x, y):
    """Python's x % y (the sign of y). Floats: NaN for y == 0; integers: ZeroDivisionError."""
    if y == 0 and not _is_integral(x, y):
        return math.nan
    return x % y


@overload(floordiv)
def _floordiv_impl(x, y):
    if isinstance(x, _INTEGRAL) and isinstance(y, _INTEGRAL):
        return lambda x, y: x // y
    return lambda x, y: x // y if y != 0 else _divided_by_zero_jit(x, y)


@overload(remainder)
def _remainder_impl(x, y):
    if isinstance(x, _INTEGRAL) and isinstance(y, _INTEGRAL):
        return lambda x, y: x % y
    return lambda x, y: x % y if y != 0 else math.nan


def pow(x, y):  # noqa: A001 (the language's name)
    """x ** y. An integer to a negative integer power is 0 unless x is 1 or -1, as in torch (Numba would
    raise for 0, Python gives a float); floats are IEEE's."""
    if y < 0 and _is_integral(x, y):
        return _integer_to_negative_power(x, y)
    return x ** y


def _integer_to_negative_power(x, y):
    return 1 if x == 1 else ((-1 if y % 2 else 1) if x == -1 else 0)


@overload(pow)
def _pow_impl(x, y):
    if isinstance(x, _INTEGRAL) and isinstance(y, _INTEGRAL):
        return lambda x, y: x ** y if y >= 0 else _integer_to_negative_power_jit(x, y)
    return lambda x, y: x ** y


_integer_to_negative_power_jit = njit(inline="always")(_integer_to_negative_power)


def _bitwise(integer_op):
    """A bitwise library function: ``integer_op`` for integers; floats, which the op layer refuses, get x back
    (so that float kernels still type)."""
    def function(x, y):
        return integer_op(x, y) if _is_integral(x, y) else x

    @overload(function)
    def _impl(x, y):
        if isinstance(x, _INTEGRAL) and isinstance(y, _INTEGRAL):
            return lambda x, y: integer_op(x, y)
        return lambda x, y: x
    return function


# a shift below 0 or beyond 63 gives 0 (left) or the sign (right), as in torch (C and LLVM leave it undefined)
bitand = _bitwise(njit(inline="always")(lambda x, y: x & y))
bitor = _bitwise(njit(inline="always")(lambda x, y: x | y))
bitxor = _bitwise(njit(inline="always")(lambda x, y: x ^ y))
shl = _bitwise(njit(inline="always")(lambda x, y: x << y if 0 <= y <= 63 else x * 0))
shr = _bitwise(njit(inline="always")(lambda x, y: x >> (y if 0 <= y <= 63 else 63)))
_divided_by_zero_jit = njit(inline="always")(_divided_by_zero)
