"""Linear, NonDynamicallyQuantizableLinear, Bilinear (and Identity re-exported from container)."""
from __future__ import annotations

import math

import minidl

from . import functional as F
from . import init
from .container import Identity  # noqa: F401
from .module import Module
from .parameter import Parameter


class Linear(Module):
    """y = x W^T + b, with PyTorch's default initialisation."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(minidl.empty(out_features, in_features, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(minidl.empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.default_reset_(self.weight, self.bias)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class NonDynamicallyQuantizableLinear(Linear):
    """The Linear of MultiheadAttention's ``out_proj``: torch's own class there (it keeps quantization from
    swapping that layer), so a pickled model names the same class in minidl as in torch."""


class Bilinear(Module):
    """y = x1^T A x2 + b for each of ``out_features`` matrices A (in1, in2), initialised as torch's:
    uniform in +-1/sqrt(in1_features)."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None):
        super().__init__()
        self.in1_features, self.in2_features, self.out_features = in1_features, in2_features, out_features
        self.weight = Parameter(minidl.empty(out_features, in1_features, in2_features, device=device, dtype=dtype))
        if bias:
            self.bias = Parameter(minidl.empty(out_features, device=device, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.in1_features <= 0:
            raise ValueError(f"in1_features must be > 0, but got (in1_features={self.in1_features})")
        bound = 1 / math.sqrt(self.in1_features)
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")
