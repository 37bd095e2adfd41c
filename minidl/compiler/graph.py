"""A captured graph and its replay: a flat list of kernel launches with their arguments bound.

A replay copies the call's tensor arguments into the graph's own input buffers, points each random
draw at where its generator stands, calls every step in order, and copies back the arguments the call
wrote in place. No op, autograd or registry code runs: what Python remains per step is the call of
the kernel's device wrapper (for a CPU kernel, reading its layouts and picking the Numba kernel), and
per replay the guards, the input copies and the outputs.

Outputs come back as fresh tensors (a clone of each one the graph made), so that what a caller kept
from one call is not overwritten by the next; an argument or a parameter returned comes back itself.
"""
from __future__ import annotations

from .. import Tensor, no_grad
from ..ops.core import buf
from . import config, cudagraphs
from .fusion import fuse
from .guards import GraphGuards
from .recorder import ReadChanged, root

_INPUT, _CLONE, _SAME = "input", "clone", "same"


class Graph:
    def __init__(self, recorder, inputs, written, result, cuda_graphs=False):
        self.steps = recorder.steps
        self.kinds = recorder.kinds     # per step: the primitive's name, or one of recorder.STEP_KINDS
        self.draws = recorder.draws
        self.claims = [(g, end - start) for g, (_, start, end) in recorder.claims.items()]
        self.reads = recorder.reads
        self.inputs = inputs            # the graph's own copies of the tensor arguments
        self.written = written          # positions of the arguments the call wrote in place
        self.guards = GraphGuards(recorder)
        owned = recorder.own
        index = {id(t): i for i, t in enumerate(inputs)}
        self.result = _plan(result, lambda t: (_INPUT, index[id(t)]) if id(t) in index else
                            (_CLONE, t) if id(root(buf(t))) in owned else (_SAME, t))
        candidates = set(owned)   # (the recorder's own references go first: the passes count the steps')
        for held in (recorder.own, recorder.views, recorder.host_arrays):
            held.clear()
        self.programs = []   # the fused kernels' programs, in order
        if config.fuse:
            self.steps, self.kinds, _, self.programs = fuse(self.steps, self.kinds, recorder.writes, candidates)
        self.cuda_graphs = cuda_graphs   # True: runs of CUDA kernels become CUDA graphs at the first replay

    def stale(self):
        """Why this graph does not fit the call's state (a guard that fails), or None."""
        return self.guards.stale()

    def replay(self, tensors):
        with no_grad():
            for own, given in zip(self.inputs, tensors):
                own.copy_(given)
        if self.cuda_graphs is True:   # (then what cudagraphs.install made, or None)
            self.cuda_graphs = cudagraphs.install(self)
        saved = [(g, g.get_state()) for g, _ in self.claims] if self.reads else None
        for args, seed_at, offset_at, generator, delta in self.draws:
            args[seed_at] = generator.initial_seed()
        starts = {g: g.claim(count)[1] for g, count in self.claims}
        for args, seed_at, offset_at, generator, delta in self.draws:
            args[offset_at] = (starts[generator] + delta) % (1 << 64)
        try:
            for fn, args in self.steps:
                fn(*args)
        except ReadChanged:   # (the call is captured again from the caller's tensors, untouched)
            for generator, state in saved:
                generator.set_state(state)
            self.guards.restore()   # (and from the modes and flags it found)
            raise
        except BaseException:   # (a step raised, as the eager call would there: its writes so far stay)
            self._write_back(tensors)
            raise
        self._write_back(tensors)
        return self.outputs(tensors)

    def _write_back(self, tensors):
        with no_grad():
            for i in self.written:
                tensors[i].copy_(self.inputs[i])

    def outputs(self, tensors):
        return _build(self.result, tensors)


PLAIN_VALUES = (bool, int, float, complex, str, bytes, type(None))


def _plan(value, classify):
    """The shape of a call's result with each tensor replaced by how a replay gives it back
    (containers: tuples, named tuples, lists and dicts; ``rebuildable`` says what else may be in it)."""
    if isinstance(value, Tensor):
        return ("tensor", classify(value))
    if type(value) in (tuple, list):
        return (type(value), [_plan(v, classify) for v in value])
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return ("named", (type(value), [_plan(v, classify) for v in value]))
    if type(value) is dict:
        return (dict, {k: _plan(v, classify) for k, v in value.items()})
    return ("value", value)


def rebuildable(value) -> str | None:
    """None if a replay can give ``value`` back, else the type of the part it cannot."""
    if isinstance(value, Tensor) or isinstance(value, PLAIN_VALUES):
        return None
    if type(value) in (tuple, list) or (isinstance(value, tuple) and hasattr(value, "_fields")):
        return next((r for r in map(rebuildable, value) if r), None)   # (what _plan rebuilds, no subclass)
    if type(value) is dict:
        return next((r for r in map(rebuildable, value.values()) if r), None)
    return type(value).__name__


def _build(plan, tensors):
    kind, content = plan
    if kind == "tensor":
        how, what = content
        if how == _INPUT:
            return tensors[what]
        if how == _CLONE:
            with no_grad():
                return what.detach().clone()
        return what
    if kind == "value":
        return content
    if kind is dict:
        return {k: _build(v, tensors) for k, v in content.items()}
    if kind == "named":
        cls, items = content
        return cls(*(_build(v, tensors) for v in items))
    return kind(_build(v, tensors) for v in content)
