"""View ops: a new layout over the same storage, never a copy.

Each view is a :class:`View` Function whose forward asks ``minidl.layout`` for
the new layout. Views that rearrange elements one-to-one invert themselves in
backward (permute, reshape, squeeze ...); views that pick a subset
(slicing, select, narrow, diagonal) send the gradient back with
:class:`StridedScatter`: zeros in the input's shape, the gradient written
through the same view of them.
"""
from __future__ import annotations

import math
import numbers
import operator

import numpy as np

from .. import layout as L
from .._layouts import channels_last
from .._tensor_base import make
from ..autograd import Function
from .core import buf, from_host_array, kernel, new_like_shape, sum_to
from .take_put import IndexPut, Take
from .registry import OPS, op


def view_of(x, layout):
    """A tensor over ``x``'s storage with ``layout``; views of views share one base."""
    return make(x._storage, layout, x.dtype, base=x._base if x._base is not None else x)


class View(Function):
    """Generic view: ``layout_fn(x._layout, *params)`` gives the new layout."""

    @classmethod
    def forward(cls, ctx, x, *params):
        new = cls.layout_fn(x._layout, *params)
        ctx.meta = (x.shape, params)
        ctx.relative = None
        if cls.backward_kind == "scatter":
            # the same view taken on a packed tensor of x's shape: where the gradient goes back
            ctx.relative = cls.layout_fn(L.Layout(x.shape), *params)
        return view_of(x, new)

    @classmethod
    def backward(cls, ctx, g):
        shape, params = ctx.meta
        if cls.backward_kind == "scatter":
            gx = StridedScatter.apply(g, shape, ctx.relative)
        else:
            gx = cls.inverse(g, shape, *params)
        return (gx,) + (None,) * len(params)


def _view(name, layout_fn, inverse=None):
    attrs = {"layout_fn": staticmethod(layout_fn), "backward_kind": "scatter" if inverse is None else "inverse"}
    if inverse is not None:
        attrs["inverse"] = staticmethod(inverse)
    return type(name, (View,), attrs).apply


class StridedScatter(Function):
    """Zeros of ``shape`` with ``g`` written through the packed-relative layout ``rel``."""

    @staticmethod
    def forward(ctx, g, shape, rel):
        out = new_like_shape(shape, g.dtype, g)
        out.fill_(0)
        target = L.Layout(rel.shape, rel.strides, rel.offset + out._layout.offset)
        kernel("copy", g)(buf(g), g._layout, buf(out), target)
        ctx.rel = rel
        return out

    @staticmethod
    def backward(ctx, gg):
        gg = gg.contiguous()
        rel = ctx.rel
        return view_of(gg, L.Layout(rel.shape, rel.strides, rel.offset + gg._layout.offset)), None, None


def _inverse_permutation(dims):
    inv = [0] * len(dims)
    for i, d in enumerate(dims):
        inv[d] = i
    return inv


permute_ = _view("Permute", L.permute, lambda g, shape, dims: g.permute(
    _inverse_permutation([L.normalize_dim(d, len(shape)) for d in dims])))
transpose = op("transpose", aliases=("swapaxes", "swapdims"), samples=lambda t: [
    t.S("transpose", lambda x: x.transpose(0, 2), t.rn(2, 3, 4)),
    t.S("mT", lambda x: x.mT @ x, t.rn(3, 2)),
])(_view("Transpose", L.transpose, lambda g, shape, d0, d1: g.transpose(d0, d1)))
expand_ = _view("Expand", L.expand, lambda g, shape, size: sum_to(g, shape))
unsqueeze = op("unsqueeze", samples=lambda t: [
    t.S("unsqueeze", lambda x: x.unsqueeze(1), t.rn(3, 4)),
])(_view("Unsqueeze", L.unsqueeze, lambda g, shape, dim: g.reshape(shape)))
squeeze_ = _view("Squeeze", L.squeeze, lambda g, shape, dims: g.reshape(shape))
_as_view = _view("ViewAs", lambda layout, shape: L.Layout(shape, L.view_strides(layout, shape), layout.offset),
                 lambda g, shape, new_shape: g.reshape(shape))
narrow_ = _view("Narrow", L.narrow)
select_ = _view("Select", L.select)
slice_dim = _view("Slice", L.slice_dim)
diagonal_ = _view("Diagonal", L.diagonal)


class AsStrided(View):
    """A view at absolute storage positions (which may overlap): the gradient is summed per
    storage position, then read back at the input's positions."""
    layout_fn = staticmethod(lambda layout, size, stride, offset: L.Layout(size, stride, offset))
    backward_kind = "storage"

    @classmethod
    def forward(cls, ctx, x, *params):
        ctx.input_layout = x._layout
        return super().forward(ctx, x, *params)

    @classmethod
    def backward(cls, ctx, g):
        shape, params = ctx.meta
        if not g.numel():
            return (g.new_zeros(shape),) + (None,) * len(params)
        out_pos, in_pos = _positions(L.Layout(*params)), _positions(ctx.input_layout)
        both = np.concatenate([out_pos.ravel(), in_pos.ravel()])
        lo, hi = both.min(), both.max()
        storage = IndexPut.apply(g.new_zeros(int(hi - lo + 1)), from_host_array(out_pos - lo, g.device), g, True)
        return (Take.apply(storage, from_host_array(in_pos - lo, g.device)),) + (None,) * len(params)


def _positions(layout):
    """numpy int64 array of the storage position of every element of ``layout``."""
    pos = np.full(tuple(layout.shape), layout.offset, dtype=np.int64)
    for d, (n, s) in enumerate(zip(layout.shape, layout.strides)):
        pos = pos + (np.arange(n, dtype=np.int64) * s).reshape([-1 if i == d else 1 for i in range(pos.ndim)])
    return pos


as_strided_ = AsStrided.apply
flip_view = _view("FlipView", lambda layout, dims: _flip_layout(layout, dims),
                  lambda g, shape, dims: g.flip(dims))


def _unreduce_layout(layout, shape, dims, keepdim):
    """A reduced tensor's layout broadcast back to the unreduced ``shape`` (stride 0 on ``dims``)."""
    strides, it = [], iter(layout.strides)
    for d in range(len(shape)):
        if d in dims:
            if keepdim:
                next(it)
            strides.append(0)
        else:
            strides.append(next(it))
    return L.Layout(shape, strides, layout.offset)


unreduce = _view("Unreduce", _unreduce_layout,
                 lambda g, shape, full_shape, dims, keepdim: g.sum(dims, keepdim=keepdim))


def _flip_layout(layout, dims):
    for d in dims:
        layout = L.slice_dim(layout, d, None, None, -1)
    return layout


def _shape_arg(shape):
    if len(shape) == 1 and not isinstance(shape[0], int) and not hasattr(shape[0], "__index__"):
        shape = tuple(shape[0])
    elif len(shape) == 1 and hasattr(shape[0], "_layout"):
        shape = tuple(shape[0].tolist())
    return tuple(operator.index(n) for n in shape)


def _infer_shape(x, shape, op):
    try:
        return L.infer_shape(_shape_arg(shape), x.numel(), op)
    except RuntimeError as e:
        raise RuntimeError(f"{e} (a tensor of shape {list(x.shape)})") from None


@op(samples=lambda t: [t.S("view", lambda x: x.view(4, 3), t.rn(3, 4), any_layout=False)])  # (strides must fit)
def view(x, *shape):
    shape = _infer_shape(x, shape, "view")
    if L.view_strides(x._layout, shape) is None:
        raise RuntimeError(f"view size is not compatible with input tensor's size and stride (at least one "
                           f"dimension spans across two contiguous subspaces); shape {list(x.shape)} with "
                           f"strides {list(x.stride())} cannot be viewed as {list(shape)}. Use .reshape(...) "
                           f"instead.")
    return _as_view(x, shape)


@op(samples=lambda t: [t.S("reshape-copy", lambda x: x.reshape(-1), t.NC(t.rn(3, 4), "F"))])
def reshape(x, *shape):
    """A view when the layout allows it, else a copy (as in PyTorch)."""
    shape = _infer_shape(x, shape, "reshape")
    if L.view_strides(x._layout, shape) is None:
        x = x.contiguous()
    return _as_view(x, shape)


@op(samples=lambda t: [
    t.S("permute", lambda x: x.permute(2, 0, 1), t.rn(2, 3, 4)),
    t.S("permute-noncontig", lambda x: x.permute(1, 0), t.NC(t.rn(3, 4), "F"))])
def permute(x, *dims):
    """permute(1, 0) or permute((1, 0)), as in PyTorch."""
    return permute_(x, _shape_arg(dims))


@op(samples=lambda t: [
    t.S("expand", lambda x: x.expand(3, 4), t.rn(3, 1)),
    t.S("expand-new-dims", lambda x: x.expand(2, 3, 4), t.NC(t.rn(4), "gap"))])
def expand(x, *size):
    return expand_(x, _shape_arg(size))


@op(samples=lambda t: [
    t.S("squeeze-dim", lambda x: x.squeeze(1), t.rn(3, 1, 4)),
    t.S("squeeze-all", lambda x: x.squeeze(), t.rn(1, 3, 1))])
def squeeze(x, dim=None):
    return squeeze_(x, dim)


@op(samples=lambda t: [t.S("flatten", lambda x: x.flatten(1), t.rn(2, 3, 2))])
def flatten(x, start_dim=0, end_dim=-1):
    if x.ndim == 0:
        return reshape(x, (1,))
    s, e = L.normalize_dim(start_dim, x.ndim, "flatten"), L.normalize_dim(end_dim, x.ndim, "flatten")
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    return reshape(x, x.shape[:s] + (math.prod(x.shape[s:e + 1]),) + x.shape[e + 1:])


@op(samples=lambda t: [t.S("unflatten", lambda x: x.unflatten(1, (2, 2)), t.rn(3, 4))])
def unflatten(x, dim, sizes):
    d = L.normalize_dim(dim, x.ndim, "unflatten")
    sizes = L.infer_shape(tuple(sizes), x.shape[d], "unflatten")
    return reshape(x, x.shape[:d] + tuple(sizes) + x.shape[d + 1:])


@op(samples=lambda t: [
    t.S("narrow", lambda x: x.narrow(1, 1, 2), t.rn(3, 4)),
    t.S("narrow-noncontig", lambda x: narrow(x, 0, 1, 2), t.NC(t.rn(4, 3), "F")),
    # StridedScatter, the backward of the views that pick a subset (narrow, slicing, select, diagonal)
    t.S("strided_scatter", lambda g: StridedScatter.apply(g, (3, 4), L.Layout((2, 2), (4, 2), 1)), t.rn(2, 2)),
    t.S("strided_scatter-noncontig", lambda g: StridedScatter.apply(g, (5,), L.Layout((3,), (2,), 0)),
        t.NC(t.rn(3), "gap"))])
def narrow(x, dim, start, length):
    return narrow_(x, dim, operator.index(start), operator.index(length))


@op(samples=lambda t: [
    t.S("diagonal", lambda x: x.diagonal(), t.rn(3, 4)),
    t.S("diagonal-offset", lambda x: x.diagonal(1), t.NC(t.rn(4, 4), "F")),
    t.S("diagonal-3d", lambda x: diagonal(x, -1, 0, 2), t.rn(3, 2, 3))])
def diagonal(x, offset=0, dim1=0, dim2=1):
    return diagonal_(x, offset, dim1, dim2)


@op(samples=lambda t: [t.S("t", lambda x: x.t() * 1, t.NC(t.rn(3, 4), "neg"))])
def t(x):
    if x.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {x.ndim}D")
    return transpose(x, 0, 1) if x.ndim == 2 else x.view(x.shape)


@op(aliases=("moveaxis",), samples=lambda t: [
    t.S("movedim", lambda x: x.movedim(0, -1), t.rn(2, 3, 4)),
    t.S("moveaxis-several", lambda x: x.moveaxis((0, 1), (2, 0)), t.rn(2, 3, 4))])
def movedim(x, source, destination):
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    src = [L.normalize_dim(d, x.ndim, "movedim") for d in src]
    dst = [L.normalize_dim(d, x.ndim, "movedim") for d in dst]
    order = [d for d in range(x.ndim) if d not in src]
    for s, d in sorted(zip(dst, src)):
        order.insert(s, d)
    return permute(x, order)


@op(samples=lambda t: [
    t.S("as_strided", lambda x: x.as_strided((2, 2), (1, 3), 1), t.rn(3, 4)),
    # (as_strided addresses the storage: a leaf read backwards starts at its end)
    t.S("as_strided-overlapping", lambda x: x.as_strided((3, 3), (1, 1)), t.rn(6), any_layout=False),
    t.S("as_strided-of-offset-view", lambda x: x[2:].as_strided((2,), (1,)), t.rn(6), any_layout=False),
    t.S("as_strided-overlapping", lambda x: x.as_strided((3, 3), (1, 1)) ** 2, t.rn(5), second_order=True)])
def as_strided(x, size, stride, storage_offset=None):
    offset = x._layout.offset if storage_offset is None else storage_offset
    if any(n < 0 for n in size) or offset < 0:
        raise RuntimeError(f"as_strided: sizes and storage offset must be non-negative, got size {list(size)} "
                           f"and offset {offset}")
    lo, hi = L.Layout(size, stride, offset).span()
    if L.Layout(size).numel and (lo < 0 or hi >= x._storage.buf.size):
        raise RuntimeError(f"as_strided: size {list(size)}, stride {list(stride)} and offset {offset} reach "
                           f"outside the storage of {x._storage.buf.size} elements")
    return as_strided_(x, tuple(size), tuple(stride), offset)


class Clone(Function):
    """A packed copy; the gradient passes straight through."""

    @staticmethod
    def forward(ctx, x):
        out = new_like_shape(x.shape, x.dtype, x)
        kernel("copy", x)(buf(x), x._layout, buf(out), out._layout)
        return out

    @staticmethod
    def backward(ctx, g):
        return g


@op(samples=lambda t: [t.S("clone", lambda x: x.clone(), t.rn(3, 4)),
                       t.S("clone-channels_last", lambda x: x.clone(memory_format=channels_last), t.rn(2, 3, 2, 2))])
def clone(x, memory_format=None):
    """A copy of x, laid out in ``memory_format`` when it names a dim order (channels_last: N, H, W, C)."""
    order = getattr(memory_format, "order", None)
    if order is None:
        return Clone.apply(x)
    if len(order) != x.ndim:
        raise RuntimeError(f"required rank {len(order)} tensor to use {memory_format.name} format, got a "
                           f"{x.ndim}-D tensor")
    outer_first = order[::-1]
    return Clone.apply(x.permute(outer_first)).permute(tuple(outer_first.index(d) for d in range(x.ndim)))


@op(samples=lambda t: [t.S("contiguous", lambda x: x.contiguous(), t.NC(t.rn(3, 4), "F"))])
def contiguous(x, memory_format=None):
    return x if x.is_contiguous(memory_format) else clone(x, memory_format)


@op(samples=lambda t: [t.S("broadcast_to", lambda x: x.broadcast_to((2, 3, 4)), t.rn(3, 1))])
def broadcast_to(x, shape):
    return expand_(x, tuple(shape))


@op(method=False, samples=lambda t: [
    t.S("broadcast_tensors", lambda a, b: broadcast_tensors(a, b), t.rn(3, 1), t.NC(t.rn(4), "gap"))])
def broadcast_tensors(*tensors):
    shape = L.broadcast_shapes(*(t.shape for t in tensors), op="broadcast_tensors")
    return tuple(expand_(t, tuple(shape)) for t in tensors)


@op(method=False)
def broadcast_shapes(*shapes):
    """Each shape a sequence of sizes or, as in torch, one int (``broadcast_shapes((5, 1), 5)`` is (5, 5))."""
    shapes = [(shape,) if isinstance(shape, numbers.Integral) else tuple(shape) for shape in shapes]
    return L.broadcast_shapes(*shapes, op="broadcast_shapes")


@op(samples=lambda t: [
    t.S("select", lambda x: x.select(1, -1), t.rn(3, 4)),
    t.S("select-fn", lambda x: select(x, 0, 1), t.NC(t.rn(3, 2, 2), "F"))])
def select(x, dim, index):
    """``x`` at ``index`` along ``dim``: a view one dim smaller (``x.select(0, i)`` is ``x[i]``)."""
    if x.ndim == 0:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    dim = L.normalize_dim(dim, x.ndim, "select")
    index, n = operator.index(index), x.shape[dim]
    if not -n <= index < n:
        raise IndexError(f"select(): index {index} out of range for tensor of size {list(x.shape)} at dimension "
                         f"{dim}")
    return select_(x, dim, index)


def _unfold_layout(layout, dim, size, step):
    """Every window of ``size`` elements ``step`` apart along ``dim``: that dim counts the windows,
    a new last dim walks inside one (a 0-d tensor is one element)."""
    if layout.ndim == 0:
        return L.Layout((size,), (1,), layout.offset)
    shape, strides = list(layout.shape), list(layout.strides)
    shape[dim], strides[dim] = (shape[dim] - size) // step + 1, strides[dim] * step
    return L.Layout(shape + [size], strides + [layout.strides[dim]], layout.offset)


class Unfold(View):
    """Windows may overlap (step < size): the gradient is summed into each input element."""
    layout_fn = staticmethod(_unfold_layout)
    backward_kind = "scatter"   # (forward keeps the windows' layout over a packed input: ctx.relative)

    @classmethod
    def backward(cls, ctx, g):
        shape, params = ctx.meta
        flat = from_host_array(_positions(ctx.relative), g.device)
        gx = IndexPut.apply(g.new_zeros(math.prod(shape)), flat, g, True).reshape(shape)
        return (gx,) + (None,) * len(params)


@op("_unfold", method=False, namespace=None, samples=lambda t: [
    t.S("unfold-overlapping", lambda x: x.unfold(1, 3, 1), t.rn(2, 5)),
    t.S("unfold-step", lambda x: x.unfold(0, 2, 3), t.NC(t.rn(7, 2), "F")),
    t.S("unfold-0d", lambda x: x.unfold(0, 1, 2), t.rn()),
    t.S("unfold-overlapping", lambda x: x.unfold(-1, 2, 1) ** 2, t.rn(3, 4), second_order=True)])
def unfold_windows(x, dimension, size, step):
    """``Tensor.unfold``: a view of every window (``minidl.nn.functional.unfold``, im2col, is another op)."""
    dim = L.normalize_dim(dimension, max(x.ndim, 1), "unfold")
    n = x.shape[dim] if x.ndim else 1
    if size < 0 or size > n:
        raise RuntimeError(f"unfold: maximum size for tensor at dimension {dim} is {n} but size is {size} (a "
                           f"tensor of shape {list(x.shape)})")
    if step <= 0:
        raise RuntimeError(f"unfold: step is {step} but must be > 0")
    return Unfold.apply(x, dim, operator.index(size), operator.index(step))


@op(samples=lambda t: [t.S("ravel", lambda x: x.ravel(), t.NC(t.rn(3, 4), "F"))])
def ravel(x):
    """The elements in row-major order, 1-D and packed: a view when ``x`` is packed already."""
    return reshape(contiguous(x), -1)


@op(namespace=None, samples=lambda t: [
    t.S("sum_to_size", lambda x: x.sum_to_size(3, 1), t.rn(3, 4)),
    t.S("sum_to_size-lead", lambda x: x.sum_to_size((1, 4)), t.NC(t.rn(2, 3, 4), "F"))])
def sum_to_size(x, *size):
    """``Tensor.sum_to_size``: sum ``x`` down to a shape it could have been expanded from."""
    size = _shape_arg(size)
    if len(size) > x.ndim or any(s not in (n, 1) for s, n in zip(reversed(size), reversed(x.shape))):
        raise RuntimeError(f"sum_to_size: size {list(size)} is not expandable to size {list(x.shape)}.")
    return x.sum() if not size else sum_to(x, tuple(size))   # (size (): a sum, even of a 0-d x, as torch's)


def _itself(name, doc):
    """The op ``name``, the identity on minidl's tensors, all real: ``x`` itself, as torch returns it."""
    def same(x):
        return x
    same.__name__ = same.__qualname__ = name
    same.__doc__ = doc
    return same


def _as_itself(name):
    """The samples of an op that returns its input."""
    return lambda t: [t.S(name, lambda x: OPS[name].function(x) * 1, t.rn(3))]


_real = _itself("real", "The real part: the tensor itself (minidl has no complex dtypes).")
real = op("real", method=property(_real), samples=_as_itself("real"))(_real)   # (x.real: an attribute)
conj = op("conj", samples=_as_itself("conj"))(_itself("conj", "The complex conjugate: of a real tensor, itself."))
conj_physical = op("conj_physical", samples=_as_itself("conj_physical"))(
    _itself("conj_physical", "The conjugate, materialised: of a real tensor, itself (as torch's)."))
resolve_conj = op("resolve_conj", samples=_as_itself("resolve_conj"))(
    _itself("resolve_conj", "Materialises a lazy conjugation, which real tensors never carry: itself."))
resolve_neg = op("resolve_neg", samples=_as_itself("resolve_neg"))(
    _itself("resolve_neg", "Materialises a lazy negation (of complex views), which minidl never makes: itself."))


@op(method=property(lambda x: imag(x)))   # (x.imag: an attribute)
def imag(x):
    """The imaginary part, which a real tensor does not have (torch raises too)."""
    raise RuntimeError(f"imag is not implemented for tensors with non-complex dtypes (got {x.dtype}).")
