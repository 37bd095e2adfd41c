"""Parameter: a Tensor that a Module registers as learnable (requires grad by default)."""
from __future__ import annotations

import minidl
from minidl import Tensor


class _ParameterMeta(type):
    """``isinstance(x, Parameter)`` holds too for a parameter of another tensor type, which marks itself
    ``_is_param`` (a DTensor made a parameter), as torch's."""

    def __instancecheck__(cls, instance):
        return type.__instancecheck__(cls, instance) or (cls is Parameter and "_is_param" in type(instance).__dict__)


class Parameter(Tensor, metaclass=_ParameterMeta):
    """``Parameter(data, requires_grad=True)``: shares ``data``'s memory, is a leaf, requires grad. A ``data``
    of another tensor type that knows how (``__minidl_parameter__``: a DTensor) makes its own parameter."""

    __slots__ = ()

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            data = minidl.empty(0)
        elif not isinstance(data, Tensor) and hasattr(type(data), "__minidl_parameter__"):
            return data.__minidl_parameter__(requires_grad)
        # a fresh leaf over data's memory (every field set by the core), retagged as a Parameter:
        # Parameter adds no slots, so the object layouts agree
        p = data.detach()
        p.__class__ = cls
        if requires_grad:
            p.requires_grad = True
        return p

    def __init__(self, data=None, requires_grad=True):
        pass

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()

    __str__ = __repr__

    def __reduce_ex__(self, proto):
        # over the same storage (not a clone), so that a parameter in shared memory stays shared
        return (Parameter, (self.detach(), self.requires_grad))

    def __deepcopy__(self, memo):
        if id(self) in memo:
            return memo[id(self)]
        result = Parameter(self.detach().clone(), self.requires_grad)
        memo[id(self)] = result
        return result
