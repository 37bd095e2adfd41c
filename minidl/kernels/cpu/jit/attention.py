"""Scaled-dot-product attention, forward and backward, blocked with an online softmax (flash attention).

The forward never holds more than one block of scores per query row: for each block of keys it
updates the row's running max ``m``, its running sum ``l`` of exp(score - m) and its accumulated
output, rescaling both by exp(m_old - m_new) when the max grows; it saves only the row's log-sum-exp
``m + log(l)``. The backward recomputes each score and its weight exp(score - lse) from that.

Geometry ``geo`` = (B, H, G, L, S, E, Ev): batch, query heads, query heads per key/value head
(grouped-query attention), query and key lengths, head dims of query/key and of value. Each of
q, k, v is addressed by (offset, batch stride, head stride, row stride) with unit stride along the
head dim; the additive mask by (offset, batch, head, row, column strides), any of them 0 when
broadcast. out, lse, g, dq, dk, dv are packed. ``causal``: query i sees keys 0..i (upper-left).
"""
import math

import numpy as np
from numba import njit, prange

from .vector_math import dot_run, exp_run, sum_run

BQ = 32   # query rows per forward work item
BK = 64   # keys per block: its rows of k and v stay in the L1 cache across the rows of a work item


@njit(inline="always")
def _transpose_rows(x, base, stride, j0, n, cols, xt):
    """xt[c, jj] = element c of row j0 + jj (rows ``stride`` apart from ``base``): a block of keys or values
    laid out so that the loops over a block's keys run along unit strides."""
    for jj in range(n):
        p = base + (j0 + jj) * stride
        for c in range(cols):
            xt[c, jj] = x[p + c]


@njit(inline="always")
def _scores(q, qp, kt, n, e, mask, mp, mstride, has_mask, scale, s):
    """s[:n] = the scores of the query row at qp against the block kt (e x n), scaled and masked. The forward
    and the backward both use this one order of operations, so the backward's weights are the forward's."""
    for jj in range(n):
        s[jj] = 0
    for c in range(e):
        x, row = q[qp + c], kt[c]
        for jj in range(n):
            s[jj] += x * row[jj]
    for jj in range(n):
        s[jj] *= scale
    if has_mask:
        for jj in range(n):
            s[jj] += mask[mp + jj * mstride]


@njit(inline="always")
def _forward_item(t, q, qo, k, ko, v, vo, mask, mo, out, lse, geo, scale, causal, has_mask, zero):
    B, H, G, L, S, E, Ev = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5], geo[6]
    blocks = (L + BQ - 1) // BQ
    bh, i0 = t // blocks, (t % blocks) * BQ
    b, h = bh // H, bh % H
    i1 = min(L, i0 + BQ)
    rows = i1 - i0
    qb = qo[0] + b * qo[1] + h * qo[2]
    kb = ko[0] + b * ko[1] + (h // G) * ko[2]
    vb = vo[0] + b * vo[1] + (h // G) * vo[2]
    mb = mo[0] + b * mo[1] + h * mo[2]
    run_max = np.full(rows, -np.inf, out.dtype)
    run_sum = np.zeros(rows, out.dtype)
    acc = np.zeros(rows * Ev, out.dtype)
    s, p = np.empty(BK, out.dtype), np.empty(BK, out.dtype)
    kt = np.empty((E, BK), out.dtype)
    kend = min(S, i1) if causal else S
    for j0 in range(0, kend, BK):
        _transpose_rows(k, kb, ko[3], j0, min(kend, j0 + BK) - j0, E, kt)
        for r in range(rows):
            i = i0 + r
            n = (min(kend, j0 + BK, i + 1) if causal else min(kend, j0 + BK)) - j0
            if n <= 0:
                continue
            _scores(q, qb + i * qo[3], kt, n, E, mask, mb + i * mo[3] + j0 * mo[4], mo[4], has_mask, scale, s)
            block_max = -np.inf
            for jj in range(n):
                x = s[jj]
                if x > block_max or x != x:
                    block_max = x
            m_old = run_max[r]
            m_new = block_max if block_max > m_old or block_max != block_max else m_old
            if m_new == -np.inf:
                continue                               # every key so far masked out
            for jj in range(n):
                s[jj] -= m_new
            exp_run(s[:n], p[:n])
            a = acc[r * Ev:(r + 1) * Ev]
            if m_new != m_old:
                alpha = math.exp(m_old - m_new)
                run_sum[r] *= alpha
                for e in range(Ev):
                    a[e] *= alpha
            run_max[r] = m_new
            run_sum[r] += sum_run(p[:n], zero)
            for jj in range(n):
                w, vp = p[jj], vb + (j0 + jj) * vo[3]
                vr = v[vp:vp + Ev]
                for e in range(Ev):
                    a[e] += w * vr[e]
    for r in range(rows):
        row = bh * L + i0 + r
        o = out[row * Ev:(row + 1) * Ev]
        if run_sum[r] == 0:                            # no key may take part: zeros, as the unfused path
            lse[row] = -np.inf
            for e in range(Ev):
                o[e] = zero
        else:
            lse[row] = run_max[r] + math.log(run_sum[r])
            inv = 1 / run_sum[r]
            for e in range(Ev):
                o[e] = acc[r * Ev + e] * inv


@njit(cache=True, nogil=True)
def attention_serial(q, qo, k, ko, v, vo, mask, mo, out, lse, geo, scale, causal, has_mask, items):
    zero = out.dtype.type(0)
    for t in range(items):
        _forward_item(t, q, qo, k, ko, v, vo, mask, mo, out, lse, geo, scale, causal, has_mask, zero)


@njit(cache=True, nogil=True, parallel=True)
def attention_parallel(q, qo, k, ko, v, vo, mask, mo, out, lse, geo, scale, causal, has_mask, items):
    zero = out.dtype.type(0)
    for t in prange(items):
        _forward_item(t, q, qo, k, ko, v, vo, mask, mo, out, lse, geo, scale, causal, has_mask, zero)


@njit(inline="always")
def _backward_item(t, q, qo, k, ko, v, vo, mask, mo, out, lse, g, dq, dk, dv, geo, scale, causal, has_mask,
                   zero):
    """Work item t = (batch, key/value head): it owns dk and dv of that head and dq of its G query heads, so
    no two items write one element. Per block of keys: dV += P^T dO, dS = P (dO V^T - D) scale,
    dQ += dS K, dK += dS^T Q, with D_i = dO_i . O_i, and dK, dV of the block accumulated transposed."""
    B, H, G, L, S, E, Ev = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5], geo[6]
    Hkv = H // G
    b, hk = t // Hkv, t % Hkv
    kb = ko[0] + b * ko[1] + hk * ko[2]
    vb = vo[0] + b * vo[1] + hk * vo[2]
    d = np.empty((G, L), out.dtype)
    for h in range(hk * G, (hk + 1) * G):
        bh = b * H + h
        dq[bh * L * E:(bh + 1) * L * E] = zero
        for i in range(L):
            row = (bh * L + i) * Ev
            d[h - hk * G, i] = dot_run(g[row:row + Ev], out[row:row + Ev], zero)
    s, p, dp = np.empty(BK, out.dtype), np.empty(BK, out.dtype), np.empty(BK, out.dtype)
    kt, vt = np.empty((E, BK), out.dtype), np.empty((Ev, BK), out.dtype)
    dkt, dvt = np.empty((E, BK), out.dtype), np.empty((Ev, BK), out.dtype)
    for j0 in range(0, S, BK):
        nb = min(S, j0 + BK) - j0
        _transpose_rows(k, kb, ko[3], j0, nb, E, kt)
        _transpose_rows(v, vb, vo[3], j0, nb, Ev, vt)
        dkt[:] = zero
        dvt[:] = zero
        for h in range(hk * G, (hk + 1) * G):
            bh = b * H + h
            qb = qo[0] + b * qo[1] + h * qo[2]
            mb = mo[0] + b * mo[1] + h * mo[2]
            for i in range(j0 if causal else 0, L):
                lse_i = lse[bh * L + i]
                n = (min(S, j0 + BK, i + 1) if causal else min(S, j0 + BK)) - j0
                if lse_i == -np.inf or n <= 0:
                    continue                           # a row no key takes part in has no gradient
                qp, gp = qb + i * qo[3], (bh * L + i) * Ev
                _scores(q, qp, kt, n, E, mask, mb + i * mo[3] + j0 * mo[4], mo[4], has_mask, scale, s)
                for jj in range(n):
                    s[jj] -= lse_i
                exp_run(s[:n], p[:n])
                for jj in range(n):
                    dp[jj] = 0
                for c in range(Ev):
                    x, row, drow = g[gp + c], vt[c], dvt[c]
                    for jj in range(n):
                        dp[jj] += x * row[jj]
                        drow[jj] += x * p[jj]
                d_i = d[h - hk * G, i]
                for jj in range(n):
                    dp[jj] = p[jj] * (dp[jj] - d_i) * scale   # now dS
                dqi = dq[(bh * L + i) * E:(bh * L + i + 1) * E]
                for c in range(E):
                    x, row, drow = q[qp + c], kt[c], dkt[c]
                    acc = dqi[c]
                    for jj in range(n):
                        acc += dp[jj] * row[jj]
                        drow[jj] += x * dp[jj]
                    dqi[c] = acc
        for jj in range(nb):
            dkj = dk[((t * S) + j0 + jj) * E:((t * S) + j0 + jj + 1) * E]
            dvj = dv[((t * S) + j0 + jj) * Ev:((t * S) + j0 + jj + 1) * Ev]
            for c in range(E):
                dkj[c] = dkt[c, jj]
            for c in range(Ev):
                dvj[c] = dvt[c, jj]


@njit(cache=True, nogil=True)
def attention_backward_serial(q, qo, k, ko, v, vo, mask, mo, out, lse, g, dq, dk, dv, geo, scale, causal, has_mask,
                              items):
    zero = out.dtype.type(0)
    for t in range(items):
        _backward_item(t, q, qo, k, ko, v, vo, mask, mo, out, lse, g, dq, dk, dv, geo, scale, causal, has_mask, zero)


@njit(cache=True, nogil=True, parallel=True)
def attention_backward_parallel(q, qo, k, ko, v, vo, mask, mo, out, lse, g, dq, dk, dv, geo, scale, causal,
                                has_mask, items):
    zero = out.dtype.type(0)
    for t in prange(items):
        _backward_item(t, q, qo, k, ko, v, vo, mask, mo, out, lse, g, dq, dk, dv, geo, scale, causal, has_mask, zero)
