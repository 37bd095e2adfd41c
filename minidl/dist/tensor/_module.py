"""distribute_module: a module's parameters made DTensors over a mesh (torch's), and hooks around its forward."""
from __future__ import annotations

import inspect
import warnings

from ...nn.parameter import Parameter
from ._api import DTensor, _default_mesh, distribute_tensor
from .placement_types import Replicate


def distribute_module(module, device_mesh=None, partition_fn=None, input_fn=None, output_fn=None):
    """``partition_fn(name, submodule, device_mesh)`` places each submodule's parameters (registering
    ``nn.Parameter(distribute_tensor(...))``); every parameter and buffer left a plain tensor is replicated
    (rank 0's values on every rank). ``input_fn(module, inputs, device_mesh)`` runs before forward and
    ``output_fn(module, outputs, device_mesh)`` after; what they return replaces the inputs / outputs."""
    if getattr(module, "_distribute_module_applied", False):
        raise RuntimeError("distribute_module should only be called once on a module, but it has already been "
                           "called on this module!")
    before, after = _hook(input_fn, "input_fn"), _hook(output_fn, "output_fn")   # (checked before any change)
    first = next(iter(module.parameters()), None)
    mesh = device_mesh or _default_mesh(None if first is None else first)
    for name, submodule in module.named_modules():
        if partition_fn is not None:
            partition_fn(name, submodule, mesh)
        _replicate_the_rest(submodule, mesh)
    if before is not None:
        module.register_forward_pre_hook(lambda m, inputs: before(m, inputs, mesh))
    if after is not None:
        module.register_forward_hook(lambda m, inputs, outputs: after(m, outputs, mesh))
    module._distribute_module_applied = True
    return module


def _hook(fn, what):
    """``fn`` as (module, value, device_mesh) -> value; torch's deprecated (value, device_mesh) form still works,
    with its FutureWarning."""
    if fn is None:
        return None
    count = len(inspect.signature(fn).parameters)
    if count == 2:
        warnings.warn(f"Deprecating {what} that takes two arguments (inputs, device_mesh), please use {what} that "
                      f"takes in (module, inputs, device_mesh) instead!", FutureWarning, stacklevel=3)
        return lambda module, value, mesh: fn(value, mesh)
    if count != 3:
        raise ValueError(f"{what} should take in 3 arguments, but got {count} arguments!")
    return fn


def _replicate_the_rest(submodule, mesh) -> None:
    """The submodule's own parameters and buffers that are still plain tensors, replicated over the mesh."""
    everywhere = [Replicate()] * mesh.ndim
    for key, param in list(submodule._parameters.items()):
        if param is not None and not isinstance(param, DTensor):
            submodule.register_parameter(key, Parameter(distribute_tensor(param.detach(), mesh, everywhere),
                                                        requires_grad=param.requires_grad))
    for key, buffer in list(submodule._buffers.items()):
        if buffer is not None and not isinstance(buffer, DTensor):
            submodule._buffers[key] = distribute_tensor(buffer, mesh, everywhere)
