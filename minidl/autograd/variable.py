"""The autograd half of a Tensor: its place in the graph, its gradient and its hooks.

``Tensor`` (in ``minidl._tensor``, through ``_tensor_base.TensorBase``) subclasses this; autograd itself only needs
what is here plus a few tensor methods (``shape``, ``detach``, ``clone``, ``add_``).
"""
from __future__ import annotations

import weakref

from .. import _tracing
from .hooks import RemovableHandle


class Variable:
    # AccumulateGrad, set by ``autograd.function`` (which defines it and imports this module)
    _accumulator_class = None

    __slots__ = ("_requires_grad", "_grad", "grad_fn", "_output_nr", "_accumulator", "_hooks",
                 "_post_acc_hooks", "_retains_grad", "__weakref__")

    def _init_autograd(self, requires_grad=False):
        self._requires_grad = requires_grad
        self._grad = None
        self.grad_fn = None
        self._output_nr = 0
        self._accumulator = None
        self._hooks = None
        self._post_acc_hooks = None
        self._retains_grad = False

    @property
    def grad(self):
        return self._grad

    @grad.setter
    def grad(self, value):
        """(Every assignment, by the backward, zero_grad or the user, is a step a minidl.compile replay repeats.)"""
        self._grad = value
        if _tracing.captures:
            recorder = _tracing.recording()
            if recorder is not None:
                recorder.grad_set(self)

    @property
    def requires_grad(self) -> bool:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool):
        if self.grad_fn is not None and not value:
            raise RuntimeError("you can only change requires_grad flags of leaf variables. If you want to "
                               "use a computed variable in a subgraph that doesn't require differentiation "
                               "use var_no_grad = var.detach().")
        if value and not self.dtype.is_floating_point:
            raise RuntimeError(f"only Tensors of floating point dtype can require gradients, got {self.dtype}")
        if _tracing.captures:   # (a minidl.compile replay sets it again)
            recorder = _tracing.recording()
            if recorder is not None:
                recorder.requires_grad_set(self, bool(value))
        self._requires_grad = bool(value)

    def requires_grad_(self, requires_grad: bool = True):
        self.requires_grad = requires_grad
        return self

    @property
    def is_leaf(self) -> bool:
        return self.grad_fn is None

    def _grad_edge(self):
        """(node, output index) through which this tensor's gradient flows, or None."""
        if self.grad_fn is not None:
            return (self.grad_fn, self._output_nr)
        if self._requires_grad:
            node = self._accumulator() if self._accumulator is not None else None
            if node is None:
                node = self._accumulator_class(self)
                self._accumulator = weakref.ref(node)
            return (node, 0)
        return None


    # -- hooks ----------------------------------------------------------------------------------
    def register_hook(self, hook) -> RemovableHandle:
        """``hook(grad)`` runs when this tensor's gradient is computed; a non-None result replaces it."""
        if not self._requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if self.grad_fn is None:
            if self._hooks is None:
                self._hooks = []
            hooks = self._hooks
        else:
            if self.grad_fn._pre_hooks is None:
                self.grad_fn._pre_hooks = {}
            hooks = self.grad_fn._pre_hooks.setdefault(self._output_nr, [])
        hooks.append(hook)
        return RemovableHandle(hooks, hook)

    def register_post_accumulate_grad_hook(self, hook) -> RemovableHandle:
        """``hook(tensor)`` runs on a leaf right after its ``.grad`` has been updated."""
        if self.grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf tensors")
        if self._post_acc_hooks is None:
            self._post_acc_hooks = []
        self._post_acc_hooks.append(hook)
        return RemovableHandle(self._post_acc_hooks, hook)

    def retain_grad(self) -> None:
        """Keep the gradient of a non-leaf tensor in ``.grad`` after backward."""
        if not self._requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self.grad_fn is None or self._retains_grad:
            return
        self._retains_grad = True
        node = self.grad_fn
        if node._retained is None:
            node._retained = {}
        node._retained[self._output_nr] = weakref.ref(self)

    @property
    def retains_grad(self) -> bool:
        return self._retains_grad
