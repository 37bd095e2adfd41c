"""What ``python -m minidl.serve SPEC`` serves: ``path/module.py:factory`` (the factory builds the module, ``--weights``
loads into it strictly), a model folder ``minidl.models.from_pretrained`` reads, or a ``.onnx`` file (run by ONNX
Runtime: ``OnnxRunner``)."""
from __future__ import annotations

import importlib.util
import os

import numpy as np

import minidl

from .runner import ModuleRunner, OnnxRunner, Runner

__all__ = ["SpecError", "load_runner"]


class SpecError(ValueError):
    """A SPEC (or its --weights) that names nothing servable; the command prints it without a traceback."""


def load_runner(spec: str, *, weights: str | None = None, example_ndim: int | None = None) -> Runner:
    if spec.endswith(".onnx"):
        if weights is not None:
            raise SpecError(f"--weights is for a module.py:factory spec; the ONNX file {spec} holds its own weights")
        if not os.path.isfile(spec):
            raise SpecError(f"{spec}: no such file")
        try:
            return OnnxRunner(spec, example_ndim=example_ndim)
        except ValueError as error:
            raise SpecError(str(error)) from None
    if os.path.isdir(spec):
        if weights is not None:
            raise SpecError(f"--weights is for a module.py:factory spec; the folder {spec} holds its own weights")
        from minidl.models import from_pretrained   # (the zoo loads only when a folder is served)
        model = from_pretrained(spec)
        return ModuleRunner(model, name=os.path.basename(os.path.normpath(spec)), input_dtype=np.int64,
                            example_ndim=1 if example_ndim is None else example_ndim)
    path, sep, factory_name = spec.rpartition(":")
    if not sep or not path.endswith(".py") or not factory_name.isidentifier():
        raise SpecError(f"{spec!r} is neither path/module.py:factory nor a model folder")
    factory, module = _factory(path, factory_name)
    model = factory()
    if not isinstance(model, minidl.nn.Module):
        raise SpecError(f"{spec} returned a {type(model).__name__}, not a minidl.nn.Module")
    if weights is not None:
        if not os.path.isfile(weights):
            raise SpecError(f"--weights {weights}: no such file")
        model.load_state_dict(minidl.load(weights), strict=True)
    runner = ModuleRunner(model, name=os.path.splitext(os.path.basename(path))[0], example_ndim=example_ndim)
    runner.tokenizer = getattr(module, "tokenizer", None)      # the language model's tokenizer, from the same file
    return runner


def _factory(path: str, name: str):
    """(the callable ``name`` of the Python file ``path``, the module it was read into)."""
    if not os.path.isfile(path):
        raise SpecError(f"{path}: no such file")
    module_spec = importlib.util.spec_from_file_location(f"_minidl_serve_{os.path.basename(path)[:-3]}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    factory = getattr(module, name, None)
    if not callable(factory):
        raise SpecError(f"{path} has no callable {name!r}")
    return factory, module
