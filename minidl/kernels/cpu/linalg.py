"""Matrix multiply and the decompositions on the CPU: BLAS and LAPACK through numpy, which reads transposed
operands in place."""
import numpy as np

from ... import kernels, threads
from .. import lapack
from .memory import numpy_view


@kernels.register("matmul")
def matmul(a, al, b, bl, out, ol):
    """out = a @ b over layouts of shape (..., m, k), (..., k, n), (..., m, n) with equal batch dims
    (broadcast ones have stride 0). numpy hands BLAS any operand it can pass with a transpose flag
    and copies only the ones it cannot. Each matrix of a batch is its own BLAS call, so one matrix's
    multiply-adds decide the threads (``minidl/threads.py``)."""
    threads.use_blas_threads(al.shape[-2] * al.shape[-1] * bl.shape[-1])
    np.matmul(numpy_view(a, al), numpy_view(b, bl), out=numpy_view(out, ol))


@kernels.register("linalg")
def linalg(op, ins, layouts, outs, options=()):
    """The decomposition ``op`` (``minidl.kernels.lapack``) of the batched matrices in the buffers ``ins`` (any
    strides, their ``layouts``), each result written packed into its buffer of ``outs`` (None: not wanted).
    LAPACK through numpy, so its threads follow the matrix size as matmul's do."""
    first = layouts[0]
    threads.use_blas_threads(first.shape[-2] * first.shape[-1] * max(first.shape[-2:]))
    with np.errstate(divide="ignore", invalid="ignore"):   # (a zero pivot gives inf or NaN, as LAPACK's)
        results = lapack.run(np, op, [numpy_view(b, layout) for b, layout in zip(ins, layouts)], options)
    for out, result in zip(outs, results):
        if out is not None:
            out[:result.size] = result.reshape(-1)
