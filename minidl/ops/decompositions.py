"""torch.linalg's decompositions and the solvers made of them, on the ``linalg`` primitive (LAPACK through
numpy on the CPU, cuSOLVER through CuPy on CUDA; see ``minidl/kernels/lapack.py``).

One graph node per factorisation carries its gradient, each with torch's adjoint formula: the LU
factorisation, the triangular solve, the general solve (inv is a solve of the identity), Cholesky, QR, eigh,
SVD, pinv, det and slogdet. The rest (lu, lu_solve, lstsq, cholesky_solve, householder_product, tensorinv,
matrix_exp, ...) are compositions of those and of plain ops, so their gradients follow.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from .. import _dtype as dt
from ..autograd import Function
from ..layout import broadcast_shapes
from .core import buf, kernel, sum_to
from .creation import arange, empty, eye, full, ones, zeros
from .elementwise import maximum, where
from .registry import op
from .shape_ops import cat

return_types = {name: namedtuple(name, fields.split()) for name, fields in (
    ("linalg_cholesky_ex", "L info"), ("linalg_inv_ex", "inverse info"), ("linalg_solve_ex", "result info"),
    ("linalg_slogdet", "sign logabsdet"), ("slogdet", "sign logabsdet"), ("linalg_qr", "Q R"), ("qr", "Q R"),
    ("linalg_svd", "U S Vh"), ("svd", "U S V"), ("linalg_eigh", "eigenvalues eigenvectors"),
    ("linalg_lstsq", "solution residuals rank singular_values"), ("linalg_lu_factor", "LU pivots"),
    ("linalg_lu_factor_ex", "LU pivots info"), ("linalg_lu", "P L U"), ("lu_unpack", "P L U"),
    ("triangular_solve", "solution cloned_coefficient"), ("geqrf", "a tau"))}


class LinAlgError(RuntimeError):
    """A matrix the factorisation cannot take (singular, not positive-definite): torch.linalg.LinAlgError."""


# ----------------------------------------------------------------------------- checks and the primitive
def _check(name, *matrices, square=True):
    """Floating matrices (..., m, n) of one dtype and device; square ones where ``square``."""
    for a in matrices:
        if a.dtype not in (dt.float32, dt.float64):
            raise RuntimeError(f"{name}: Expected a floating point tensor of float32 or float64 as input. "
                               f"Got {a.dtype.name}")
        if a.ndim < 2:
            raise RuntimeError(f"{name}: The input tensor A must have at least 2 dimensions, got shape "
                               f"{list(a.shape)}.")
        if square and a.shape[-1] != a.shape[-2]:
            raise RuntimeError(f"{name}: A must be batches of square matrices, but they are {a.shape[-2]} by "
                               f"{a.shape[-1]} matrices")
    first = matrices[0]
    for a in matrices[1:]:
        if a.dtype is not first.dtype:
            raise RuntimeError(f"{name}: Expected all tensors to have the same dtype, got {first.dtype.name} "
                               f"and {a.dtype.name}")
        if a.device != first.device:
            raise RuntimeError(f"{name}: Expected all tensors to be on the same device, got {first.device} and "
                               f"{a.device}")


def _launch(name, inputs, outs, **options):
    """New tensors ``outs`` ((shape, dtype) each, None: not wanted) computed by the ``linalg`` primitive's op
    ``name`` from the batched matrices ``inputs``; zeros where there is nothing to compute."""
    like = inputs[0]
    made = [None if o is None else empty(tuple(o[0]), dtype=o[1], device=like.device) for o in outs]
    if all(x.numel() for x in inputs):
        kernel("linalg", like)(name, [buf(x) for x in inputs], [x._layout for x in inputs],
                               [None if t is None else buf(t) for t in made], tuple(options.items()))
    else:
        for t in made:
            if t is not None:
                t.zero_()
    return made


def _raise_info(name, info, message, error=None):
    """LinAlgError (or ``error``) naming the first failing batch element, when ``info`` (int32, one per matrix)
    says so; ``message(code)`` says what failed."""
    bad = (info != 0).nonzero()
    if not bad.shape[0]:
        return
    where = tuple(int(i) for i in bad[0])
    code = int(info[where]) if where else int(info)
    element = f"(Batch element {', '.join(map(str, where))}): " if info.ndim else ""
    raise (error or LinAlgError)(f"{name}: {element}{message(code)}")


def _singular(code):
    return (f"The diagonal element {code} is zero, the inversion could not be completed because the input "
            f"matrix is singular.")


def _solver_singular(code):
    return "The solver failed because the input matrix is singular."


def _zero_pivot(code):
    return (f"U[{code},{code}] is zero and using it on lu_solve would result in a division by zero. If you still "
            f"want to perform the factorization, consider calling linalg.lu(A, pivot) or linalg.lu_factor_ex(A, "
            f"pivot)")


def _not_pd(code):
    return (f"The factorization could not be completed because the input is not positive-definite (the "
            f"leading minor of order {code} is not positive-definite).")


def _batched(a, b):
    """a (..., m, n) and b (..., p, q) expanded to their broadcast batch dims."""
    batch = tuple(broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    return a.expand(batch + tuple(a.shape[-2:])), b.expand(batch + tuple(b.shape[-2:]))


def _eye_like(a, n=None):
    n = a.shape[-1] if n is None else n
    return eye(n, dtype=a.dtype, device=a.device)


# ----------------------------------------------------------------------------- raw factorisations
def _lu_raw(a):
    m, n = a.shape[-2:]
    batch = tuple(a.shape[:-2])
    return _launch("lu_factor", [a], [(a.shape, a.dtype), (batch + (min(m, n),), dt.int32), (batch, dt.int32)])


def _permutation(pivots, m):
    """int64 perm (..., m) of the 1-based row swaps ``pivots``: the factored rows are ``A[perm]``."""
    return _launch("permutation", [pivots.unsqueeze(-2)], [(tuple(pivots.shape[:-1]) + (m,), dt.int64)], m=m)[0]


def _rows(b, perm):
    """b[..., perm, :] along the matrices' rows."""
    return b.gather(-2, perm.unsqueeze(-1).expand(tuple(perm.shape) + (b.shape[-1],)))


def _tri_raw(a, b, upper, unitriangular=False):
    a, b = _batched(a, b)
    return _launch("triangular_solve", [a, b], [(b.shape, b.dtype)], upper=upper, unitriangular=unitriangular)[0]


# ----------------------------------------------------------------------------- LU
class LUFactor(Function):
    """A = P L U with partial pivoting; the gradient of LU (L's strict lower and U's upper part) as torch's."""

    @staticmethod
    def forward(ctx, a):
        lu, pivots, info = _lu_raw(a)
        ctx.save_for_backward(lu, pivots)
        ctx.mark_non_differentiable(pivots, info)
        return lu, pivots, info

    @staticmethod
    def backward(ctx, g, _pivots, _info):
        lu, pivots = ctx.saved_tensors
        p, low, up = _unpack(lu, pivots)
        return _lu_backward(p, low, up, g.tril(-1)[..., :, :low.shape[-1]], g.triu()[..., :up.shape[-2], :])


def _lu_backward(p, low, up, g_low, g_up):
    """torch's linalg_lu_backward: the gradient of A = P L U given those of L and U (either may be zero)."""
    m, n = low.shape[-2], up.shape[-1]
    k = min(m, n)
    if m == n:
        ga = (low.mT @ g_low).tril(-1) + (g_up @ up.mT).triu()
        ga = solve_triangular(up.mT, ga, upper=False, left=False)
        ga = solve_triangular(low.mT, ga, upper=True, unitriangular=True)
    elif m < n:
        u1 = up[..., :, :k]
        ga = (low.mT @ g_low - g_up.triu() @ up.mT).tril(-1)
        ga = solve_triangular(u1.mT, ga, upper=False, left=False)
        ga = cat([ga + g_up[..., :, :k].triu(), g_up[..., :, k:]], -1)
        ga = solve_triangular(low.mT, ga, upper=True, unitriangular=True)
    else:
        l1 = low[..., :k, :]
        ga = (g_up @ up.mT - low.mT @ g_low).triu()
        ga = solve_triangular(l1.mT, ga, upper=True, unitriangular=True)
        ga = cat([ga + g_low[..., :k, :].tril(-1), g_low[..., k:, :]], -2)
        ga = solve_triangular(up.mT, ga, upper=False, left=False)
    return p @ ga


def _unpack(lu, pivots, data=True, perm=True):
    """(P, L, U) of a packed LU and its pivots; L and U follow LU's gradient."""
    m, n = lu.shape[-2:]
    k = min(m, n)
    p = low = up = None
    if perm:
        order = _permutation(pivots, m)
        p = (arange(m, device=lu.device).unsqueeze(-1) == order.unsqueeze(-2)).to(lu.dtype)
    if data:
        low = lu[..., :, :k].tril(-1) + eye(m, k, dtype=lu.dtype, device=lu.device)
        up = lu[..., :k, :].triu()
    return p, low, up


# ----------------------------------------------------------------------------- solves
class TriangularSolve(Function):
    """X with A X = B (left) or X A = B, A triangular; B's gradient solves with A^T, A's is masked to A's
    triangle."""

    @staticmethod
    def forward(ctx, a, b, upper, left, unitriangular):
        x = _tri_raw(a, b, upper, unitriangular) if left else \
            _tri_raw(a.mT, b.mT, not upper, unitriangular).mT.contiguous()
        ctx.save_for_backward(a, x)
        ctx.options, ctx.b_shape = (upper, left, unitriangular), b.shape
        return x

    @staticmethod
    def backward(ctx, g):
        a, x = ctx.saved_tensors
        upper, left, unit = ctx.options
        gb = solve_triangular(a.mT, g, upper=not upper, left=left, unitriangular=unit)
        ga = None
        if ctx.needs_input_grad[0]:
            ga = -(gb @ x.mT if left else x.mT @ gb)
            ga = ga.triu(int(unit)) if upper else ga.tril(-int(unit))
            ga = sum_to(ga, a.shape)
        return ga, sum_to(gb, ctx.b_shape), None, None, None


class Solve(Function):
    """X = A^{-1} B through A's LU factors (B (..., n, k), batch dims already equal); info not raised unless
    ``check`` is (the op's name, its message maker)."""

    @staticmethod
    def forward(ctx, a, b, check):
        x, info = _launch("solve", [a, b], [(b.shape, b.dtype), (tuple(a.shape[:-2]), dt.int32)])
        if check:
            _raise_info(check[0], info, check[1])
        ctx.save_for_backward(a, x)
        ctx.mark_non_differentiable(info)
        return x, info

    @staticmethod
    def backward(ctx, g, _info):
        a, x = ctx.saved_tensors
        gb = solve(a.mT, g)
        return (-(gb @ x.mT) if ctx.needs_input_grad[0] else None), gb, None


# ----------------------------------------------------------------------------- determinants
def _slogdet_raw(a):
    """(sign, log|det|); a 0x0 matrix's determinant is the empty product, 1."""
    batch = tuple(a.shape[:-2])
    if not a.shape[-1]:
        return ones(batch, dtype=a.dtype, device=a.device), zeros(batch, dtype=a.dtype, device=a.device)
    return _launch("slogdet", [a], [(batch, a.dtype), (batch, a.dtype)])


class Det(Function):
    """det A from its LU factors; gradient g times the cofactors: det A^{-T}, or where det A = 0 (no inverse)
    det(U) det(V) U diag(prod of the other singular values) V^T from A's SVD, continuous there, as torch's."""

    @staticmethod
    def forward(ctx, a):
        sign, logabs = _slogdet_raw(a)
        det = sign * logabs.exp()
        ctx.save_for_backward(a, det)
        return det

    @staticmethod
    def backward(ctx, g):
        a, det = ctx.saved_tensors
        cofactors = det.unsqueeze(-1).unsqueeze(-1) * _inv(a, None, "linalg.det")[0].mT
        singular = det == 0
        if bool(singular.any()):
            cofactors = where(singular.unsqueeze(-1).unsqueeze(-1), _svd_cofactors(a), cofactors)
        return g.unsqueeze(-1).unsqueeze(-1) * cofactors


def _svd_cofactors(a):
    """A's cofactor matrix from its SVD, defined for singular A too."""
    u, s, vh = svd(a)
    n = s.shape[-1]
    others = s.unsqueeze(-2).expand(tuple(s.shape[:-1]) + (n, n)).masked_fill(eye(n, dtype=dt.bool_,
                                                                                    device=a.device), 1)
    signs = (_slogdet_raw(u)[0] * _slogdet_raw(vh)[0]).unsqueeze(-1).unsqueeze(-1)
    return signs * (u * others.prod(-1).unsqueeze(-2)) @ vh


class SlogDet(Function):
    """(sign, log|det A|); the log's gradient g A^{-T}, the sign has none."""

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return tuple(_slogdet_raw(a))   # (sign stays differentiable, as torch's: its gradient is 0)

    @staticmethod
    def backward(ctx, _sign, g):
        a, = ctx.saved_tensors
        return g.unsqueeze(-1).unsqueeze(-1) * inv(a).mT


# ----------------------------------------------------------------------------- Cholesky
class Cholesky(Function):
    """A = L L^T; the gradient of torch's cholesky_backward: L^{-T} Φ(L^T gL) L^{-1}, symmetrised."""

    @staticmethod
    def forward(ctx, a, upper):
        source = a.mT if upper else a   # (upper reads A's upper triangle: the lower one of A^T)
        low, info = _launch("cholesky", [source], [(a.shape, a.dtype), (tuple(a.shape[:-2]), dt.int32)])
        out = low.mT.contiguous() if upper else low
        ctx.save_for_backward(out)   # (the output itself: a second backward differentiates through it)
        ctx.upper = upper
        ctx.mark_non_differentiable(info)
        return out, info

    @staticmethod
    def backward(ctx, g, _info):
        low, = ctx.saved_tensors
        low, g = (low.mT, g.mT) if ctx.upper else (low, g)
        ga = (low.mT @ g).tril()
        ga = 0.5 * (ga + ga.tril(-1).mT)
        ga = solve_triangular(low.mT, ga, upper=True)
        return solve_triangular(low, ga, upper=False, left=False), None


# ----------------------------------------------------------------------------- QR, eigh, SVD
def _copyltu(x):
    """The lower triangle of x mirrored onto the upper one."""
    return x.tril() + x.tril(-1).mT


class QR(Function):
    """A = Q R (Householder, LAPACK's signs); gradients for Q (m, k) as in Liao et al. 2019 (wide A too)."""

    @staticmethod
    def forward(ctx, a, mode):
        m, n = a.shape[-2:]
        k, batch = min(m, n), tuple(a.shape[:-2])
        q_shape = None if mode == "r" else (batch + ((m, m) if mode == "complete" else (m, k)), a.dtype)
        r_shape = batch + ((m, n) if mode == "complete" else (k, n))
        q, r = _launch("qr", [a], [q_shape, (r_shape, a.dtype)], mode=mode)
        ctx.mode = mode
        ctx.set_materialize_grads(False)
        if mode == "r":
            q = empty((0,), dtype=a.dtype, device=a.device)
            ctx.mark_non_differentiable(r)
        ctx.save_for_backward(q, r)
        return q, r

    @staticmethod
    def backward(ctx, gq, gr):
        q, r = ctx.saved_tensors
        m, n = q.shape[-2], r.shape[-1]
        if ctx.mode == "complete" and m > n:
            raise RuntimeError("linalg.qr: The derivative of linalg.qr depends on Q, which is not computed when "
                               "mode='complete' and nrows > ncols.")
        gq = zeros(q.shape, dtype=q.dtype, device=q.device) if gq is None else gq
        gr = zeros(r.shape, dtype=r.dtype, device=r.device) if gr is None else gr
        if m >= n:
            return _qr_square_backward(q, r, gq, gr), None
        x, y = r[..., :, :m], r[..., :, m:]
        gx, gy = gr[..., :, :m], gr[..., :, m:]
        gq = gq + q @ (y @ gy.mT)   # (Y = Q^T A2)
        return cat([_qr_square_backward(q, x, gq, gx), q @ gy], -1), None


def _qr_square_backward(q, r, gq, gr):
    """A's gradient for A = Q R with R square (k, k): (gQ + Q copyltu(M)) R^{-T}, M = R gR^T - gQ^T Q."""
    m = r @ gr.mT - gq.mT @ q
    return solve_triangular(r.mT, gq + q @ _copyltu(m), upper=False, left=False)


class Eigh(Function):
    """A = V diag(w) V^T from one triangle; gradient V (diag(gw) + skew(V^T gV) / (w_j - w_i)) V^T."""

    @staticmethod
    def forward(ctx, a, lower):
        w, v = _launch("eigh", [a], [(tuple(a.shape[:-1]), a.dtype), (a.shape, a.dtype)], lower=lower)
        ctx.save_for_backward(w, v)
        ctx.set_materialize_grads(False)
        return w, v

    @staticmethod
    def backward(ctx, gw, gv):
        w, v = ctx.saved_tensors
        if gv is None:
            inner = gw.diag_embed()
        else:
            vgv = v.mT @ gv
            gaps = w.unsqueeze(-2) - w.unsqueeze(-1)
            gaps = gaps + _eye_like(v)
            inner = (0.5 * (vgv - vgv.mT)) / gaps
            if gw is not None:
                inner = inner + gw.diag_embed()
        return v @ inner @ v.mT, None


class SVD(Function):
    """A = U diag(S) Vh; torch's svd_backward (gauge-invariant losses: U's and V's phases are free)."""

    @staticmethod
    def forward(ctx, a, full_matrices):
        m, n = a.shape[-2:]
        k, batch = min(m, n), tuple(a.shape[:-2])
        u, s, vh = _launch("svd", [a], [(batch + (m, m if full_matrices else k), a.dtype), (batch + (k,), a.dtype),
                                         (batch + (n if full_matrices else k, n), a.dtype)],
                           full_matrices=full_matrices, compute_uv=True)
        if full_matrices and not a.numel():   # (no columns to take: the identity, as LAPACK completes it)
            u, vh = u + _eye_like(a, m), vh + _eye_like(a, n)
        ctx.save_for_backward(u, s, vh)
        ctx.set_materialize_grads(False)
        return u, s, vh

    @staticmethod
    def backward(ctx, gu, gs, gvh):
        u, s, vh = ctx.saved_tensors
        k = s.shape[-1]
        u, vh = u[..., :, :k], vh[..., :k, :]
        gu = None if gu is None else gu[..., :, :k]
        gvh = None if gvh is None else gvh[..., :k, :]
        return _svd_backward(u, s, vh, gu, gs, gvh), None


def _svd_backward(u, s, vh, gu, gs, gvh):
    """torch's svd_backward on the reduced factors."""
    m, n = u.shape[-2], vh.shape[-1]
    if gu is None and gvh is None:
        return (u * gs.unsqueeze(-2)) @ vh
    s2 = s * s
    gaps = s2.unsqueeze(-2) - s2.unsqueeze(-1) + _eye_like(vh, s.shape[-1])
    inner = 0
    if gu is not None:
        ugu = u.mT @ gu
        inner = (ugu - ugu.mT) * s.unsqueeze(-2) / gaps
    if gvh is not None:
        vgv = vh @ gvh.mT
        inner = inner + s.unsqueeze(-1) * ((vgv - vgv.mT) / gaps)
    if gs is not None:
        inner = inner + gs.diag_embed()
    if m > n and gu is not None:
        ga = u @ inner
        gus = gu / s.unsqueeze(-2)
        return (ga + gus - u @ (u.mT @ gus)) @ vh
    if m < n and gvh is not None:
        ga = inner @ vh
        sgv = gvh / s.unsqueeze(-1)
        return u @ (ga + sgv - (sgv @ vh.mT) @ vh)
    return u @ inner @ vh


class Pinv(Function):
    """The pseudo-inverse through the SVD (or eigh: hermitian), singular values at or below
    max(atol, rtol * largest) dropped; gradient by torch's pinv_backward (Golub and Pereyra)."""

    @staticmethod
    def forward(ctx, a, atol, rtol, hermitian):
        if hermitian:
            s, u = _launch("eigh", [a], [(tuple(a.shape[:-1]), a.dtype), (a.shape, a.dtype)], lower=True)
            vh, mag = u.mT, s.abs()
        else:
            u, s, vh = _svd_raw(a)
            mag = s
        keep = mag > _tolerance(mag, atol, rtol, a)
        inverse = (keep.to(a.dtype) / s.masked_fill(~keep, 1)).unsqueeze(-2)
        p = (vh.mT * inverse) @ u.mT
        ctx.save_for_backward(a, p)
        return p

    @staticmethod
    def backward(ctx, g):
        a, p = ctx.saved_tensors
        m, n = a.shape[-2:]
        ph, gh = p.mT, g.mT
        if m <= n:
            kk = gh @ p
            kph = kk @ ph
            return -(p @ kk).mT + kph - (a @ p) @ kph + (ph @ p) @ (gh - kk @ a), None, None, None
        kk = p @ gh
        phk = ph @ kk
        return -(kk @ p).mT + ((gh - a @ kk) @ p) @ ph + phk - (phk @ p) @ a, None, None, None


def _svd_raw(a, full_matrices=False):
    m, n = a.shape[-2:]
    k, batch = min(m, n), tuple(a.shape[:-2])
    return _launch("svd", [a], [(batch + (m, m if full_matrices else k), a.dtype), (batch + (k,), a.dtype),
                                (batch + (n if full_matrices else k, n), a.dtype)],
                   full_matrices=full_matrices, compute_uv=True)


def _svdvals_raw(a):
    m, n = a.shape[-2:]
    return _launch("svd", [a], [None, (tuple(a.shape[:-2]) + (min(m, n),), a.dtype), None],
                   full_matrices=False, compute_uv=False)[1]


def _tolerance(s, atol, rtol, a):
    """max(atol, rtol * largest |s|) per matrix, as (..., 1) against s; torch's default rtol is
    eps * max(m, n), or 0 where atol > 0."""
    def as_tensor(x):
        if x is None or hasattr(x, "shape"):
            return None if x is None else x.to(s.dtype).unsqueeze(-1)
        return full((1,), float(x), dtype=s.dtype, device=s.device)
    atol, rtol = as_tensor(atol), as_tensor(rtol)
    if rtol is None:
        rtol = full((1,), float(np.finfo(a.dtype.np).eps) * max(a.shape[-2:]), dtype=s.dtype, device=s.device)
        if atol is not None:
            rtol = where(atol > 0, 0.0, rtol)
    largest = s.amax(-1, keepdim=True) if s.shape[-1] else s.sum(-1, keepdim=True)
    tol = rtol * largest
    return tol if atol is None else maximum(tol, atol)


# ----------------------------------------------------------------------------- torch.linalg
def _square(n, rn, shift=3.0):
    """A well-conditioned (n, n) sample matrix: rn(n, n) plus shift on the diagonal."""
    return rn(n, n) + shift * np.eye(n)


def _pd(a):
    """A positive-definite matrix made of any square a (for samples)."""
    return a @ a.mT + eye(a.shape[-1], dtype=a.dtype, device=a.device)


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
    return Solve.apply(A, _eye_like(A).expand(A.shape), check)


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


@op("linalg_det", method=False, namespace="linalg", samples=lambda t: [
    t.S("det", det, _square(3, t.rn)), t.S("batched", det, t.rn(2, 2, 2)),
    t.S("det", det, _square(2, t.rn), second_order=True)])
def det(A):
    _check("linalg.det", A)
    return Det.apply(A)


@op("det", samples=lambda t: [t.S("det", lambda a: a.det(), t.rn(3, 3))])
def det_(input):
    return det(input)


@op("linalg_slogdet", method=False, namespace="linalg", samples=lambda t: [
    t.S("logabsdet", lambda a: slogdet(a).logabsdet, t.rn(2, 3, 3))])
def slogdet(A):
    _check("linalg.slogdet", A)
    return return_types["linalg_slogdet"](*SlogDet.apply(A))


@op("slogdet", samples=lambda t: [t.S("slogdet", lambda a: a.slogdet()[1], t.rn(3, 3))])
def slogdet_(input):
    return return_types["slogdet"](*slogdet(input))


@op("logdet", samples=lambda t: [t.S("logdet", lambda a: a.logdet(), _square(3, t.rn))])
def logdet(input):
    """log det: NaN for a negative determinant, -inf for zero."""
    sign, logabs = slogdet(input)
    return logabs + sign.log()


def _cholesky(A, upper, check, name):
    _check(name, A)
    low, info = Cholesky.apply(A, upper)
    if check:
        _raise_info(name, info, _not_pd)
    return low, info


@op("linalg_cholesky", method=False, namespace="linalg", samples=lambda t: [
    t.S("lower", lambda a: cholesky(_pd(a)), t.rn(3, 3)),
    t.S("upper-batched", lambda a: cholesky(_pd(a), upper=True), t.rn(2, 3, 3)),
    t.S("upper", lambda a: cholesky(_pd(a), upper=True), t.rn(2, 2), second_order=True),
    t.S("lower", lambda a: cholesky(_pd(a)), t.rn(2, 2), second_order=True)])
def cholesky(A, *, upper=False):
    """The Cholesky factor of positive-definite A (from its lower triangle); LinAlgError names the minor."""
    return _cholesky(A, upper, True, "linalg.cholesky")[0]


@op("linalg_cholesky_ex", method=False, namespace="linalg", samples=lambda t: [
    t.S("cholesky_ex", lambda a: cholesky_ex(_pd(a)).L, t.rn(3, 3))])
def cholesky_ex(A, *, upper=False, check_errors=False):
    return return_types["linalg_cholesky_ex"](*_cholesky(A, upper, check_errors, "linalg.cholesky_ex"))


@op("cholesky", samples=lambda t: [t.S("cholesky", lambda a: _pd(a).cholesky(upper=True), t.rn(3, 3))])
def cholesky_(input, upper=False):
    return _cholesky(input, upper, True, "cholesky")[0]


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


@op("linalg_qr", method=False, namespace="linalg", samples=lambda t: [
    t.S("reduced-tall", lambda a: qr(a).Q * qr(a).R.diagonal().sign().unsqueeze(-2) + qr(a).R.sum(), t.rn(4, 3)),
    t.S("reduced-wide-batched", lambda a: (lambda q, r: q.sum() + r)(*qr(a)), t.rn(2, 2, 3)),
    t.S("complete-square", lambda a: (lambda q, r: q + r)(*qr(a, "complete")), t.rn(3, 3)),
    t.S("reduced-tall", lambda a: (lambda q, r: q.sum(-1) + r.sum())(*qr(a)), t.rn(3, 2), second_order=True)])
def qr(A, mode="reduced"):
    """A = Q R by Householder reflections: mode 'reduced' (Q (m, k)), 'complete' (Q (m, m)) or 'r' (R only,
    Q empty)."""
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), "
                           f"'r', or 'complete'")
    _check("linalg.qr", A, square=False)
    return return_types["linalg_qr"](*QR.apply(A, mode))


@op("qr", samples=lambda t: [t.S("qr", lambda a: (lambda q, r: q.sum(-1) + r.sum(-2))(*a.qr()), t.rn(3, 3))])
def qr_(input, some=True):
    return return_types["qr"](*qr(input, "reduced" if some else "complete"))


def _eigh(A, UPLO, name):
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"{name}: Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    _check(name, A)
    return Eigh.apply(A, UPLO == "L")


@op("linalg_eigh", method=False, namespace="linalg", samples=lambda t: [
    t.S("gauge-free", lambda a: (lambda w, v: w.unsqueeze(-1) + v * v)(*eigh(a + a.mT)), t.distinct(3, 3) * 0.3),
    t.S("upper-batched", lambda a: (lambda w, v: v.abs().sum() + w)(*eigh(a + a.mT, "U")), t.rn(2, 3, 3)),
    t.S("gauge-free", lambda a: (lambda w, v: w.unsqueeze(-1) + v * v)(*eigh(a + a.mT)), t.distinct(3, 3) * 0.3,
        second_order=True)])
def eigh(A, UPLO="L"):
    """Eigenvalues (ascending) and eigenvectors of symmetric A, read from its UPLO triangle."""
    return return_types["linalg_eigh"](*_eigh(A, UPLO, "linalg.eigh"))


@op("linalg_eigvalsh", method=False, namespace="linalg", samples=lambda t: [
    t.S("eigvalsh", lambda a: eigvalsh(a + a.mT), t.rn(2, 3, 3))])
def eigvalsh(A, UPLO="L"):
    return _eigh(A, UPLO, "linalg.eigvalsh")[0]


@op("linalg_svd", method=False, namespace="linalg", samples=lambda t: [
    t.S("reduced-tall", lambda a: (lambda u, s, vh: u[..., :1] * vh[..., :1, :] + s.sum())(*svd(a, False)), t.rn(4, 3)),
    t.S("full-wide", lambda a: (lambda u, s, vh: (u[..., :2] @ vh[..., :2, :]) * s.sum())(*svd(a)), t.rn(2, 2, 3)),
    t.S("square", lambda a: (lambda u, s, vh: u @ vh + s.sum())(*svd(a, False)), t.rn(3, 3)),
    t.S("tall", lambda a: (lambda u, s, vh: u @ vh + s.sum())(*svd(a, False)), t.rn(3, 2), second_order=True)])
def svd(A, full_matrices=True, *, driver=None):
    """A = U diag(S) Vh, S descending (LAPACK's gesdd, as torch's CPU default)."""
    _check("linalg.svd", A, square=False)
    return return_types["linalg_svd"](*SVD.apply(A, full_matrices))


@op("linalg_svdvals", method=False, namespace="linalg", samples=lambda t: [
    t.S("svdvals", svdvals, t.rn(2, 3, 4))])
def svdvals(A, *, driver=None):
    _check("linalg.svdvals", A, square=False)
    if A.requires_grad:
        return SVD.apply(A, False)[1]
    return _svdvals_raw(A)


@op("svd", samples=lambda t: [
    t.S("svd", lambda a: (lambda u, s, v: u @ v.mT + s.sum())(*a.svd()), t.rn(3, 3))])
def svd_(input, some=True, compute_uv=True):
    """torch.svd: V rather than Vh; without compute_uv, U and V are zeros (m, m) and (n, n)."""
    if not compute_uv:
        m, n = input.shape[-2:]
        batch = tuple(input.shape[:-2])
        return return_types["svd"](zeros(batch + (m, m), dtype=input.dtype, device=input.device),
                                   svdvals(input), zeros(batch + (n, n), dtype=input.dtype, device=input.device))
    u, s, vh = svd(input, full_matrices=not some)
    return return_types["svd"](u, s, vh.mT)


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
    _check("linalg.lstsq", A, B, square=False)
    if driver not in (None, "gelsy", "gels", "gelsd", "gelss"):
        raise RuntimeError(f"torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss), "
                           f"but got {driver}")
    vector = B.ndim == A.ndim - 1
    b = B.unsqueeze(-1) if vector else B
    if b.shape[-2] != A.shape[-2]:
        raise RuntimeError(f"torch.linalg.lstsq: input.size(-2) should match other.size(-2), got {A.shape[-2]} and "
                           f"{b.shape[-2]}")
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


# ----------------------------------------------------------------------------- LU
def _lu_factor(A, pivot, name):
    _check(name, A, square=False)
    if not pivot:
        raise RuntimeError(f"{name}: LU without pivoting is not implemented on the CPU")
    return LUFactor.apply(A)


@op("linalg_lu_factor", method=False, namespace="linalg", samples=lambda t: [
    t.S("square", lambda a: lu_factor(a).LU, t.rn(3, 3)), t.S("wide", lambda a: lu_factor(a).LU, t.rn(2, 3, 4)),
    t.S("tall", lambda a: lu_factor(a).LU, t.rn(4, 2)),
    t.S("square", lambda a: lu_factor(a).LU, t.rn(3, 3), second_order=True)])
def lu_factor(A, *, pivot=True):
    """A = P L U packed as LU (L's unit diagonal left out) with LAPACK's 1-based int32 pivots; a singular A
    raises, as torch's."""
    lu, pivots, info = _lu_factor(A, pivot, "linalg.lu_factor")
    _raise_info("torch.linalg.lu_factor", info, _zero_pivot, RuntimeError)
    return return_types["linalg_lu_factor"](lu, pivots)


@op("linalg_lu_factor_ex", method=False, namespace="linalg", samples=lambda t: [
    t.S("lu_factor_ex", lambda a: lu_factor_ex(a).LU, t.rn(3, 3))])
def lu_factor_ex(A, *, pivot=True, check_errors=False):
    lu, pivots, info = _lu_factor(A, pivot, "linalg.lu_factor_ex")
    if check_errors:
        _raise_info("torch.linalg.lu_factor_ex", info, _zero_pivot, RuntimeError)
    return return_types["linalg_lu_factor_ex"](lu, pivots, info)


@op("linalg_lu", method=False, namespace="linalg", samples=lambda t: [
    t.S("square", lambda a: (lambda p, lo, up: lo @ up)(*lu(a)), t.rn(3, 3)),
    t.S("wide", lambda a: (lambda p, lo, up: lo.sum() + up)(*lu(a)), t.rn(2, 3, 4)),
    t.S("tall", lambda a: (lambda p, lo, up: lo + up.sum())(*lu(a)), t.rn(4, 2))])
def lu(A, *, pivot=True):
    """(P, L, U) with A = P L U."""
    packed, pivots, _ = _lu_factor(A, pivot, "linalg.lu")
    return return_types["linalg_lu"](*_unpack(packed, pivots))


@op("lu_unpack", samples=lambda t: [
    t.S("lu_unpack", lambda a: (lambda p, lo, up: lo + up)(*lu_unpack(*lu_factor(a))), t.rn(3, 3))])
def lu_unpack(LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    p, low, up = _unpack(LU_data, LU_pivots, unpack_data, unpack_pivots)
    nothing = empty((0,), dtype=LU_data.dtype, device=LU_data.device)
    return return_types["lu_unpack"](nothing if p is None else p, nothing if low is None else low,
                                     nothing if up is None else up)


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


@op("lu", samples=lambda t: [t.S("lu", lambda a: a.lu()[0], t.rn(3, 3))])
def lu_(A, pivot=True, get_infos=False):
    """torch.lu: (LU, pivots) and, with get_infos, info."""
    packed, pivots, info = lu_factor_ex(A, pivot=pivot)
    return (packed, pivots, info) if get_infos else (packed, pivots)


@op("lu_solve", samples=lambda t: [
    t.S("lu_solve", lambda b, a: b.lu_solve(*lu_factor(a)), t.rn(3, 2), _square(3, t.rn))])
def lu_solve_(b, LU_data, LU_pivots):
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


@op("geqrf")
def geqrf(input):
    """LAPACK's geqrf: R on and above the diagonal, the Householder vectors below it, and their tau (no
    gradient, as torch's)."""
    _check("geqrf", input, square=False)
    m, n = input.shape[-2:]
    a, tau = _launch("qr", [input], [(input.shape, input.dtype), (tuple(input.shape[:-2]) + (min(m, n),),
                                                                   input.dtype)], mode="raw")
    return return_types["geqrf"](a, tau)


@op("ormqr", samples=lambda t: [
    t.S("left", lambda a, tau, c: ormqr(a, tau, c), t.rn(4, 3), t.rn(3), t.rn(4, 2)),
    t.S("right-transpose", lambda a, tau, c: ormqr(a, tau, c, left=False, transpose=True), t.rn(2, 3, 2),
        t.rn(2, 2), t.rn(2, 2, 3))])
def ormqr(input, input2, input3, left=True, transpose=False):
    """op(Q) C or C op(Q), Q = H_1 ... H_k the full (m, m) product of geqrf's reflectors."""
    _check("ormqr", input, input3, square=False)
    m, k = input.shape[-2], input2.shape[-1]
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
    steps = max(0, int(np.ceil(np.log2(norm / 0.5)))) if norm > 0.5 else 0
    if not np.isfinite(norm):
        steps = 0
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
