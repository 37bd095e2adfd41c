"""Numba kernels of the ``random`` primitive: Philox4x32-10 per element, then the kind's transform.

The formulas are the contract's (minidl/kernels/__init__.py), written to round exactly as the CUDA kernels
in csrc/random.cu do, so a seed gives bit-identical tensors on both devices. All integer math is
in uint64 (Numba turns uint64/int64 mixes into floats, hence the typed constants).
"""
import math

import numpy as np
from numba import njit, prange

from .op_codes import RANDOM_INTEGERS, RANDOM_NORMAL, RANDOM_UNIFORM

_LO = np.uint64(0xFFFFFFFF)
_32 = np.uint64(32)
_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = np.uint64(0x9E3779B9), np.uint64(0xBB67AE85)
_2_24 = 2.0 ** -24
_2_53 = 2.0 ** -53
_TWO_PI = 2.0 * math.pi


@njit(inline="always")
def philox(c0, c1, c2, c3, k0, k1):
    """The four output words of Philox4x32-10 (each a uint64 below 2^32)."""
    for r in range(10):
        if r:
            k0 = (k0 + _W0) & _LO
            k1 = (k1 + _W1) & _LO
        p0 = _M0 * c0
        p1 = _M1 * c2
        c0, c1, c2, c3 = ((p1 >> _32) ^ c1 ^ k0, p1 & _LO, (p0 >> _32) ^ c3 ^ k1, p0 & _LO)
    return c0, c1, c2, c3


@njit(inline="always")
def _u53(x, y):
    return np.float64(((y << _32) | x) >> np.uint64(11)) * _2_53


# One loop per kind: a loop with only Philox and the uniform transform in it runs vectorised
# (~1 ns an element); the normal's log and cos in the same loop would stop that.
@njit(inline="always")
def _words(seed, offset, i):
    c = offset + np.uint64(i)
    return philox(c & _LO, c >> _32, np.uint64(0), np.uint64(0), seed & _LO, seed >> _32)


@njit(inline="always")
def unit_draw(seed, offset, i, wide):
    """Draw i's uniform in [0, 1): u24 (what a float32 draw holds exactly) or, when ``wide``, u53 (float64).
    The attention kernels' dropout draws its kept elements with this too, so they match a ``bernoulli_``."""
    w0, w1, w2, w3 = _words(seed, offset, i)
    return _u53(w0, w1) if wide else np.float64(w0 >> np.uint64(8)) * _2_24


@njit(inline="always")
def _uniform(out, seed, offset, a, b, lo, hi):
    for i in range(lo, hi):
        out[i] = a + (b - a) * unit_draw(seed, offset, i, out.itemsize != 4)


@njit(inline="always")
def _normal(out, seed, offset, a, b, lo, hi):
    for i in range(lo, hi):
        w0, w1, w2, w3 = _words(seed, offset, i)
        radius = math.sqrt(-2.0 * math.log(_u53(w0, w1) + _2_53))
        out[i] = a + b * (radius * math.cos(_TWO_PI * _u53(w2, w3)))


@njit(inline="always")
def _integers(out, seed, offset, a, span, lo, hi):
    for i in range(lo, hi):
        w0, w1, w2, w3 = _words(seed, offset, i)
        bits = (w1 << _32) | w0
        out[i] = a + np.int64(bits % span if span else bits)


@njit(inline="always")
def _draw_range(kind, out, seed, offset, a, b, span, lo, hi):
    if kind == RANDOM_UNIFORM:
        _uniform(out, seed, offset, a, b, lo, hi)
    elif kind == RANDOM_NORMAL:
        _normal(out, seed, offset, a, b, lo, hi)
    else:
        _integers(out, seed, offset, a, span, lo, hi)


@njit(inline="always")
def _check_kind(kind):
    """Before the loop: a raise inside a prange loop would keep Numba from parallelising it."""
    if kind != RANDOM_UNIFORM and kind != RANDOM_NORMAL and kind != RANDOM_INTEGERS:
        raise ValueError("random: unknown random kind code")


@njit(cache=True, nogil=True)
def random_serial(kind, out, seed, offset, a, b, span, chunk, items):
    _check_kind(kind)
    _draw_range(kind, out, seed, offset, a, b, span, 0, out.size)


@njit(cache=True, nogil=True, parallel=True)
def random_parallel(kind, out, seed, offset, a, b, span, chunk, items):
    _check_kind(kind)
    for t in prange(items):
        _draw_range(kind, out, seed, offset, a, b, span, t * chunk, min(out.size, (t + 1) * chunk))


@njit(inline="always")
def _dropout_range(x, out, mask, keep, scale, seed, offset, lo, hi):
    wide = x.itemsize != 4
    zero = scale * 0
    for i in range(lo, hi):
        m = scale if unit_draw(seed, offset, i, wide) < keep else zero
        mask[i] = m
        out[i] = x[i] * m


@njit(cache=True, nogil=True)
def dropout_serial(x, out, mask, keep, scale, seed, offset, chunk, items):
    _dropout_range(x, out, mask, keep, scale, seed, offset, 0, x.size)


@njit(cache=True, nogil=True, parallel=True)
def dropout_parallel(x, out, mask, keep, scale, seed, offset, chunk, items):
    for t in prange(items):
        _dropout_range(x, out, mask, keep, scale, seed, offset, t * chunk, min(x.size, (t + 1) * chunk))
