"""Float32 runs of the activations that fill transformer steps (GELU in both forms, SiLU, their gradients), vectorised.

libm's erf, exp and tanh are scalar calls, and one in a loop keeps LLVM from vectorising it (GELU took
7 ns an element forward and 15 backward, PyTorch 1-4). These runs compute each float32 element in
float64 with polynomials and selects only, so the loops vectorise, and round once: the error before
rounding is below 2e-9 relative, far under float32's 6e-8. Each run returns True when it has
computed the run; for any other dtype it returns False and the formula table's own loop runs
(``FLOAT32_RUNS`` in minidl/formulas/numba_source.py). The plain functions are the twins that run with
NUMBA_DISABLE_JIT=1, where the formula's loop always runs. NaN and infinities give PyTorch's results:
nan for gelu(-inf), silu(-inf) and every gradient at an infinity.
"""
import numpy as np
from numba import njit, types
from numba.extending import overload

from .convert import float64_bits, float64_from_bits

_LOG2E = 1.4426950408889634
_ROUNDER = 6755399441055744.0   # 1.5 * 2**52: adding it rounds to an integer, kept in the low mantissa bits
_LN2_HI, _LN2_LO = 0.693145751953125, 1.4286068203094173e-06   # ln 2 = HI + LO, n * HI exact for |n| < 2**11
_EXP_TAYLOR = (1.0, 1.0, 1 / 2, 1 / 6, 1 / 24, 1 / 120, 1 / 720, 1 / 5040, 1 / 40320, 1 / 362880)
_EXP_RANGE = 700.0
# erf(t) / t as a polynomial in s = t * t on [0, 2], and the Mills ratio's a * M(a) as one in u = 1 / a on
# [0, 0.5] (M(a) = (1 - Phi(a)) / phi(a)): least-squares Chebyshev fits (numpy) to mpmath's erf and erfc at
# 400 nodes, then written in powers; largest relative errors 2e-11 and 1.5e-9, the lowest degrees that keep
# the float32 results within one rounding (tests check them against math.erf).
_ERF = (1.1283791670831398, -0.37612638778342466, 0.11283789588310386, -0.02686603549992348, 0.005223530467186453,
        -0.0008539776750204082, 0.0001195481341082681, -1.4181475604354899e-05, 1.3016739657746043e-06,
        -6.784596913603569e-08)
_MILLS = (0.9999999985564584, 9.807828931542029e-07, -1.0001098359817013, 0.00478708054719873, 2.893466232276497,
          1.3653525441974552, -25.507910121596286, 46.334793214740294, 25.035042703516087, -237.009399614678,
          423.9020205481537, -354.16534104373136, 120.05371218281834)
_SQRT_HALF = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327
_SQRT_2_OVER_PI = 0.7978845608028654


@njit(inline="always")
def _poly(c, x):
    acc = c[-1]
    for i in range(len(c) - 2, -1, -1):
        acc = acc * x + c[i]
    return acc


@njit(inline="always")
def _exp64(v):
    """exp(v) for v in [-_EXP_RANGE, _EXP_RANGE]: v = n ln2 + r with |r| <= ln2/2, r's Taylor polynomial
    (degree 9, relative error under 1e-11), 2**n as exponent bits. n is rounded by adding _ROUNDER and
    read from the sum's bits: AVX2 has no vector conversion of float64 to int64."""
    shifted = v * _LOG2E + _ROUNDER
    n = shifted - _ROUNDER
    r = v - n * _LN2_HI - n * _LN2_LO
    two_n = float64_from_bits((float64_bits(shifted) - float64_bits(_ROUNDER) + np.uint64(1023)) << np.uint64(52))
    return _poly(_EXP_TAYLOR, r) * two_n


@njit(inline="always")
def _normal_cdf_pdf(x):
    """Phi(x) and phi(x), the standard normal's CDF and density: 1/2 + erf(x / sqrt 2) / 2 for |x| < 2, and
    beyond, the tail phi(a) M(a) (a = |x|), which keeps its relative accuracy far into the lower tail.
    Beyond |x| = 37 (and at NaN) phi is taken as 0: Phi(-37) is 1e-300."""
    a = abs(x)
    inside = a < 37.0
    pdf = _exp64(-0.5 * (a * a if inside else 37.0 * 37.0)) * _INV_SQRT_2PI
    pdf = pdf if inside else 0.0
    central = 0.5 + 0.5 * (x * _SQRT_HALF) * _poly(_ERF, 0.5 * x * x)
    u = 1.0 / (a if a > 2.0 else 2.0)
    tail = pdf * u * _poly(_MILLS, u)
    cdf = central if a < 2.0 else (tail if x < 0 else 1.0 - tail)
    return cdf, pdf


@njit(inline="always")
def _sigmoid64(w):
    """1 / (1 + exp(-w)), from exp(-|w|) so that nothing overflows; 0 below -_EXP_RANGE and at NaN."""
    aw = abs(w)
    inside = aw < _EXP_RANGE
    e = _exp64(-(aw if inside else _EXP_RANGE))
    s = 1.0 / (1.0 + e)
    return s if w >= 0 else (e * s if inside else 0.0)


@njit(inline="always")
def _gelu(x):
    return x * _normal_cdf_pdf(x)[0]


@njit(inline="always")
def _gelu_slope(x):
    cdf, pdf = _normal_cdf_pdf(x)
    return cdf + x * pdf


@njit(inline="always")
def _gelu_tanh(x):
    """x (1 + tanh z) / 2 = x sigmoid(2 z), z = sqrt(2/pi) (x + 0.044715 x^3)."""
    return x * _sigmoid64(2.0 * _SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))


@njit(inline="always")
def _gelu_tanh_slope(x):
    s = _sigmoid64(2.0 * _SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))
    return s + 2.0 * x * s * (1.0 - s) * (_SQRT_2_OVER_PI * (1.0 + 0.134145 * x * x))


@njit(inline="always")
def _silu(x):
    return x * _sigmoid64(x)


@njit(inline="always")
def _silu_slope(x):
    s = _sigmoid64(x)
    return s * (1.0 + x * (1.0 - s))


def _unary_run(f):
    """The overload of a unary run's twin: out = f(x) elementwise in float64 for float32 runs."""
    def impl(x, out):
        if x.dtype != types.float32:
            return lambda x, out: False

        def run(x, out):
            for j in range(out.size):
                out[j] = np.float32(f(np.float64(x[j])))
            return True
        return run
    return impl


def _gradient_run(slope):
    """The overload of a gradient run's twin: out = g * slope(x) elementwise in float64 for float32 runs."""
    def impl(g, x, out):
        if g.dtype != types.float32:
            return lambda g, x, out: False

        def run(g, x, out):
            for j in range(out.size):
                out[j] = np.float32(np.float64(g[j]) * slope(np.float64(x[j])))
            return True
        return run
    return impl


def gelu_run(x, out):
    return False


def gelu_backward_run(g, x, out):
    return False


def gelu_tanh_run(x, out):
    return False


def gelu_tanh_backward_run(g, x, out):
    return False


def silu_run(x, out):
    return False


def silu_backward_run(g, x, out):
    return False


# numpy's error model: Python's division-by-zero check would put a branch in every loop and stop vectorisation
# (the divisors here are never zero); "contract" lets LLVM fuse the polynomials' multiply-adds
_JIT = {"error_model": "numpy", "fastmath": {"contract"}}
overload(gelu_run, jit_options=_JIT)(_unary_run(_gelu))
overload(gelu_backward_run, jit_options=_JIT)(_gradient_run(_gelu_slope))
overload(gelu_tanh_run, jit_options=_JIT)(_unary_run(_gelu_tanh))
overload(gelu_tanh_backward_run, jit_options=_JIT)(_gradient_run(_gelu_tanh_slope))
overload(silu_run, jit_options=_JIT)(_unary_run(_silu))
overload(silu_backward_run, jit_options=_JIT)(_gradient_run(_silu_slope))
