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
def _score(q, qp, k, kp, e, mask, mp, has_mask, scale, zero):
    s = dot_run(q[qp:qp + e], k[kp:kp + e], zero) * scale
    if has_mask:
        s += mask[mp]
    return s


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
    kend = min(S, i1) if causal else S
    for j0 in range(0, kend, BK):
        for r in range(rows):
            i = i0 + r
            n = (min(kend, j0 + BK, i + 1) if causal else min(kend, j0 + BK)) - j0
            if n <= 0:
                continue
            block_max = -np.inf
            for jj in range(n):
                x = _score(q, qb + i * qo[3], k, kb + (j0 + jj) * ko[3], E, mask, mb + i * mo[3] + (j0 + jj) * mo[4],
                           has_mask, scale, zero)
                s[jj] = x
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
    """Work item t = (batch, key/value head): it owns dk and dv of that head and dq of its G query heads."""
    B, H, G, L, S, E, Ev = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5], geo[6]
    Hkv = H // G
    b, hk = t // Hkv, t % Hkv
    kb = ko[0] + b * ko[1] + hk * ko[2]
    vb = vo[0] + b * vo[1] + hk * vo[2]
    dkr, dvr = dk[t * S * E:(t + 1) * S * E], dv[t * S * Ev:(t + 1) * S * Ev]
    dkr[:] = zero
    dvr[:] = zero
    d = np.empty(L, out.dtype)
    s, p = np.empty(BK, out.dtype), np.empty(BK, out.dtype)
    for h in range(hk * G, (hk + 1) * G):
        bh = b * H + h
        qb = qo[0] + b * qo[1] + h * qo[2]
        mb = mo[0] + b * mo[1] + h * mo[2]
        dqr = dq[bh * L * E:(bh + 1) * L * E]
        dqr[:] = zero
        for i in range(L):                             # D_i = dO_i . O_i = sum over keys of P_ij dP_ij
            row = (bh * L + i) * Ev
            d[i] = dot_run(g[row:row + Ev], out[row:row + Ev], zero)
        for j0 in range(0, S, BK):
            for i in range(j0 if causal else 0, L):
                lse_i = lse[bh * L + i]
                n = (min(S, j0 + BK, i + 1) if causal else min(S, j0 + BK)) - j0
                if lse_i == -np.inf or n <= 0:
                    continue
                qp, gp = qb + i * qo[3], (bh * L + i) * Ev
                for jj in range(n):
                    s[jj] = _score(q, qp, k, kb + (j0 + jj) * ko[3], E, mask, mb + i * mo[3] + (j0 + jj) * mo[4],
                                   has_mask, scale, zero) - lse_i
                exp_run(s[:n], p[:n])
                qr, gr, dqi = q[qp:qp + E], g[gp:gp + Ev], dqr[i * E:(i + 1) * E]
                for jj in range(n):
                    j = j0 + jj
                    w = p[jj]
                    dvj = dvr[j * Ev:(j + 1) * Ev]
                    for e in range(Ev):
                        dvj[e] += w * gr[e]
                    vp = vb + j * vo[3]
                    ds = w * (dot_run(gr, v[vp:vp + Ev], zero) - d[i]) * scale
                    kp = kb + j * ko[3]
                    kr, dkj = k[kp:kp + E], dkr[j * E:(j + 1) * E]
                    for e in range(E):
                        dqi[e] += ds * kr[e]
                        dkj[e] += ds * qr[e]


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
