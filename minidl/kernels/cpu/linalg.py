"""Matrix multiply on the CPU: BLAS through numpy, which reads transposed operands in place."""
import numpy as np

from ... import kernels, threads
from .memory import numpy_view


@kernels.register("matmul")
def matmul(a, al, b, bl, out, ol):
    """out = a @ b over layouts of shape (..., m, k), (..., k, n), (..., m, n) with equal batch dims
    (broadcast ones have stride 0). numpy hands BLAS any operand it can pass with a transpose flag
    and copies only the ones it cannot. Each matrix of a batch is its own BLAS call, so one matrix's
    multiply-adds decide the threads (``minidl/threads.py``)."""
    threads.use_blas_threads(al.shape[-2] * al.shape[-1] * bl.shape[-1])
    np.matmul(numpy_view(a, al), numpy_view(b, bl), out=numpy_view(out, ol))
