"""Indexing: ``x[...]``, ``x[...] = v`` and the gather/scatter family.

Basic indices (ints, slices, None, Ellipsis) become views. Advanced indices
(integer/boolean tensors and lists) become *flat indices* into the basic view's
shape, laid out in the result's shape by numpy's placement rule; then one of
two Functions moves the data: :class:`Take` (gather) and :class:`IndexPut`
(scatter, optionally accumulating). Each is the other's backward. Index ranges
are checked by kernels, never by reading indices back to the host: a bad index
raises IndexError at once on the CPU, and at the next synchronisation on a GPU.
"""
from __future__ import annotations

import operator

import numpy as np

from .. import _dtype as dt
from .._tensor_base import Storage, make
from ..autograd import Function
from ..layout import Layout, broadcast_shapes, contiguous_strides, normalize_dim
from . import views
from .autocast_mode import autocast_op
from .core import (
    buf,
    cast,
    check_devices,
    kernel,
    new_like_shape,
    packed_buffer,
    written_operand,
)
from .creation import arange, tensor, zeros
from .elementwise import where
from .inplace import assign
from .shape_ops import stack
from .take_put import IndexPut, Take
from .inplace import rebased
from .registry import op


# ----------------------------------------------------------------------------- index planning
def _as_index_tensor(item, like):
    if hasattr(item, "_layout"):
        # as in PyTorch, a CPU index may index a tensor on any device (the index is copied there)
        t = item.to(like.device) if item.device.type == "cpu" else item
    else:
        t = tensor(item, device=like.device)
        if t.dtype.is_floating_point and t.numel() == 0:
            t = t.long()
    if t.dtype.is_floating_point:
        raise TypeError(f"tensors used as indices must be long, int or bool tensors, got {t.dtype}")
    return t


def _checked(index, size: int, stride: int, dim, op: str, wrap: bool = True):
    """``stride * index``, packed int64, its negatives wrapped first when ``wrap`` (the gather
    family takes none, as in PyTorch) and its range checked: one kernel, no waiting."""
    index = cast(index, dt.int64)
    out = new_like_shape(index.shape, dt.int64, index)
    if index.numel():
        try:
            kernel("check_index", index)(packed_buffer(index), size, stride, wrap, buf(out))
        except IndexError as e:  # raised here on the CPU; a GPU reports at its next synchronisation
            raise IndexError(f"{op}: {e}" + ("" if dim is None else f" (dimension {dim})")) from None
    return out


def _normalize(index, x):
    """Split an index expression into steps; Ellipsis expanded, lists turned into tensors."""
    if not isinstance(index, tuple):
        index = (index,)
    items = []
    for item in index:
        if isinstance(item, range):
            item = list(item)
        if isinstance(item, (list, np.ndarray)) or (hasattr(item, "_layout") and item.ndim > 0) or \
                (hasattr(item, "_layout") and item.dtype is dt.bool_):
            items.append(_as_index_tensor(item, x))
        elif isinstance(item, bool):
            items.append(_as_index_tensor([item], x).reshape(()))
        else:
            items.append(item)
    consumed = 0
    for item in items:
        if hasattr(item, "_layout"):
            consumed += item.ndim if item.dtype is dt.bool_ else 1
        elif item is not None and item is not Ellipsis:
            consumed += 1
    if consumed > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    ellipses = [i for i, item in enumerate(items) if item is Ellipsis]
    if len(ellipses) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    fill = [slice(None)] * (x.ndim - consumed)
    if ellipses:
        items[ellipses[0]:ellipses[0] + 1] = fill
    else:
        items += fill
    return items


def plan(x, index):
    """(basic view of x, list of (dim in view, index tensor)) for an index expression."""
    view = x
    dim = 0
    advanced = []
    for item in _normalize(index, x):
        if item is None:
            view = views.unsqueeze(view, dim)
            dim += 1
        elif isinstance(item, slice):
            if item != slice(None):
                start, stop, step = (None if v is None else operator.index(v) for v in
                                     (item.start, item.stop, item.step))
                view = views.slice_dim(view, dim, start, stop, 1 if step is None else step)
            dim += 1
        elif hasattr(item, "_layout"):
            if item.dtype is dt.bool_:
                if tuple(item.shape) != tuple(view.shape[dim:dim + item.ndim]):
                    raise IndexError(f"The shape of the mask {list(item.shape)} at index {dim} does not match "
                                     f"the shape of the indexed tensor {list(view.shape)}")
                if item.ndim == 0:
                    view = views.unsqueeze(view, dim)
                    advanced.append((dim, _mask_positions(item.reshape(1))[0]))
                    dim += 1
                    continue
                for k, positions in enumerate(_mask_positions(item)):
                    advanced.append((dim + k, positions))
                dim += item.ndim
            else:
                advanced.append((dim, item))
                dim += 1
        else:
            try:
                i = operator.index(item)
            except TypeError:
                raise TypeError(f"invalid index of type {type(item).__name__}; only integers, slices, None, "
                                f"Ellipsis, lists and integer or boolean tensors are valid indices") from None
            view = views.select_(view, dim, i)
    return view, advanced


def _mask_positions(mask):
    return nonzero(mask, as_tuple=True)


def flat_indices(view, advanced, wrap: bool = True):
    """Flat indices into ``view`` for the advanced part, shaped like the indexing result
    (negative indices wrap when ``wrap``)."""
    check_devices("index", view, *(t for _, t in advanced))
    dims = [d for d, _ in advanced]
    try:
        bshape = broadcast_shapes(*(t.shape for _, t in advanced), op="index")
    except RuntimeError as e:
        raise IndexError(f"shape mismatch: indexing tensors could not be broadcast together ({e})") from None
    cs = contiguous_strides(view.shape)
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    rest = [d for d in range(view.ndim) if d not in dims]
    block = dims[0] if adjacent else 0
    positions = {}
    for k, d in enumerate(rest):
        positions[d] = k if (adjacent and d < block) else k + len(bshape)
    ndim_out = len(rest) + len(bshape)
    flat = None
    for d, idx in advanced:
        term = _checked(idx, view.shape[d], cs[d], d, "index", wrap)
        flat = term if flat is None else flat + term
    flat = flat.expand(bshape).reshape((1,) * block + tuple(bshape) + (1,) * (ndim_out - block - len(bshape)))
    for d in rest:
        shape = [1] * ndim_out
        shape[positions[d]] = view.shape[d]
        flat = flat + (arange(view.shape[d], device=view.device) * cs[d]).reshape(shape)
    out_shape = [0] * ndim_out
    for d in rest:
        out_shape[positions[d]] = view.shape[d]
    out_shape[block:block + len(bshape)] = bshape
    return flat.expand(out_shape)


def _getitem_samples(t):
    mask = t.rn(3, 4) > 0
    return [
        t.S("select", lambda x: x[1], t.rn(3, 4)),
        t.S("select-last-col", lambda x: x[:, -1], t.NC(t.rn(3, 4), "F")),
        t.S("slice", lambda x: x[1:3], t.rn(4, 3)),
        t.S("slice-step", lambda x: x[:, ::2], t.NC(t.rn(3, 5), "gap")),
        t.S("slice-negative-step", lambda x: x[::-2, 1:], t.rn(5, 3)),
        t.S("getitem-list", lambda x: x[[0, 2, 2]], t.rn(3, 4)),
        t.S("getitem-adv-basic", lambda x: x[[0, 2], 1:3], t.rn(4, 5)),
        t.S("getitem-dup-cols", lambda x: x[:, [1, 0, 1]], t.NC(t.rn(3, 4), "F")),
        t.S("getitem-bool-mask", lambda x: x[t.const(mask)], t.rn(3, 4)),
        t.S("getitem-none-ellipsis", lambda x: x[None, ..., 1], t.rn(2, 3, 4)),
        t.S("getitem-nonadjacent", lambda x: x[[0, 1], :, [1, 2]], t.rn(2, 3, 4)),
        t.S("getitem-2d-index", lambda x: x[t.const([[0, 1], [2, 0]]), -1], t.rn(3, 4)),
        t.S("getitem-mask-row-slice", lambda x: x[1:, t.const([True, False, True, True])], t.NC(t.rn(3, 4), "neg")),
        t.S("getitem-negative-index-tensor", lambda x: x[t.const([-1, 0]), t.const([1, -2])], t.rn(3, 4)),
        t.S("getitem", lambda x: x[[0, 2, 2], 1:] ** 2, t.rn(3, 3), second_order=True),
    ]


@op(method=False, namespace=None, samples=_getitem_samples)
def getitem(x, index):
    view, advanced = plan(x, index)
    if not advanced:
        return view if view is not x else views.view_of(x, x._layout)
    return Take.apply(view, flat_indices(view, advanced))


def _setitem_samples(t):
    def index_broadcast_value(x, v):
        y = x * 1
        y[t.const([0, 2])] = v
        return y

    def overwrite_with_constant(x, w):  # (copy_, which writes as setitem does)
        y = x * 2
        y.copy_(t.const(np.full((3, 4), 0.5)))
        return y * w + x

    def fill_row(x):
        y = x * 3
        y[0] = 5.0
        return y * x

    def view_of_nonleaf(x, v):
        y = x * 1
        y[1:, ::2] = v
        return y * x

    def advanced(x, v, w):
        y = x * 1
        y[t.const([0, 2]), 1:3] = v
        y[:, 0] += w
        return y

    return [
        t.S("setitem-index-broadcast-value", index_broadcast_value, t.rn(3, 4), t.rn(4)),
        t.S("overwrite-with-constant", overwrite_with_constant, t.rn(3, 4), t.rn(3, 4)),
        t.S("setitem-constant", fill_row, t.rn(3, 4)),
        t.S("setitem-view-of-nonleaf", view_of_nonleaf, t.rn(3, 4), t.rn(2, 2)),
        t.S("setitem-nonleaf-advanced", advanced, t.rn(3, 4), t.rn(2, 2), t.rn(3)),
        t.S("setitem-nonleaf-view", view_of_nonleaf, t.NC(t.rn(3, 4), "F"), t.rn(2, 2)),
        t.S("setitem-nonleaf", view_of_nonleaf, t.rn(3, 4), t.rn(2, 2), second_order=True),
    ]


@op(method=False, namespace=None, samples=_setitem_samples)
def setitem(x, index, value):
    """``x[index] = value``: an in-place write into the basic view, through IndexPut when advanced."""
    view, advanced = plan(x, index)
    value = written_operand(value, x, "__setitem__")
    if not advanced:
        assign(view, lambda t: value.to(t.dtype).expand(t.shape), "__setitem__")
        return
    flat = flat_indices(view, advanced)
    assign(view, lambda t: IndexPut.apply(t, flat, value.to(t.dtype), False), "index_put_")


# ----------------------------------------------------------------------------- gather family
@op()
def nonzero(x, as_tuple=False):
    compute = dt.compute_dtype(x.dtype)
    xc = cast(x, compute)
    found = kernel("nonzero", x)(buf(xc), xc._layout)
    flat = make(Storage(found, x._storage.device), Layout((found.size,)), dt.int64)
    if x.ndim == 0:
        coords = []
    else:
        coords, rem = [], flat
        for stride in contiguous_strides(x.shape)[:-1]:
            coords.append(rem // stride)
            rem = rem % stride
        coords.append(rem)
    if as_tuple:
        return tuple(coords) if coords else (flat * 0,)
    return stack(coords, 1) if coords else flat.new_zeros((flat.numel(), 0))


def _along_dim(op, x_shape, dim, index):
    """Flat indices into a packed x of ``x_shape`` that pick ``index`` along ``dim`` (gather rule)."""
    cs = contiguous_strides(x_shape)
    flat = _checked(index, x_shape[dim], cs[dim], dim, op, wrap=False)
    for d in range(index.ndim):
        if d != dim:
            shape = [1] * index.ndim
            shape[d] = index.shape[d]
            flat = flat + (arange(index.shape[d], device=index.device) * cs[d]).reshape(shape)
    return flat


def _check_gather_shapes(op, x, dim, index, src=None):
    check_devices(op, x, index, *(() if src is None else (src,)))
    if index.ndim != x.ndim:
        raise RuntimeError(f"{op}: index tensor must have the same number of dimensions as input tensor "
                           f"({index.ndim} vs {x.ndim})")
    for d in range(x.ndim):
        if d != dim and index.shape[d] > x.shape[d]:
            raise RuntimeError(f"{op}: size of index {list(index.shape)} does not fit input {list(x.shape)} "
                               f"at dimension {d}")
        if src is not None and index.shape[d] > src.shape[d]:
            raise RuntimeError(f"{op}: size of index {list(index.shape)} does not fit src {list(src.shape)} "
                               f"at dimension {d}")
    if index.dtype.is_floating_point or index.dtype is dt.bool_:
        raise TypeError(f"{op}(): Expected dtype int64 for index, got {index.dtype}")


@op(samples=lambda t: [
    t.S("gather", lambda x: x.gather(1, t.const([[0, 0], [3, 1], [2, 2]])), t.NC(t.rn(3, 4), "F")),
    t.S("gather-dups", lambda x: gather(x, 0, t.const([[0, 1, 0], [2, 2, 1]])), t.rn(3, 3))])
def gather(x, dim, index):
    dim = normalize_dim(dim, x.ndim, "gather")
    if index.numel() == 0:  # torch checks nothing then: the answer is empty, shaped as the index
        check_devices("gather", x, index)
        return Take.apply(x, index.to(dt.int64))
    if _one_element_dim(x, index):
        return gather(x.reshape(-1), dim, index.reshape(-1)).reshape(index.shape)
    _check_gather_shapes("gather", x, dim, index)
    return Take.apply(x, _along_dim("gather", x.shape, dim, index))


def _one_element_dim(x, index):
    """Whether x or index is 0-d and neither more than 1-d: then, as in PyTorch, a 0-d one counts as
    1-d of one element (the caller works on 1-d views)."""
    return min(x.ndim, index.ndim) == 0 and max(x.ndim, index.ndim) <= 1


def _scatter(op, x, dim, index, src, accumulate, multiply=False):
    dim = normalize_dim(dim, x.ndim, op)
    if _one_element_dim(x, index):
        return _scatter(op, x.reshape(-1), dim, index.reshape(-1), src, accumulate, multiply).reshape(x.shape)
    src = written_operand(src, x, op)
    _check_gather_shapes(op, x, dim, index, src if src.ndim else None)
    if src.ndim:
        src = src[tuple(slice(0, n) for n in index.shape)]
    flat = _along_dim(op, x.shape, dim, index)
    if multiply:
        return ScatterMultiply.apply(x, flat, src.to(x.dtype))
    return IndexPut.apply(x, flat, src.to(x.dtype), accumulate)


class ScatterMultiply(Function):
    """x with x.reshape(-1)[flat] multiplied by ``values`` (a repeated index multiplies in turn): the
    deprecated ``scatter(..., reduce="multiply")``. Rare, so computed on the host; like PyTorch's, it
    has no derivative."""

    @staticmethod
    def forward(ctx, x, flat, values):
        return host_reduce_at(x, flat, values, "prod", True)

    @staticmethod
    def backward(ctx, g):
        raise RuntimeError("scatter: the derivative for reduce='multiply' is not implemented (nor is it in PyTorch)")


@op(inplace=rebased, samples=lambda t: [
    t.S("scatter", lambda x, s: x.scatter(1, t.const([[0, 2], [1, 3], [3, 0]]), s), t.rn(3, 4), t.rn(3, 2)),
    t.S("scatter-public", lambda x, s: scatter(x, 0, t.const([[2, 0, 1]]), s), t.rn(3, 3), t.rn(1, 3)),
    t.S("scatter-value", lambda x: x.scatter(1, t.const([[1], [0]]), value=2.0), t.rn(2, 3))])
def scatter(x, dim, index, src=None, value=None, reduce=None):
    if reduce not in (None, "add", "multiply"):
        raise RuntimeError(f"scatter: reduce argument must be either 'add' or 'multiply', got {reduce!r}")
    src = src if src is not None else value
    return _scatter("scatter", x, dim, index, src, reduce == "add", reduce == "multiply")


@op(inplace=rebased, samples=lambda t: [
    t.S("scatter_add-dups", lambda x, s: x.scatter_add(0, t.const([[0, 1, 0], [0, 0, 1]]), s), t.rn(2, 3),
        t.NC(t.rn(2, 3), "F")),
    t.S("scatter_add-public", lambda x, s: scatter_add(x, 1, t.const([[0, 1, 0], [2, 2, 1]]), s),
        t.NC(t.rn(2, 3), "F"), t.rn(2, 3))])
@autocast_op("scatter_add")
def scatter_add(x, dim, index, src):
    return _scatter("scatter_add", x, dim, index, src, True)


@op(samples=lambda t: [t.S("index_select", lambda x: x.index_select(1, t.const([3, 0, 3])), t.rn(2, 4))])
def index_select(x, dim, index):
    dim = normalize_dim(dim, x.ndim, "index_select")
    if index.ndim > 1:
        raise IndexError(f"index_select(): Index is supposed to be a vector, got shape {list(index.shape)}")
    if index.dtype.is_floating_point or index.dtype is dt.bool_:
        raise TypeError(f"index_select(): Expected dtype int32/int64 for index, got {index.dtype}")
    if x.ndim == 0:  # one element along its dim 0, as in PyTorch
        if index.numel() != 1:
            raise RuntimeError(f"index_select(): Index to scalar can have only 1 value, got {index.numel()} "
                               f"value(s)")
        return index_select(x.reshape(1), 0, index.reshape(1)).reshape(())
    check_devices("index_select", x, index)  # (unlike x[index], index_select takes no CPU index for a GPU tensor)
    view, advanced = plan(x, (slice(None),) * dim + (index.reshape(-1),))
    return Take.apply(view, flat_indices(view, advanced, wrap=False))


def _index_along(op, x, dim, index, source, accumulate, scatter=None):
    """x with its slices ``index`` along ``dim`` set to (or increased by) the slices of ``source``
    (of x's shape but for index.numel() slices along ``dim``; a function of that shape gives it);
    ``scatter(op, x, dim, index, source)``, with the index expanded to source's shape: instead, to
    fold them in (index_reduce)."""
    dim = normalize_dim(dim, x.ndim, op)
    if index.ndim > 1:
        raise IndexError(f"{op}(): Index is supposed to be a vector, got shape {list(index.shape)}")
    if x.ndim == 0:  # one element along its dim 0, as in PyTorch; so is a 0-d source
        if not callable(source):
            if source.ndim:
                raise RuntimeError(f"{op}: source of shape {list(source.shape)} does not fit a 0-d input "
                                   f"(expected a 0-d source)")
            source = source.reshape(1)
        return _index_along(op, x.reshape(1), 0, index, source, accumulate, scatter).reshape(())
    expected = tuple(index.numel() if d == dim else n for d, n in enumerate(x.shape))
    if callable(source):
        source = source(expected)
    if tuple(source.shape) != expected:
        raise RuntimeError(f"{op}: source of shape {list(source.shape)} does not fit input "
                           f"{list(x.shape)} with {index.numel()} indices along dim {dim} (expected "
                           f"{list(expected)})")
    expanded = index.reshape([-1 if d == dim else 1 for d in range(x.ndim)]).expand(expected)
    if scatter is not None:
        return scatter(op, x, dim, expanded, source)
    return _scatter(op, x, dim, expanded, source, accumulate)


@op(inplace=rebased, samples=lambda t: [
    t.S("index_add", lambda x, s: x.index_add(0, t.const([0, 2, 0]), s), t.rn(3, 4), t.rn(3, 4)),
    t.S("index_add-alpha-dim1", lambda x, s: x.index_add(1, t.const([3, 1]), s, alpha=2.0), t.NC(t.rn(3, 4), "F"),
        t.rn(3, 2))])
def index_add(x, dim, index, source, alpha=1):
    return _index_along("index_add", x, dim, index, source if alpha == 1 else source * alpha, True)


@op(inplace=rebased, samples=lambda t: [
    t.S("index_copy", lambda x, s: x.index_copy(0, t.const([2, 0]), s), t.rn(3, 4), t.NC(t.rn(2, 4), "F"))])
@autocast_op("index_copy")
def index_copy(x, dim, index, source):
    if min(x.ndim, source.ndim) == 0 and max(x.ndim, source.ndim) <= 1:  # as PyTorch: scalars and vectors mix
        dim = normalize_dim(dim, x.ndim, "index_copy")
        return _index_along("index_copy", x.reshape(-1), dim, index, source.reshape(-1), False).reshape(x.shape)
    return _index_along("index_copy", x, dim, index, source, False)


@op(inplace=rebased, samples=lambda t: [
    t.S("index_fill-value-tensor", lambda x, v: index_fill(x, 1, t.const([0, 2]), v), t.rn(3, 4), t.rn()),
    t.S("index_fill-duplicates", lambda x, v: index_fill(x, 1, t.const([3, 0, 3]), v), t.rn(2, 4), t.rn())])
def index_fill(x, dim, index, value):
    """x with its slices ``index`` along ``dim`` set to ``value`` (a number or a 0-d tensor). A mask of
    the filled places selects the value, so a repeated index fills (and passes the gradient) once."""
    value = written_operand(value, x, "index_fill")
    if value.ndim:
        raise RuntimeError(f"index_fill: only supports a 0-dimensional value tensor, got {value.ndim}-D")
    if index.dtype.is_floating_point or index.dtype is dt.bool_:
        raise TypeError(f"index_fill(): Expected dtype int64 for index, got {index.dtype}")
    size = x.shape[normalize_dim(dim, x.ndim, "index_fill")] if x.ndim else 1
    index = _checked(index, size, 1, dim, "index_fill")  # unlike index_add/copy, negatives count from the end
    empty = zeros(x.shape, dtype=dt.bool_, device=x.device)   # (a mask: a repeated index fills once)
    filled = _index_along("index_fill", empty, dim, index, tensor(True, device=x.device).expand, False)
    return where(filled, value.to(x.dtype), x)


def _masked_scatter_samples(t):
    mask = t.rn(3, 4) > 0
    return [t.S("masked_scatter", lambda x, s: x.masked_scatter(t.const(mask), s), t.rn(3, 4), t.rn(12))]


@op(inplace=rebased, samples=_masked_scatter_samples)
def masked_scatter(x, mask, source):
    """x with the places where ``mask`` is True filled, in order, from the first elements of ``source``.
    x and mask broadcast together (out of place; in place the mask must fit x)."""
    if mask.dtype is not dt.bool_:
        raise TypeError(f"masked_scatter: expected a bool mask, got {mask.dtype}")
    shape = broadcast_shapes(x.shape, mask.shape, op="masked_scatter")
    x = x.expand(shape)
    positions = nonzero(mask.expand(shape).reshape(-1), as_tuple=True)[0]
    count = positions.numel()
    if source.numel() < count:
        raise RuntimeError(f"masked_scatter: source has {source.numel()} elements, fewer than the {count} "
                           f"True places of the mask")
    return IndexPut.apply(x, positions, source.reshape(-1)[:count].to(x.dtype), False)


def _masked_fill_samples(t):
    mask = t.rn(3, 4) > 0
    return [t.S("masked_fill", lambda x: x.masked_fill(t.const(mask), 0.0), t.rn(3, 4)),
            t.S("masked_fill-tensor-value", lambda x, v: masked_fill(x, t.const(mask[0]), v), t.rn(3, 4), t.rn())]


@op(inplace=rebased, samples=_masked_fill_samples)
def masked_fill(x, mask, value):
    if mask.dtype is not dt.bool_:
        raise TypeError(f"masked_fill only supports boolean masks, but got mask with dtype {mask.dtype}")
    value = written_operand(value, x, "masked_fill").to(x.dtype)
    return where(mask, value, x)  # (a mask may broadcast x up, as in PyTorch; not in place)


def _masked_select_samples(t):
    mask = t.rn(3, 4) > 0
    return [t.S("masked_select-broadcast", lambda x: x.masked_select(t.const(mask)), t.rn(4))]


@op(samples=_masked_select_samples)
def masked_select(x, mask):
    if mask.dtype is not dt.bool_:
        raise TypeError(f"masked_select: expected BoolTensor for mask, got {mask.dtype}")
    shape = broadcast_shapes(x.shape, mask.shape, op="masked_select")
    return getitem(x.expand(shape), mask.expand(shape))


@op(samples=lambda t: [t.S("take", lambda x: take(x, t.const([[5, 0], [11, -1]])), t.rn(3, 4))])
def take(x, index):
    if index.dtype.is_floating_point or index.dtype is dt.bool_:
        raise TypeError(f"take(): Expected a long tensor for index, but got {index.dtype}")
    check_devices("take", x, index)
    return Take.apply(x, _checked(index, x.numel(), 1, None, "take"))




# ----------------------------------------------------------------------------- host folding
_UFUNCS = {"prod": np.multiply, "amax": np.maximum, "amin": np.minimum}


def identity_of(reduce, np_dtype):
    """The value a reduction (sum, mean, prod, amax, amin) starts from where x's own element takes no part."""
    if reduce in ("sum", "mean", "prod"):
        return int(reduce == "prod")
    if np_dtype.kind == "f":
        return -np.inf if reduce == "amax" else np.inf
    if np_dtype.kind == "b":
        return reduce == "amin"
    info = np.iinfo(np_dtype)
    return info.min if reduce == "amax" else info.max


def host_reduce_at(x, flat, values, reduce, include_self):
    """x with ``values`` folded into x.reshape(-1)[flat] by ``reduce`` (prod, amax, amin; a repeated
    index folds in turn, NaN wins), from the reduction's identity where not ``include_self``: numpy's
    ufunc.at on the host, for the rare folds no kernel does."""
    work = dt.float32 if x.dtype in dt.HALF else x.dtype                # (numpy has no bfloat16)
    out = np.array(x.detach().cpu().to(work).numpy(), order="C").reshape(-1)
    where_ = flat.cpu().numpy().reshape(-1)
    if not include_self:
        out[where_] = identity_of(reduce, out.dtype)
    with np.errstate(invalid="ignore"):   # (a NaN taking part is the answer, not a warning)
        _UFUNCS[reduce].at(out, where_, values.detach().to(work).expand(flat.shape).cpu().numpy().reshape(-1))
    return tensor(out.reshape(x.shape), device=x.device).to(x.dtype)


@op(samples=lambda t: [
    t.S("take_along_dim", lambda x: x.take_along_dim(t.const([[2, 0], [1, 1], [0, 2]]), 1), t.rn(3, 3)),
    t.S("take_along_dim-broadcast", lambda x: take_along_dim(x, t.const([[0], [2]]), 0), t.NC(t.rn(3, 4), "F")),
    t.S("take_along_dim-flat", lambda x: take_along_dim(x, t.const([5, 0, 5])), t.rn(2, 3))])
def take_along_dim(x, indices, dim=None):
    """``gather`` with x and indices broadcast together but for ``dim``, negative indices counting from the
    end; without ``dim``, of the flattened x."""
    if indices.dtype is not dt.int64:
        raise RuntimeError(f"torch.take_along_dim(): dtype of indices should be Long but got {indices.dtype}")
    if dim is None:
        return take_along_dim(x.reshape(-1), indices.reshape(-1), 0)
    dim = normalize_dim(dim, x.ndim, "take_along_dim")
    indices = indices + (indices < 0) * x.shape[dim]    # (unlike gather, it counts negatives from the end)
    if x.ndim != indices.ndim:
        raise RuntimeError(f"torch.take_along_dim(): input and indices should have the same number of dimensions, "
                           f"but got {x.ndim} dimensions for input, and {indices.ndim} dimensions for indices")
    others = broadcast_shapes(*([1 if d == dim else n for d, n in enumerate(t.shape)] for t in (x, indices)),
                              op="take_along_dim")
    return gather(x.expand([x.shape[d] if d == dim else n for d, n in enumerate(others)]), dim,
                  indices.expand([indices.shape[d] if d == dim else n for d, n in enumerate(others)]))


def check_put_dtypes(name, x, values):
    """index_put and index_put_ write no cast (unlike ``x[i] = v``): torch refuses values of another dtype."""
    if getattr(values, "dtype", x.dtype) is not x.dtype:
        raise RuntimeError(f"{name}(): Index put requires the source and destination dtypes match, got "
                           f"{x.dtype} for the destination and {values.dtype} for the source")


@op(samples=lambda t: [
    t.S("index_put", lambda x, v: x.index_put((t.const([0, 2]),), v), t.rn(3, 4), t.rn(4)),
    t.S("index_put-accumulate", lambda x, v: index_put(x, (t.const([0, 0]), t.const([1, 1])), v, True),
        t.rn(3, 4), t.rn(2)),
    t.S("index_put-none", lambda x, v: index_put(x, (None, t.const([3, 1])), v), t.rn(2, 4), t.rn(2, 2))])
def index_put(x, indices, values, accumulate=False):
    """A copy of x with ``x[indices] = values`` (or ``+=`` when ``accumulate``); a None index takes a whole dim."""
    check_put_dtypes("index_put", x, values)
    return x.clone().index_put_(tuple(slice(None) if i is None else i for i in indices), values, accumulate)
