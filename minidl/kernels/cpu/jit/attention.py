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

Dropout (``drop`` = (p, seed, offset); p = 0: none) keeps weight (i, j) of head bh when draw
(bh * L + i) * S + j of the generator at (seed, offset) is below 1 - p (in the compute dtype) — the draw
``F.dropout`` makes over the whole (B, H, L, S) weights — and scales it by 1 / (1 - p). The softmax's sum
runs over the weights before dropout; the backward uses dV = (P Z)^T dO and dS = P (Z dP - D) scale,
Z the kept elements' factor, D_i = dO_i . O_i as without dropout.
"""
import math

import numpy as np
from numba import njit, prange

from .random import unit_draw
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
def _tile_rows(base, stride, rr):
    """Positions of a tile's R = 4 rows; rows past the rr real ones repeat the last (their results are unused)."""
    return base, base + min(1, rr - 1) * stride, base + min(2, rr - 1) * stride, base + min(3, rr - 1) * stride


@njit(inline="always")
def _add_row(x0, x1, x2, x3, row, n, t0, t1, t2, t3):
    """t_r[:n] += x_r * row[:n] for the four rows of a tile: the step every product here is made of, one
    element of ``row`` read for four multiply-adds."""
    for jj in range(n):
        y = row[jj]
        t0[jj] += x0 * y
        t1[jj] += x1 * y
        t2[jj] += x2 * y
        t3[jj] += x3 * y


@njit(inline="always")
def _scores(q, qp, qstride, rr, kt, n, e, s):
    """s[r, :n] = (query row r of the tile at qp) . kt[:, :n], summed over the head dim in order. Four rows at
    a time, so that each element of the key block feeds four multiply-adds. The forward and the backward
    both use this one order of operations, so the backward's weights are the forward's."""
    p0, p1, p2, p3 = _tile_rows(qp, qstride, rr)
    s0, s1, s2, s3 = s[0], s[1], s[2], s[3]
    for jj in range(n):
        s0[jj] = s1[jj] = s2[jj] = s3[jj] = 0
    for c in range(e):
        _add_row(q[p0 + c], q[p1 + c], q[p2 + c], q[p3 + c], kt[c], n, s0, s1, s2, s3)


@njit(inline="always")
def _add_products(w, x, base, stride, n, cols, tile):
    """tile[r, :cols] += sum over jj < n of w[r, jj] * (row jj of x: ``cols`` elements from base + jj * stride),
    for the four rows r of a tile: P V in the forward, dS K in the backward."""
    t0, t1, t2, t3 = tile[0], tile[1], tile[2], tile[3]
    for jj in range(n):
        xp = base + jj * stride
        _add_row(w[0, jj], w[1, jj], w[2, jj], w[3, jj], x[xp:xp + cols], cols, t0, t1, t2, t3)


@njit(inline="always")
def _finish_scores(sr, n, visible, mask, mp, mstride, has_mask, scale):
    """Scale and mask one row of scores; keys from ``visible`` on (causal) get -inf."""
    for jj in range(n):
        sr[jj] *= scale
    if has_mask:
        for jj in range(n):
            sr[jj] += mask[mp + jj * mstride]
    for jj in range(max(visible, 0), n):
        sr[jj] = -np.inf


@njit(inline="always")
def _dropout_terms(p, out):
    """(threshold a uniform draw must stay below, the kept weights' factor) for dropout probability p, as
    ``F.dropout`` compares and scales: 1 - p rounded to the dtype, 1 / (1 - p) in it."""
    if out.itemsize == 4:
        return np.float64(np.float32(1.0 - p)), np.float32(1.0 / (1.0 - p))
    return 1.0 - p, 1.0 / (1.0 - p)


@njit(inline="always")
def _dropout_factors(z, n, seed, offset, first, keep_below, rescale, zero):
    """z[:n] = rescale where draw first + jj is kept, else 0."""
    wide = z.itemsize == 8
    for jj in range(n):
        z[jj] = rescale if unit_draw(seed, offset, first + jj, wide) < keep_below else zero


@njit(inline="always")
def _forward_item(t, q, qo, k, ko, v, vo, mask, mo, out, lse, geo, scale, causal, has_mask, drop, zero):
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
    run_max = np.full(BQ, -np.inf, out.dtype)
    run_sum = np.zeros(BQ, out.dtype)
    acc = np.zeros((BQ, Ev), out.dtype)
    s, p = np.empty((4, BK), out.dtype), np.zeros((4, BK), out.dtype)
    kt = np.empty((E, BK), out.dtype)
    z = np.empty(BK, out.dtype)
    p_drop, seed, offset = drop
    keep_below, rescale = _dropout_terms(p_drop, out)
    kend = min(S, i1) if causal else S
    for j0 in range(0, kend, BK):
        n = min(kend, j0 + BK) - j0
        _transpose_rows(k, kb, ko[3], j0, n, E, kt)
        for r0 in range(0, rows, 4):
            rr = min(4, rows - r0)
            _scores(q, qb + (i0 + r0) * qo[3], qo[3], rr, kt, n, E, s)
            for r in range(4):
                pr = p[r]
                i = i0 + r0 + r
                if r >= rr:
                    pr[:n] = zero
                    continue
                sr = s[r]
                _finish_scores(sr, n, i + 1 - j0 if causal else n, mask, mb + i * mo[3] + j0 * mo[4], mo[4],
                               has_mask, scale)
                block_max = -np.inf
                for jj in range(n):
                    x = sr[jj]
                    if x > block_max or x != x:
                        block_max = x
                m_old = run_max[r0 + r]
                m_new = block_max if block_max > m_old or block_max != block_max else m_old
                if m_new == -np.inf:                   # every key so far masked out
                    pr[:n] = zero
                    continue
                for jj in range(n):
                    sr[jj] -= m_new
                exp_run(sr[:n], pr[:n])
                if m_new != m_old:
                    alpha = math.exp(m_old - m_new)
                    run_sum[r0 + r] *= alpha
                    a = acc[r0 + r]
                    for e in range(Ev):
                        a[e] *= alpha
                run_max[r0 + r] = m_new
                run_sum[r0 + r] += sum_run(pr[:n], zero)
                if p_drop > 0:
                    _dropout_factors(z, n, seed, offset, (bh * L + i) * S + j0, keep_below, rescale, zero)
                    for jj in range(n):
                        pr[jj] *= z[jj]
            _add_products(p, v, vb + j0 * vo[3], vo[3], n, Ev, acc[r0:r0 + 4])     # (BQ is a multiple of 4)
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
                o[e] = acc[r, e] * inv


@njit(cache=True, nogil=True)
def attention_serial(q, qo, k, ko, v, vo, mask, mo, out, lse, geo, scale, causal, has_mask, drop, items):
    zero = out.dtype.type(0)
    for t in range(items):
        _forward_item(t, q, qo, k, ko, v, vo, mask, mo, out, lse, geo, scale, causal, has_mask, drop, zero)


@njit(cache=True, nogil=True, parallel=True)
def attention_parallel(q, qo, k, ko, v, vo, mask, mo, out, lse, geo, scale, causal, has_mask, drop, items):
    zero = out.dtype.type(0)
    for t in prange(items):
        _forward_item(t, q, qo, k, ko, v, vo, mask, mo, out, lse, geo, scale, causal, has_mask, drop, zero)


@njit(inline="always")
def _backward_item(t, q, qo, k, ko, v, vo, mask, mo, out, lse, g, dq, dk, dv, geo, scale, causal, has_mask,
                   drop, zero):
    """Work item t = (batch, key/value head): it owns dk and dv of that head and dq of its G query heads, so
    no two items write one element. Per block of keys and tile of four query rows: dV += P^T dO,
    dS = P (dO V^T - D) scale, dQ += dS K, dK += dS^T Q, with D_i = dO_i . O_i; dK and dV of the block are
    accumulated transposed."""
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
    s, p, dp = np.empty((4, BK), out.dtype), np.empty((4, BK), out.dtype), np.empty((4, BK), out.dtype)
    kt, vt = np.empty((E, BK), out.dtype), np.empty((Ev, BK), out.dtype)
    dkt, dvt = np.empty((E, BK), out.dtype), np.empty((Ev, BK), out.dtype)
    dqt = np.empty((4, E), out.dtype)
    z, pz = np.empty((4, BK), out.dtype), np.empty((4, BK), out.dtype)
    p_drop, seed, offset = drop
    keep_below, rescale = _dropout_terms(p_drop, out)
    kept = pz if p_drop > 0 else p        # the weights after dropout, which dV takes
    for j0 in range(0, S, BK):
        n = min(S, j0 + BK) - j0
        _transpose_rows(k, kb, ko[3], j0, n, E, kt)
        _transpose_rows(v, vb, vo[3], j0, n, Ev, vt)
        dkt[:] = zero
        dvt[:] = zero
        for h in range(hk * G, (hk + 1) * G):
            bh = b * H + h
            qb = qo[0] + b * qo[1] + h * qo[2]
            mb = mo[0] + b * mo[1] + h * mo[2]
            for i0 in range(j0 if causal else 0, L, 4):   # (causal: rows before j0 see no key of the block)
                rr = min(4, L - i0)
                _scores(q, qb + i0 * qo[3], qo[3], rr, kt, n, E, s)
                for r in range(4):
                    i, pr = i0 + r, p[r]
                    lse_i = lse[bh * L + i] if r < rr else -np.inf
                    if lse_i == -np.inf:                   # a row no key takes part in has no gradient
                        pr[:n] = zero
                        continue
                    sr = s[r]
                    _finish_scores(sr, n, i + 1 - j0 if causal else n, mask, mb + i * mo[3] + j0 * mo[4], mo[4],
                                   has_mask, scale)
                    for jj in range(n):
                        sr[jj] -= lse_i
                    exp_run(sr[:n], pr[:n])
                if p_drop > 0:
                    for r in range(4):
                        _dropout_factors(z[r], n, seed, offset, (bh * L + min(i0 + r, L - 1)) * S + j0, keep_below,
                                         rescale, zero)
                        for jj in range(n):
                            pz[r, jj] = p[r, jj] * z[r, jj]
                g0, g1, g2, g3 = _tile_rows((bh * L + i0) * Ev, Ev, rr)
                for jj in range(n):
                    dp[0, jj] = dp[1, jj] = dp[2, jj] = dp[3, jj] = 0
                for c in range(Ev):
                    x0, x1, x2, x3, row, drow = g[g0 + c], g[g1 + c], g[g2 + c], g[g3 + c], vt[c], dvt[c]
                    for jj in range(n):
                        w = row[jj]
                        dp[0, jj] += x0 * w
                        dp[1, jj] += x1 * w
                        dp[2, jj] += x2 * w
                        dp[3, jj] += x3 * w
                        drow[jj] += x0 * kept[0, jj] + x1 * kept[1, jj] + x2 * kept[2, jj] + x3 * kept[3, jj]
                for r in range(4):
                    d_i = d[h - hk * G, min(i0 + r, L - 1)]
                    if p_drop > 0:
                        for jj in range(n):
                            dp[r, jj] *= z[r, jj]
                    for jj in range(n):
                        dp[r, jj] = p[r, jj] * (dp[r, jj] - d_i) * scale   # now dS (0 where P is)
                q0, q1, q2, q3 = _tile_rows(qb + i0 * qo[3], qo[3], rr)
                for c in range(E):
                    x0, x1, x2, x3, drow = q[q0 + c], q[q1 + c], q[q2 + c], q[q3 + c], dkt[c]
                    for jj in range(n):
                        drow[jj] += x0 * dp[0, jj] + x1 * dp[1, jj] + x2 * dp[2, jj] + x3 * dp[3, jj]
                dqt[:] = zero                      # (a scratch tile: rows of dq itself may alias, which stops SIMD)
                _add_products(dp, k, kb + j0 * ko[3], ko[3], n, E, dqt)
                for r in range(rr):
                    dqi, dqr = dq[(bh * L + i0 + r) * E:(bh * L + i0 + r + 1) * E], dqt[r]
                    for c in range(E):
                        dqi[c] += dqr[c]
        for jj in range(n):
            dkj = dk[(t * S + j0 + jj) * E:(t * S + j0 + jj + 1) * E]
            dvj = dv[(t * S + j0 + jj) * Ev:(t * S + j0 + jj + 1) * Ev]
            for c in range(E):
                dkj[c] = dkt[c, jj]
            for c in range(Ev):
                dvj[c] = dvt[c, jj]


@njit(cache=True, nogil=True)
def attention_backward_serial(q, qo, k, ko, v, vo, mask, mo, out, lse, g, dq, dk, dv, geo, scale, causal, has_mask,
                              drop, items):
    zero = out.dtype.type(0)
    for t in range(items):
        _backward_item(t, q, qo, k, ko, v, vo, mask, mo, out, lse, g, dq, dk, dv, geo, scale, causal, has_mask, drop,
                       zero)


@njit(cache=True, nogil=True, parallel=True)
def attention_backward_parallel(q, qo, k, ko, v, vo, mask, mo, out, lse, g, dq, dk, dv, geo, scale, causal,
                                has_mask, drop, items):
    zero = out.dtype.type(0)
    for t in prange(items):
        _backward_item(t, q, qo, k, ko, v, vo, mask, mo, out, lse, g, dq, dk, dv, geo, scale, causal, has_mask, drop,
                       zero)
