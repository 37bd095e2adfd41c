"""``minidl.compile``: capture a call once, guard it, and replay its kernel launches without Python per op.

``minidl.compile(fn_or_module, ...)`` takes torch.compile's arguments. The first call runs eagerly
while a recorder keeps every kernel launch (forward, the backward run inside the call, the optimizer's
update); later calls that pass the guards replay those launches. What cannot be replayed is a graph
break: that call runs eagerly (``fullgraph=True`` raises instead). See ``recorder.py`` for what is
captured, ``guards.py`` for what a graph is specialised on, ``graph.py`` for the replay.

Backends: torch's names are accepted. "inductor" (the default) and "cudagraphs" capture and replay;
"eager" and "aot_eager" capture only to find graph breaks and always run the function eagerly (to tell
a replay's fault from the function's). Modes ("default", "lite", "reduce-overhead", "max-autotune",
"max-autotune-no-cudagraphs") are accepted; with "reduce-overhead", or backend "cudagraphs", a replay
launches its runs of CUDA kernels as CUDA graphs (``cudagraphs.py``; on the CPU nothing changes).
``dynamic`` is accepted; shapes are always static (a new shape is a new capture). ``options`` are
accepted and not read.
"""
from __future__ import annotations

import functools
import weakref

from .. import _tracing
from ..nn import Module
from . import logs
from .compiled import CompiledFunction
from .recorder import GraphBreakError

__all__ = ["compile", "OptimizedModule", "GraphBreakError", "reset", "list_backends", "is_compiling",
           "disable", "set_logs"]

BACKENDS = {"inductor": True, "cudagraphs": True, "eager": False, "aot_eager": False}   # name -> replays
MODES = ("default", "lite", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
RECOMPILE_LIMIT = 8   # torch._dynamo.config.recompile_limit
_compiled = weakref.WeakSet()  # every CompiledFunction alive, for reset()
set_logs = logs.set_logs


class OptimizedModule(Module):
    """A module whose calls are compiled. Its attributes are the original module's (``_orig_mod``),
    which is its one child: ``state_dict`` keys carry the ``_orig_mod.`` prefix, as torch's do."""

    def __init__(self, mod, compiled):
        super().__init__()
        self._orig_mod = mod
        object.__setattr__(self, "_compiled_call", compiled)

    def forward(self, *args, **kwargs):
        return self._compiled_call(*args, **kwargs)

    def __getattr__(self, name):
        if name == "_orig_mod":
            return super().__getattr__(name)
        return getattr(self._orig_mod, name)

    def __repr__(self):
        return f"OptimizedModule(\n  (_orig_mod): {self._orig_mod!r}\n)"


def compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None, options=None, name=None,
            disable=False, recompile_limit=None, isolate_recompiles=False, shapes_spec=None):
    """torch.compile's signature and use (a call, or a decorator with or without arguments)."""
    if model is None:
        return lambda fn: compile(fn, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                                  options=options, name=name, disable=disable, recompile_limit=recompile_limit,
                                  isolate_recompiles=isolate_recompiles, shapes_spec=shapes_spec)
    if not callable(model):
        raise RuntimeError(f"minidl.compile: expected a callable (a function or a module), got "
                           f"{type(model).__name__}")
    if mode is not None and options is not None:
        raise RuntimeError("Either mode or options can be specified, but both can't be specified at the same time.")
    if mode is not None and mode not in MODES:
        raise RuntimeError(f"Unrecognized mode={mode}, should be one of: {', '.join(MODES)}")
    backend = "inductor" if backend is None else backend
    if callable(backend):
        raise NotImplementedError("minidl.compile: a backend callable would receive torch's FX graph, which "
                                  "minidl does not build; use one of " + ", ".join(BACKENDS))
    if backend not in BACKENDS:
        raise RuntimeError(f"Invalid backend: {backend!r}, see `minidl.compiler.list_backends()` for available "
                           f"backends.")
    if disable:
        return model
    compiled = CompiledFunction(model, fullgraph=fullgraph, replay=BACKENDS[backend],
                                recompile_limit=RECOMPILE_LIMIT if recompile_limit is None else recompile_limit,
                                cuda_graphs=backend == "cudagraphs" or mode == "reduce-overhead")
    _compiled.add(compiled)
    if isinstance(model, Module):
        return OptimizedModule(model, compiled)

    @functools.wraps(model)
    def call(*args, **kwargs):
        return compiled(*args, **kwargs)
    call._minidl_compiled = compiled
    return call


def reset() -> None:
    """Forget every captured graph (``torch.compiler.reset``): the next calls capture again."""
    for compiled in _compiled:
        compiled.reset()


def list_backends(exclude_tags=("debug", "experimental")) -> list:
    return sorted(BACKENDS)


def is_compiling() -> bool:
    """True while a call is being captured on this thread (``torch.compiler.is_compiling``)."""
    return _tracing.recording() is not None


def disable(fn=None, recursive=True, *, reason=None):
    """``torch.compiler.disable``: ``fn`` runs eagerly, a graph break inside a compiled call."""
    if fn is None:
        return lambda f: disable(f, recursive, reason=reason)

    @functools.wraps(fn)
    def run(*args, **kwargs):
        _tracing.graph_break(f"{getattr(fn, '__qualname__', fn)} is marked minidl.compiler.disable"
                             + (f" ({reason})" if reason else ""))
        return fn(*args, **kwargs)
    return run
