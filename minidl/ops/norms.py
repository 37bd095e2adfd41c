"""torch.linalg's norms: vector_norm (over torch.norm's reductions), matrix_norm (its entrywise and
row/column-sum orders over vector_norm; 'nuc' and the spectral orders from singular values) and norm, which
picks one of the two as torch.linalg.norm does."""
from __future__ import annotations

import math
import numbers

from .. import _dtype as dt
from ..layout import normalize_dim, normalize_dims
from .autocast_mode import autocast_op
from .decompositions import svdvals
from .reduction import _nuclear_norm, amax, amin, norm
from .registry import op


def _float_input(name, x, dtype):
    """x, cast to ``dtype`` when given, checked to be floating point (the norms are not defined on integers)."""
    if dtype is not None:
        if not dtype.is_floating_point:
            raise RuntimeError(f"{name}: dtype should be floating point, but got {dtype.name}")
        if dt.promote_types(x.dtype, dtype) is not dtype:
            raise RuntimeError(f"{name}: the dtype of the input ({x.dtype.name}) should be convertible without "
                               f"narrowing to the specified dtype ({dtype.name})")
        return x.to(dtype)
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"{name}: Expected a floating point tensor as input. Got {x.dtype.name}")
    return x


@op("linalg_vector_norm", method=False, namespace="linalg", samples=lambda t: [
    t.S("vector-norm", lambda x: linalg_vector_norm(x), t.rn(3, 4)),
    t.S("vector-norm-dim", lambda x: linalg_vector_norm(x, 3.5, dim=(0, 2), keepdim=True), t.nonzero(2, 3, 2)),
    t.S("vector-norm-1", lambda x: linalg_vector_norm(x, 1, dim=1), t.nonzero(3, 4)),
    t.S("vector-norm-inf", lambda x: linalg_vector_norm(x, -math.inf, dim=0), t.distinct(3, 4) + 0.01),
    t.S("vector-norm-neg", lambda x: linalg_vector_norm(x, -1.5, dim=-1), t.nonzero(2, 3)),
    t.S("vector-norm-grad2", lambda x: linalg_vector_norm(x, 3, dim=1), t.nonzero(2, 3), second_order=True)])
@autocast_op("linalg_vector_norm")
def linalg_vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    """The ord-norm of x's elements over ``dim`` (all dims when None); ord 0 counts the nonzeros. Where the norm
    is not differentiable (at zero) its gradient is 0, as torch's."""
    if not isinstance(ord, numbers.Real):
        raise TypeError(f"linalg.vector_norm: ord must be a number, got {ord!r}")
    x = _float_input("linalg.vector_norm", x, dtype)
    dims = normalize_dims(dim if dim not in ((), []) else None, x.ndim, "linalg.vector_norm")
    if ord < 0 or ord == math.inf:
        empty = [d for d in dims if x.shape[d] == 0]
        if empty or (x.numel() == 0 and not dims):
            where = f"the dimension {empty[0]}" if dim is not None and empty else "an empty tensor"
            raise RuntimeError(f"linalg.vector_norm cannot compute the {ord} norm on {where} because the operation "
                               f"does not have an identity")
    return norm(x, ord, dims, keepdim)


def _matrix_dims(name, A, dim):
    if A.ndim < 2:
        raise RuntimeError(f"{name}: The input tensor A must have at least 2 dimensions, got shape {list(A.shape)}")
    if not isinstance(dim, (tuple, list)) or len(dim) != 2:
        raise RuntimeError(f"{name}: dim must be a 2-tuple. Got {dim!r}")
    rows, cols = (normalize_dim(d, A.ndim, name) for d in dim)
    if rows == cols:
        raise RuntimeError(f"{name}: dims must be different. Got ({dim[0]}, {dim[1]})")
    return rows, cols


def _singular_value_norm(A, ord, rows, cols, keepdim):
    """The largest (ord 2) or smallest (-2) singular value."""
    values = svdvals(A.movedim((rows, cols), (-2, -1)))
    out = values.amax(-1) if ord == 2 else values.amin(-1)
    for d in sorted((rows, cols)) if keepdim else ():
        out = out.unsqueeze(d)
    return out


@op("linalg_matrix_norm", method=False, namespace="linalg", samples=lambda t: [
    t.S("matrix-norm-fro", lambda a: linalg_matrix_norm(a), t.rn(2, 3, 4)),
    t.S("matrix-norm-1", lambda a: linalg_matrix_norm(a, 1), t.distinct(3, 4)),
    t.S("matrix-norm-inf", lambda a: linalg_matrix_norm(a, math.inf, dim=(2, 0), keepdim=True), t.distinct(3, 2, 4)),
    t.S("matrix-norm-neg", lambda a: linalg_matrix_norm(a, -1, dim=(0, 1)), t.distinct(3, 4)),
    t.S("matrix-norm-nuc", lambda a: linalg_matrix_norm(a, "nuc"), t.rn(3, 4))])
@autocast_op("linalg_matrix_norm")
def linalg_matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):
    """A matrix norm over the two dims ``dim``: 'fro', 'nuc', the largest (inf, 1) or smallest (-inf, -1) row or
    column sum of magnitudes, or the largest or smallest singular value (2, -2)."""
    name = "linalg.matrix_norm"
    A = _float_input(name, A, dtype)
    rows, cols = _matrix_dims(name, A, dim)
    if ord == "fro":
        return linalg_vector_norm(A, 2, (rows, cols), keepdim)
    if ord == "nuc":
        return _nuclear_norm(A, (rows, cols), keepdim)
    if ord in (1, 2, math.inf) and A.shape[rows] * A.shape[cols] == 0:   # (the largest of nothing: 0)
        return linalg_vector_norm(A, 1, (rows, cols), keepdim)
    if ord in (2, -2):
        return _singular_value_norm(A, ord, rows, cols, keepdim)
    if ord not in (1, -1, math.inf, -math.inf):
        raise RuntimeError(f"{name}: Order {ord} not supported.")
    summed, extreme = (rows, cols) if abs(ord) == 1 else (cols, rows)
    out = linalg_vector_norm(A, 1, summed, keepdim=True)
    out = (amax if ord > 0 else amin)(out, extreme, keepdim=True)
    return out if keepdim else out.squeeze((rows, cols))


@op("linalg_norm", method=False, namespace="linalg", samples=lambda t: [
    t.S("linalg-norm", lambda a: linalg_norm(a), t.rn(2, 3, 2)),
    t.S("linalg-norm-vector", lambda a: linalg_norm(a, 3, dim=1), t.nonzero(2, 3)),
    t.S("linalg-norm-matrix", lambda a: linalg_norm(a, -math.inf), t.distinct(3, 4)),
    t.S("linalg-norm-fro-dims", lambda a: linalg_norm(a, dim=(0, 2), keepdim=True), t.rn(2, 3, 2))])
def linalg_norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):
    """A vector norm or a matrix norm, as torch.linalg.norm chooses: by the length of ``dim`` when given, else
    by A's rank when ``ord`` is (None: the 2-norm of all elements)."""
    if dim is not None:
        dims = [dim] if isinstance(dim, int) else list(dim)
        if len(dims) not in (1, 2):
            raise RuntimeError(f"linalg.norm: If dim is specified, it must be of length 1 or 2. Got {dims}")
    elif ord is not None and A.ndim not in (1, 2):
        raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. "
                           f"Got {A.ndim}D.")
    else:
        dims = None if ord is None else list(range(A.ndim))
    if dims is not None and len(dims) == 2:
        return linalg_matrix_norm(A, "fro" if ord is None else ord, dims, keepdim, dtype=dtype)
    if isinstance(ord, str):
        raise RuntimeError(f"linalg.norm: ord={ord!r} is a matrix norm, but dim names a single dim ({dims})")
    return linalg_vector_norm(A, 2 if ord is None else ord, dims, keepdim, dtype=dtype)
