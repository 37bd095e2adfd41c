"""The ``linalg`` primitive's work, written once over an array module ``xp`` (numpy on the CPU and in the
CUDA simulator, CuPy on a GPU): LAPACK's (numpy's) or cuSOLVER's (CuPy's) routines where the module has one
(cholesky, solve, slogdet, qr, eigh, svd), and for what numpy lacks (the LU factorisation with its pivots,
triangular solves, the failing minor of a Cholesky) a loop over columns vectorised over the batch, blocked as
LAPACK's so that GEMMs do most of the work. Inputs are (batch, m, n) arrays, outputs too; each op returns its
results in the contract's order (see ``minidl.kernels``).
"""
from __future__ import annotations

BLOCK = 64  # the rows (columns) an LU or a triangular solve takes one by one before one GEMM updates the rest


def cholesky(xp, a):
    """(L, info): the lower Cholesky factor of each matrix and 0, or the order of its first leading minor that
    is not positive-definite (then L is what the factorisation reached, zeros beyond)."""
    info = xp.zeros(a.shape[0], xp.int32)
    try:
        low = xp.linalg.cholesky(a)
        if bool(xp.isfinite(low).all()):
            return low, info
    except Exception:  # noqa: BLE001 (numpy's LinAlgError, CuPy's under errstate): find the minor below
        pass
    low = xp.zeros_like(a)
    for j in range(a.shape[-1]):
        row = low[:, j, :j]
        pivot = a[:, j, j] - (row * row).sum(-1)
        bad = ~(pivot > 0)
        info = xp.where((info == 0) & bad, j + 1, info).astype(xp.int32)
        root = xp.sqrt(xp.where(info == 0, pivot, 1.0))
        low[:, j, j] = xp.where(info == 0, root, 0)
        below = (a[:, j + 1:, j] - (low[:, j + 1:, :j] * row[:, None, :]).sum(-1)) / root[:, None]
        low[:, j + 1:, j] = xp.where((info == 0)[:, None], below, 0)
    return low, info


def lu_factor(xp, a):
    """(LU, pivots, info) of partial pivoting as LAPACK's getrf, blocked as it is: each panel of BLOCK columns
    column by column (pivot, swap whole rows, scale, update the panel), then U's rows right of the panel by a
    triangular solve and the rest by one GEMM. pivots are 1-based (int32), info the 1-based column of the first
    exactly zero pivot (0: none)."""
    lu = a.copy()
    batch, m, n = a.shape
    k = min(m, n)
    pivots = xp.zeros((batch, k), xp.int32)
    info = xp.zeros(batch, xp.int32)
    rows = xp.arange(batch)
    for lo in range(0, k, BLOCK):
        hi = min(lo + BLOCK, k)
        for j in range(lo, hi):
            p = j + xp.argmax(xp.abs(lu[:, j:, j]), axis=1)
            pivots[:, j] = p + 1
            top = lu[rows, j].copy()
            lu[rows, j] = lu[rows, p]
            lu[rows, p] = top
            pivot = lu[:, j, j]
            zero = pivot == 0
            info = xp.where((info == 0) & zero, j + 1, info).astype(xp.int32)
            lu[:, j + 1:, j] /= xp.where(zero, 1, pivot)[:, None]
            lu[:, j + 1:, j + 1:hi] -= lu[:, j + 1:, j, None] * lu[:, j, None, j + 1:hi]
        if hi < n:
            lu[:, lo:hi, hi:], = triangular_solve(xp, lu[:, lo:hi, lo:hi], lu[:, lo:hi, hi:], False, True)
            lu[:, hi:, hi:] -= xp.matmul(lu[:, hi:, lo:hi], lu[:, lo:hi, hi:])
    return lu, pivots, info


def permutation(xp, pivots, m):
    """The row order ``perm`` (int64, (batch, m)) the 1-based swaps ``pivots`` make: the factored matrix is
    ``A[perm]``, so ``P[perm[i], i] = 1`` in ``A = P L U``."""
    pivots = pivots[:, 0, :]   # (passed as (batch, 1, k) matrices)
    batch = pivots.shape[0]
    perm = xp.broadcast_to(xp.arange(m), (batch, m)).copy()
    rows = xp.arange(batch)
    for j in range(pivots.shape[1]):
        p = pivots[:, j].astype(xp.int64) - 1
        top = perm[:, j].copy()
        perm[:, j] = perm[rows, p]
        perm[rows, p] = top
    return (perm,)


def triangular_solve(xp, a, b, upper, unitriangular):
    """X with A X = B for triangular A (its other triangle unread), blocked as LAPACK's trsm: substitution row
    by row inside a block of rows, then one GEMM for the rows still to solve. A zero on the diagonal gives inf
    or NaN, as trsm's."""
    x = b.astype(xp.result_type(a, b), copy=True)
    n = a.shape[-1]
    starts = range(0, n, BLOCK)
    for lo in (reversed(starts) if upper else starts):
        hi = min(lo + BLOCK, n)
        for i in (range(hi - 1, lo - 1, -1) if upper else range(lo, hi)):
            done = slice(i + 1, hi) if upper else slice(lo, i)
            row = x[:, i, :] - xp.matmul(a[:, i:i + 1, done], x[:, done, :])[:, 0, :]
            x[:, i, :] = row if unitriangular else row / a[:, i, i][:, None]
        rest = slice(0, lo) if upper else slice(hi, n)
        x[:, rest, :] -= xp.matmul(a[:, rest, lo:hi], x[:, lo:hi, :])
    return (x,)


def solve(xp, a, b):
    """(X, info) with A X = B: LAPACK's gesv (getrf and getrs) where every matrix is invertible, else the LU
    above for all, which gives the info of each and inf or NaN where a pivot is zero, as LAPACK's getrs."""
    try:
        return xp.linalg.solve(a, b), xp.zeros(a.shape[0], xp.int32)
    except Exception:  # noqa: BLE001 (numpy's LinAlgError, CuPy's under errstate: an exactly zero pivot)
        pass
    lu, pivots, info = lu_factor(xp, a)
    perm, = permutation(xp, pivots[:, None, :], a.shape[-1])
    y, = triangular_solve(xp, lu, b[xp.arange(a.shape[0])[:, None], perm], False, True)
    x, = triangular_solve(xp, lu, y, True, False)
    return x, info


def slogdet(xp, a):
    """(sign, log|det|) from LAPACK's LU (sign 0 and -inf for a singular matrix)."""
    return xp.linalg.slogdet(a)


def qr(xp, a, mode):
    """(Q, R) as LAPACK's geqrf and orgqr give them (numpy and CuPy call those); mode 'r' leaves Q empty;
    mode 'raw' gives geqrf's own (the reflectors below R, tau)."""
    if mode == "raw":
        h, tau = xp.linalg.qr(a, mode="raw")
        return h.swapaxes(-1, -2), tau
    if mode == "r":
        return None, xp.linalg.qr(a, mode="r")
    return xp.linalg.qr(a, mode=mode)


def eigh(xp, a, lower):
    """(eigenvalues ascending, eigenvectors as columns) of the symmetric matrices given by one triangle."""
    return xp.linalg.eigh(a, UPLO="L" if lower else "U")


def svd(xp, a, full_matrices, compute_uv):
    """(U, S, Vh) (gesdd, as torch's CPU default), or (None, S, None) for the singular values only."""
    if not compute_uv:
        return None, xp.linalg.svd(a, compute_uv=False), None
    return xp.linalg.svd(a, full_matrices=full_matrices)


OPS = {"cholesky": cholesky, "lu_factor": lu_factor, "permutation": permutation,
       "triangular_solve": triangular_solve, "solve": solve, "slogdet": slogdet, "qr": qr, "eigh": eigh, "svd": svd}


def run(xp, op, arrays, options):
    """The results of ``op`` on (batch, m, n) ``arrays`` with keyword ``options`` (see OPS)."""
    try:
        fn = OPS[op]
    except KeyError:
        raise ValueError(f"linalg: unknown op {op!r}; the linalg ops are {', '.join(OPS)}") from None
    return fn(xp, *(x.reshape((-1,) + x.shape[-2:]) for x in arrays), **dict(options))
