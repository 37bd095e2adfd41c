"""One export: install the tracer, run the model, and turn what it recorded into a checked,
shape-inferred onnx.ModelProto."""
from __future__ import annotations

import inspect
import warnings

import minidl

from .. import _tracing
from .._tensor_base import TensorBase
from ..nn import Module
from .dtypes import numpy_dtype
from .graph import Graph
from .tracer import OnnxExporterError, Tracer, _fixed
from . import modules


def _flat(obj):
    """The tensors of a nested output (tuples, lists, dicts), in order."""
    if isinstance(obj, TensorBase):
        return [obj]
    if isinstance(obj, (tuple, list)):
        return [t for item in obj for t in _flat(item)]
    if isinstance(obj, dict):
        return [t for item in obj.values() for t in _flat(item)]
    return []


def _axes(spec, name, ndim):
    """dynamic_axes' entry for ``name``: {axis: symbolic name}."""
    axes = spec.get(name)
    if axes is None:
        return {}
    if isinstance(axes, dict):
        return {a % ndim if ndim else a: str(n) for a, n in axes.items()}
    return {a % ndim if ndim else a: f"{name}_dynamic_axes_{i + 1}" for i, a in enumerate(axes)}


def _input_names(model, count, given):
    if given:
        return list(given) + [f"input_{i}" for i in range(len(given), count)]
    try:
        params = [p.name for p in inspect.signature(model.forward if isinstance(model, Module) else model)
                  .parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"input_{i}" for i in range(count)]


class _Patched:
    """While tracing: sizes read from traced tensors (``shape``, ``size()``, ``numel()``) are
    TracedInts, a traced tensor's Python value (``bool``, ``item``, ``tolist``, ``len``) warns, and
    module calls with a lowering (``modules.MODULES``) are recorded whole."""

    def __init__(self, tracer):
        self.tracer = tracer

    def __enter__(self):
        tracer = self.tracer
        self.saved = {name: TensorBase.__dict__[name] for name in ("shape", "size", "numel")}
        self.saved_tensor = {name: minidl.Tensor.__dict__[name] for name in ("__bool__", "item", "tolist", "__len__")}
        self.saved_call = Module.__call__
        plain_shape, plain_size, plain_numel = self.saved["shape"], self.saved["size"], self.saved["numel"]

        def shape(t):
            if tracer.depth == 0 and id(t) in tracer.values:
                return tracer.traced_shape(t)
            return plain_shape.fget(t)

        def size(t, dim=None):
            if tracer.depth == 0 and id(t) in tracer.values:
                sizes = tracer.traced_shape(t)
                return sizes if dim is None else sizes[dim if dim >= 0 else dim + len(sizes)]
            return plain_size(t, dim)

        def numel(t):
            if tracer.depth == 0 and id(t) in tracer.values:
                return tracer.traced_numel(t)
            return plain_numel(t)

        def valued(name):
            plain = self.saved_tensor[name]

            def method(t, *args, **kwargs):
                if tracer.depth == 0 and id(t) in tracer.values:
                    _fixed(f"a traced tensor read by Tensor.{name}")
                return tracer.run_inside(plain, t, *args, **kwargs)   # (once: not again by what it calls)
            return method

        def call(module, *args, **kwargs):
            if tracer.depth:
                return self.saved_call(module, *args, **kwargs)
            rule = modules.MODULES.get(type(module))
            tracer.modules.append(module)
            try:
                if rule is None or not tracer.involved(args, kwargs):
                    return self.saved_call(module, *args, **kwargs)
                out = tracer.run_inside(self.saved_call, module, *args, **kwargs)
                tracer.record(type(module).__name__, lambda L, *a, **k: rule(L, module, *a, **k), args, kwargs, out,
                              flat=_flat)
                return out
            finally:
                tracer.modules.pop()
        TensorBase.shape = property(shape)
        TensorBase.size, TensorBase.numel = size, numel
        for name in self.saved_tensor:
            setattr(minidl.Tensor, name, valued(name))
        Module.__call__ = call
        _tracing.active = tracer

    def __exit__(self, *exc):
        _tracing.active = None
        for name, attr in self.saved.items():
            setattr(TensorBase, name, attr)
        for name, attr in self.saved_tensor.items():
            setattr(minidl.Tensor, name, attr)
        Module.__call__ = self.saved_call


def trace(model, args, kwargs, opset, input_names, output_names, dynamic_axes, export_params,
          keep_initializers_as_inputs, training, custom_opsets):
    if _tracing.active is not None:
        raise OnnxExporterError("minidl.onnx.export: called while another export is tracing")
    args = args if isinstance(args, tuple) else (args,)
    graph = Graph(opset)
    graph.domains = dict(custom_opsets)
    names = {}
    is_module = isinstance(model, Module)
    if is_module:
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            names.setdefault(id(t), name)
    tracer = Tracer(graph, names, export_params)
    if is_module:
        tracer.module_names = {id(m): name for name, m in model.named_modules()}
    inputs = [a for a in args if isinstance(a, TensorBase)] + [v for v in kwargs.values() if isinstance(v, TensorBase)]
    in_names = _input_names(model, len(args), input_names)
    in_names = [n for n, a in zip(in_names, args) if isinstance(a, TensorBase)] + \
        [k for k, v in kwargs.items() if isinstance(v, TensorBase)]
    for name, t in zip(in_names, inputs):
        axes = _axes(dynamic_axes, name, t.ndim)
        graph.inputs.append((name, numpy_dtype(t.dtype), [axes.get(i, n) for i, n in enumerate(t.shape)]))
        tracer.bind(t, name)
    modes = {m: m.training for m in model.modules()} if is_module else {}
    if is_module and training != 1:   # (TrainingMode.PRESERVE keeps the model's mode)
        model.train(training == 2)
    try:
        with minidl.no_grad(), _Patched(tracer):
            out = model(*args, **kwargs)
    finally:
        for m, mode in modes.items():   # (every submodule its own mode back)
            m.training = mode
    outs = _flat(out)
    if not outs:
        raise OnnxExporterError(f"minidl.onnx.export: the model returned no tensor ({type(out).__name__})")
    out_names = list(output_names or []) + [f"output_{i}" for i in range(len(output_names or []), len(outs))]
    unknown = sorted(set(dynamic_axes) - set(in_names) - set(out_names[:len(outs)]))
    if unknown:   # (as torch's exporter warns)
        warnings.warn(f"minidl.onnx.export: dynamic_axes names {unknown}, which are no input or output name "
                      f"(inputs {in_names}, outputs {out_names[:len(outs)]}); nothing there is made dynamic",
                      UserWarning, stacklevel=3)
    for name, t in zip(out_names, outs):
        value = tracer.value(t)
        graph.nodes.append(("Identity", [value], [name], {}))
        axes = _axes(dynamic_axes, name, t.ndim)
        graph.outputs.append((name, numpy_dtype(t.dtype), [axes.get(i) for i in range(t.ndim)]))   # (see _checked)
    _prune(graph, tracer)
    if keep_initializers_as_inputs:
        graph.inputs += [(n, a.dtype, list(a.shape)) for n, a in graph.initializers.items()]
    return _checked(graph)


def _prune(graph, tracer):
    """Drop the nodes and constants no output needs; refuse an output that needs an op without a
    lowering (recorded as a poisoned value, so that an unused one costs nothing)."""
    needed = {name for _, _, outs, _ in graph.nodes[-len(graph.outputs):] for name in outs}
    kept = []
    for node in reversed(graph.nodes):
        op_type, inputs, outs, _ = node
        if any(o in needed for o in outs):
            kept.append(node)
            needed.update(i for i in inputs if i)
    graph.nodes = kept[::-1]
    for name in needed:
        if name in tracer.poisoned:
            raise OnnxExporterError(tracer.poisoned[name])
    graph.initializers = {n: a for n, a in graph.initializers.items() if n in needed}
    graph.inputs = [i for i in graph.inputs if i[0] in needed or i[0] not in tracer.param_inputs]


def _checked(graph):
    """The checked model, its value shapes inferred. An output dim not named in dynamic_axes takes
    the inferred one (a number where it is fixed, a symbol where it follows an input) rather than
    its traced size, which would be wrong for other inputs."""
    import onnx
    proto = graph.model("minidl", minidl.__version__)
    onnx.checker.check_model(proto)
    inferred = onnx.shape_inference.infer_shapes(proto, strict_mode=True)
    found = {v.name: v for v in inferred.graph.value_info}
    sources = {node.output[0]: node.input[0] for node in inferred.graph.node if node.op_type == "Identity"}
    for out in inferred.graph.output:
        source = found.get(sources.get(out.name))
        if source is None:
            continue
        for ours, theirs in zip(out.type.tensor_type.shape.dim, source.type.tensor_type.shape.dim):
            if not ours.dim_param and not ours.HasField("dim_value"):
                ours.CopyFrom(theirs)
    onnx.checker.check_model(inferred)
    return inferred
