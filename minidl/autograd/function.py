"""Graph nodes. Every differentiable op is a :class:`Function` subclass.

``Function.apply`` runs ``forward`` without recording, and if any input
requires grad, turns the ``ctx`` object into a node of the tape: it remembers
edges to the nodes that produced the inputs (``next_functions``) and what
``forward`` saved. ``backward`` computes input gradients with ordinary,
differentiable tensor ops, so gradients of gradients come for free. Built-in
ops and user-defined ops use this same class.
"""
from __future__ import annotations

import sys
import threading

from .. import _tracing
from . import grad_mode
from .hooks import apply_hooks
from .variable import Variable


_narrowed = threading.local()   # per thread: (node, mask) while a pruned pass runs that node


class Function:
    """Base class of ops; an instance is both the ``ctx`` of one call and its graph node.

    Per-node state starts as these class-level defaults and is set on the instance only
    when it differs, which keeps the construction of a node cheap.
    """

    next_functions = ()
    _needs_input_grad = ()
    _saved = ()
    _released = False
    _pre_hooks = None          # output index -> list of hooks on that output's gradient
    _non_differentiable = ()
    _input_meta = ()           # (shape, dtype) per forward argument, None for non-tensors
    _output_meta = ()          # (shape, dtype, device, tensor class) per output
    _materialize = True
    _recording = False         # set by apply when this call becomes a graph node
    _retained = None           # output index -> weakref of a tensor that retain_grad()s it
    _dirty = ()                # ids of inputs that forward modified in place (mark_dirty)

    # -- subclass API -------------------------------------------------------------------------
    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError("subclasses of Function must implement forward")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("subclasses of Function must implement backward")

    def save_for_backward(self, *tensors):
        """Keep tensors for backward, with their version, to catch later in-place changes
        (nothing to keep when this call records no graph)."""
        if self._recording:
            self._saved = tuple([None if t is None else (t, t._version) for t in tensors])  # (faster than a generator)

    @property
    def saved_tensors(self):
        if self._released:
            raise RuntimeError(
                f"Trying to backward through the graph a second time (or directly access saved tensors "
                f"after they have already been freed) in {self.name()}. Saved intermediate values of the "
                f"graph are freed when you call .backward() or autograd.grad(). Specify "
                f"retain_graph=True if you need to backward through the graph a second time.")
        out = []
        for item in self._saved:
            if item is None:
                out.append(None)
                continue
            t, version = item
            if t._version != version:
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has been modified by an "
                    f"inplace operation: [{t.dtype.name} tensor of shape {list(t.shape)}], which is an "
                    f"input or output of {self.name()}, is at version {t._version}; expected version "
                    f"{version} instead.")
            out.append(t)
        return tuple(out)

    def mark_non_differentiable(self, *tensors):
        self._non_differentiable = tuple(id(t) for t in tensors)

    def set_materialize_grads(self, value: bool):
        self._materialize = value

    def mark_dirty(self, *tensors):
        """Declare inputs that forward modified in place and returns: they become this node's
        outputs (their history is rebased onto it) and their version is bumped."""
        self._dirty = tuple(id(t) for t in tensors)

    @property
    def needs_input_grad(self) -> tuple:
        """Per input: whether backward should compute its gradient. Set by the forward call, and
        narrowed by a backward pass that wants fewer of them (``run_backward(grads, wanted)``),
        for that call and this thread only: another thread's pass over the same graph sees
        the forward's."""
        narrowed = getattr(_narrowed, "current", None)
        if narrowed is not None and narrowed[0] is self:
            return narrowed[1]
        return self._needs_input_grad

    # -- node API -------------------------------------------------------------------------------
    @classmethod
    def name(cls) -> str:
        return cls.__name__ + "Backward0"

    def __repr__(self):
        return f"<{self.name()} object at {hex(id(self))}>"

    def register_hook(self, hook):
        raise NotImplementedError("hooks on graph nodes are not supported; use Tensor.register_hook")

    def release(self):
        self._saved = ()
        self._released = True

    @classmethod
    def apply(cls, *args):
        if _tracing.active is not None and not _tracing.active.depth:   # (an exporter records it: minidl.onnx)
            return _tracing.active.function(cls, args)
        state = grad_mode.state
        needs_grad = False
        if state.enabled:
            for a in args:
                if isinstance(a, Variable) and a._requires_grad:
                    needs_grad = True
                    break
        ctx = cls()
        if not needs_grad:
            if not state.enabled:
                return cls.forward(ctx, *args)
            state.enabled = False
            try:
                return cls.forward(ctx, *args)
            finally:
                state.enabled = True
        needs, edges, in_meta = [], [], []
        for a in args:
            if isinstance(a, Variable):
                needs.append(a._requires_grad)
                edges.append(a._grad_edge())
                in_meta.append((a.shape, a.dtype))
            else:
                needs.append(False)
                edges.append(None)
                in_meta.append(None)
        ctx._needs_input_grad = tuple(needs)
        ctx._recording = True
        state.enabled = False
        try:
            outputs = cls.forward(ctx, *args)
        finally:
            state.enabled = True
        ctx.next_functions = tuple(edges)
        ctx._input_meta = tuple(in_meta)
        if not isinstance(outputs, tuple):
            out = ctx._link(outputs, 0, args)
            ctx._output_meta = (out._meta(),) if isinstance(out, Variable) else (None,)
            return out
        linked = tuple(ctx._link(out, i, args) for i, out in enumerate(outputs))
        ctx._output_meta = tuple(out._meta() if isinstance(out, Variable) else None for out in linked)
        return linked

    def _link(self, out, i, args):
        """Make ``out`` the ``i``-th output of this node (aliasing it if forward returned an input)."""
        if not isinstance(out, Variable):
            return out
        for a in args:
            if out is a:
                if id(a) not in self._dirty:
                    out = out._alias()
                elif a.grad_fn is None and a._requires_grad:
                    raise RuntimeError(f"{self.name()}: a leaf Variable that requires grad has been used in an "
                                       f"in-place operation (mark_dirty).")
                else:
                    a._bump_version()
                    a._history_version = a._storage.version
                break
        if out.dtype.is_floating_point and id(out) not in self._non_differentiable:
            out._requires_grad = True
            out.grad_fn = self
            out._output_nr = i
        return out

    def run_backward(self, grads, wanted=None):
        """Call ``backward`` on the gradients of the outputs; returns one gradient per input.
        ``wanted``: the inputs whose gradients this pass needs, if fewer than needs_input_grad."""
        if wanted is not None:
            previous, _narrowed.current = getattr(_narrowed, "current", None), (self, wanted)
            try:
                return self.run_backward(grads)
            finally:
                _narrowed.current = previous
        missing = sparse = False
        for g in grads:
            if g is None:
                missing = True
            elif g.is_sparse:
                sparse = True
        if sparse:   # (a sparse gradient reaching an op's backward, say a slice of an embedding's table)
            grads = [g.to_dense() if g is not None and g.is_sparse else g for g in grads]
        if missing:
            if all(g is None for g in grads):
                return (None,) * len(self.next_functions)
            if self._materialize:
                grads = [g if g is not None or m is None else _zeros_like_meta(m)
                         for g, m in zip(grads, self._output_meta)]
        result = self.backward(self, *grads)
        if type(result) is not tuple:
            result = (result,)
        n = len(self.next_functions)
        if len(result) != n:
            if len(result) > n and all(g is None for g in result[n:]):
                result = result[:n]
            elif len(result) == 1 and not any(self.next_functions[1:]):
                result = result + (None,) * (n - 1)
            else:
                raise RuntimeError(f"function {self.name()} returned an incorrect number of gradients "
                                   f"(expected {n}, got {len(result)})")
        checked = []
        for i, g in enumerate(result):
            if g is not None:
                meta = self._input_meta[i]
                if meta is None or self.next_functions[i] is None:
                    g = None
                elif g.shape != meta[0] or g.dtype is not meta[1]:
                    g = _conform(self, i, g, meta)
            checked.append(g)
        return checked


def add_gradients(a, b):
    """a + b where either may be a sparse COO gradient: two sparse ones stay sparse (their
    entries, uncoalesced), a sparse and a dense one give a dense one, as in torch."""
    return b + a if a.is_sparse and not b.is_sparse else a + b


def _zeros_like_meta(meta):
    shape, dtype, device, cls = meta
    return cls._zeros(shape, dtype, device)


def _conform(node, i, grad, meta):
    """A gradient that does not match its input: cast its dtype, or explain the shape mismatch."""
    shape, dtype = meta
    if grad.shape != shape:
        raise RuntimeError(f"Function {node.name()} returned an invalid gradient at index {i} - got "
                           f"{list(grad.shape)} but expected shape compatible with {list(shape)}")
    if grad.dtype is not dtype:
        grad = grad.to(dtype)
    return grad


def _lone_argument_refcount() -> int:
    """``sys.getrefcount`` of a method argument that nothing else refers to (the engine passes a
    gradient it popped from its buffer); measured, since it differs across CPython versions."""
    class Probe:
        def count(self, x):
            return sys.getrefcount(x)
    return Probe().count([object()].pop())


_LONE_REFCOUNT = _lone_argument_refcount()


class AccumulateGrad(Function):
    """The node at a leaf: runs the leaf's hooks, then adds the gradient into ``.grad``."""

    def __init__(self, leaf):
        self.variable = leaf

    @classmethod
    def name(cls) -> str:
        return "AccumulateGrad"

    def accumulate(self, grad, create_graph: bool, run_hooks: bool = True):
        leaf = self.variable
        recorder = _tracing.recording()
        if recorder is not None:
            recorder.accumulating(leaf)
        if run_hooks and leaf._hooks:
            grad = apply_hooks(leaf._hooks, grad)
        if grad.is_sparse and leaf.grad is None:
            leaf.grad = grad.clone()   # (each leaf its own: one backward may hand it to several)
        elif grad.is_sparse and not leaf.grad.is_sparse:
            leaf.grad.add_(grad)
        elif leaf.grad is not None and leaf.grad.is_sparse:
            leaf.grad = add_gradients(leaf.grad, grad)
        elif leaf.grad is None:
            if create_graph:
                leaf.grad = grad.clone()
            elif (sys.getrefcount(grad) <= _LONE_REFCOUNT and not grad.requires_grad
                  and grad._owns_whole_storage()):
                leaf.grad = grad  # nobody else can see this buffer: keep it instead of copying (as PyTorch does)
            else:
                leaf.grad = grad.detach().clone()
        elif create_graph:
            leaf.grad = leaf.grad + grad
        else:
            leaf.grad.add_(grad)
        if leaf._post_acc_hooks:
            _tracing.graph_break("a post-accumulate-grad hook runs Python during the backward")
            for hook in leaf._post_acc_hooks:
                hook(leaf)


Variable._accumulator_class = AccumulateGrad
