"""Loops over packed runs that LLVM vectorises: exp in float32, sums and dot products; the softmax weight exp.

The unit-stride fast paths work on slices cut to the run, indexed from 0 by a range loop: both
let LLVM use SIMD."""
import math

import numpy as np
from numba import njit, types
from numba.extending import overload

from .convert import float32_from_bits


def exp_run(x, out):
    """Plain-Python twin of the overload below (runs only with NUMBA_DISABLE_JIT=1)."""
    for j in range(out.size):
        out[j] = math.exp(x[j])


@overload(exp_run)
def exp_run_impl(x, out):
    if x.dtype == types.float32:
        return lambda x, out: _exp_float32(x, out)
    return lambda x, out: _exp_libm(x, out)


@njit(inline="always")
def _exp_libm(x, out):
    for j in range(out.size):
        out[j] = math.exp(x[j])


_EXP_LO, _EXP_HI = np.float32(-87.0), np.float32(88.5)   # where exp in float32 is normal


@njit(inline="always")
def _exp_normal32(v):
    """exp(v) for a float32 v in [_EXP_LO, _EXP_HI], without libm, so that loops of it vectorise (about 1 ulp).

    v = n*ln2 + r with |r| <= ln2/2; exp(r) by a degree-6 polynomial (Cephes' expf coefficients);
    2**n built directly as exponent bits."""
    n = np.floor(v * np.float32(1.44269504088896341) + np.float32(0.5))
    r = v - n * np.float32(0.693359375) - n * np.float32(-2.12194440e-4)
    p = np.float32(1.9875691500e-4) * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    two_n = float32_from_bits(np.uint32((np.int32(n) + np.int32(127)) << np.int32(23)))
    return (p * (r * r) + r + np.float32(1.0)) * two_n


@njit(inline="always")
def _exp_float32(x, out):
    """exp in float32 by _exp_normal32; inputs outside its range (overflow, subnormal results, nan)
    are redone with libm in a rarely taken pass."""
    m = out.size
    for j in range(m):
        v = x[j]
        v = v if v > _EXP_LO else _EXP_LO
        v = v if v < _EXP_HI else _EXP_HI
        out[j] = _exp_normal32(v)
    for j in range(m):
        v = x[j]
        if not (v > _EXP_LO and v < _EXP_HI):
            out[j] = math.exp(v)


def exp_weight(x):
    """exp(x) for x <= 0, a softmax weight (x = score - row max). Plain-Python twin of the overload
    below (runs only with NUMBA_DISABLE_JIT=1)."""
    return math.exp(x)


@overload(exp_weight)
def exp_weight_impl(x):
    if x == types.float32:
        return lambda x: _exp_weight32(x)
    return lambda x: math.exp(x)


@njit(inline="always")
def _exp_weight32(x):
    """Branch-free, so that a loop of weights vectorises: below exp(-87) (under 1e-38 of the row's largest
    weight, which is 1) the weight is 0; -inf (a masked score) gives 0 and nan stays nan."""
    v = x if x > _EXP_LO else _EXP_LO
    e = _exp_normal32(v if v < _EXP_HI else _EXP_HI)
    return e if x >= _EXP_LO else (np.float32(0) if x < _EXP_LO else x)


@njit(fastmath={"reassoc"})
def sum_run(v, zero):
    """Sum of a packed run. ``reassoc`` (and nothing else: NaN and inf keep their meaning) lets
    LLVM split the one chain of dependent adds into vector accumulators: 3x faster, and closer to
    the exact sum than one running total."""
    acc = zero
    for j in range(v.size):
        acc += v[j]
    return acc


@njit(fastmath={"reassoc"})
def dot_run(a, b, zero):
    """sum(a * b) of two packed runs, vectorised like sum_run."""
    acc = zero
    for j in range(a.size):
        acc += a[j] * b[j]
    return acc
