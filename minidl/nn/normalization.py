"""LayerNorm, RMSNorm and LocalResponseNorm."""
from __future__ import annotations

import minidl

from . import functional as F
from . import init
from .module import Module
from .parameter import Parameter


def _shape_and_weight(module, normalized_shape, eps, elementwise_affine, device, dtype):
    """What LayerNorm and RMSNorm share: the shape as a tuple, eps, and the weight (None without
    ``elementwise_affine``)."""
    module.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    module.eps = eps
    module.elementwise_affine = elementwise_affine
    if elementwise_affine:
        module.weight = Parameter(minidl.empty(module.normalized_shape, device=device, dtype=dtype))
    else:
        module.register_parameter("weight", None)


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        _shape_and_weight(self, normalized_shape, eps, elementwise_affine, device, dtype)
        if elementwise_affine and bias:
            self.bias = Parameter(minidl.empty(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.elementwise_affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class RMSNorm(Module):
    """x / sqrt(mean(x**2) + eps) * weight over the trailing ``normalized_shape`` (no bias); eps None is the
    machine epsilon of the input's dtype (F.rms_norm)."""

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True, device=None,
                 dtype=None):
        super().__init__()
        _shape_and_weight(self, normalized_shape, eps, elementwise_affine, device, dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.elementwise_affine:
            init.ones_(self.weight)

    def forward(self, input):
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class LocalResponseNorm(Module):
    """Each element divided by (k + alpha * the mean square over its ``size`` neighbouring channels) ** beta."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def forward(self, input):
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"
