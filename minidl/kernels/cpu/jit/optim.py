"""Fused optimizer steps: one pass per parameter instead of one per elementwise op.

Each item updates elements [lo, hi). Factors such as 1 - dampening arrive precomputed (in
float64, then rounded) as PyTorch does it.
"""
import math

from numba import njit, prange

from .rows import CHUNK


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
