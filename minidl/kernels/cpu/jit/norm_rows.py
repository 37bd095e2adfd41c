"""Layer, RMS and group norm over packed rows of n elements, forward and backward (the ``norm_rows`` pair).

A row stays in cache while it is read a few times: its mean (none for RMS), the sum of squared deviations
from it (two passes: as exact as torch's float32 moments), then the output with the affine applied. The
affine parameter of element j of row r is ``(r % cycle) * (n // span) + j // span``: per column for
layer/RMS norm (span 1, cycle 1), per channel for group norm (span = the spatial size, cycle = groups).
The backward's parameter gradients are column sums over rows, accumulated into ``pw``/``pb``: one
(blocks, params) slice per parallel block, which the wrapper adds up.
"""
import math

from numba import njit, prange

from .vector_math import sum_run


@njit(fastmath={"reassoc"})
def _square_sum(v, m, zero):
    """sum((v - m)**2) of a packed run, vectorised as sum_run."""
    acc = zero
    for j in range(v.size):
        d = v[j] - m
        acc += d * d
    return acc


@njit(fastmath={"reassoc"})
def _gradient_sums(g, w, v, m, zero):
    """(sum(g * w), sum(g * w * (v - m))) of packed runs."""
    a = zero
    c = zero
    for j in range(v.size):
        gy = g[j] * w[j]
        a += gy
        c += gy * (v[j] - m)
    return a, c


@njit(fastmath={"reassoc"})
def _run_sums(g, v, m, zero):
    """(sum(g), sum(g * (v - m))) of packed runs."""
    a = zero
    c = zero
    for j in range(v.size):
        a += g[j]
        c += g[j] * (v[j] - m)
    return a, c


@njit(inline="always")
def _norm_rows(x, w, b, out, mean, rstd, r0, r1, n, span, cycle, eps, rms, zero, inv_n):
    per = n // span
    for r in range(r0, r1):
        xr, o = x[r * n:(r + 1) * n], out[r * n:(r + 1) * n]
        mean[r] = zero if rms else sum_run(xr, zero) * inv_n
        m = mean[r]                                    # (read back: in the row's dtype)
        rstd[r] = 1.0 / math.sqrt(_square_sum(xr, m, zero) * inv_n + eps)
        s = rstd[r]
        base = (r % cycle) * per
        if span == 1:
            wr, br = w[base:base + n], b[base:base + n]
            for j in range(n):
                o[j] = (xr[j] - m) * s * wr[j] + br[j]
        else:
            for c in range(per):
                a = s * w[base + c]
                shift = b[base + c] - m * a
                xc, oc = xr[c * span:(c + 1) * span], o[c * span:(c + 1) * span]  # (runs from 0: they vectorise)
                for j in range(span):
                    oc[j] = xc[j] * a + shift


@njit(inline="always")
def _norm_rows_backward(x, w, mean, rstd, g, dx, want_dx, pw, pb, r0, r1, n, span, cycle, rms, zero, inv_n):
    """dx = rstd * (gy - mean(gy) - xhat * mean(gy * xhat)) with gy = g * w (no mean(gy) term for RMS), when
    ``want_dx`` (dx is empty otherwise); pw += g * xhat and pb += g per parameter."""
    per = n // span
    for r in range(r0, r1):
        xr, gr = x[r * n:(r + 1) * n], g[r * n:(r + 1) * n]
        d = dx[r * n:(r + 1) * n] if want_dx else dx
        m, s = mean[r], rstd[r]
        base = (r % cycle) * per
        if span == 1:
            wr, qw, qb = w[base:base + n], pw[base:base + n], pb[base:base + n]
            a, c = _gradient_sums(gr, wr, xr, m, zero)
            a, c = zero if rms else a * inv_n, c * s * inv_n
            for j in range(n):
                xhat = (xr[j] - m) * s
                if want_dx:
                    d[j] = s * (gr[j] * wr[j] - a - xhat * c)
                qw[j] += gr[j] * xhat
                qb[j] += gr[j]
        else:
            a, c = zero, zero
            for k in range(per):
                sg, sgx = _run_sums(gr[k * span:(k + 1) * span], xr[k * span:(k + 1) * span], m, zero)
                a += w[base + k] * sg
                c += w[base + k] * sgx
                pw[base + k] += s * sgx
                pb[base + k] += sg
            a, c = zero if rms else a * inv_n, c * s * s * inv_n
            for k in range(per if want_dx else 0):
                wk, shift, scale = s * w[base + k], s * a, s * c
                xk, gk, dk = xr[k * span:(k + 1) * span], gr[k * span:(k + 1) * span], d[k * span:(k + 1) * span]
                for j in range(span):
                    dk[j] = gk[j] * wk - shift - (xk[j] - m) * scale


@njit(cache=True, nogil=True)
def norm_rows_serial(x, w, b, out, mean, rstd, rows, n, span, cycle, eps, rms, zero, inv_n, blocks):
    _norm_rows(x, w, b, out, mean, rstd, 0, rows, n, span, cycle, eps, rms, zero, inv_n)


@njit(cache=True, nogil=True, parallel=True)
def norm_rows_parallel(x, w, b, out, mean, rstd, rows, n, span, cycle, eps, rms, zero, inv_n, blocks):
    for k in prange(blocks):
        _norm_rows(x, w, b, out, mean, rstd, rows * k // blocks, rows * (k + 1) // blocks, n, span, cycle, eps,
                   rms, zero, inv_n)


@njit(cache=True, nogil=True)
def norm_rows_backward_serial(x, w, mean, rstd, g, dx, want_dx, pw, pb, rows, n, span, cycle, rms, zero, inv_n,
                              blocks):
    _norm_rows_backward(x, w, mean, rstd, g, dx, want_dx, pw, pb, 0, rows, n, span, cycle, rms, zero, inv_n)


@njit(cache=True, nogil=True, parallel=True)
def norm_rows_backward_parallel(x, w, mean, rstd, g, dx, want_dx, pw, pb, rows, n, span, cycle, rms, zero, inv_n,
                                blocks):
    params = pw.size // blocks
    for k in prange(blocks):
        _norm_rows_backward(x, w, mean, rstd, g, dx, want_dx, pw[k * params:(k + 1) * params],
                            pb[k * params:(k + 1) * params], rows * k // blocks, rows * (k + 1) // blocks, n, span,
                            cycle, rms, zero, inv_n)
