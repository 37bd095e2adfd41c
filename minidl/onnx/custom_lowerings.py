"""User ops (``minidl.library``) in ONNX: one node of the op's namespace as its domain, named as the op.

A runtime that knows the domain (an ONNX Runtime custom-op library, say) runs it. Tensor arguments are the
node's inputs (an absent ``Tensor?`` an omitted input), the others its attributes under their schema names
(a dtype as its ONNX type code). ONNX's shape inference cannot see into the node, so the exporter declares
its outputs' element types and ranks from the op's fake, and refuses an op without one, naming it. A user op
may carry a lowering of its own instead (``op.rules["onnx"]``, called as any registry rule).
"""
from __future__ import annotations

import functools

from .. import _dtype
from .._device import device as Device
from .dtypes import code, numpy_dtype


def rule_for(op):
    return op.rules.get("onnx") or functools.partial(_domain_node, op)


def _domain_node(op, L, *values):
    if op._fake is None:
        raise NotImplementedError(f"minidl.onnx.export: custom op {op._qualname} has no fake (register_fake); the "
                                  f"exporter declares the outputs of its node from it")
    inputs, attributes = [], {}
    for value, argument in zip(values, op._schema.arguments):
        if argument.type == "Tensor[]":
            inputs += [L.value(t) for t in value]
        elif argument.type.startswith("Tensor"):
            inputs.append(None if value is None else L.value(value))
        elif value is not None:
            attributes[argument.name] = _attribute(op, argument.name, value)
    made = op._as_list(L.tracer.run_inside(op._faked, values), "its fake")
    names = L.op(f"{op._namespace}::{op._name}", *inputs, outputs=len(made), **attributes)
    names = [names] if isinstance(names, str) else list(names)
    for name, t in zip(names, made):
        L.graph.value_info.append((name, numpy_dtype(t.dtype), [None] * t.ndim))
    return names[0] if len(names) == 1 and not isinstance(L.out, (tuple, list)) else tuple(names)


def _attribute(op, name, value):
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, _dtype.dtype):
        return code(value)
    if isinstance(value, Device):
        return str(value)
    if isinstance(value, (int, float, str)):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) for v in value):
        return [int(v) if isinstance(v, bool) else v for v in value]
    raise NotImplementedError(f"minidl.onnx.export: custom op {op._qualname}: argument {name!r} "
                              f"({type(value).__name__}) has no ONNX attribute form")
