"""The graph nodes of torch.linalg's decompositions, on the ``linalg`` primitive (LAPACK through numpy on the
CPU, cuSOLVER through CuPy on CUDA; see ``minidl/kernels/lapack.py``), and the checks and launches they share.

One node per factorisation carries its gradient, each with torch's adjoint formula: the LU factorisation, the
triangular solve, the general solve (inv is a solve of the identity), Cholesky, QR, eigh, SVD, pinv, det and
slogdet. The ops on them are in ``decompositions`` (the factorisations) and ``solvers`` (what is made of them).
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
    says so; ``message(code)`` says what failed. (A meta info says nothing: meta matrices have no values.)"""
    if info.is_meta:
        return
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
    """int64 perm (..., m) of the 1-based row swaps ``pivots``: the factored rows are ``A[perm]`` (no swaps: the
    rows in order)."""
    if not pivots.shape[-1]:
        return arange(m, device=pivots.device).expand(tuple(pivots.shape[:-1]) + (m,))
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
        ga = _solve_tri(up.mT, ga, upper=False, left=False)
        ga = _solve_tri(low.mT, ga, upper=True, unitriangular=True)
    elif m < n:
        u1 = up[..., :, :k]
        ga = (low.mT @ g_low - g_up.triu() @ up.mT).tril(-1)
        ga = _solve_tri(u1.mT, ga, upper=False, left=False)
        ga = cat([ga + g_up[..., :, :k].triu(), g_up[..., :, k:]], -1)
        ga = _solve_tri(low.mT, ga, upper=True, unitriangular=True)
    else:
        l1 = low[..., :k, :]
        ga = (g_up @ up.mT - low.mT @ g_low).triu()
        ga = _solve_tri(l1.mT, ga, upper=True, unitriangular=True)
        ga = cat([ga + g_low[..., :k, :].tril(-1), g_low[..., k:, :]], -2)
        ga = _solve_tri(up.mT, ga, upper=False, left=False)
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
        gb = _solve_tri(a.mT, g, upper=not upper, left=left, unitriangular=unit)
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
        gb = Solve.apply(a.mT, g, ("torch.linalg.solve", _solver_singular))[0]
        return (-(gb @ x.mT) if ctx.needs_input_grad[0] else None), gb, None


def _solve_tri(a, b, upper, left=True, unitriangular=False):
    """linalg.solve_triangular's node, for the gradients (their operands are checked already)."""
    return TriangularSolve.apply(a, b, upper, left, unitriangular)


def _inverse(a, check):
    """(A^{-1}, info): a solve of the identity; ``check`` as Solve's."""
    return Solve.apply(a, _eye_like(a).expand(a.shape), check)


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
        cofactors = det.unsqueeze(-1).unsqueeze(-1) * _inverse(a, None)[0].mT
        singular = det == 0
        if bool(singular.any()):
            cofactors = where(singular.unsqueeze(-1).unsqueeze(-1), _svd_cofactors(a), cofactors)
        return g.unsqueeze(-1).unsqueeze(-1) * cofactors


def _svd_cofactors(a):
    """A's cofactor matrix from its SVD, defined for singular A too."""
    u, s, vh = SVD.apply(a, True)
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
        return g.unsqueeze(-1).unsqueeze(-1) * _inverse(a, ("linalg.inv", _singular))[0].mT


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
        ga = _solve_tri(low.mT, ga, upper=True)
        return _solve_tri(low, ga, upper=False, left=False), None


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
    return _solve_tri(r.mT, gq + q @ _copyltu(m), upper=False, left=False)


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
        u, s, vh = _svd_raw(a, full_matrices)
        if full_matrices and not a.numel():   # (no columns to take: the identity, as LAPACK completes it)
            u, vh = u + _eye_like(a, a.shape[-2]), vh + _eye_like(a, a.shape[-1])
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
