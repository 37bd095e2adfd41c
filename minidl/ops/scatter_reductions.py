"""The reducing scatters: ``scatter_reduce`` and ``index_reduce`` fold elements into the places an
index names by sum, prod, mean, amax or amin. Sum and mean accumulate with the ``put`` kernel;
amax and amin sort the elements by place and value (``argsort``) and let each place's last one
write (``put``); prod folds on the host, as no kernel multiplies into places. Gradients as
PyTorch's."""
from __future__ import annotations

from .. import _dtype as dt
from ..autograd import Function
from ..layout import normalize_dim
from .core import check_devices, sum_to
from .creation import tensor, zeros
from .elementwise import floor_divide, isnan, maximum, minimum, where
from .indexing import _along_dim, _check_gather_shapes, _index_along, _one_element_dim, host_reduce_at
from .inplace import rebased
from .registry import op
from .shape_ops import cat
from .sorting import argsort_raw
from .take_put import IndexPut, Take

_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def _counts(x, flat, include_self):
    """How many elements each place of x averages (int64; at least 1, as places no one reaches keep x)."""
    start = zeros(x.shape, dtype=dt.int64, device=x.device) + int(include_self)
    count = IndexPut.apply(start, flat, tensor(1, device=x.device), True)
    return count.clamp(min=1)


class ScatterReduce(Function):
    """x with ``values`` folded into x.reshape(-1)[flat] by ``reduce`` (one of _REDUCTIONS), x's own element
    taking part where ``include_self``. Gradients as PyTorch's: prod's without dividing by a zero factor,
    amax/amin's shared evenly among the elements equal to the result (x's own counted even when it took no
    part), and none to x's elements that did not take part."""

    @staticmethod
    def forward(ctx, x, flat, values, reduce, include_self):
        count = None
        if reduce in ("sum", "mean"):
            base = x if include_self else IndexPut.apply(x, flat, x.new_zeros(()), False)
            out = IndexPut.apply(base, flat, values, True)
            if reduce == "mean":
                count = _counts(x, flat, include_self)
                out = (out / count if x.dtype.is_floating_point else floor_divide(out, count)).to(x.dtype)
        elif reduce == "prod":
            out = host_reduce_at(x, flat, values, reduce, include_self)
        else:
            out = _extremes(x, flat, values.expand(flat.shape), reduce, include_self)
        ctx.save_for_backward(x, flat, values, out, count)
        ctx.meta = (reduce, include_self)
        return out

    @staticmethod
    def backward(ctx, g):
        x, flat, values, out, count = ctx.saved_tensors
        reduce, include_self = ctx.meta
        shape, values = values.shape, values.expand(flat.shape)
        if reduce in ("sum", "mean"):
            gx = g if count is None else g / count
            gv = Take.apply(gx, flat)
        elif reduce == "prod":
            gx, gv = _prod_grads(x, flat, values, g, include_self)
        else:
            gx, gv = _extreme_grads(x, flat, values, out, g)
        if not include_self:
            gx = IndexPut.apply(gx, flat, gx.new_zeros(()), False)
        return gx, None, sum_to(gv, shape), None, None


def _extremes(x, flat, values, reduce, include_self):
    """amax/amin into places: the values sorted by value (amin: descending, NaN as the least, so that NaN
    wins either way), then stably by place, so that each place's last element is its extreme and alone
    writes it (the others write to a spare element past the end)."""
    flat, values = flat.reshape(-1), values.reshape(-1)
    key = values if reduce == "amax" else where(isnan(values), -float("inf"), values)
    by_value = argsort_raw(key if key.dtype is not dt.bool_ else key.to(dt.int64), 0, reduce == "amin")
    places = Take.apply(flat, by_value)
    by_place = argsort_raw(places, 0, False)
    places, order = Take.apply(places, by_place), Take.apply(by_value, by_place)
    last = cat([places[1:] != places[:-1], tensor([True], device=x.device)])
    spare = x.numel()
    written = IndexPut.apply(cat([x.reshape(-1), x.reshape(-1)[:1]]), where(last, places, spare),
                             Take.apply(values, order), False)[:spare].reshape(x.shape)
    if include_self:
        written = (maximum if reduce == "amax" else minimum)(written, x)
    touched = IndexPut.apply(zeros(x.shape, dtype=dt.bool_, device=x.device), flat, tensor(True, device=x.device),
                             False)
    return where(touched, written, x)


def _prod_grads(x, flat, values, g, include_self):
    """prod's gradients: the product of the others, computed again without the zero where a place has one
    zero factor, by division elsewhere (a place with two zeros gives 0). The products are made again here,
    differentiably, for a second derivative."""
    out = ScatterReduce.apply(x, flat, values, "prod", include_self)
    kept_x = where(x == 0, 1.0, x)
    gx = g * ScatterReduce.apply(kept_x, flat, values, "prod", include_self) / kept_x
    zero = values == 0
    zeros_at_place = Take.apply(IndexPut.apply(x.new_zeros(x.shape), flat, zero.to(x.dtype), True), flat)
    single = zero & (zeros_at_place == 1)
    others = ScatterReduce.apply(x, flat, where(single, 1.0, values), "prod", include_self)
    gv = where(single, Take.apply(g * others, flat), Take.apply(g * out, flat) / where(zero, 1.0, values))
    return gx, gv


def _extreme_grads(x, flat, values, out, g):
    """amax/amin's gradients: each place's gradient shared evenly among the elements equal to its result."""
    x_is = (x == out).to(g.dtype)
    values_are = (values == Take.apply(out, flat)).to(g.dtype)
    share = g / IndexPut.apply(x_is, flat, values_are, True)
    return x_is * share, values_are * Take.apply(share, flat)


def _scatter_reduce(op, x, dim, index, src, reduce, include_self):
    dim = normalize_dim(dim, x.ndim, op)
    if src.dtype is not x.dtype:
        raise RuntimeError(f"{op}(): Expected self.dtype to be equal to src.dtype, got {x.dtype} and {src.dtype}")
    if index.numel() == 0:
        check_devices(op, x, index, src)
        return x.clone()
    if _one_element_dim(x, index):
        return _scatter_reduce(op, x.reshape(-1), dim, index.reshape(-1), src.reshape(-1), reduce,
                               include_self).reshape(x.shape)
    _check_gather_shapes(op, x, dim, index, src)
    src = src[tuple(slice(0, n) for n in index.shape)]
    return ScatterReduce.apply(x, _along_dim(op, x.shape, dim, index), src, reduce, include_self)


def _scatter_reduce_samples(t):
    def index():   # (made inside the callables: on the device the sweep runs on)
        return t.const([[0, 2, 0], [1, 1, 1], [2, 0, 2]])

    with_zeros = t.zeros_at(t.rn(3, 3), (0, 0), (2, 2), (0, 2))
    return [
        t.S("scatter_reduce-sum", lambda x, s: x.scatter_reduce(0, index(), s, "sum"), t.rn(3, 3), t.rn(3, 3)),
        t.S("scatter_reduce-mean-exclude", lambda x, s: scatter_reduce(x, 1, index(), s, "mean", include_self=False),
            t.rn(3, 4), t.NC(t.rn(3, 3), "F")),
        t.S("scatter_reduce-prod", lambda x, s: x.scatter_reduce(0, index(), s, "prod"), t.rn(3, 3), t.rn(3, 3)),
        t.S("scatter_reduce-prod-zeros", lambda x, s: x.scatter_reduce(1, index(), s, "prod", include_self=False),
            t.zeros_at(t.rn(3, 3), (1, 1)), with_zeros),
        t.S("scatter_reduce-amax", lambda x, s: x.scatter_reduce(0, index(), s, "amax"), t.distinct(3, 3),
            t.distinct(3, 3) + 0.1),
        t.S("scatter_reduce-amin-exclude", lambda x, s: x.scatter_reduce(1, index(), s, "amin", include_self=False),
            t.distinct(3, 3), t.distinct(3, 3) + 0.1),
        t.S("scatter_reduce-prod", lambda x, s: x.scatter_reduce(0, index(), s, "prod") ** 2, t.rn(3, 3), t.rn(3, 3),
            second_order=True)]


@op(inplace=rebased, samples=_scatter_reduce_samples)
def scatter_reduce(x, dim, index, src, reduce, *, include_self=True):
    """x with src's elements folded into the places ``index`` names along ``dim`` (the gather rule) by
    ``reduce``: "sum", "prod", "mean", "amax" or "amin"; x's own element takes part where ``include_self``."""
    if reduce not in _REDUCTIONS:
        raise RuntimeError(f"scatter_reduce(): reduce argument must be one of {', '.join(_REDUCTIONS)}, "
                           f"got {reduce!r}")
    return _scatter_reduce("scatter_reduce", x, dim, index, src, reduce, include_self)


@op(inplace=rebased, samples=lambda t: [
    t.S("index_reduce-prod", lambda x, s: x.index_reduce(0, t.const([0, 2, 0]), s, "prod"), t.rn(3, 4), t.rn(3, 4)),
    t.S("index_reduce-mean-exclude", lambda x, s: index_reduce(x, 1, t.const([3, 1, 3]), s, "mean",
                                                               include_self=False), t.rn(2, 4), t.rn(2, 3)),
    t.S("index_reduce-amax", lambda x, s: x.index_reduce(0, t.const([1, 1]), s, "amax"), t.distinct(2, 3),
        t.distinct(2, 3) + 0.1),
    t.S("index_reduce-amin", lambda x, s: x.index_reduce(1, t.const([0, 0]), s, "amin"), t.distinct(2, 3),
        t.distinct(2, 2) + 0.1)])
def index_reduce(x, dim, index, source, reduce, *, include_self=True):
    """x with the slices of ``source`` folded into its slices ``index`` along ``dim`` by ``reduce``: "prod",
    "mean", "amax" or "amin"; x's own slices take part where ``include_self``."""
    if reduce not in _REDUCTIONS[1:]:
        raise RuntimeError(f"index_reduce(): reduce argument must be one of prod, mean, amax, amin, got {reduce!r}")
    return _index_along("index_reduce", x, dim, index, source, False,
                        lambda *args: _scatter_reduce(*args, reduce, include_self))


