"""In-place ops: write a new value into a tensor's memory and keep autograd right.

Without a graph to record, the new value is written straight into the target.
With one, it is computed out of place (recorded as usual), copied in, and the
target's history is *rebased* onto it; when the target is a view, its base
gets a :class:`CopySlices` node, so gradients reach both the overwritten
region (through the new value) and the rest of the base.
"""
from __future__ import annotations

from .. import layout as L
from ..autograd import Function
from .core import buf, grad_enabled, kernel
from .views import as_strided_, view_of


def check_writable(target, op: str):
    if not target._storage.writable:
        raise RuntimeError(f"{op}: the tensor's memory is read-only (it was made with from_numpy from a "
                           f"read-only numpy array); copy it with .clone() before writing")
    if not grad_enabled():
        return
    if target.grad_fn is None and target._requires_grad:
        raise RuntimeError(f"{op}: a leaf Variable that requires grad is being used in an in-place operation.")
    base = target._base
    if base is not None and base.grad_fn is None and base._requires_grad:
        raise RuntimeError(f"{op}: a view of a leaf Variable that requires grad is being used in an in-place "
                           f"operation.")


def check_no_internal_overlap(target, op: str):
    """Per-element writes into an expanded tensor (several elements, one memory place) are refused."""
    layout = target._layout
    if 0 in layout.strides and any(n > 1 and s == 0 for n, s in zip(layout.shape, layout.strides)):
        raise RuntimeError(f"{op}: unsupported operation: more than one element of the written-to tensor "
                           f"refers to a single memory location (an expanded tensor); clone() it first")


def write_into(target, value, op: str, casting=False):
    """Copy ``value`` (broadcast to target's shape) into target's memory, converting dtype
    (to a lower dtype category only with ``casting``, as copy_ does)."""
    if value.device != target.device:   # (a meta value raises torch's "no data" here, not in a kernel)
        value = value.to(target.device)
    if not casting and value.dtype.category > target.dtype.category:
        raise RuntimeError(f"{op}: result type {value.dtype.name} can't be cast to the desired output type "
                           f"{target.dtype.name}")
    if value.numel() != 1:
        check_no_internal_overlap(target, op)
    if value._storage is target._storage and value._layout is not target._layout:
        value = value.clone()  # the copy kernel works in chunks: a read must not see earlier writes
    src = L.expand(value._layout, target.shape, op)
    kernel("copy", target)(buf(value), src, buf(target), target._layout)
    target._bump_version()


def assign(target, compute, op: str):
    """target <- compute(target), differentiably. ``compute`` builds the new value out of place."""
    check_writable(target, op)
    new = compute(target)
    node = new.grad_fn
    if node is not None and any(item is not None and item[0]._storage is target._storage for item in node._saved):
        # the op saved the value about to be overwritten: compute from a copy (PyTorch's original self)
        new = compute(target.clone())
    if new.shape != target.shape:
        if L.broadcast_shapes(new.shape, target.shape, op=op) != target.shape:  # an input broadcast up
            raise RuntimeError(f"{op}: output with shape {list(target.shape)} doesn't match the broadcast shape "
                               f"{list(new.shape)}")
        new = new.expand(target.shape)
    write_into(target, new, op)
    if grad_enabled() and (new.requires_grad or target.requires_grad or
                           (target._base is not None and target._base.requires_grad)):
        _rebase(target, new)
    return target


def rebased(fn, name):
    """The maker of an in-place twin ``x.name(...)`` (see ``registry.op``): ``fn``'s result
    written into x, autograd rebased onto it."""
    def method(self, *args, **kwargs):
        return assign(self, lambda t: fn(t, *args, **kwargs), name)
    method.__name__ = name
    return method


class Constant(Function):
    """History of a tensor overwritten by a value that needs no gradient: nothing flows back."""

    @staticmethod
    def forward(ctx, x):
        return x._alias()

    @staticmethod
    def backward(ctx, g):
        return None


def _rebase(target, new):
    if not new.requires_grad:
        # give the constant a graph node of its own so that target keeps requires_grad=True
        new = new.detach()
        node = Constant()
        node._output_meta = ((new.shape, new.dtype, new.device, type(new)),)
        new.grad_fn, new._requires_grad = node, True
    base = target._base
    if base is not None and (base.requires_grad or new.requires_grad):
        if not base._layout.is_contiguous:
            raise RuntimeError("in-place operation on a view whose base is not contiguous is not supported "
                               "when gradients are recorded")
        rel = L.Layout(target.shape, target.stride(), target._layout.offset - base._layout.offset)
        alias = CopySlices.apply(base, new, rel)
        base.grad_fn, base._output_nr, base._requires_grad = alias.grad_fn, 0, True
    target.grad_fn, target._output_nr, target._requires_grad = new.grad_fn, new._output_nr, True
    target._history_version = target._storage.version


class CopySlices(Function):
    """History of a base after one of its views was overwritten by ``new``."""

    @staticmethod
    def forward(ctx, base, new, rel):
        ctx.rel = rel
        ctx.meta = base.shape
        return base._alias()

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous()
        if g._layout.offset:
            g = g.clone()
        mask = g.new_ones(ctx.meta)
        with_region = view_of(mask, L.Layout(ctx.rel.shape, ctx.rel.strides, ctx.rel.offset))
        with_region.fill_(0)
        return g * mask, _region_grad(g, ctx.rel), None


def _region_grad(g, rel):
    return as_strided_(g, tuple(rel.shape), tuple(rel.strides), rel.offset)
