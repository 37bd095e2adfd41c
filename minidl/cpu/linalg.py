"""Matrix multiply on the CPU: BLAS (through numpy) on contiguous operands."""
import numpy as np

from .. import kernels


@kernels.register("matmul")
def matmul(a, b, out, batch, m, k, n):
    """out (batch, m, n) = a (batch, m, k) @ b (batch, k, n), all contiguous from offset 0."""
    np.matmul(a[:batch * m * k].reshape(batch, m, k), b[:batch * k * n].reshape(batch, k, n),
              out=out[:batch * m * n].reshape(batch, m, n))
