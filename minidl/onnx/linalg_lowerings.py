"""Lowerings of the decompositions' ops that ONNX can express: the determinant (ONNX's Det) and the log of it.
The factorisations themselves (LU, QR, SVD, eigh, ...) have no ONNX operator and keep no rule, so an export
that uses one is refused with an error naming the op."""
from __future__ import annotations

from .lowerings import lowers


@lowers("linalg_det", "det")
def _det(L, A):
    return L.op("Det", L.value(A))


@lowers("logdet")
def _logdet(L, input):
    """log(det): NaN for a negative determinant and -inf for zero, as torch.logdet."""
    return L.op("Log", L.op("Det", L.value(input)))
