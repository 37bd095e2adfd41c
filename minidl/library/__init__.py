"""``minidl.library``: ops users define, with torch.library's interface.

``custom_op("namespace::name", fn, mutates_args=())`` makes an op from a Python function whose annotations
give its schema (or from ``schema=``); ``register_kernel`` gives it a kernel per device, ``register_fake`` the
shapes of its outputs, ``register_autograd`` its backward. The op is then ``minidl.ops.<namespace>.<name>``.
Kernels may be Python functions on Tensors (torch's) or kernels on raw buffers and layouts, as minidl's own
primitives are: a C function of a shared library (``c_kernel``), a CUDA source (``cuda_kernel``), or Python
(``buffer_kernel``) — see ``native.py`` for their argument convention, and ``custom_op.py`` for the dispatch.
"""
from __future__ import annotations

from . import custom_op as _ops
from . import schema as _schema
from .custom_op import CustomOpDef
from .native import buffer_kernel, c_kernel, cuda_kernel, include_dir

__all__ = ["custom_op", "register_kernel", "register_fake", "register_autograd", "infer_schema", "CustomOpDef",
           "c_kernel", "cuda_kernel", "buffer_kernel", "include_dir"]


def custom_op(name, fn=None, /, *, mutates_args, device_types=None, schema=None, tags=None):
    """Define the op ``name`` ("namespace::op_name") from ``fn``, the kernel for ``device_types`` (None: every
    device). ``mutates_args``: the names of the arguments ``fn`` writes, or "unknown". ``schema``: the schema
    text, when not inferred from ``fn``'s annotations. Used bare or as a decorator, as torch's."""
    def make(fn):
        return _ops.define(name, fn, mutates_args, device_types, schema)
    return make if fn is None else make(fn)


def register_kernel(op, device_types, func=None, /, *, lib=None):
    """``op.register_kernel(device_types, func)`` for an op given as CustomOpDef or by name."""
    return _ops.lookup(op, "register_kernel").register_kernel(device_types, func)


def register_fake(op, func=None, /, *, lib=None, _stacklevel=1, allow_override=True):
    """``op.register_fake(func)`` for an op given as CustomOpDef or by name (a decorator without func)."""
    found = _ops.lookup(op, "register_fake")
    return found.register_fake if func is None else found.register_fake(func)


def register_autograd(op, backward, /, *, setup_context=None, lib=None) -> None:
    """``op.register_autograd(backward, setup_context=...)`` for an op given as CustomOpDef or by name."""
    _ops.lookup(op, "register_autograd").register_autograd(backward, setup_context=setup_context)


def infer_schema(prototype_function, /, *, mutates_args, op_name=None, tags=()) -> str:
    """The schema text ``custom_op`` infers from the function's annotations (torch's format)."""
    return str(_schema.infer(prototype_function, mutates_args, op_name=op_name))
