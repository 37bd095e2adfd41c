"""c += a b over small scratch tiles, register-blocked: the products of the attention kernels.

A micro-tile of 4 rows by two vectors of c (``simd.py``) stays in eight registers while the loop runs
along the shared dimension: each step loads two vectors of b and four elements of a, each broadcast,
for eight fused multiply-adds, close to the core's peak (a loop that kept the sums in memory would
load and store one for each multiply-add).
"""
from numba import njit

from .simd import add, fma, lanes, load, splat, store, zeros


@njit(inline="always")
def _add_micro_tile(a, pa, ars, acs, b, pb, bs, k, c, pc, cs, w):
    """c[4 rows from pc, 2w columns] += a[4 rows from pa, k] b[k rows from pb, 2w columns]."""
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = zeros(c)
    for t in range(k):
        pbt, pat = pb + t * bs, pa + t * acs
        b0, b1 = load(b, pbt), load(b, pbt + w)
        x = splat(a, pat)
        c00, c01 = fma(x, b0, c00), fma(x, b1, c01)
        x = splat(a, pat + ars)
        c10, c11 = fma(x, b0, c10), fma(x, b1, c11)
        x = splat(a, pat + 2 * ars)
        c20, c21 = fma(x, b0, c20), fma(x, b1, c21)
        x = splat(a, pat + 3 * ars)
        c30, c31 = fma(x, b0, c30), fma(x, b1, c31)
    for r, (v0, v1) in enumerate(((c00, c01), (c10, c11), (c20, c21), (c30, c31))):
        p = pc + r * cs
        store(c, p, add(load(c, p), v0))
        store(c, p + w, add(load(c, p + w), v1))


@njit(inline="always")
def add_product(a, pa, ars, acs, rows, b, pb, bs, cols, k, c, pc, cs):
    """c[r, j] += sum over t < k of a[r, t] b[t, j] for r < rows, j < cols, where x[r, t] is the element
    px + r * xrs + t * xcs of the C-contiguous x (b's and c's column strides are 1). ``rows`` is a
    multiple of 4 and ``cols`` of two vectors (``padded``): the callers pad their scratch tiles.
    Each element of c is summed in the order of t, whatever tile it falls in."""
    w = lanes(c)
    for r in range(0, rows, 4):
        for j in range(0, cols, 2 * w):
            _add_micro_tile(a, pa + r * ars, ars, acs, b, pb + j, bs, k, c, pc + r * cs + j, cs, w)


@njit(inline="always")
def padded(n, like):
    """n rounded up to whole micro-tile columns of ``like``'s dtype (a multiple of 4 as well)."""
    w = 2 * lanes(like)
    return (n + w - 1) // w * w
