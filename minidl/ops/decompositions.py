"""torch.linalg's factorisations as ops: det and slogdet, Cholesky, QR, eigh, SVD, LU and geqrf, each a check
of its operands and a graph node of ``factorisations``, with torch's older spellings (torch.det, torch.svd, ...).
"""
from __future__ import annotations

from .creation import empty, zeros
from .factorisations import (SVD, Cholesky, Det, Eigh, LUFactor, QR, SlogDet, _check, _launch, _not_pd, _pd,
                             _raise_info, _square, _svdvals_raw, _unpack, _zero_pivot, return_types)
from .registry import op


@op("linalg_det", method=False, namespace="linalg", samples=lambda t: [
    t.S("det", det, _square(3, t.rn)), t.S("batched", det, t.rn(2, 2, 2)),
    t.S("det", det, _square(2, t.rn), second_order=True)])
def det(A):
    _check("linalg.det", A)
    return Det.apply(A)


@op("det", samples=lambda t: [t.S("det", lambda a: a.det(), t.rn(3, 3))])
def det_alias(input):
    return det(input)


@op("linalg_slogdet", method=False, namespace="linalg", samples=lambda t: [
    t.S("logabsdet", lambda a: slogdet(a).logabsdet, t.rn(2, 3, 3))])
def slogdet(A):
    _check("linalg.slogdet", A)
    return return_types["linalg_slogdet"](*SlogDet.apply(A))


@op("slogdet", samples=lambda t: [t.S("slogdet", lambda a: a.slogdet()[1], t.rn(3, 3))])
def slogdet_alias(input):
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
def cholesky_legacy(input, upper=False):
    return _cholesky(input, upper, True, "cholesky")[0]


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
def qr_legacy(input, some=True):
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
def svd_legacy(input, some=True, compute_uv=True):
    """torch.svd: V rather than Vh; without compute_uv, U and V are zeros (m, m) and (n, n)."""
    if not compute_uv:
        m, n = input.shape[-2:]
        batch = tuple(input.shape[:-2])
        return return_types["svd"](zeros(batch + (m, m), dtype=input.dtype, device=input.device),
                                   svdvals(input), zeros(batch + (n, n), dtype=input.dtype, device=input.device))
    u, s, vh = svd(input, full_matrices=not some)
    return return_types["svd"](u, s, vh.mT)


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


@op("lu", samples=lambda t: [t.S("lu", lambda a: a.lu()[0], t.rn(3, 3))])
def lu_legacy(A, pivot=True, get_infos=False):
    """torch.lu: (LU, pivots) and, with get_infos, info."""
    packed, pivots, info = lu_factor_ex(A, pivot=pivot)
    return (packed, pivots, info) if get_infos else (packed, pivots)


@op("geqrf")
def geqrf(input):
    """LAPACK's geqrf: R on and above the diagonal, the Householder vectors below it, and their tau (no
    gradient, as torch's)."""
    _check("geqrf", input, square=False)
    m, n = input.shape[-2:]
    a, tau = _launch("qr", [input], [(input.shape, input.dtype), (tuple(input.shape[:-2]) + (min(m, n),),
                                                                   input.dtype)], mode="raw")
    return return_types["geqrf"](a, tau)
