"""torch.linalg's solvers, inverses and what else is made of the factorisations: solve, inv, pinv, lstsq,
matrix_rank, cond, tensorinv/tensorsolve, lu_solve, the Householder products and matrix_exp.
"""
from __future__ import annotations

import numpy as np

from .. import _dtype as dt
from .creation import empty, eye, zeros
from .decompositions import cholesky, lu_factor, svdvals
from .elementwise import where
from .factorisations import (Pinv, Solve, TriangularSolve, _batched, _check, _eye_like, _inverse, _launch, _pd,
                             _permutation, _rows, _singular, _solver_singular, _square, _svdvals_raw, _tolerance,
                             return_types)
from .registry import op
from .shape_ops import cat


@op("linalg_solve_triangular", method=False, namespace="linalg", samples=lambda t: [
    t.S("lower-left", lambda a, b: solve_triangular(a, b, upper=False), _square(3, t.rn), t.rn(3, 2)),
    t.S("upper-right-unit", lambda a, b: solve_triangular(a, b, upper=True, left=False, unitriangular=True),
        t.rn(2, 3, 3), t.rn(4, 3)),
    t.S("upper", lambda a, b: solve_triangular(a, b, upper=True), _square(2, t.rn), t.rn(2, 2),
        second_order=True)])
def solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    """X with A X = B (left) or X A = B, reading only A's upper or lower triangle."""
    _check("linalg.solve_triangular", A, B, square=False)
    _check("linalg.solve_triangular", A)
    side = B.shape[-2] if left else B.shape[-1]
    if side != A.shape[-1]:
        raise RuntimeError(f"linalg.solve_triangular: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({A.shape[-2]}x{A.shape[-1]} and "
                           f"{B.shape[-2]}x{B.shape[-1]})")
    return TriangularSolve.apply(A, B, upper, left, unitriangular)


def _solve(A, B, left, check, name):
    """linalg.solve's shapes: B a vector (...) or matrices (..., n, k), on the left or the right."""
    _check(name, A)
    if B.dtype is not A.dtype:
        raise RuntimeError(f"{name}: Expected A and B to have the same dtype, but found A of type "
                           f"{A.dtype.name} and B of type {B.dtype.name} instead")
    vector = B.ndim == 1 or (left and B.ndim == A.ndim - 1 and tuple(B.shape) == tuple(A.shape[:-1]))
    if vector:
        B = B.unsqueeze(-1)
    n = A.shape[-1]
    if (B.shape[-2] if left else B.shape[-1]) != n:
        raise RuntimeError(f"{name}: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({A.shape[-2]}x{n} and {B.shape[-2]}x{B.shape[-1]})")
    if not left:
        x, info = _solve(A.mT, B.mT, True, check, name)
        return x.mT, info
    A, B = _batched(A, B)
    x, info = Solve.apply(A, B, check)
    return (x.squeeze(-1) if vector else x), info


@op("linalg_solve", method=False, namespace="linalg", samples=lambda t: [
    t.S("matrix", solve, _square(3, t.rn), t.rn(3, 2)),
    t.S("vector-batched", solve, t.rn(2, 3, 3) + 3 * np.eye(3), t.rn(3)),
    t.S("right", lambda a, b: solve(a, b, left=False), _square(3, t.rn), t.rn(2, 3)),
    t.S("matrix", solve, _square(2, t.rn), t.rn(2, 2), second_order=True)])
def solve(A, B, *, left=True):
    """X with A X = B (X A = B when not left); a singular A is a LinAlgError."""
    return _solve(A, B, left, ("torch.linalg.solve", _solver_singular), "linalg.solve")[0]


@op("linalg_solve_ex", method=False, namespace="linalg", samples=lambda t: [
    t.S("solve_ex", lambda a, b: solve_ex(a, b).result, _square(3, t.rn), t.rn(3, 1))])
def solve_ex(A, B, *, left=True, check_errors=False):
    x, info = _solve(A, B, left, ("torch.linalg.solve_ex", _solver_singular) if check_errors else None,
                     "linalg.solve_ex")
    return return_types["linalg_solve_ex"](x, info)


def _inv(A, check, name):
    _check(name, A)
    return _inverse(A, check)


@op("linalg_inv", method=False, namespace="linalg", samples=lambda t: [
    t.S("inv", inv, _square(3, t.rn)), t.S("batched", inv, t.NC(t.rn(2, 3, 3) * 0.3 + 2 * np.eye(3))),
    t.S("inv", inv, _square(2, t.rn), second_order=True)])
def inv(A):
    """A^{-1}; a singular A is a LinAlgError naming the batch element."""
    return _inv(A, ("linalg.inv", _singular), "linalg.inv")[0]


@op("linalg_inv_ex", method=False, namespace="linalg", samples=lambda t: [
    t.S("inv_ex", lambda a: inv_ex(a).inverse, _square(3, t.rn))])
def inv_ex(A, *, check_errors=False):
    check = ("linalg.inv_ex", _singular) if check_errors else None
    return return_types["linalg_inv_ex"](*_inv(A, check, "linalg.inv_ex"))


@op("inverse", samples=lambda t: [t.S("inverse", lambda a: a.inverse(), _square(3, t.rn))])
def inverse(input):
    return inv(input)


@op("cholesky_solve", samples=lambda t: [
    t.S("lower", lambda b, a: b.cholesky_solve(cholesky(_pd(a))), t.rn(3, 2), t.rn(3, 3)),
    t.S("upper", lambda b, a: cholesky_solve(b, cholesky(_pd(a), upper=True), True), t.rn(3, 2), t.rn(3, 3))])
def cholesky_solve(input, input2, upper=False):
    """(L L^T)^{-1} B (U^T U when upper); L's gradient as torch's, of the product taken dense."""
    _check("cholesky_solve", input, input2, square=False)
    a = input2.mT @ input2 if upper else input2 @ input2.mT
    return solve(a, input)


@op("cholesky_inverse", samples=lambda t: [
    t.S("lower", lambda a: cholesky(_pd(a)).cholesky_inverse(), t.rn(3, 3))])
def cholesky_inverse(input, upper=False):
    _check("cholesky_inverse", input)
    return inv(input.mT @ input if upper else input @ input.mT)


@op("linalg_pinv", method=False, namespace="linalg", samples=lambda t: [
    t.S("tall", pinv, t.rn(4, 3)), t.S("wide-batched", pinv, t.rn(2, 2, 3)),
    t.S("hermitian", lambda a: pinv(a + a.mT, hermitian=True), _square(3, t.rn)),
    t.S("tall", pinv, t.rn(3, 2), second_order=True)])
def pinv(A, *, atol=None, rtol=None, hermitian=False):
    """The Moore-Penrose pseudo-inverse: singular values at or below max(atol, rtol * largest) count as 0."""
    _check("linalg.pinv", A, square=hermitian)
    return Pinv.apply(A, atol, rtol, hermitian)


@op("pinverse", samples=lambda t: [t.S("pinverse", lambda a: a.pinverse(), t.rn(3, 2))])
def pinverse(input, rcond=1e-15):
    return pinv(input, rtol=rcond)


@op("linalg_matrix_rank", method=False, namespace="linalg")
def matrix_rank(A, tol=None, hermitian=False, *, atol=None, rtol=None):
    """The number of singular values (|eigenvalues| when hermitian) above max(atol, rtol * largest)."""
    _check("linalg.matrix_rank", A, square=hermitian)
    if tol is not None:
        atol, rtol = tol, 0.0
    if hermitian:
        s = _launch("eigh", [A], [(tuple(A.shape[:-1]), A.dtype), None], lower=True)[0].abs()
    else:
        s = _svdvals_raw(A)
    return (s > _tolerance(s, atol, rtol, A)).sum(-1)


@op("linalg_lstsq", method=False, namespace="linalg", samples=lambda t: [
    t.S("tall", lambda a, b: lstsq(a, b).solution, t.rn(4, 3), t.rn(4, 2)),
    t.S("wide-batched", lambda a, b: lstsq(a, b).solution, t.rn(2, 2, 3), t.rn(2, 2, 1))])
def lstsq(A, B, rcond=None, *, driver=None):
    """The least-squares solution pinv(A) B (rank-revealing, as gelsy's for full-rank A), the rank; residuals
    and singular values as torch fills them per driver (empty for gelsy)."""
    _check("linalg.lstsq", A, square=False)
    if driver not in (None, "gelsy", "gels", "gelsd", "gelss"):
        raise RuntimeError(f"torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss), "
                           f"but got {driver}")
    vector = B.ndim == A.ndim - 1
    b = B.unsqueeze(-1) if vector else B
    _check("linalg.lstsq", A, b, square=False)
    if b.shape[-2] != A.shape[-2]:
        raise RuntimeError(f"torch.linalg.lstsq: input.size(-2) should match other.size({-1 if vector else -2}), "
                           f"got {A.shape[-2]} and {b.shape[-2]}")
    m, n = A.shape[-2:]
    x = pinv(A, rtol=rcond) @ b
    rank = matrix_rank(A, rtol=rcond) if driver != "gels" else empty((0,), dtype=dt.int64, device=A.device)
    nothing = A.reshape(-1)[:0]   # (empty, yet a function of A, as torch's)
    values = _svdvals_raw(A) if driver in ("gelsd", "gelss") else nothing
    residuals = nothing
    if driver not in (None, "gelsy") and m > n and bool((matrix_rank(A) == n).all()):
        residuals = ((A @ x - b) ** 2).sum(-2)
    return return_types["linalg_lstsq"](x.squeeze(-1) if vector else x, residuals, rank, values)


def _matrix_norm(a, p):
    """The matrix norms cond needs: 'fro', 'nuc', 1, -1, inf, -inf (2 and -2 go through the singular values)."""
    if p == "fro":
        return (a * a).sum((-2, -1)).sqrt()
    if p == "nuc":
        return svdvals(a).sum(-1)
    along = -2 if abs(p) == 1 else -1
    sums = a.abs().sum(along)
    return sums.amax(-1) if p > 0 else sums.amin(-1)


@op("linalg_cond", method=False, namespace="linalg", samples=lambda t: [
    t.S("2", cond, _square(3, t.rn)), t.S("fro-batched", lambda a: cond(a, "fro"), t.rn(2, 3, 3) + 2 * np.eye(3)),
    t.S("-inf", lambda a: cond(a, -float("inf")), _square(3, t.rn))])
def cond(A, p=None):
    """The condition number in the p-norm: largest over smallest singular value for p = None, 2 (-2: the
    reverse), else norm(A) * norm(A^{-1})."""
    if p not in (None, 2, -2, "fro", "nuc", 1, -1, float("inf"), -float("inf")):
        raise RuntimeError(f"linalg.cond got an invalid norm type: {p}")
    _check("linalg.cond", A, square=p not in (None, 2, -2))
    if 0 in A.shape[-2:]:
        return zeros(tuple(A.shape[:-2]), dtype=A.dtype, device=A.device)   # (an empty matrix's is 0, as torch's)
    if p in (None, 2, -2):
        s = svdvals(A)
        big, small = s[..., 0], s[..., -1]
        return big / small if p != -2 else small / big
    inverse, info = _inv(A, None, "linalg.cond")
    return where(info > 0, float("inf"), _matrix_norm(A, p) * _matrix_norm(inverse, p))   # (singular: inf)


@op("linalg_tensorinv", method=False, namespace="linalg", samples=lambda t: [
    t.S("tensorinv", lambda a: tensorinv(a, 1), _square(4, t.rn).reshape(4, 2, 2))])
def tensorinv(A, ind=2):
    """The inverse of A seen as a matrix (prod(shape[:ind]), prod(shape[ind:])), shaped shape[ind:] + shape[:ind]."""
    if ind <= 0:
        raise RuntimeError(f"linalg.tensorinv: Expected a strictly positive integer for 'ind', but got {ind}")
    rows, cols = tuple(A.shape[:ind]), tuple(A.shape[ind:])
    r, c = int(np.prod(rows)), int(np.prod(cols))
    if r != c:
        raise RuntimeError(f"linalg.tensorinv: Expected self to satisfy the requirement prod(self.shape[ind:]) == "
                           f"prod(self.shape[:ind]), but got {c} != {r}")
    return inv(A.reshape(r, c)).reshape(cols + rows)


@op("linalg_tensorsolve", method=False, namespace="linalg", samples=lambda t: [
    t.S("tensorsolve", tensorsolve, _square(6, t.rn).reshape(2, 3, 6), t.rn(2, 3))])
def tensorsolve(A, B, dims=None):
    """X with tensordot(A, X, X.ndim) = B; ``dims`` of A moved to the end first."""
    if dims is not None:
        dims = [d % A.ndim for d in dims]
        A = A.permute([d for d in range(A.ndim) if d not in dims] + dims)
    rest = tuple(A.shape[B.ndim:])
    n = int(np.prod(rest))
    if int(np.prod(B.shape)) != n or int(np.prod(A.shape[:B.ndim])) != n:
        raise RuntimeError(f"linalg.tensorsolve: Expected self to satisfy the requirement "
                           f"prod(self.shape[other.ndim:]) == prod(self.shape[:other.ndim]), got shapes "
                           f"{list(A.shape)} and {list(B.shape)}")
    return solve(A.reshape(n, n), B.reshape(n)).reshape(rest)


@op("linalg_lu_solve", method=False, namespace="linalg", samples=lambda t: [
    t.S("left", lambda a, b: lu_solve(*lu_factor(a), b), _square(3, t.rn), t.rn(3, 2)),
    t.S("adjoint-right", lambda a, b: lu_solve(*lu_factor(a), b, left=False, adjoint=True), _square(3, t.rn),
        t.rn(2, 2, 3))])
def lu_solve(LU, pivots, B, *, left=True, adjoint=False):
    """X with A X = B (A^T X = B when adjoint; X A = B when not left) from A's LU factors."""
    _check("linalg.lu_solve", LU, B, square=False)
    _check("linalg.lu_solve", LU)
    if not left:
        return lu_solve(LU, pivots, B.mT, adjoint=not adjoint).mT
    n = LU.shape[-1]
    if B.shape[-2] != n:
        raise RuntimeError(f"linalg.lu_solve: Incompatible shapes of A and B for the equation AX = B "
                           f"({n}x{n} and {B.shape[-2]}x{B.shape[-1]})")
    perm = _permutation(pivots, n)
    LU, B = _batched(LU, B)
    perm = perm.expand(tuple(LU.shape[:-1]))
    if not adjoint:
        y = solve_triangular(LU, _rows(B, perm), upper=False, unitriangular=True)
        return solve_triangular(LU, y, upper=True)
    y = solve_triangular(LU.mT, B, upper=False)
    y = solve_triangular(LU.mT, y, upper=True, unitriangular=True)
    return _rows(y, perm.argsort(-1))


@op("lu_solve", samples=lambda t: [
    t.S("lu_solve", lambda b, a: b.lu_solve(*lu_factor(a)), t.rn(3, 2), _square(3, t.rn))])
def lu_solve_legacy(b, LU_data, LU_pivots):
    return lu_solve(LU_data, LU_pivots, b)


@op("triangular_solve", samples=lambda t: [
    t.S("upper", lambda b, a: b.triangular_solve(a)[0], t.rn(3, 2), _square(3, t.rn)),
    t.S("lower-transpose-unit", lambda b, a: triangular_solve(b, a, False, True, True).solution, t.rn(2, 3, 2),
        _square(3, t.rn))])
def triangular_solve(b, A, upper=True, transpose=False, unitriangular=False):
    """torch.triangular_solve: (X with op(A) X = b, op the transpose when asked, and a copy of A)."""
    x = solve_triangular(A.mT if transpose else A, b, upper=upper != transpose, unitriangular=unitriangular)
    return return_types["triangular_solve"](x, A.clone())


@op("linalg_householder_product", method=False, namespace="linalg", samples=lambda t: [
    t.S("tall", householder_product, t.rn(4, 3), t.rn(2)), t.S("batched", householder_product, t.rn(2, 3, 3),
                                                                  t.rn(2, 3))])
def householder_product(A, tau):
    """The first n columns of H_1 ... H_k, H_i = I - tau_i v_i v_i^T with v_i = (0.., 1, A[i+1:, i])."""
    _check("linalg.householder_product", A, square=False)
    m, n = A.shape[-2:]
    k = tau.shape[-1]
    if not (m >= n >= k):
        raise RuntimeError(f"torch.linalg.householder_product: input.shape[-2] must be greater than or equal to "
                           f"input.shape[-1] and tau.shape[-1] must not exceed it, got A {list(A.shape)} and tau "
                           f"{list(tau.shape)}")
    low = A.tril(-1) + eye(m, n, dtype=A.dtype, device=A.device)
    q = _eye_like(A, m)[:, :n].expand(tuple(A.shape))
    if k == 0:
        return q + 0 * A   # (no reflection: the identity, yet a function of A for autograd, as torch's)
    for i in reversed(range(k)):
        v = low[..., :, i:i + 1]
        q = q - (tau[..., i:i + 1].unsqueeze(-1) * v) @ (v.mT @ q)
    return q


@op("ormqr", samples=lambda t: [
    t.S("left", lambda a, tau, c: ormqr(a, tau, c), t.rn(4, 3), t.rn(3), t.rn(4, 2)),
    t.S("right-transpose", lambda a, tau, c: ormqr(a, tau, c, left=False, transpose=True), t.rn(2, 3, 2),
        t.rn(2, 2), t.rn(2, 2, 3))])
def ormqr(input, input2, input3, left=True, transpose=False):
    """op(Q) C or C op(Q), Q = H_1 ... H_k the full (m, m) product of geqrf's reflectors."""
    _check("ormqr", input, input3, square=False)
    m, k = input.shape[-2], input2.shape[-1]
    if k > min(m, input.shape[-1]):
        raise RuntimeError("torch.ormqr: tau.shape[-1] must be equal to min(other.shape[-2], input.shape[-1])")
    if (input3.shape[-2] if left else input3.shape[-1]) != m:
        raise RuntimeError(f"torch.ormqr: other.shape[{-2 if left else -1}] must be equal to input.shape[-2]")
    reflectors = input[..., :, :k]
    padded = cat([reflectors, zeros(tuple(input.shape[:-1]) + (m - k,), dtype=input.dtype, device=input.device)], -1)
    taus = cat([input2, zeros(tuple(input2.shape[:-1]) + (m - k,), dtype=input2.dtype, device=input2.device)], -1)
    q = householder_product(padded, taus)
    q = q.mT if transpose else q
    return q @ input3 if left else input3 @ q


_TAYLOR_DEGREE = 18   # terms of exp's series at a norm <= 1/2: the error, 2^-19/19!, is below float64's eps


@op("matrix_exp", samples=lambda t: [
    t.S("small", lambda a: a.matrix_exp(), t.rn(3, 3) * 0.2), t.S("scaled-batched", matrix_exp, t.rn(2, 3, 3) * 2),
    t.S("small", matrix_exp, t.rn(2, 2) * 0.3, second_order=True)])
def matrix_exp(A):
    """e^A by scaling and squaring: A / 2^s (1-norm <= 1/2) through the Taylor series, squared s times; the
    gradient is the algorithm's own derivative, as accurate as its values."""
    _check("matrix_exp", A)
    if not A.numel():
        return A + 0
    norm = float(A.detach().abs().sum(-2).amax(-1).amax())
    steps = int(np.ceil(np.log2(norm / 0.5))) if 0.5 < norm < float("inf") else 0   # (inf or NaN: NaN anyway)
    x = A / (2 ** steps)
    identity = _eye_like(A)
    out = identity + x / _TAYLOR_DEGREE
    for i in range(_TAYLOR_DEGREE - 1, 0, -1):
        out = identity + (x @ out) / i
    for _ in range(steps):
        out = out @ out
    return out


@op("linalg_matrix_exp", method=False, namespace="linalg", samples=lambda t: [
    t.S("matrix_exp", lambda a: matrix_exp_linalg(a), t.rn(3, 3) * 0.5)])
def matrix_exp_linalg(A):
    return matrix_exp(A)


@op("orgqr", samples=lambda t: [t.S("orgqr", lambda a, tau: a.orgqr(tau), t.rn(3, 2), t.rn(2))])
def orgqr(input, input2):
    """torch.orgqr: householder_product under LAPACK's name."""
    return householder_product(input, input2)
