"""Scaled-dot-product attention, forward and backward, blocked with an online softmax (flash attention).

The forward never holds more than one block of scores per query row: for each block of keys it
updates the row's running max ``m``, its running sum ``l`` of exp(score - m) and its accumulated
output, rescaling both by exp(m_old - m_new) when the max grows; it saves only the row's log-sum-exp
``m + log(l)``. The backward recomputes each score and its weight exp(score - lse) from that.

Both work on tiles of BQ query rows against blocks of BK keys; q and the gradient g are read in place,
keys are copied transposed (times the scale) and values (and, in the backward, keys) with rows padded to
whole micro-tiles, once per work item, so that every product is one register-blocked ``product``.
The weights of a tile stay in their own scratch block between the softmax and the products that use them.

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
from .simd import lanes, largest, load, maximum
from .tile_product import padded, product
from .vector_math import dot_run, exp_weight

BQ = 64      # query rows per tile
SPAN = 256   # query rows per forward work item, which copies the keys and values it needs once
BK = 64      # keys per block: its rows of k and v stay in the L1 cache across the rows of a tile
# the sums of a row's weights and its max split into vector lanes, and multiply-adds fuse; NaN and inf keep
# their meaning
_FASTMATH = {"reassoc", "contract"}


@njit(inline="always")
def _copy_rows(x, base, stride, n, cols, factor, xs):
    """xs[r, :cols] = factor * row r < n of x (rows ``stride`` apart from ``base``)."""
    for r in range(n):
        p = base + r * stride
        xr = xs[r]
        for c in range(cols):
            xr[c] = x[p + c] * factor


@njit(inline="always")
def _transpose_rows(x, base, stride, n, cols, factor, xt):
    """xt[c, r] = factor * element c of row r < n of x: a block of keys or values laid out so that a
    product's columns run over the block's keys."""
    for r in range(n):
        p = base + r * stride
        for c in range(cols):
            xt[c, r] = x[p + c] * factor


@njit(inline="always")
def _finish_scores(s, r, n, visible, mask, mp, mstride, has_mask):
    """Mask row r of a tile's n scores; keys from ``visible`` on (causal) and the block's padding get -inf,
    so that the row's loops run over all BK columns (a literal trip count that LLVM vectorises whole)."""
    if has_mask:
        for jj in range(n):
            s[r, jj] += mask[mp + jj * mstride]
    for jj in range(max(min(visible, n), 0), BK):
        s[r, jj] = -np.inf


@njit(inline="always")
def _row_max(s, r):
    """Largest score of row r, by whole vectors (LLVM turns a loop of scalar maxima into one serial chain);
    nan if the row has a nan and nothing above -inf (elsewhere a nan score makes its weight, and so the
    row's sum and output, nan)."""
    w = lanes(s)
    m = load(s, r * BK)
    for jj in range(w, BK, w):
        m = maximum(load(s, r * BK + jj), m)
    top = largest(m)
    if top == -np.inf:
        for jj in range(BK):
            if s[r, jj] != s[r, jj]:
                return s[r, jj]
    return top


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
    """Work item t = (batch, head, SPAN query rows): the scores Q (scale K)^T of a tile of rows against a
    block of keys, their online softmax, and P V added to the tile's output."""
    B, H, G, L, S, E, Ev = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5], geo[6]
    spans = (L + SPAN - 1) // SPAN
    bh, start = t // spans, (t % spans) * SPAN
    b, h = bh // H, bh % H
    end = min(L, start + SPAN)
    qb = qo[0] + b * qo[1] + h * qo[2]
    kb = ko[0] + b * ko[1] + (h // G) * ko[2]
    vb = vo[0] + b * vo[1] + (h // G) * vo[2]
    mb = mo[0] + b * mo[1] + h * mo[2]
    Evp = padded(Ev, out)
    kend = min(S, end) if causal else S
    blocks = (kend + BK - 1) // BK
    kt, vp = np.zeros((blocks, E, BK), out.dtype), np.zeros((blocks * BK, Evp), out.dtype)
    for jb in range(blocks):
        n = min(kend, (jb + 1) * BK) - jb * BK
        _transpose_rows(k, kb + jb * BK * ko[3], ko[3], n, E, scale, kt[jb])
    _copy_rows(v, vb, vo[3], kend, Ev, zero + 1, vp)
    s, p = np.empty((BQ, BK), out.dtype), np.zeros((BQ, BK), out.dtype)
    acc = np.empty((BQ, Evp), out.dtype)
    run_max, run_sum = np.empty(BQ, out.dtype), np.empty(BQ, out.dtype)
    z = np.empty(BK, out.dtype)
    p_drop, seed, offset = drop
    keep_below, rescale = _dropout_terms(p_drop, out)
    for i0 in range(start, end, BQ):
        rows = min(end, i0 + BQ) - i0
        acc[:] = zero
        run_max[:] = -np.inf
        run_sum[:] = zero
        for j0 in range(0, min(S, i0 + rows) if causal else S, BK):
            n = min(kend, j0 + BK) - j0
            product(q, qb + i0 * qo[3], qo[3], 1, rows, kt, j0 * E, BK, BK, E, s, 0, BK, False)
            for r in range(rows):
                i = i0 + r
                _finish_scores(s, r, n, i + 1 - j0 if causal else n, mask, mb + i * mo[3] + j0 * mo[4], mo[4],
                               has_mask)
                m_old, block_max = run_max[r], _row_max(s, r)
                m_new = block_max if block_max > m_old or block_max != block_max else m_old
                if m_new == -np.inf:                   # every key so far masked out
                    p[r] = zero
                    continue
                total = zero
                for jj in range(BK):
                    w = exp_weight(s[r, jj] - m_new)
                    p[r, jj] = w
                    total += w
                if m_new != m_old:
                    alpha = math.exp(m_old - m_new)
                    run_sum[r] *= alpha
                    for e in range(Ev):
                        acc[r, e] *= alpha
                run_max[r] = m_new
                run_sum[r] += total
                if p_drop > 0:
                    _dropout_factors(z, n, seed, offset, (bh * L + i) * S + j0, keep_below, rescale, zero)
                    for jj in range(n):
                        p[r, jj] *= z[jj]
            product(p, 0, BK, 1, rows, vp, j0 * Evp, Evp, Evp, n, acc, 0, Evp, True)
        for r in range(rows):
            row = bh * L + i0 + r
            o = out[row * Ev:(row + 1) * Ev]
            if run_sum[r] == 0:                        # no key may take part: zeros, as the unfused path
                lse[row] = -np.inf
                for e in range(Ev):
                    o[e] = zero
            else:
                lse[row] = run_max[r] + math.log(run_sum[r])
                inv = 1 / run_sum[r]
                for e in range(Ev):
                    o[e] = acc[r, e] * inv


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def attention_serial(q, qo, k, ko, v, vo, mask, mo, out, lse, geo, scale, causal, has_mask, drop, items):
    zero = out.dtype.type(0)
    for t in range(items):
        _forward_item(t, q, qo, k, ko, v, vo, mask, mo, out, lse, geo, scale, causal, has_mask, drop, zero)


@njit(cache=True, nogil=True, parallel=True, fastmath=_FASTMATH)
def attention_parallel(q, qo, k, ko, v, vo, mask, mo, out, lse, geo, scale, causal, has_mask, drop, items):
    zero = out.dtype.type(0)
    for t in prange(items):
        _forward_item(t, q, qo, k, ko, v, vo, mask, mo, out, lse, geo, scale, causal, has_mask, drop, zero)


@njit(inline="always")
def _backward_item(t, q, qo, k, ko, v, vo, mask, mo, out, lse, g, dq, dk, dv, geo, scale, causal, has_mask,
                   drop, zero):
    """Work item t = (batch, key/value head): it owns dk and dv of that head and dq of its G query heads, so
    no two items write one element. Per block of keys and tile of query rows, with the forward's scores
    Q (scale K)^T: dV += P^T dO, dS = P (dO V^T - D), dK += scale dS^T Q, dQ += scale dS K, with
    D_i = dO_i . O_i; dK and dV of the block are accumulated transposed across the tiles."""
    B, H, G, L, S, E, Ev = geo[0], geo[1], geo[2], geo[3], geo[4], geo[5], geo[6]
    Hkv = H // G
    b, hk = t // Hkv, t % Hkv
    kb = ko[0] + b * ko[1] + hk * ko[2]
    vb = vo[0] + b * vo[1] + hk * vo[2]
    d = np.empty((G, L), out.dtype)
    for h in range(hk * G, (hk + 1) * G):
        bh = b * H + h
        for i in range(L):
            row = (bh * L + i) * Ev
            d[h - hk * G, i] = dot_run(g[row:row + Ev], out[row:row + Ev], zero)
    Ep = padded(E, out)
    kt, kp = np.zeros((E, BK), out.dtype), np.zeros((BK, Ep), out.dtype)
    vt = np.zeros((Ev, BK), out.dtype)
    dkt, dvt = np.empty((E, BK), out.dtype), np.empty((Ev, BK), out.dtype)
    s, p, ds = np.empty((BQ, BK), out.dtype), np.zeros((BQ, BK), out.dtype), np.empty((BQ, BK), out.dtype)
    dqs = np.zeros((G, L, Ep), out.dtype)      # dQ / scale of the G heads (dq's rows themselves are not padded)
    z, pz = np.empty((BQ, BK), out.dtype), np.empty((BQ, BK), out.dtype)
    p_drop, seed, offset = drop
    keep_below, rescale = _dropout_terms(p_drop, out)
    kept = pz if p_drop > 0 else p        # the weights after dropout, which dV takes
    for j0 in range(0, S, BK):
        n = min(S, j0 + BK) - j0
        _transpose_rows(k, kb + j0 * ko[3], ko[3], n, E, scale, kt)
        _copy_rows(k, kb + j0 * ko[3], ko[3], n, E, zero + 1, kp)
        _transpose_rows(v, vb + j0 * vo[3], vo[3], n, Ev, zero + 1, vt)
        dkt[:] = zero
        dvt[:] = zero
        for h in range(hk * G, (hk + 1) * G):
            bh = b * H + h
            qb = qo[0] + b * qo[1] + h * qo[2]
            mb = mo[0] + b * mo[1] + h * mo[2]
            for i0 in range(j0 if causal else 0, L, BQ):   # (causal: rows before j0 see no key of the block)
                rows = min(L, i0 + BQ) - i0
                qp, gp = qb + i0 * qo[3], (bh * L + i0) * Ev
                product(q, qp, qo[3], 1, rows, kt, 0, BK, BK, E, s, 0, BK, False)
                for r in range(rows):
                    i, lse_i = i0 + r, lse[bh * L + i0 + r]
                    if lse_i == -np.inf:                   # a row no key takes part in has no gradient
                        p[r] = zero
                        continue
                    _finish_scores(s, r, n, i + 1 - j0 if causal else n, mask, mb + i * mo[3] + j0 * mo[4], mo[4],
                                   has_mask)
                    for jj in range(BK):
                        p[r, jj] = exp_weight(s[r, jj] - lse_i)
                if p_drop > 0:
                    for r in range(rows):
                        _dropout_factors(z[r], n, seed, offset, (bh * L + i0 + r) * S + j0, keep_below, rescale, zero)
                        for jj in range(n):
                            pz[r, jj] = p[r, jj] * z[r, jj]
                product(g, gp, Ev, 1, rows, vt, 0, BK, BK, Ev, ds, 0, BK, False)      # dP
                for r in range(rows):
                    d_i = d[h - hk * G, i0 + r]
                    if p_drop > 0:
                        for jj in range(n):
                            ds[r, jj] *= z[r, jj]
                    for jj in range(BK):
                        ds[r, jj] = p[r, jj] * (ds[r, jj] - d_i)                      # now dS (0 where P is)
                product(g, gp, 1, Ev, Ev, kept, 0, BK, BK, rows, dvt, 0, BK, True)
                product(q, qp, 1, qo[3], E, ds, 0, BK, BK, rows, dkt, 0, BK, True)
                product(ds, 0, BK, 1, rows, kp, 0, Ep, Ep, n, dqs, ((h - hk * G) * L + i0) * Ep, Ep, True)
        for jj in range(n):
            dkj = dk[(t * S + j0 + jj) * E:(t * S + j0 + jj + 1) * E]
            dvj = dv[(t * S + j0 + jj) * Ev:(t * S + j0 + jj + 1) * Ev]
            for c in range(E):
                dkj[c] = scale * dkt[c, jj]
            for c in range(Ev):
                dvj[c] = dvt[c, jj]
    for h in range(hk * G, (hk + 1) * G):
        for i in range(L):
            dqi = dq[((b * H + h) * L + i) * E:((b * H + h) * L + i + 1) * E]
            for c in range(E):
                dqi[c] = scale * dqs[h - hk * G, i, c]


@njit(cache=True, nogil=True, fastmath=_FASTMATH)
def attention_backward_serial(q, qo, k, ko, v, vo, mask, mo, out, lse, g, dq, dk, dv, geo, scale, causal, has_mask,
                              drop, items):
    zero = out.dtype.type(0)
    for t in range(items):
        _backward_item(t, q, qo, k, ko, v, vo, mask, mo, out, lse, g, dq, dk, dv, geo, scale, causal, has_mask, drop,
                       zero)


@njit(cache=True, nogil=True, parallel=True, fastmath=_FASTMATH)
def attention_backward_parallel(q, qo, k, ko, v, vo, mask, mo, out, lse, g, dq, dk, dv, geo, scale, causal,
                                has_mask, drop, items):
    zero = out.dtype.type(0)
    for t in prange(items):
        _backward_item(t, q, qo, k, ko, v, vo, mask, mo, out, lse, g, dq, dk, dv, geo, scale, causal, has_mask, drop,
                       zero)
