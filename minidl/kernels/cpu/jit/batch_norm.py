"""Batch norm forward and backward over packed (N, C, S) "planes" (a channel is N runs of S) or (R, C) "rows"
(channels last: a channel is every C-th element).

Planes: a channel at a time, its statistics and its normalisation back to back while its N * S elements are in
cache. Rows: the channels of a block side by side, so that every pass is a vectorised loop over a row's channels.
The statistics take two passes (the mean, then the squared deviations from it), as PyTorch's CPU kernels do:
sound in float32 where one pass of sums of squares is not. ``reassoc`` only lets LLVM split the sums into
vector accumulators (NaN and inf keep their meaning).
"""
import math

import numpy as np
from numba import njit, prange

_FASTMATH = {"reassoc"}


@njit(inline="always")
def _channel(c, total, deviations, w, b, mean, invstd, rm, rv, training, update, momentum, eps, count):
    """Channel c's mean and 1/sqrt(var + eps) into mean, invstd (from the running statistics in eval mode),
    the running statistics updated (unbiased variance), and the (scale, shift) that normalise it."""
    if training:
        m = total / count if count else total
        var = deviations / count if count else deviations
        mean[c], invstd[c] = m, 1 / math.sqrt(var + eps)
        if update:
            rm[c] = (1 - momentum) * rm[c] + momentum * m
            rv[c] = (1 - momentum) * rv[c] + momentum * (var * count / (count - 1))
    else:
        mean[c], invstd[c] = rm[c], 1 / math.sqrt(rv[c] + eps)
    scale = w[c] * invstd[c]
    return scale, b[c] - mean[c] * scale


@njit(inline="always")
def _planes_forward(x, out, N, C, S, w, b, mean, invstd, rm, rv, training, update, momentum, eps, c):
    count, zero = N * S, x.dtype.type(0)
    total = deviations = zero
    if training:
        for n in range(N):
            run = x[(n * C + c) * S:(n * C + c + 1) * S]
            for j in range(S):
                total += run[j]
        m = total / x.dtype.type(count) if count else zero   # (in x's dtype: float32 loops stay float32)
        for n in range(N):
            run = x[(n * C + c) * S:(n * C + c + 1) * S]
            for j in range(S):
                d = run[j] - m
                deviations += d * d
    scale, shift = _channel(c, total, deviations, w, b, mean, invstd, rm, rv, training, update, momentum, eps,
                            count)
    for n in range(N):
        run, o = x[(n * C + c) * S:(n * C + c + 1) * S], out[(n * C + c) * S:(n * C + c + 1) * S]
        for j in range(S):
            o[j] = run[j] * scale + shift


@njit(inline="always")
def _rows_forward(x, out, R, C, w, b, mean, invstd, rm, rv, training, update, momentum, eps, c0, c1):
    k = c1 - c0
    total, deviations = np.zeros(k, x.dtype), np.zeros(k, x.dtype)
    scale, shift = np.empty(k, x.dtype), np.empty(k, x.dtype)
    if training:
        for r in range(R):
            row = x[r * C + c0:r * C + c1]
            for j in range(k):
                total[j] += row[j]
        m = total / x.dtype.type(R) if R else total
        for r in range(R):
            row = x[r * C + c0:r * C + c1]
            for j in range(k):
                d = row[j] - m[j]
                deviations[j] += d * d
    for j in range(k):
        scale[j], shift[j] = _channel(c0 + j, total[j], deviations[j], w, b, mean, invstd, rm, rv, training, update,
                                      momentum, eps, R)
    for r in range(R):
        row, o = x[r * C + c0:r * C + c1], out[r * C + c0:r * C + c1]
        for j in range(k):
            o[j] = row[j] * scale[j] + shift[j]


@njit(inline="always")
def _dx_coefficients(c, sum_g, sum_gd, w, mean, invstd, training, count):
    """dx = a * g + p * x + q for channel c: w * invstd * (g - mean(g) - xhat * mean(g * xhat)) in training,
    w * invstd * g in eval (the statistics are constants there)."""
    a = w[c] * invstd[c]
    if not training or not count:
        return a, a * 0, a * 0
    p = -a * invstd[c] * invstd[c] * sum_gd / count
    return a, p, -a * sum_g / count - p * mean[c]


@njit(inline="always")
def _planes_backward(x, g, dx, N, C, S, w, mean, invstd, dw, db, training, c):
    count, zero = N * S, x.dtype.type(0)
    sum_g = sum_gd = zero
    m = mean[c]
    for n in range(N):
        xr, gr = x[(n * C + c) * S:(n * C + c + 1) * S], g[(n * C + c) * S:(n * C + c + 1) * S]
        for j in range(S):
            sum_g += gr[j]
            sum_gd += gr[j] * (xr[j] - m)
    db[c], dw[c] = sum_g, sum_gd * invstd[c]
    a, p, q = _dx_coefficients(c, sum_g, sum_gd, w, mean, invstd, training, count)
    for n in range(N):
        lo = (n * C + c) * S
        xr, gr, o = x[lo:lo + S], g[lo:lo + S], dx[lo:lo + S]
        for j in range(S):
            o[j] = a * gr[j] + p * xr[j] + q


@njit(inline="always")
def _rows_backward(x, g, dx, R, C, w, mean, invstd, dw, db, training, c0, c1):
    k = c1 - c0
    sum_g, sum_gd = np.zeros(k, x.dtype), np.zeros(k, x.dtype)
    a, p, q = np.empty(k, x.dtype), np.empty(k, x.dtype), np.empty(k, x.dtype)
    m = mean[c0:c1]
    for r in range(R):
        xr, gr = x[r * C + c0:r * C + c1], g[r * C + c0:r * C + c1]
        for j in range(k):
            sum_g[j] += gr[j]
            sum_gd[j] += gr[j] * (xr[j] - m[j])
    for j in range(k):
        c = c0 + j
        db[c], dw[c] = sum_g[j], sum_gd[j] * invstd[c]
        a[j], p[j], q[j] = _dx_coefficients(c, sum_g[j], sum_gd[j], w, mean, invstd, training, R)
    for r in range(R):
        xr, gr, o = x[r * C + c0:r * C + c1], g[r * C + c0:r * C + c1], dx[r * C + c0:r * C + c1]
        for j in range(k):
            o[j] = a[j] * gr[j] + p[j] * xr[j] + q[j]


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def batch_norm_serial(x, out, N, C, S, rows, w, b, mean, invstd, rm, rv, training, update, momentum, eps, blocks):
    if rows:
        _rows_forward(x, out, N * S, C, w, b, mean, invstd, rm, rv, training, update, momentum, eps, 0, C)
    else:
        for c in range(C):
            _planes_forward(x, out, N, C, S, w, b, mean, invstd, rm, rv, training, update, momentum, eps, c)


@njit(cache=True, nogil=True, parallel=True, fastmath=_FASTMATH)
def batch_norm_parallel(x, out, N, C, S, rows, w, b, mean, invstd, rm, rv, training, update, momentum, eps, blocks):
    if rows:
        for i in prange(blocks):
            _rows_forward(x, out, N * S, C, w, b, mean, invstd, rm, rv, training, update, momentum, eps,
                          C * i // blocks, C * (i + 1) // blocks)
    else:
        for c in prange(C):
            _planes_forward(x, out, N, C, S, w, b, mean, invstd, rm, rv, training, update, momentum, eps, c)


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def batch_norm_backward_serial(x, g, dx, N, C, S, rows, w, mean, invstd, dw, db, training, blocks):
    if rows:
        _rows_backward(x, g, dx, N * S, C, w, mean, invstd, dw, db, training, 0, C)
    else:
        for c in range(C):
            _planes_backward(x, g, dx, N, C, S, w, mean, invstd, dw, db, training, c)


@njit(cache=True, nogil=True, parallel=True, fastmath=_FASTMATH)
def batch_norm_backward_parallel(x, g, dx, N, C, S, rows, w, mean, invstd, dw, db, training, blocks):
    if rows:
        for i in prange(blocks):
            _rows_backward(x, g, dx, N * S, C, w, mean, invstd, dw, db, training, C * i // blocks,
                           C * (i + 1) // blocks)
    else:
        for c in prange(C):
            _planes_backward(x, g, dx, N, C, S, w, mean, invstd, dw, db, training, c)
