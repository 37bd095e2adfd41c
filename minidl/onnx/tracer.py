"""The tracer: runs a model once and records what it computes as ONNX nodes.

It sits in ``minidl._tracing.active`` while the model runs. Every call of a registry op, and
every ``Function.apply`` made outside one (``x + y``, ``x * 0.5``), comes to it: it runs the op
for real, then, if an input is a traced value (a graph input, or computed from one) or a traced
size, calls the op's lowering (the registry's ``onnx`` rule) to emit the nodes that compute the
same result, and binds the result to their output. Calls made inside a recorded op are not
recorded again: the op's lowering stands for all of them. A call that depends on no traced value
is a constant: its result is baked into the graph as an initializer when something traced uses
it (constant folding comes for free). Module lowerings (``modules.py``) take a whole module call
the same way (an LSTM becomes one ONNX LSTM node).

Sizes read from a traced tensor (``x.shape[1]``, ``x.size(0)``, ``x.numel()``) are
``TracedInt``s: ints that remember where they came from, so that integer arithmetic on them,
``x / t``, ``arange(t)``, ``view(b, t, -1)`` or ``mask[:t, :t]`` become ``Shape``/``Gather``/
arithmetic nodes and stay dynamic. Turning one into a plain Python value (a comparison, ``int()``,
``float()``, ``t / 2``, an index) fixes it at its traced value with a warning, as torch's tracer
warns. Python itself reads a size's value without asking in ``range(t)``, ``np.prod(shape)`` and
the like: those are fixed silently.
"""
from __future__ import annotations

import math
import operator
import os
import sys
import threading
import warnings

import numpy as np

from .. import _tracing
from ..layout import Size
from ..ops.registry import OPS, USER_OPS
from .graph import Graph


# The ``onnx`` rule of a composite op: an op written over other registry ops, whose graph is the nodes those
# ops' own lowerings emit (``lowerings.composite``). The tracer records the calls inside it instead of it.
COMPOSITE = "composite"


class OnnxExporterError(RuntimeError):
    """The model cannot be exported (an op without a lowering, a value that cannot be traced)."""


class TracerWarning(UserWarning):
    """A traced value became a Python constant: the exported graph keeps its traced value."""


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def warn(message):
    """A TracerWarning at the first line outside minidl: the model's own code."""
    frame, level = sys._getframe(0), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, TracerWarning, stacklevel=level)


def _fixed(what):
    """Warn (once per line of the model's code) that ``what`` became a Python constant."""
    tracer = _tracing.active
    if tracer is not None and tracer.depth == 0:
        warn(f"minidl.onnx.export: {what} is turned into a Python value; the exported graph keeps the value it "
             f"had while tracing and will not follow it for other inputs")


_plain = int.__int__   # (a TracedInt's value as a plain int, without the warning int() gives)


class TracedInt(int):
    """A size read during tracing: its value, and how to compute it from the graph's values.
    Integer arithmetic keeps it traced; anything that makes a plain Python value of it (a
    comparison, ``int()``, ``float()``, true division, a power, use as an index) warns."""

    def __new__(cls, value, expr):
        self = int.__new__(cls, value)
        self.expr = expr   # ("size", value name, dim) or (op, operand, operand)
        return self

    def _arith(op_type, fn, swap=False):
        def method(self, other):
            if not isinstance(other, (int, float)):
                return NotImplemented   # (a tensor's operator takes it: x.shape[1] - x stays traced)
            if isinstance(other, float):
                _fixed("a traced size combined with a float")
                return fn(_plain(self), other) if not swap else fn(other, _plain(self))
            a, b = (other, self) if swap else (self, other)
            return TracedInt(fn(_plain(a), _plain(b)), (op_type, a, b))
        return method

    __add__, __radd__ = _arith("Add", operator.add), _arith("Add", operator.add, swap=True)
    __sub__, __rsub__ = _arith("Sub", operator.sub), _arith("Sub", operator.sub, swap=True)
    __mul__, __rmul__ = _arith("Mul", operator.mul), _arith("Mul", operator.mul, swap=True)
    __floordiv__ = _arith("FloorDiv", operator.floordiv)
    __rfloordiv__ = _arith("FloorDiv", operator.floordiv, swap=True)
    __mod__, __rmod__ = _arith("Mod", operator.mod), _arith("Mod", operator.mod, swap=True)

    def __neg__(self):
        return TracedInt(-_plain(self), ("Neg", self, None))

    def __pos__(self):
        return self

    def _fixing(fn, what):
        def method(self, *args):
            _fixed(f"a traced size {what}")
            return fn(_plain(self), *[_plain(a) if isinstance(a, TracedInt) else a for a in args])
        return method

    __eq__, __ne__ = _fixing(operator.eq, "compared with =="), _fixing(operator.ne, "compared with !=")
    __lt__, __le__ = _fixing(operator.lt, "compared with <"), _fixing(operator.le, "compared with <=")
    __gt__, __ge__ = _fixing(operator.gt, "compared with >"), _fixing(operator.ge, "compared with >=")
    __truediv__ = _fixing(operator.truediv, "divided with /")
    __rtruediv__ = _fixing(lambda a, b: b / a, "divided with /")
    __pow__ = _fixing(operator.pow, "raised to a power")
    __rpow__ = _fixing(lambda a, b: b ** a, "used as an exponent")
    __int__ = _fixing(int, "turned into int()")
    __float__ = _fixing(float, "turned into float()")
    __index__ = _fixing(int, "used as a Python index or count")
    __bool__ = _fixing(bool, "tested for truth")
    __hash__ = int.__hash__

    def __repr__(self):
        return f"TracedInt({_plain(self)})"

    del _arith, _fixing


def _leaves(obj):
    """The tensors and traced sizes in an op's arguments (through lists, tuples, dicts, slices)."""
    if isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _leaves(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _leaves(item)
    elif isinstance(obj, slice):
        yield from _leaves((obj.start, obj.stop, obj.step))
    elif obj is not None and not isinstance(obj, (bool, float, str, complex)):
        yield obj


class Tracer:
    """One export's recording state; ``minidl._tracing.active`` while the model runs."""

    def __init__(self, graph: Graph, names: dict, export_params: bool):
        from .._tensor_base import TensorBase
        self.graph, self.names, self.export_params = graph, names, export_params   # names: id(param) -> name
        self.TensorBase = TensorBase
        self.values = {}       # id(tensor) -> graph value name
        self.versions = {}     # id(tensor) -> its version when bound
        self.keep = []         # every tensor given a value (so that its id stays its own)
        self.sizes = {}        # id(TracedInt expression) -> graph value: a size computed once
        self._depth = 0        # (see depth)
        self.thread = threading.get_ident()
        self.param_inputs = []
        self.poisoned = {}     # value name -> why it cannot be exported (raised if an output needs it)
        self.modules = []      # the module calls running now, outermost first (for error messages)
        self.module_names = {}  # id(module) -> its qualified name in the exported model

    # -- values -------------------------------------------------------------------------------
    def traced(self, t) -> bool:
        return id(t) in self.values

    def constant(self, t) -> bool:
        """A tensor that is neither traced nor a parameter or buffer: its value is baked in."""
        return id(t) not in self.values and id(t) not in self.names

    def bind(self, t, name):
        self.values[id(t)] = name
        self.versions[id(t)] = t._version   # (a later write the tracer did not see changes it)
        self.keep.append(t)

    def poison(self, why) -> str:
        name = self.graph.fresh("unexportable")
        self.poisoned[name] = why
        return name

    def value(self, t, dtype=None) -> str:
        """The graph value of a tensor (traced, a parameter, or a constant) or a Python number (a
        constant of ``dtype``, a numpy dtype)."""
        if isinstance(t, TracedInt):
            return self.scalar(t, dtype)
        if not isinstance(t, self.TensorBase):
            return self.graph.constant(t, dtype)
        name = self.values.get(id(t))
        if name is not None:
            if t._version != self.versions[id(t)]:
                return self.poison("minidl.onnx.export: a tensor the graph needs was written in place behind the "
                                   "exporter's back (through another view of its memory, or by a method such as "
                                   "copy_ or fill_); only the tensor an in-place op returns follows its write")
            return name
        array = t.detach().cpu().numpy(force=True) if hasattr(t, "numpy") else np.asarray(t)
        if id(t) in self.names:
            name = self.names[id(t)]
            if self.export_params:
                self.graph.constant(array, name=name)
            else:
                self.graph.inputs.append((name, array.dtype, list(array.shape)))
                self.param_inputs.append(name)
        else:
            name = self.graph.constant(array)
        self.bind(t, name)
        return name

    def size_vector(self, n) -> str:
        """A 1-D int64 value [n] of an int or TracedInt."""
        if not isinstance(n, TracedInt):
            return self.graph.constant([int(n)], np.int64)
        key = id(n.expr)
        if key not in self.sizes:
            op, a, b = n.expr
            g = self.graph
            if op == "size":
                self.sizes[key] = g.op("Shape", a, start=b, end=b + 1)
            elif op == "Neg":
                self.sizes[key] = g.op("Neg", self.size_vector(a))
            elif op == "FloorDiv":   # (Python's floor, from ONNX's truncating Div: (a - a % b) / b is exact)
                x, y = self.size_vector(a), self.size_vector(b)
                self.sizes[key] = g.op("Div", g.op("Sub", x, g.op("Mod", x, y)), y)
            else:
                self.sizes[key] = g.op(op, self.size_vector(a), self.size_vector(b))
            self.keep.append(n)
        return self.sizes[key]

    def scalar(self, n, dtype=None) -> str:
        """A 0-d value of an int or TracedInt (int64 unless ``dtype``)."""
        if not isinstance(n, TracedInt):
            return self.graph.constant(n, dtype or np.int64)
        out = self.graph.op("Squeeze", self.size_vector(n), self.graph.constant([0], np.int64))
        return out if dtype in (None, np.int64) else self.graph.op("Cast", out, to=_onnx_type(dtype))

    def shape_vector(self, sizes) -> str:
        """A 1-D int64 value of a shape whose entries are ints or TracedInts."""
        sizes = list(sizes)
        if not any(isinstance(s, TracedInt) for s in sizes):
            return self.graph.constant([int(s) for s in sizes], np.int64)
        return self.graph.op("Concat", *[self.size_vector(s) for s in sizes], axis=0)

    def size_operand(self, t, n):
        """``t``, the 0-d tensor an operator made of the number ``n`` (``x * t``): tied to the
        size's graph value when ``n`` is a traced size."""
        if isinstance(n, TracedInt) and self.depth == 0:
            self.bind(t, self.scalar(n, np.dtype(t.dtype.np)))
        return t

    def traced_shape(self, t):
        """``t.shape`` as TracedInts (read by the model from a traced tensor)."""
        name = self.values[id(t)]
        return Size(TracedInt(n, ("size", name, i)) for i, n in enumerate(t._layout.shape))

    def traced_numel(self, t):
        """``t.numel()`` as the product of its traced sizes."""
        return math.prod(self.traced_shape(t), start=1) if t.ndim else 1

    # -- recording ----------------------------------------------------------------------------
    def involved(self, args, kwargs) -> bool:
        """Does the call read a graph value: a traced tensor or size, or a parameter or buffer
        (which export_params=False makes a graph input; with it they are initializers, and work
        on them stays in the graph, as in torch's export)?"""
        return any(isinstance(x, TracedInt) or id(x) in self.values or id(x) in self.names
                   for x in _leaves((args, kwargs)))

    @property
    def depth(self) -> int:
        """> 0 inside a recorded op or module, where nothing is recorded again; and in any thread
        but the one tracing the model (another thread's ops are not the model's)."""
        return self._depth if threading.get_ident() == self.thread else 1

    def run_inside(self, fn, *args, **kwargs):
        if threading.get_ident() != self.thread:   # (another thread: not the model, nothing to count)
            return fn(*args, **kwargs)
        self._depth += 1
        try:
            return fn(*args, **kwargs)
        finally:
            self._depth -= 1

    def call(self, key, fn, args, kwargs, in_place):
        """A registry op's call (``in_place``: its in-place twin ``key_``, whose result, the
        tensor it wrote, is bound to the op's lowering)."""
        rule = self.rule(key)
        if self.depth or rule is COMPOSITE:
            return fn(*args, **kwargs)
        written = [(t, t._version) for t in args if isinstance(t, self.TensorBase)]
        out = self.run_inside(fn, *args, **kwargs)
        if self.involved(args, kwargs):
            if in_place and id(out) in self.values:   # (its lowering reads the value from before the write)
                self.versions[id(out)] = out._version
            self.record(key, rule, args, kwargs, out)
            for t, version in written:   # (a write into an argument that is not the result: setitem, ...)
                if t._version != version and t is not out:
                    self.bind(t, self.poison(f"minidl.onnx.export: op '{key}'{self.where()} writes into its "
                                             f"argument in place, which is not lowered"))
        return out

    @staticmethod
    def rule(key):
        """The ONNX rule of the registry op or user op ``key`` (a user op's own, else a node of its domain)."""
        if key in OPS:
            return OPS[key].rules.get("onnx")
        from .custom_lowerings import rule_for
        return rule_for(USER_OPS[key])

    def function(self, cls, args):
        """A ``Function.apply`` outside any registry op (an operator such as ``x + y``)."""
        self._depth += 1
        try:
            out = cls.apply(*args)
        finally:
            self._depth -= 1
        if self.involved(args, {}):
            from .lowerings import FUNCTION_OPS
            key = FUNCTION_OPS.get(cls)
            rule = OPS[key].rules.get("onnx") if key is not None else None
            self.record(key or f"{cls.__name__} (a Function applied outside the op registry)", rule, args, {}, out)
        return out

    def record(self, key, rule, args, kwargs, out, flat=None):
        """Bind ``out``'s tensors to the values ``rule`` emits. Without a rule, or where the rule
        cannot lower these arguments, the outputs become poisoned values: an error only if an
        output of the model needs them."""
        outs = flat(out) if flat is not None else list(out) if isinstance(out, (tuple, list)) else [out]
        why = None
        if rule is None:
            why = (f"minidl.onnx.export: op '{key}'{self.where()} has no ONNX lowering (opset {self.graph.opset}); "
                   f"a model that uses it cannot be exported yet")
        else:
            try:
                produced = self.run_inside(rule, Lowering(self, out), *args, **kwargs)   # (its size reads: plain)
            except NotImplementedError as e:
                why = f"{e} (op '{key}'{self.where()}, opset {self.graph.opset})"
        if why is not None:
            produced = [self.poison(why) for _ in outs]
        names = [produced] if isinstance(produced, str) else list(produced)   # (a module rule: flat, in order)
        for t, name in zip(outs, names):
            if isinstance(t, self.TensorBase) and name is not None:
                self.bind(t, name)


    def where(self) -> str:
        """`` in module 'name' (Class)`` of the innermost module running, if any."""
        if not self.modules:
            return ""
        m = self.modules[-1]
        name = self.module_names.get(id(m), "?") or "the model itself"
        return f" in module '{name}' ({type(m).__name__})"


def _onnx_type(dtype) -> int:
    """The ONNX TensorProto code of a numpy or minidl dtype."""
    from . import dtypes
    return dtypes.code(dtype)


class Lowering:
    """What a lowering rule gets: the graph, the tracer's value lookups, and the op's eager result
    (for its dtype and shape)."""

    def __init__(self, tracer: Tracer, out):
        self.tracer, self.graph, self.out = tracer, tracer.graph, out
        self.opset = tracer.graph.opset

    def op(self, op_type, *inputs, outputs=1, **attributes):
        return self.graph.op(op_type, *inputs, outputs=outputs, **attributes)

    def value(self, t, dtype=None):
        return self.tracer.value(t, dtype)

    def ints(self, values) -> str:
        return self.tracer.shape_vector(values)

    def scalar(self, n, dtype=None) -> str:
        return self.tracer.scalar(n, dtype)

    def constant(self, value, dtype=None) -> str:
        return self.graph.constant(value, dtype)

    def type_code(self, dtype) -> int:
        return _onnx_type(dtype)
