"""Matrix multiply and the decompositions on the GPU: cuBLAS and cuSOLVER through the array module (CuPy on a
GPU, numpy in the simulator, so both run this same code). Layouts become strided views of the buffers; an
operand cuBLAS cannot read in place is packed first."""
import numpy as np

from .... import kernels
from ... import lapack
from .. import runtime


def _view(xp, buf, layout, op):
    """``layout`` over the 1-D ``buf`` as an array of the runtime (no copy); every element it
    reaches must lie inside the buffer, since as_strided does not check."""
    if layout.numel == 0:
        return xp.empty(tuple(layout.shape), buf.dtype)
    lo, hi = layout.span()
    if lo < 0 or hi >= buf.size:
        raise ValueError(f"{op}: {layout} reaches outside its buffer of {buf.size} elements")
    item = buf.itemsize
    return xp.lib.stride_tricks.as_strided(buf[layout.offset:], tuple(layout.shape),
                                           tuple(s * item for s in layout.strides))


def _blas_ready(layout) -> bool:
    """True when each matrix is row- or column-major with a leading dimension that fits (what a
    GEMM's transpose flags and lda express) and batches step by a non-negative stride."""
    rows, cols = layout.shape[-2:]
    sr, sc = layout.strides[-2:]
    row_major = (sc == 1 or cols == 1) and sr >= max(cols, 1)
    col_major = (sr == 1 or rows == 1) and sc >= max(rows, 1)
    return (row_major or col_major) and all(s >= 0 for s in layout.strides[:-2])


@kernels.register("matmul", "cuda")
def matmul(a, al, b, bl, out, ol):
    """out = a @ b over layouts (..., m, k), (..., k, n), (..., m, n) with equal batch dims."""
    if a.dtype != b.dtype or a.dtype != out.dtype:
        raise TypeError(f"matmul: operand dtypes differ ({a.dtype}, {b.dtype} -> {out.dtype})")
    if ol.numel == 0:
        return
    xp = runtime.get().xp
    views = [_view(xp, buf, layout, "matmul") for buf, layout in ((a, al), (b, bl), (out, ol))]
    runtime.enqueue(gemm, xp, *views, *(_blas_ready(layout) for layout in (al, bl, ol)))


def gemm(xp, av, bv, ov, a_ready, b_ready, out_ready):
    """The device work of matmul (one piece, so a graph capture records it whole): pack what
    cuBLAS cannot read in place, multiply."""
    av = av if a_ready else xp.ascontiguousarray(av)
    bv = bv if b_ready else xp.ascontiguousarray(bv)
    if out_ready:
        xp.matmul(av, bv, out=ov)
    else:
        ov[...] = xp.matmul(av, bv)


@kernels.register("linalg", "cuda")
def linalg(op, ins, layouts, outs, options=()):
    """The decomposition ``op`` (``minidl.kernels.lapack``) through the array module's linalg: cuSOLVER by
    CuPy on a GPU, numpy's LAPACK in the simulator; one piece of device work, as gemm."""
    xp = runtime.get().xp
    views = [_view(xp, buf, layout, "linalg") for buf, layout in zip(ins, layouts)]
    runtime.enqueue(decompose, xp, op, views, outs, options)


def decompose(xp, op, views, outs, options):
    """The device work of linalg: the decomposition, its results written packed into ``outs``."""
    with _raising(xp):
        results = lapack.run(xp, op, views, options)
    for out, result in zip(outs, results):
        if out is not None:
            out[:result.size] = result.reshape(-1)


def _raising(xp):
    """CuPy reports a failed factorisation (a Cholesky of a matrix that is not positive-definite) only under
    errstate(linalg="raise"), numpy always: then lapack finds the failing minor itself."""
    if xp is np:
        return np.errstate(divide="ignore", invalid="ignore")   # (the simulator: inf or NaN, as on a GPU)
    import cupyx
    return cupyx.errstate(linalg="raise")
