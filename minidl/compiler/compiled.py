"""A compiled callable: its graphs by key, when to capture again, and when to run eagerly.

The first call of each key runs the function eagerly under a recorder (``recorder.py``) and keeps
the graph; later calls with that key replay it (``graph.py``) after its guards (``guards.py``). A
call whose key has no graph, or whose graphs' guards all fail, is captured again, at most
``recompile_limit`` times in all; past that it runs eagerly. A capture that meets a graph break
keeps no graph: that key then always runs eagerly (with ``fullgraph=True`` the break raises).
"""
from __future__ import annotations

import logging
import threading

from .. import Tensor, _tracing, no_grad
from ..nn import Module
from ..ops.core import buf
from . import logs
from .graph import PLAIN_VALUES, Graph, rebuildable
from .guards import call_key, describe_change
from .recorder import GraphBreakError, ReadChanged, Recorder, root, user_line


class CompiledFunction:
    def __init__(self, fn, *, fullgraph: bool, replay: bool, recompile_limit: int, cuda_graphs: bool = False):
        self.fn = fn
        self.fullgraph = fullgraph
        self.replay = replay            # False for the "eager" backends: capture to find breaks, never replay
        self.cuda_graphs = cuda_graphs  # replay runs of CUDA kernels as CUDA graphs (cudagraphs.py)
        self.recompile_limit = recompile_limit
        self.graphs: dict = {}          # key -> [Graph], newest last
        self.eager: dict = {}           # key -> the graph break that makes it run eagerly
        self.captures = 0
        self.last_key = None
        self.limit_reported = False
        self.lock = threading.Lock()   # one call at a time uses the graphs' buffers; others run eagerly

    def reset(self) -> None:
        self.graphs.clear()
        self.eager.clear()
        self.captures = 0
        self.last_key = None
        self.limit_reported = False

    def __call__(self, *args, **kwargs):
        if _tracing.recording() is not None:   # (inside another capture: its recorder sees our kernels)
            return self.fn(*args, **kwargs)
        if not self.lock.acquire(blocking=False):   # (another thread replays or captures: its buffers are busy)
            return self.fn(*args, **kwargs)
        try:
            return self._call(args, kwargs)
        finally:
            self.lock.release()

    def _call(self, args, kwargs):
        key, tensors, refusal = call_key(args, kwargs)
        if refusal:   # (not kept in self.eager: the key would keep the argument alive)
            return self._run_eagerly(None, refusal, args, kwargs)
        why = None
        for graph in self.graphs.get(key, ()):
            why = graph.stale()
            if why is None:
                try:
                    return graph.replay(tensors)
                except ReadChanged as changed:
                    why = str(changed)
        if key in self.eager:
            return self.fn(*args, **kwargs)
        if self.captures >= self.recompile_limit:
            if not self.limit_reported:
                self.limit_reported = True
                logging.getLogger("minidl.compile").warning(
                    f"minidl.compile: {_name(self.fn)} reached recompile_limit ({self.recompile_limit}); calls that "
                    f"fit none of its graphs run eagerly. Last reason: {why or describe_change(self.last_key, key)}")
            return self.fn(*args, **kwargs)
        if self.captures:
            logs.report("recompiles", f"Recompiling {_name(self.fn)}: "
                                      f"{why or describe_change(self.last_key, key)}")
        self.last_key = key
        return self._capture(key, args, kwargs, tensors)

    def _capture(self, key, args, kwargs, tensors):
        refusal = _refuse(tensors)
        if refusal:
            return self._run_eagerly(key, refusal, args, kwargs)
        with no_grad():
            inputs = [t.detach().clone() for t in tensors]
        versions = [t._version for t in inputs]
        swap = {id(t): own for t, own in zip(tensors, inputs)}
        recorder = Recorder(self.fullgraph)
        for own in inputs:
            recorder.own[id(root(buf(own)))] = buf(own)
        copies = []   # (the caller's list or dict, the copy the call is given)
        _tracing.start_recording(recorder)
        try:
            owner = getattr(self.fn, "__self__", None)   # (compile(model.forward): the module runs, unseen)
            if isinstance(owner, Module):
                recorder.saw_module(owner)
            call_args, call_kwargs = _substitute(args, swap, copies), _substitute(kwargs, swap, copies)
            result = self.fn(*call_args, **call_kwargs)
        finally:
            _tracing.stop_recording()
            recorder.done = True
            written = [i for i, own in enumerate(inputs) if own._version != versions[i]]
            with no_grad():   # (even when the call raises: eagerly its writes stay)
                for i in written:
                    tensors[i].copy_(inputs[i])
            back = {id(own): t for t, own in zip(tensors, inputs)}
            back.update((id(copy), given) for given, copy in copies)
            changed = _containers_back(copies, back)   # (and what the call put in them)
        if changed:
            recorder.graph_break("a list or dict argument is changed by the call (a Python side effect a replay "
                                 "would not redo)")
        if not recorder.broken:
            _check_result(recorder, result)
        if recorder.broken:
            reason, where = recorder.broken
            self.eager[key] = recorder.broken
            logs.report("graph_breaks", f"Graph break in {_name(self.fn)}: {reason} (at {where}); "
                                        f"calls like this one run eagerly")
            return _substitute(result, back)
        self.captures += 1
        if self.replay:
            graph = Graph(recorder, inputs, written, result, self.cuda_graphs)
            self.graphs.setdefault(key, []).append(graph)
            return graph.outputs(tensors)
        self.eager[key] = None   # (an eager backend: captured only to find the breaks)
        return _substitute(result, back)

    def _run_eagerly(self, key, reason, args, kwargs):
        """A call refused before its capture runs eagerly (``key``: kept so, unless None); raises with fullgraph."""
        if self.fullgraph:
            raise GraphBreakError(f"minidl.compile(fullgraph=True): {reason}, at {user_line()}")
        if key is not None:
            self.eager[key] = (reason, "the call")
        logs.report("graph_breaks", f"Graph break in {_name(self.fn)}: {reason}; calls like this one run eagerly")
        return self.fn(*args, **kwargs)


def _refuse(tensors):
    """Why a call with these tensor arguments cannot be captured, or None."""
    seen = set()
    for i, t in enumerate(tensors):
        if t.requires_grad:
            return (f"tensor argument {i} requires grad (its gradient would go to the graph's copy); "
                    f"capture the step that makes it, or pass it detached")
        address = id(root(buf(t)))
        if address in seen:
            return f"tensor argument {i} shares memory with another argument"
        seen.add(address)
    return None


def _check_result(recorder, result):
    """Graph breaks found in what the call returns."""
    odd = rebuildable(result)
    if odd:
        recorder.graph_break(f"the call returns a {odd}: a replay rebuilds only tensors, numbers, strings and "
                             f"tuples, lists and dicts of them")
        return
    leaves = list(_leaves(result))
    if not recorder.backward_ran and any(isinstance(t, Tensor) and t.requires_grad for t in leaves):
        recorder.graph_break("the call returns a tensor that requires grad, and its backward runs outside the "
                             "call: compile the whole training step (forward, backward and optimizer step)")
    elif recorder.reads and any(isinstance(v, PLAIN_VALUES) and v is not None and not isinstance(v, str)
                                for v in leaves):
        recorder.graph_break("the call returns a number and reads tensor values on the host: the number may "
                             "come from them, and a replay would return the captured one")


def _leaves(value):
    if isinstance(value, (tuple, list)):
        for v in value:
            yield from _leaves(v)
    elif type(value) is dict:
        for v in value.values():
            yield from _leaves(v)
    else:
        yield value


def _substitute(value, swap, copies=None):
    """``value`` with the tensors found in ``swap`` (by identity) replaced, containers rebuilt (each
    list and dict rebuilt noted in ``copies`` as (the original, its copy))."""
    if id(value) in swap:
        return swap[id(value)]
    if type(value) in (tuple, list):
        new = type(value)(_substitute(v, swap, copies) for v in value)
    elif isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_substitute(v, swap, copies) for v in value))
    elif type(value) is dict:
        new = {k: _substitute(v, swap, copies) for k, v in value.items()}
    else:
        return value
    if copies is not None and type(value) is not tuple:
        copies.append((value, new))
    return new


def _containers_back(copies, back) -> bool:
    """Put into each list or dict argument what the call left in its copy (the graph's own tensors
    mapped back to the caller's); True if the call changed any."""
    changed = False
    for given, copy in copies:
        if type(given) is list:
            now = [back.get(id(v), v) for v in copy]
            if len(now) != len(given) or any(a is not b for a, b in zip(now, given)):
                given[:] = now
                changed = True
        else:
            now = {k: back.get(id(v), v) for k, v in copy.items()}
            if list(now) != list(given) or any(now[k] is not given[k] for k in now):
                given.clear()
                given.update(now)
                changed = True
    return changed


def _name(fn) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__
