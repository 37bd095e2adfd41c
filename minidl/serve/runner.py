"""Runners: what the batcher calls. A runner maps one batch array (examples stacked on axis 0) to one batch array
with as many rows, so the HTTP layer and the batcher never know whether a minidl module, an ONNX session or
something else computes the answer."""
from __future__ import annotations

import os

import numpy as np

import minidl
from minidl.models.outputs import ModelOutput

__all__ = ["Runner", "ModuleRunner", "OnnxRunner"]


class Runner:
    """The runner interface. ``__call__(batch)`` runs on the batcher's worker thread, one call at a time, and may
    raise: its message reaches the client as a 422. ``input_dtype`` is the numpy dtype requests are parsed to;
    ``example_ndim`` the rank of one example when known (it tells one example from a list of them), else None;
    ``describe()`` what ``GET /v1/models`` shows."""
    name = "model"
    kind = "runner"
    input_dtype = np.dtype(np.float32)
    example_ndim: int | None = None

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} does not say how to run a batch")

    def describe(self) -> dict:
        return {"name": self.name, "kind": self.kind, "input_dtype": str(self.input_dtype),
                "example_ndim": self.example_ndim}


class ModuleRunner(Runner):
    """A minidl module in eval mode, run under ``inference_mode`` (entered on the worker thread, where grad mode
    lives). A model that returns a ``ModelOutput`` or a tuple answers with its first field (logits, hidden
    states)."""
    kind = "minidl"

    def __init__(self, module, *, name: str | None = None, input_dtype=np.float32, example_ndim: int | None = None):
        self.module = module.eval()
        self.name = name or type(module).__name__
        self.input_dtype = np.dtype(input_dtype)
        self.example_ndim = example_ndim

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        with minidl.inference_mode():
            out = self.module(minidl.from_numpy(np.ascontiguousarray(batch)))
        if isinstance(out, (ModelOutput, tuple, list)):
            out = out[0]
        if not isinstance(out, minidl.Tensor):
            raise TypeError(f"{self.name} returned a {type(out).__name__}, not a tensor")
        return out.detach().cpu().numpy()


_ONNX_DTYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
                "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16,
                "tensor(int8)": np.int8, "tensor(uint8)": np.uint8}


class OnnxRunner(Runner):
    """An ONNX graph run by ONNX Runtime on the CPU provider: one input, one output, dtype and example rank read from
    the graph. A dynamic first axis takes the batch as it comes; a fixed first axis of 1 (an export without
    ``dynamic_axes``) is run one example at a time, so it still serves, only unbatched; any other fixed first axis
    is refused, since no batch the batcher makes would fit it."""
    kind = "onnx"

    def __init__(self, path: str, *, name: str | None = None, example_ndim: int | None = None):
        import onnxruntime   # (only when an ONNX graph is served)
        try:
            self.session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        except Exception as error:  # noqa: BLE001  (ONNX Runtime's errors share no base class but Exception)
            raise ValueError(f"ONNX Runtime cannot load {path}: {error}") from None
        inputs, outputs = self.session.get_inputs(), self.session.get_outputs()
        if len(inputs) != 1 or len(outputs) != 1:
            raise ValueError(f"{path} has {len(inputs)} inputs ({', '.join(i.name for i in inputs)}) and "
                             f"{len(outputs)} outputs ({', '.join(o.name for o in outputs)}); "
                             f"only graphs of one input and one output are served")
        (graph_input,) = inputs
        self.name = name or os.path.splitext(os.path.basename(path))[0]
        self.input_name, self.output_name, self.shape = graph_input.name, outputs[0].name, graph_input.shape
        if graph_input.type not in _ONNX_DTYPES:
            raise ValueError(f"{path}: input {self.input_name!r} is a {graph_input.type}; served inputs are "
                             f"{', '.join(_ONNX_DTYPES)}")
        self.input_dtype = np.dtype(_ONNX_DTYPES[graph_input.type])
        if not self.shape:
            raise ValueError(f"{path}: input {self.input_name!r} has no batch axis (shape {self.shape})")
        batch = self.shape[0]
        if isinstance(batch, int) and batch != 1:
            raise ValueError(f"{path}: input {self.input_name!r} has shape {self.shape}, a fixed batch of {batch}; "
                             f"export it with a dynamic first axis (dynamic_axes={{{self.input_name!r}: {{0: "
                             f"'batch'}}}}) or a batch of 1")
        self.one_at_a_time = batch == 1
        if example_ndim is not None and example_ndim != len(self.shape) - 1:
            raise ValueError(f"example_ndim {example_ndim} does not match {path}'s input {self.input_name!r} of "
                             f"shape {self.shape} ({len(self.shape) - 1} dimension(s) per example)")
        self.example_ndim = len(self.shape) - 1

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        batch = np.ascontiguousarray(batch, dtype=self.input_dtype)
        if self.one_at_a_time:
            return np.concatenate([self._run(batch[i:i + 1]) for i in range(len(batch))])
        return self._run(batch)

    def _run(self, batch: np.ndarray) -> np.ndarray:
        return self.session.run([self.output_name], {self.input_name: batch})[0]

    def describe(self) -> dict:
        return {**super().describe(), "input": self.input_name, "input_shape": self.shape,
                "output": self.output_name, "batched": not self.one_at_a_time}
