"""``minidl.onnx``: export a model to ONNX, as ``torch.onnx.export`` does, by tracing.

    minidl.onnx.export(model, (x,), "model.onnx", input_names=["x"], output_names=["logits"],
                       dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}})

minidl has one exporter, torch's *tracing* one in kind: the model is put in eval mode, run once
on ``args``, and the ops it performs are recorded into an ONNX graph, its parameters and buffers
as initializers (``tracer``). Each op declares its lowering in the op registry (``lowerings``,
``nn_lowerings``); modules with an ONNX counterpart declare theirs (``modules``: LSTM, GRU, RNN).
Sizes the model reads from its inputs (``x.shape[1]``) are traced, so the graph stays dynamic
along the axes named in ``dynamic_axes``; a Python branch on a size, or on a tensor's value, is
fixed at export with a ``TracerWarning``. ``dynamo=True`` (torch's default) is accepted and means
the same here. Building the model needs the ``onnx`` package (``pip install "minidl[onnx]"``);
``import minidl.onnx`` does not.
"""
from __future__ import annotations

import enum
import os

from .. import _tracing
from . import lowerings, modules  # noqa: F401  (each op's and module's lowering, declared on import)
from .tracer import OnnxExporterError, TracerWarning

__all__ = ["export", "is_in_onnx_export", "OnnxExporterError", "TracerWarning", "TrainingMode", "ONNXProgram"]

DEFAULT_OPSET = 20   # (torch 2.13's)
MIN_OPSET = 18       # (reductions take their axes as an input, Split its sizes: the forms emitted here)


class TrainingMode(enum.IntEnum):
    EVAL = 0
    PRESERVE = 1
    TRAINING = 2


def is_in_onnx_export() -> bool:
    return _tracing.active is not None


class ONNXProgram:
    """The exported model: ``model_proto`` (an onnx.ModelProto), ``save(path)``, and calling it
    runs it in ONNX Runtime (needs ``onnxruntime``) on minidl tensors or numpy arrays."""

    def __init__(self, model_proto):
        self.model_proto = model_proto
        self._session = None

    def save(self, destination) -> None:
        import onnx
        onnx.save(self.model_proto, destination)

    def __call__(self, *args):
        import numpy as np
        import onnxruntime
        if self._session is None:
            self._session = onnxruntime.InferenceSession(self.model_proto.SerializeToString(),
                                                         providers=["CPUExecutionProvider"])
        names = [i.name for i in self._session.get_inputs()]
        feed = {n: np.asarray(a.numpy() if hasattr(a, "numpy") else a, order="C") for n, a in zip(names, args)}
        return self._session.run(None, feed)

    def __repr__(self):
        graph = self.model_proto.graph
        return (f"ONNXProgram(inputs={[i.name for i in graph.input]}, outputs={[o.name for o in graph.output]}, "
                f"{len(graph.node)} nodes, opset {self.model_proto.opset_import[0].version})")


_NOT_HERE = {"dynamic_shapes": None, "custom_translation_table": None, "report": False, "verify": False,
             "profile": False, "dump_exported_program": False, "export_modules_as_functions": False}


def export(model, args=(), f=None, *, kwargs=None, verbose=None, input_names=None, output_names=None,
           opset_version=None, dynamo=True, external_data=True, dynamic_shapes=None, custom_translation_table=None,
           report=False, optimize=True, verify=False, profile=False, dump_exported_program=False,
           artifacts_dir=".", export_params=True, keep_initializers_as_inputs=False, dynamic_axes=None,
           training=TrainingMode.EVAL, operator_export_type=None, do_constant_folding=True, custom_opsets=None,
           export_modules_as_functions=False, autograd_inlining=True):
    """Trace ``model`` on ``args`` (a tensor or a tuple; ``kwargs`` too) and write the ONNX model
    to ``f`` (a path or a binary file) if given. Returns an ``ONNXProgram`` (None with
    ``dynamo=False``, as torch's). ``opset_version``: 18 and up, default 20. ``dynamic_axes``:
    {input or output name: {axis: name} or [axes]}. ``export_params=False`` makes the parameters
    graph inputs instead of initializers; ``keep_initializers_as_inputs`` lists them as inputs
    too. Constant folding is what tracing does anyway (work that depends on no input is done once,
    at export): ``do_constant_folding`` is accepted. ``custom_opsets``: {domain: opset version} of the
    domains user ops (``minidl.library``) export into (default 1). The dynamo exporter's own options
    (``dynamic_shapes``, ``custom_translation_table``, ``report``, ``verify``, ...) are refused."""
    given = dict(dynamic_shapes=dynamic_shapes, custom_translation_table=custom_translation_table, report=report,
                 verify=verify, profile=profile, dump_exported_program=dump_exported_program,
                 export_modules_as_functions=export_modules_as_functions)
    for name, default in _NOT_HERE.items():
        if given[name] not in (default, {}, ()):
            raise NotImplementedError(f"minidl.onnx.export: {name}= is not supported: minidl has one exporter, the "
                                      f"tracing one (use dynamic_axes for dynamic sizes)")
    opset = DEFAULT_OPSET if opset_version is None else int(opset_version)
    try:
        import onnx
    except ImportError:
        raise ImportError('minidl.onnx.export needs the onnx package: pip install "minidl[onnx]"') from None
    if not MIN_OPSET <= opset <= onnx.defs.onnx_opset_version():
        raise ValueError(f"minidl.onnx.export: opset_version={opset}; minidl exports opsets {MIN_OPSET} to "
                         f"{onnx.defs.onnx_opset_version()} (this onnx package's newest)")
    from .build import trace
    proto = trace(model, args, kwargs or {}, opset, input_names, output_names, dynamic_axes or {}, export_params,
                  keep_initializers_as_inputs, TrainingMode(training), custom_opsets or {})
    if verbose:
        print(onnx.helper.printable_graph(proto.graph))
    if f is not None:
        onnx.save(proto, os.fspath(f) if isinstance(f, (str, os.PathLike)) else f)
    return ONNXProgram(proto) if dynamo else None

