"""ONNX lowerings of the products and norms (minidl/ops/products.py, norms.py): torch.norm through ONNX's
ReduceL2/ReduceSum/ReduceMax/ReduceMin, linalg.diagonal as a Gather of the flattened matrices, and the rest
composite (written over matmul, reshapes and elementwise ops, which lower themselves). See ``lowerings``."""
from __future__ import annotations

import numpy as np

from .lowerings import _dim, _np, _operand, _warn_fixed_sizes, composite, lowers
from .nn_lowerings import _axes
from .reduction_lowerings import _p_norm


@lowers("norm")
def _norm(L, x, p="fro", dim=None, keepdim=False, dtype=None):
    if p == "nuc":
        raise NotImplementedError("minidl.onnx.export: norm(..., 'nuc') needs singular values, which ONNX has no "
                                  "op for")
    out_dtype = _np(L.out)
    value = _operand(L, x, out_dtype)
    if x.ndim == 0:   # (a number's norm is its magnitude, or the count of it being nonzero)
        value, axes = L.op("Reshape", value, L.ints([1])), L.ints([0])
    else:
        axes = _axes(L, x, None if dim in ((), []) else dim)
    keep = int(bool(keepdim)) if x.ndim else 0
    return _p_norm(L, value, 2 if p == "fro" else p, axes, keep, out_dtype)


@lowers("linalg_diagonal")
def _linalg_diagonal(L, A, *, offset=0, dim1=-2, dim2=-1):
    """The matrices moved last and flattened (batch sizes kept by Reshape's 0), then the diagonal's places taken
    (fixed by the matrices' sizes while tracing)."""
    _warn_fixed_sizes(L, "linalg.diagonal", A)
    first, second = _dim(dim1, A.ndim), _dim(dim2, A.ndim)
    rest = [d for d in range(A.ndim) if d not in (first, second)]
    rows, cols = A.shape[first], A.shape[second]
    moved = L.op("Transpose", L.value(A), perm=rest + [first, second])
    flat = L.op("Reshape", moved, L.ints([0] * len(rest) + [rows * cols]))
    length = L.out.shape[-1]
    start = offset if offset >= 0 else -offset * cols
    places = np.arange(length, dtype=np.int64) * (cols + 1) + start
    return L.op("Gather", flat, L.constant(places, np.dtype(np.int64)), axis=len(rest))


composite("mv", "tensordot", "inner", "vdot", "cross", "linalg_cross", "kron", "addmv", "addr", "addbmm",
          "linalg_vecdot", "linalg_multi_dot", "chain_matmul", "linalg_matrix_power", "matrix_power", "linalg_vander",
          "linalg_vector_norm", "linalg_matrix_norm", "linalg_norm", "cdist")
