"""A user op: its schema, a kernel per device, its fake and its autograd formula, and the dispatch that joins them.

A call binds the arguments to the schema, finds the tensors' device, and runs that device's kernel (or the
default one, registered for no device in particular). Two kinds of kernel:

- a kernel on Tensors (torch's): a Python function taking the op's arguments and returning its outputs. Its
  body is opaque to ``minidl.compile`` (it may hand memory to numpy or ctypes), so a call under capture is a
  graph break. Its outputs are checked: the schema's count and types, no alias of an input, and, when the op
  has a fake, the fake's shapes and dtypes;
- a kernel on buffers (``native.BufferKernel``: a C function in a shared library, a CUDA source, or Python on
  raw buffers), as minidl's own primitives are: the op makes its outputs with its fake and the kernel writes
  into them. It is registered as a primitive of ``minidl.kernels`` under the op's name, so ``minidl.compile``
  records and replays it like any launch.

With an autograd formula, a call on tensors that require grad becomes one graph node (``autograd.Function``)
whose backward is the user's; without one the node's backward raises, naming the op, as torch's does.
"""
from __future__ import annotations

import inspect
import os
import sys

from .. import _tracing, kernels
from .._device import device as Device
from ..autograd import Function, grad_mode
from ..autograd.variable import Variable
from ..ops import registry
from . import schema as schemas
from .native import BufferKernel

DEVICE_TYPES = ("cpu", "cuda")
_RESERVED = ("aten", "prim", "prims", "minidl")   # namespaces of ops that are not users'


class CustomOpDef:
    """A user op made by ``custom_op``: call it as a function; ``minidl.ops.<namespace>.<name>`` is the same
    object (``.default`` too, torch's overload)."""

    def __init__(self, namespace: str, name: str, schema, where: str):
        self._namespace, self._name, self._schema, self._where = namespace, name, schema, where
        self._qualname = f"{namespace}::{name}"
        self._kernels = {}       # device type, or None for every device -> kernel
        self._fake = None
        self._backward = self._setup_context = None
        self.rules = {}          # as a registry op's (ops.registry.RULE_KINDS): an ONNX lowering of its own
        self._node = type(f"{namespace}_{name}", (_Node,), {"op": self})

    def __repr__(self):
        return f"<CustomOpDef({self._qualname})>"

    @property
    def default(self):
        return self

    # -- registration --------------------------------------------------------------------------------------
    def register_kernel(self, device_types, fn=None, /):
        """Make ``fn`` this op's kernel for ``device_types`` ("cpu", "cuda", a sequence of them, or None for
        every device without a kernel of its own; for a C or CUDA kernel, its device). A later registration for
        a device replaces the earlier."""
        def register(fn):
            if device_types is None:   # (a kernel on buffers for one device is that device's)
                types = list(getattr(fn, "device_types", None) or [None])
            else:
                types = [device_types] if isinstance(device_types, str) else list(device_types)
            kinds = [None if t is None else str(t).partition(":")[0] for t in types]
            for device_type, kind in zip(types, kinds):
                if device_type is not None and kind not in DEVICE_TYPES:
                    raise ValueError(f"{self._qualname}: register_kernel for unknown device type {device_type!r}; "
                                     f"minidl's device types are {', '.join(DEVICE_TYPES)}")
                if isinstance(fn, BufferKernel):
                    fn.bind(self, kind)
            self._kernels.update((kind, fn) for kind in kinds)
            self._register_primitives()
            return fn
        return register if fn is None else register(fn)

    def _register_primitives(self):
        """Register, as the primitive named as the op, each device's kernel on buffers (the one that device's
        calls run): ``minidl.kernels`` launches it, and ``minidl.compile`` records it there."""
        for device_type in DEVICE_TYPES:
            kernel = self._kernels.get(device_type, self._kernels.get(None))
            if isinstance(kernel, BufferKernel):
                kernels.register(self._qualname, device_type)(kernel.launcher(self, device_type))

    def register_fake(self, fn, /):
        """``fn(*args)`` returns outputs of the right shapes, dtypes and device without computing them (as
        ``minidl.empty_like(x)``): they are where a kernel on buffers writes, what checks a kernel on Tensors,
        and what the ONNX exporter declares the op's outputs to be."""
        self._fake = fn
        return fn

    def register_autograd(self, backward, /, *, setup_context=None):
        """``backward(ctx, *grads)`` returns one gradient per positional argument (None where there is none);
        ``setup_context(ctx, inputs, output)`` (with ``keyword_only_inputs=`` when the op has keyword-only
        arguments) saves what it needs on ctx (``ctx.save_for_backward``)."""
        mutated = [a.name for a in self._schema.arguments if a.mutable]
        if mutated:
            raise RuntimeError(f"{self._qualname}: cannot register an autograd formula for an op that mutates its "
                               f"arguments ({', '.join(mutated)}); make a functional op and register it for that")
        self._backward, self._setup_context = backward, setup_context

    # -- calls ---------------------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        values = self._schema.bind(self._qualname, args, kwargs)
        tracer = _tracing.active
        if tracer is not None and not tracer.depth:   # (the ONNX exporter records the call as one node)
            return tracer.call(self._qualname, self._dispatch, values, {}, False)
        return self._dispatch(*values)

    def _dispatch(self, *values):
        tensors = list(_tensors(values))
        if grad_mode.state.enabled and any(isinstance(t, Variable) and t._requires_grad for t in tensors):
            self._check_differentiable(values)
            if self._schema.returns:
                return self._node.apply(*values)
        with grad_mode.no_grad():   # (a kernel runs below autograd, as torch's)
            return self._run(values)

    def _kernel(self, values):
        """(the kernel for the tensors' device, that device's type)."""
        tensors = list(_tensors(values))
        device = tensors[0]._storage.device if tensors else Device("cpu")
        others = {str(t.device) for t in tensors if t._storage.device != device}
        if others:
            raise RuntimeError(f"{self._qualname}: expected all tensors on one device, got {device} and "
                               f"{', '.join(sorted(others))}")
        kernel = self._kernels.get(device.type, self._kernels.get(None))
        if kernel is None:
            has = ", ".join(k or "every device" for k in self._kernels) or "none"
            raise NotImplementedError(f"{self._qualname} has no kernel for device type '{device.type}' "
                                      f"(kernels registered for: {has})")
        return kernel, device.type

    def _check_differentiable(self, values):
        """Refuse, naming the op, what would otherwise lose gradients silently: a Tensor[] argument or output,
        an in-place write into a leaf that requires grad."""
        for value, argument in zip(values, self._schema.arguments):
            if argument.type in ("Tensor[]", "Tensor?[]") and any(
                    isinstance(t, Variable) and t._requires_grad for t in value or ()):
                raise NotImplementedError(f"{self._qualname}: gradients through a Tensor[] argument ({argument.name}) "
                                          f"are not supported; call it under minidl.no_grad() or on detached tensors")
            if argument.mutable and isinstance(value, Variable) and value._requires_grad and value.grad_fn is None:
                raise RuntimeError(f"{self._qualname}: a leaf Variable that requires grad ({argument.name}) is used "
                                   f"in an in-place operation")
        if "Tensor[]" in self._schema.returns:
            raise NotImplementedError(f"{self._qualname}: gradients through a Tensor[] output are not supported; call "
                                      f"it under minidl.no_grad() or on detached tensors")

    def _run(self, values):
        kernel, device_type = self._kernel(values)
        if isinstance(kernel, BufferKernel):
            outputs = self._launch(device_type, values)
        else:
            _tracing.graph_break(f"custom op {self._qualname} runs a kernel on Tensors, whose work a replay cannot "
                                 f"see (a kernel on buffers, minidl.library.c_kernel/cuda_kernel/buffer_kernel, "
                                 f"is captured)")
            positional, keywords = _split(self._schema, values)
            outputs = self._checked(kernel(*positional, **keywords), values, device_type)
        for value, argument in zip(values, self._schema.arguments):
            if argument.mutable and isinstance(value, Variable):
                value._bump_version()
        return outputs

    def _faked(self, values):
        """The fake's outputs for these argument values (called as the kernels are)."""
        positional, keywords = _split(self._schema, values)
        return self._fake(*positional, **keywords)

    def _launch(self, device_type, values):
        """A kernel on buffers: outputs made by the fake, then one launch of the primitive named as the op."""
        if self._schema.returns and self._fake is None:
            raise RuntimeError(f"{self._qualname}: its {device_type} kernel works on buffers and writes into "
                               f"outputs the op's fake makes; register one with register_fake")
        made = self._faked(values) if self._schema.returns else None
        outs = self._as_list(made, "its fake")
        inputs = list(_tensors(values))
        for i, out in enumerate(outs):
            if any(out._storage is t._storage for t in inputs):
                raise RuntimeError(f"{self._qualname}: output {i} of its fake is (a view of) an input; a fake "
                                   f"makes new tensors (minidl.empty_like, x.new_empty)")
            if out._storage.device.type != device_type:
                raise RuntimeError(f"{self._qualname}: output {i} of its fake is on {out.device}, the inputs on "
                                   f"{device_type}")
        operands = []
        for value, argument in zip(values, self._schema.arguments):
            if argument.type.startswith("Tensor"):
                operands += (None, None) if value is None else (value._storage.buf, value._layout)
            else:
                operands.append(value)
        for out in outs:
            operands += (out._storage.buf, out._layout)
        counted = outs or [v for v, a in zip(values, self._schema.arguments) if a.mutable and v is not None] \
            or inputs
        operands.append(counted[0]._layout.numel if counted else 0)
        kernels.get(self._qualname, device_type)(operands)
        return made

    def _checked(self, result, values, device_type):
        """A kernel on Tensors' result, checked against the schema, the inputs (no alias) and the fake."""
        outs = self._as_list(result, f"its {device_type} kernel")
        inputs = list(_tensors(values))
        for i, out in enumerate(outs):
            if any(out._storage is t._storage for t in inputs):
                raise RuntimeError(f"{self._qualname}: output {i} of its {device_type} kernel is (a view of) an "
                                   f"input; the outputs of a custom op must not alias its inputs (return a "
                                   f"clone)")
        if self._fake is not None and outs:
            expected = self._as_list(self._faked(values), "its fake")
            for i, (out, fake) in enumerate(zip(outs, expected)):
                if tuple(out.shape) != tuple(fake.shape) or out.dtype != fake.dtype:
                    raise RuntimeError(
                        f"{self._qualname}: its {device_type} kernel returned output {i} of shape "
                        f"{tuple(out.shape)} and dtype {out.dtype}, but its fake says shape {tuple(fake.shape)} "
                        f"and dtype {fake.dtype}")
        return result

    def _as_list(self, result, what) -> list:
        """The tensors of a result shaped as the schema's returns; an error naming the op otherwise."""
        returns = self._schema.returns
        if not returns:
            if result is not None:
                raise RuntimeError(f"{self._qualname}: {what} returned {type(result).__name__}; the schema "
                                   f"says the op returns nothing ({self._schema})")
            return []
        if self._schema.returns_tuple:
            if not isinstance(result, (tuple, list)) or len(result) != len(returns):
                raise RuntimeError(f"{self._qualname}: {what} returned {_describe(result)}; the schema says "
                                   f"{len(returns)} outputs ({self._schema})")
            pairs = zip(result, returns)
        else:
            pairs = [(result, returns[0])]
        outs = []
        for value, kind in pairs:
            if kind == "Tensor[]":
                if not isinstance(value, (list, tuple)) or not all(isinstance(t, Variable) for t in value):
                    raise RuntimeError(f"{self._qualname}: {what} returned {_describe(value)} where the schema "
                                       f"says Tensor[]")
                outs += value
            elif kind == "Tensor":
                if not isinstance(value, Variable):
                    raise RuntimeError(f"{self._qualname}: {what} returned {_describe(value)} where the schema "
                                       f"says Tensor")
                outs.append(value)
        return outs


class _Node(Function):
    """The graph node of one call of a custom op (a subclass per op, ``op`` its CustomOpDef)."""
    op = None

    @classmethod
    def name(cls) -> str:
        return f"{cls.op._qualname}Backward"

    @staticmethod
    def forward(ctx, *values):
        op = ctx.op
        output = op._run(values)
        if op._setup_context is not None:
            positional, keywords = _split(op._schema, values)
            extra = {"keyword_only_inputs": keywords} if keywords else {}
            op._setup_context(ctx=ctx, inputs=tuple(positional), output=output, **extra)
        return output

    @staticmethod
    def backward(ctx, *grads):
        op = ctx.op
        if op._backward is None:
            raise RuntimeError(f"Trying to backward through {op._qualname} but no autograd formula was "
                               f"registered. Please use register_autograd to add one.")
        result = op._backward(ctx, *grads)
        result = result if isinstance(result, tuple) else (result,)
        positional = sum(not a.kwarg_only for a in op._schema.arguments)
        if len(result) > positional:
            raise RuntimeError(f"{op._qualname}: its backward returned {len(result)} gradients; the op has "
                               f"{positional} positional arguments")
        return result + (None,) * (len(op._schema.arguments) - len(result))


# -- defining ops -----------------------------------------------------------
def define(qualname: str, fn, mutates_args, device_types, schema) -> CustomOpDef:
    """Make, register and return the op ``qualname`` (``custom_op``'s work)."""
    if not isinstance(qualname, str) or qualname.count("::") != 1:
        raise ValueError(f"custom_op: the name must be 'namespace::op_name', got {qualname!r}")
    namespace, name = qualname.split("::")
    for part in (namespace, name):
        if not part.isidentifier():
            raise ValueError(f"custom_op: {qualname!r}: {part!r} is not a Python identifier")
    if namespace in _RESERVED or namespace in vars(sys.modules["minidl.ops"]):
        raise ValueError(f"custom_op: {qualname!r}: the namespace {namespace!r} is minidl's own; pick another")
    found = registry.USER_OPS.get(qualname)
    if found is not None:
        raise RuntimeError(f"custom_op: an op named {qualname!r} is already defined (at {found._where}); "
                           f"each op is defined once")
    if schema is None:
        if isinstance(fn, BufferKernel):
            raise ValueError(f"custom_op: {qualname!r}: a kernel on buffers has no annotations to infer the schema "
                             f"from; give schema=")
        parsed = schemas.infer(fn, mutates_args, op_name=qualname)
    else:
        parsed = schemas.parse(schema)
    op = CustomOpDef(namespace, name, parsed, _caller())
    registry.USER_OPS[qualname] = op
    if fn is not None:
        op.register_kernel(device_types, fn)
    return op


def lookup(op, what: str) -> CustomOpDef:
    """``op`` (a CustomOpDef or its 'namespace::name') as the CustomOpDef."""
    if isinstance(op, CustomOpDef):
        return op
    found = registry.USER_OPS.get(op) if isinstance(op, str) else None
    if found is None:
        raise ValueError(f"{what}: no custom op named {op!r} is defined (minidl.library.custom_op defines one)")
    return found


def _tensors(values):
    for v in values:
        if isinstance(v, Variable):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from (t for t in v if isinstance(t, Variable))


def _split(schema, values):
    """(the positional arguments' values, {keyword-only name: value}): how the op's kernels are called."""
    positional = [v for v, a in zip(values, schema.arguments) if not a.kwarg_only]
    return positional, {a.name: v for v, a in zip(values, schema.arguments) if a.kwarg_only}


def _describe(value) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return type(value).__name__


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _caller() -> str:
    """'file:line' of the user's code that defined the op."""
    for frame in inspect.stack()[2:]:
        if not frame.filename.startswith(_PACKAGE):
            return f"{frame.filename}:{frame.lineno}"
    return "?"

