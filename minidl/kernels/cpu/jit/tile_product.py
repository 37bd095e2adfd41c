"""c = a b or c += a b over small scratch tiles, register-blocked: the products of the attention kernels.

A micro-tile of 6 rows by two vectors of c (``simd.py``) stays in twelve registers while the loop runs
along the shared dimension: each step loads two vectors of b and six elements of a, each broadcast,
for twelve fused multiply-adds, close to the core's peak (a loop that kept the sums in memory would
load and store one for each multiply-add).
"""
from numba import njit

from .simd import add, fma, lanes, load, splat, store, zeros

ROWS = 6   # rows of a micro-tile: 12 vectors of sums, 2 of b and 1 of a fill 15 of AVX2's 16 registers


@njit(inline="always")
def _micro_tile(a, pa, ars, acs, rr, b, pb, bs, k, c, pc, cs, w, accumulate):
    """c[rr <= 6 rows from pc, 2w columns] (+)= a[rr rows from pa, k] b[k rows from pb, 2w columns]. The rows
    past rr repeat the last one and are not stored."""
    a0, a1, a2 = pa, pa + min(1, rr - 1) * ars, pa + min(2, rr - 1) * ars
    a3, a4, a5 = pa + min(3, rr - 1) * ars, pa + min(4, rr - 1) * ars, pa + min(5, rr - 1) * ars
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = zeros(c)
    for t in range(k):
        pbt, at = pb + t * bs, t * acs
        b0, b1 = load(b, pbt), load(b, pbt + w)
        x = splat(a, a0 + at)
        c00, c01 = fma(x, b0, c00), fma(x, b1, c01)
        x = splat(a, a1 + at)
        c10, c11 = fma(x, b0, c10), fma(x, b1, c11)
        x = splat(a, a2 + at)
        c20, c21 = fma(x, b0, c20), fma(x, b1, c21)
        x = splat(a, a3 + at)
        c30, c31 = fma(x, b0, c30), fma(x, b1, c31)
        x = splat(a, a4 + at)
        c40, c41 = fma(x, b0, c40), fma(x, b1, c41)
        x = splat(a, a5 + at)
        c50, c51 = fma(x, b0, c50), fma(x, b1, c51)
    for r, (v0, v1) in enumerate(((c00, c01), (c10, c11), (c20, c21), (c30, c31), (c40, c41), (c50, c51))):
        if r < rr:
            p = pc + r * cs
            if accumulate:
                v0, v1 = add(load(c, p), v0), add(load(c, p + w), v1)
            store(c, p, v0)
            store(c, p + w, v1)


@njit(inline="always")
def product(a, pa, ars, acs, rows, b, pb, bs, cols, k, c, pc, cs, accumulate):
    """c[r, j] = sum over t < k of a[r, t] b[t, j] (added to c[r, j] if ``accumulate``) for r < rows,
    j < cols, where x[r, t] is the element
    px + r * xrs + t * xcs of the C-contiguous x (b's and c's column strides are 1). ``cols`` is a whole
    number of micro-tile columns (``padded``): the callers pad their scratch tiles. Each element of c is
    summed in the order of t, whatever tile it falls in."""
    w = lanes(c)
    for r in range(0, rows, ROWS):
        rr = min(ROWS, rows - r)
        for j in range(0, cols, 2 * w):
            _micro_tile(a, pa + r * ars, ars, acs, rr, b, pb + j, bs, k, c, pc + r * cs + j, cs, w, accumulate)


@njit(inline="always")
def padded(n, like):
    """n rounded up to whole micro-tile columns of ``like``'s dtype."""
    w = 2 * lanes(like)
    return (n + w - 1) // w * w
