"""Graph nodes. Every differentiable op is a :class:`Function` subclass.

``Function.apply`` runs ``forward`` without recording, and if any input
requires grad, turns the ``ctx`` object into a node of the tape: it remembers
edges to the nodes that produced the inputs (``next_functions``) and what
``forward`` saved. ``backward`` computes input gradients with ordinary,
differentiable tensor ops, so gradients of gradients come for free. Built-in
ops and user-defined ops use this same class.
"""
from __future__ import annotations

import weakref

from . import grad_mode
from .hooks import apply_hooks
from .variable import Variable


class Function:
    """Base class of ops; an instance is both the ``ctx`` of one call and its graph node."""

    def __init__(self):
        self.next_functions = ()
        self.needs_input_grad = ()
        self._saved = ()
        self._released = False
        self._pre_hooks = None     # output index -> list of hooks on that output's gradient
        self._non_differentiable = ()
        self._input_meta = ()      # (shape, dtype) per forward argument, None for non-tensors
        self._output_meta = ()     # (shape, dtype, device, tensor class) per output
        self._materialize = True

    # -- subclass API -------------------------------------------------------------------------
    @staticmethod
    def forward(ctx, *args):
        raise NotImplementedError("subclasses of Function must implement forward")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("subclasses of Function must implement backward")

    def save_for_backward(self, *tensors):
        """Keep tensors for backward, with their version, to catch later in-place changes."""
        self._saved = tuple(None if t is None else (t, t._version) for t in tensors)

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
        """Accepted for PyTorch compatibility; in-place changes are tracked by version counters."""

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
        state = grad_mode.state
        needs_grad = state.enabled and any(isinstance(a, Variable) and a._requires_grad for a in args)
        ctx = cls()
        if not needs_grad:
            prev = state.enabled
            state.enabled = False
            try:
                return cls.forward(ctx, *args)
            finally:
                state.enabled = prev
        ctx.needs_input_grad = tuple(isinstance(a, Variable) and a._requires_grad for a in args)
        state.enabled = False
        try:
            outputs = cls.forward(ctx, *args)
        finally:
            state.enabled = True
        ctx.next_functions = tuple(a._grad_edge() if isinstance(a, Variable) else None for a in args)
        ctx._input_meta = tuple((a.shape, a.dtype) if isinstance(a, Variable) else None for a in args)
        single = not isinstance(outputs, tuple)
        outs = (outputs,) if single else outputs
        meta = []
        linked = []
        for i, out in enumerate(outs):
            if not isinstance(out, Variable):
                meta.append(None)
                linked.append(out)
                continue
            if any(out is a for a in args):
                out = out._alias()
            meta.append((out.shape, out.dtype, out.device, type(out)))
            if id(out) not in ctx._non_differentiable and out.dtype.is_floating_point:
                out._requires_grad = True
                out.grad_fn = ctx
                out._output_nr = i
            linked.append(out)
        ctx._output_meta = tuple(meta)
        return linked[0] if single else tuple(linked)

    def run_backward(self, grads):
        """Call ``backward`` on the gradients of the outputs; returns one gradient per input."""
        if all(g is None for g in grads):
            return (None,) * len(self.next_functions)
        if self._materialize:
            grads = [g if g is not None or m is None else _zeros_like_meta(m)
                     for g, m in zip(grads, self._output_meta)]
        result = self.backward(self, *grads)
        if not isinstance(result, tuple):
            result = (result,)
        if len(result) < len(self.next_functions):
            if len(result) != 1 or any(self.next_functions[1:]):
                raise RuntimeError(f"function {self.name()} returned an incorrect number of gradients "
                                   f"(expected {len(self.next_functions)}, got {len(result)})")
            result = result + (None,) * (len(self.next_functions) - len(result))
        return tuple(_check_grad(self, i, g, meta) for i, (g, meta) in
                     enumerate(zip(result[:len(self.next_functions)], self._input_meta)))


def _zeros_like_meta(meta):
    shape, dtype, device, cls = meta
    return cls._zeros(shape, dtype, device)


def _check_grad(node, i, grad, meta):
    if grad is None or meta is None or node.next_functions[i] is None:
        return None
    shape, dtype = meta
    if grad.shape != shape:
        raise RuntimeError(f"Function {node.name()} returned an invalid gradient at index {i} - got "
                           f"{list(grad.shape)} but expected shape compatible with {list(shape)}")
    if grad.dtype is not dtype:
        grad = grad.to(dtype)
    return grad


class AccumulateGrad(Function):
    """The node at a leaf: runs the leaf's hooks, then adds the gradient into ``.grad``."""

    def __init__(self, leaf):
        super().__init__()
        self.variable = leaf

    @classmethod
    def name(cls) -> str:
        return "AccumulateGrad"

    def accumulate(self, grad, create_graph: bool):
        leaf = self.variable
        grad = apply_hooks(leaf._hooks, grad)
        if leaf.grad is None:
            leaf.grad = grad.clone() if create_graph else grad.detach().clone()
        elif create_graph:
            leaf.grad = leaf.grad + grad
        else:
            leaf.grad.add_(grad.detach())
        for hook in leaf._post_acc_hooks or ():
            hook(leaf)


def accumulator_of(leaf) -> AccumulateGrad:
    """One AccumulateGrad per leaf while some graph holds it."""
    node = leaf._accumulator() if leaf._accumulator is not None else None
    if node is None:
        node = AccumulateGrad(leaf)
        leaf._accumulator = weakref.ref(node)
    return node
