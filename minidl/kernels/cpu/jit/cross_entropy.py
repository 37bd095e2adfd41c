"""Cross-entropy (or the negative log-likelihood) of packed rows of n classes, and its gradient.

A row is read once forward (its max, then the sum of exp(x - max), in cache) and once backward
(softmax(x) from the saved row max and log-sum-exp, minus the smoothed, weighted one-hot). ``weight`` of size 0
means every class weighs 1 (one compiled specialisation for both). A target out of range is recorded
in ``bad`` = (1, target) and the row is left; the wrapper raises.
"""
import math

from numba import njit, prange

from .softmax import _row_max
from .vector_math import exp_weight


@njit(fastmath={"reassoc"})
def _exp_sum(x, m, zero):
    """sum(exp(x - m)) of a packed row, vectorised as sum_run."""
    acc = zero
    for j in range(x.size):
        acc += exp_weight(x[j] - m)
    return acc


@njit(fastmath={"reassoc"})
def _smooth_sum(x, weight, m, ls, zero):
    """sum over classes of weight_c * (ls - (x_c - m)): the row's loss against a uniform target, times n."""
    acc = zero
    if weight.size:
        for j in range(x.size):
            acc += weight[j] * (ls - (x[j] - m))
    else:
        for j in range(x.size):
            acc += ls - (x[j] - m)
    return acc


@njit(inline="always")
def _forward_rows(x, target, weight, out, wrow, stats, r0, r1, n, ignore, eps, logits, bad):
    zero = out.dtype.type(0)
    one = zero + 1
    for r in range(r0, r1):
        row = x[r * n:(r + 1) * n]
        m, ls = zero, zero
        if logits:
            m = _row_max(row)
            ls = math.log(_exp_sum(row, m, zero))
            stats[2 * r], stats[2 * r + 1] = m, ls
        t = target[r]
        out[r], wrow[r] = zero, zero
        if t == ignore:
            continue
        if t < 0 or t >= n:
            bad[0], bad[1] = 1, t
            continue
        wt = weight[t] if weight.size else one
        loss = (one - eps) * wt * (ls - (row[t] - m))
        if eps > 0:
            loss += eps / n * _smooth_sum(row, weight, m, ls, zero)
        out[r], wrow[r] = loss, wt


@njit(inline="always")
def _backward_rows(x, target, weight, stats, g, out, r0, r1, n, ignore, eps, logits, total):
    zero = out.dtype.type(0)
    one = zero + 1
    for r in range(r0, r1):
        row, o = x[r * n:(r + 1) * n], out[r * n:(r + 1) * n]
        t = target[r]
        if t == ignore or t < 0 or t >= n:
            for j in range(n):
                o[j] = zero
            continue
        gr = g[r] if g.size > 1 else g[0]
        wt = weight[t] if weight.size else one
        if logits:
            coef = gr * ((one - eps) * wt + eps * total / n)
            uniform = gr * eps / n
            m, ls = stats[2 * r], stats[2 * r + 1]
            if weight.size and eps > 0:
                for j in range(n):
                    o[j] = coef * exp_weight((row[j] - m) - ls) - uniform * weight[j]
            else:
                for j in range(n):
                    o[j] = coef * exp_weight((row[j] - m) - ls) - uniform
        else:
            for j in range(n):
                o[j] = zero
        o[t] -= gr * (one - eps) * wt


@njit(inline="always")
def _total(weight, n, zero):
    """The sum of the class weights (n when unweighted)."""
    if not weight.size:
        return zero + n
    acc = zero
    for j in range(n):
        acc += weight[j]
    return acc


@njit(cache=True, nogil=True)
def cross_entropy_serial(x, target, weight, out, wrow, stats, rows, n, ignore, eps, logits, bad, blocks):
    _forward_rows(x, target, weight, out, wrow, stats, 0, rows, n, ignore, eps, logits, bad)


@njit(cache=True, nogil=True, parallel=True)
def cross_entropy_parallel(x, target, weight, out, wrow, stats, rows, n, ignore, eps, logits, bad, blocks):
    for b in prange(blocks):
        _forward_rows(x, target, weight, out, wrow, stats, rows * b // blocks, rows * (b + 1) // blocks, n, ignore,
                      eps, logits, bad)


@njit(cache=True, nogil=True)
def cross_entropy_backward_serial(x, target, weight, stats, g, out, rows, n, ignore, eps, logits, blocks):
    total = _total(weight, n, out.dtype.type(0))
    _backward_rows(x, target, weight, stats, g, out, 0, rows, n, ignore, eps, logits, total)


@njit(cache=True, nogil=True, parallel=True)
def cross_entropy_backward_parallel(x, target, weight, stats, g, out, rows, n, ignore, eps, logits, blocks):
    total = _total(weight, n, out.dtype.type(0))
    for b in prange(blocks):
        _backward_rows(x, target, weight, stats, g, out, rows * b // blocks, rows * (b + 1) // blocks, n, ignore,
                       eps, logits, total)
