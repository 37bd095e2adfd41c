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


def fmod(x, y):
    """C's fmod: the remainder of x / y rounded toward zero (the sign of x). Floats: NaN for y == 0 or an
    infinite x, x for an infinite y; integers: ZeroDivisionError for y == 0 (the CUDA kernels give 0)."""
    if _is_integral(x, y):
        return _integer_fmod(x, y)
    return _float_fmod(x, y)


def _integer_fmod(x, y):
    r = x % y  # (Python's sign: y's) moved to x's sign
    return r - y if r != 0 and (r < 0) != (x < 0) else r


def _float_fmod(x, y):
    if y == 0 or x != x or y != y or x in (math.inf, -math.inf):
        return math.nan
    return x if y in (math.inf, -math.inf) else np.fmod(x, y)


_integer_fmod_jit = njit(inline="always")(_integer_fmod)
_float_fmod_jit = njit(inline="always")(_float_fmod)


@overload(fmod)
def _fmod_impl(x, y):
    if isinstance(x, _INTEGRAL) and isinstance(y, _INTEGRAL):
        return lambda x, y: _integer_fmod_jit(x, y)
    return lambda x, y: _float_fmod_jit(x, y)


hypot = math.hypot


def _lgamma(x):
    """log |Gamma(x)|: +inf at the poles (0 and the negative integers) and at +-inf."""
    if x <= 0 and x == math.floor(x):
        return math.inf
    return math.lgamma(x)


# B_2k / (2k)! for k = 1..12 (B the Bernoulli numbers): the Euler-Maclaurin tail of zeta below
_BERNOULLI_OVER_FACTORIAL = tuple(b / math.factorial(2 * k) for k, b in enumerate(
    (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510, 43867 / 798, -174611 / 330,
     854513 / 138, -236364091 / 2730), start=1))


def _zeta(s, q):
    """Hurwitz's zeta, sum over k >= 0 of (q + k) ** -s: terms summed directly until q + k >= 9 (and at least
    9 of them), then the Euler-Maclaurin tail. inf at s == 1 and at q a pole (0, -1, ..., -inf); NaN for s < 1
    and for q < 0 with s not whole (a negative number to a fractional power); the rest of the edges as torch's:
    NaN at q == inf, and at s == inf inf for q < 1, 1 for q == 1, NaN beyond."""
    if s == 1:
        return math.inf
    if s < 1:
        return math.nan
    if q <= 0:
        if q == math.floor(q):
            return math.inf
        if s != math.floor(s):
            return math.nan
    if s != s or q != q or q == math.inf:
        return math.nan
    if s == math.inf:
        return math.inf if q < 1 else (1.0 if q == 1 else math.nan)
    total, a, n = 0.0, q, 0
    while n < 9 or a < 9:
        total += a ** -s
        a += 1.0
        n += 1
    total += a ** (1.0 - s) / (s - 1.0) + 0.5 * a ** -s
    rising = s * a ** (-s - 1.0)  # s (s+1) ... (s+2k-2) a^(-s-2k+1)
    for k in range(12):
        term = _BERNOULLI_OVER_FACTORIAL[k] * rising
        total += term
        if abs(term) <= 1e-17 * abs(total):
            break
        rising *= (s + 2 * k + 1.0) * (s + 2 * k + 2.0) / (a * a)
    return total


def _digamma(x):
    """psi(x) = d/dx log Gamma(x): -inf at +0 and +inf at -0 (as torch), NaN at the negative integers;
    negative x by reflection, psi(1 - x) - pi / tan(pi x); the rest moved up to x >= 10 by
    psi(x) = psi(x + 1) - 1/x, then the asymptotic series log x - 1/(2x) - sum B_2k / (2k x^2k)."""
    if x == 0:
        return math.copysign(math.inf, -x)
    shift = 0.0
    if x < 0:
        if x == math.floor(x):
            return math.nan
        shift = -math.pi / math.tan(math.pi * (x - math.trunc(x)))
        x = 1.0 - x
    while x < 10:
        shift -= 1.0 / x
        x += 1.0
    z = 1.0 / (x * x)
    series = z * (1 / 12 - z * (1 / 120 - z * (1 / 252 - z * (1 / 240 - z * (1 / 132 - z * (691 / 32760
                                                                                            - z / 12))))))
    return shift + math.log(x) - 0.5 / x - series


def _erfinv(x):
    """The inverse of erf on (-1, 1), +-inf at +-1, NaN beyond: a first guess (the series
    sqrt(pi)/2 (x + pi x^3 / 12) near 0, Winitzki's closed form elsewhere, both within 2e-3),
    then three Halley steps on erf(y) = |x| (on erfc(y) = 1 - |x| above 0.5, which 1 - |x| gives exactly)."""
    a = abs(x)
    if not a < 1:
        return math.copysign(math.inf, x) if a == 1 else math.nan
    if a < 0.25:
        y = 0.886226925452758 * a * (1.0 + 0.2617993877991494 * a * a)
    else:
        w = math.log((1.0 - a) * (1.0 + a))
        c = 4.330746750799873 + 0.5 * w  # 2 / (pi * 0.147) + w / 2
        y = math.sqrt(math.sqrt(c * c - w / 0.147) - c)
    for _ in range(3):
        r = math.erf(y) - a if a <= 0.5 else (1.0 - a) - math.erfc(y)
        d = r / (1.1283791670955126 * math.exp(-y * y))
        y -= d / (1.0 + y * d)
    return math.copysign(y, x)


lgamma = njit(_lgamma)
zeta = njit(_zeta)
digamma = njit(_digamma)
erfinv = njit(_erfinv)


def _bessel_i(order, x, scaled):
    """The modified Bessel function I_order(x) (order 0 or 1), times exp(-|x|) when ``scaled``: its power
    series, sum over k of (x/2)^(2k+order) / (k! (k+order)!), up to |x| = 30 (positive terms: no cancellation);
    beyond, the asymptotic series e^|x| / sqrt(2 pi |x|) sum (-1)^k a_k / |x|^k with
    a_k = prod_{j<=k} (4 order^2 - (2j-1)^2) / (k! 8^k). I_1 is odd, I_0 even; NaN at +-inf unscaled, as
    torch's."""
    a = abs(x)
    if a != a:
        return a
    if a <= 30:
        half, total, k = 0.5 * a, 0.0, 0
        term = half if order == 1 else 1.0
        while True:
            total += term
            k += 1
            term *= half * half / (k * (k + order))
            if term <= 1e-17 * total:
                break
        value = total * math.exp(-a) if scaled else total
    elif a == math.inf:
        value = 0.0 if scaled else math.nan  # (NaN: torch's value)
    else:
        mu, total, term = 4.0 * order * order, 1.0, 1.0
        for k in range(1, 60):
            term *= -(mu - (2 * k - 1) ** 2) / (k * 8.0 * a)
            total += term
            if abs(term) <= 1e-17 * abs(total):
                break
        series = total / math.sqrt(2 * math.pi * a)
        value = series if scaled else math.exp(0.5 * a) * (math.exp(0.5 * a) * series)  # (e^a alone overflows first)
    return -value if order == 1 and x < 0 else value


def _erfcx(x):
    """exp(x^2) erfc(x): as written below x = 26 (erfc keeps its relative accuracy there); above, where erfc
    underflows, the asymptotic series 1 / (x sqrt(pi)) sum (-1)^k (2k-1)!! / (2x^2)^k. In float64 whatever x's
    dtype: exp(x^2) overflows float32 from x = 9.4, long before erfc underflows."""
    x = np.float64(x)
    if x < 26:
        return math.exp(x * x) * math.erfc(x) if x > -27 else math.inf
    if x == math.inf:
        return 0.0
    z, total, term = 0.5 / (x * x), 1.0, 1.0
    for k in range(1, 12):
        term *= -(2 * k - 1) * z
        total += term
    return total / (x * 1.7724538509055159)


def _gcd(x, y):
    """Euclid's greatest common divisor, not negative; 0 for (0, 0)."""
    x, y = builtins.abs(x), builtins.abs(y)
    while y != 0:
        x, y = y, x % y
    return x


_bessel_i_jit = njit(_bessel_i)
i0 = njit(lambda x: _bessel_i_jit(0, x, False))
i1 = njit(lambda x: _bessel_i_jit(1, x, False))
i0e = njit(lambda x: _bessel_i_jit(0, x, True))
i1e = njit(lambda x: _bessel_i_jit(1, x, True))
erfcx = njit(_erfcx)
nextafter = np.nextafter
gcd = _bitwise(njit(inline="always")(_gcd))  # (integers only: floats get x back, as the bitwise functions)


def _incomplete_gamma(a, x, upper):
    """The regularized incomplete gamma function, P(a, x) = gamma(a, x) / Gamma(a) (Q = 1 - P when ``upper``):
    below x = a + 1 P's series, e^-x x^a / Gamma(a) sum x^n / (a (a+1) ... (a+n)); above, Q's continued fraction
    (Legendre's, by Lentz's method), each for the one it converges fast for. Edges as torch's, tested in its order:
    NaN for a negative argument, for a == x == 0 and for a == x == inf; a NaN only after the other edges."""
    if a < 0 or x < 0:
        return math.nan
    if a == 0:
        return (0.0 if upper else 1.0) if x > 0 else math.nan
    if x == 0:
        return 1.0 if upper else 0.0
    if a == math.inf:
        return math.nan if x == math.inf else (1.0 if upper else 0.0)
    if x == math.inf:
        return 0.0 if upper else 1.0
    if a != a or x != x:
        return math.nan
    prefix = math.exp(a * math.log(x) - x - math.lgamma(a))
    if x < a + 1:
        term = 1.0 / a
        total, n = term, a
        for _ in range(100000):
            n += 1.0
            term *= x / n
            total += term
            if term < total * 1e-17:
                break
        return max(1.0 - prefix * total, 0.0) if upper else prefix * total  # (1 - P: absolute accuracy only)
    tiny = 1e-300
    b = x + 1.0 - a
    c, d = 1.0 / tiny, 1.0 / b
    h = d
    for i in range(1, 100000):
        an = -i * (i - a)
        b += 2.0
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1.0 / d
        h *= d * c
        if abs(d * c - 1.0) < 1e-16:
            break
    return prefix * h if upper else max(1.0 - prefix * h, 0.0)


_incomplete_gamma_jit = njit(_incomplete_gamma)
igamma = njit(lambda a, x: _incomplete_gamma_jit(a, x, False))
igammac = njit(lambda a, x: _incomplete_gamma_jit(a, x, True))
