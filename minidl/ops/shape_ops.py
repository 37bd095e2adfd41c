"""Joining, splitting and rearranging: cat, stack, split, chunk, repeat, tril/triu, flip, roll, pad."""
from __future__ import annotations

import math

import numpy as np

from .. import _dtype as dt
from .. import layout as L
from ..autograd import Function
from . import views
from .autocast_mode import autocast_op
from .core import buf, check_devices, kernel, new_like_shape
from .creation import arange, tensor
from .registry import op


class Cat(Function):
    @staticmethod
    def forward(ctx, dim, *tensors):
        result = dt.result_type(*tensors)
        shape = list(tensors[0].shape)
        shape[dim] = sum(t.shape[dim] for t in tensors)
        out = new_like_shape(shape, result, tensors[0])
        start = 0
        for t in tensors:
            part = L.narrow(out._layout, dim, start, t.shape[dim])
            kernel("copy", t)(buf(t), t._layout, buf(out), part)
            start += t.shape[dim]
        ctx.meta = (dim, [t.shape[dim] for t in tensors])
        return out

    @staticmethod
    def backward(ctx, g):
        dim, sizes = ctx.meta
        grads, start = [], 0
        for n in sizes:
            grads.append(g.narrow(dim, start, n))
            start += n
        return (None, *grads)


@op(aliases=("concat", "concatenate"), method=False, samples=lambda t: [
    t.S("cat-dim0", lambda a, b: cat([a, b], 0), t.rn(2, 3), t.rn(4, 3)),
    t.S("cat-dim1-noncontig", lambda a, b: cat([a, b, a], 1), t.NC(t.rn(3, 2), "F"), t.rn(3, 1))])
@autocast_op("cat")
def cat(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("cat(): expected a non-empty list of Tensors")
    check_devices("cat", *tensors)
    # legacy rule, as in PyTorch: 1-D empty tensors are skipped
    kept = [t for t in tensors if not (t.ndim == 1 and t.numel() == 0)] or tensors[:1]
    ref = kept[0]
    if ref.ndim == 0:
        raise RuntimeError("cat(): zero-dimensional tensor (at position 0) cannot be concatenated")
    dim = L.normalize_dim(dim, ref.ndim, "cat")
    for i, t in enumerate(kept):
        if t.ndim != ref.ndim or any(a != b for d, (a, b) in enumerate(zip(t.shape, ref.shape)) if d != dim):
            raise RuntimeError(f"cat(): sizes of tensors must match except in dimension {dim}; got "
                               f"{list(ref.shape)} and {list(t.shape)} (tensor {i})")
    return Cat.apply(dim, *kept)




@op(method=False, samples=lambda t: [
    t.S("stack", lambda a, b: stack([a, b], 1), t.rn(2, 3), t.NC(t.rn(2, 3), "gap"))])
@autocast_op("stack")
def stack(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack(): expected a non-empty list of Tensors")
    for i, t in enumerate(tensors):
        if t.shape != tensors[0].shape:
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {list(tensors[0].shape)} "
                               f"at entry 0 and {list(t.shape)} at entry {i}")
    dim = L.normalize_dim(dim, tensors[0].ndim + 1, "stack")
    return cat([views.unsqueeze(t, dim) for t in tensors], dim)


@op(method=False, samples=lambda t: [
    t.S("meshgrid-xy", lambda a, b, c: meshgrid(a, b, c, indexing="xy"), t.rn(3), t.NC(t.rn(2), "gap"), t.rn(4))])
def meshgrid(*tensors, indexing=None):
    """Coordinate grids (expanded views) from 1-D tensors: ``indexing='ij'`` (the default) gives
    the grid the shape (len(t0), len(t1), ...); 'xy' swaps the first two dims, as numpy's default."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing is None:
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    for i, t in enumerate(tensors):
        if t.ndim > 1:
            raise RuntimeError(f"meshgrid: expected 0-D or 1-D tensors, got a {t.ndim}-D tensor at position {i}")
    n = len(tensors)
    axes = list(range(n))
    if indexing == "xy" and n >= 2:
        axes[0], axes[1] = 1, 0
    shape = [0] * n
    for t, axis in zip(tensors, axes):
        shape[axis] = t.numel()
    return tuple(t.reshape([-1 if d == axis else 1 for d in range(n)]).expand(shape) for t, axis in zip(tensors, axes))


@op(aliases=("unsafe_split",), samples=lambda t: [
    t.S("split", lambda x: x.split([1, 3], 1), t.rn(2, 4)),
    t.S("unsafe_split", lambda x: x.unsafe_split(2), t.rn(3, 2))])
def split(x, split_size_or_sections, dim=0):
    dim = L.normalize_dim(dim, x.ndim, "split")
    n = x.shape[dim]
    if isinstance(split_size_or_sections, int):
        size = split_size_or_sections
        sizes = [min(size, n - s) for s in range(0, n, size)] if n else [0]
    else:
        sizes = list(split_size_or_sections)
        if sum(sizes) != n:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size "
                               f"at dimension {dim}), but got split_sizes={sizes}")
    return Split.apply(x, tuple(sizes), dim)


class Split(Function):
    """Consecutive views of ``x`` along ``dim``. The backward is one ``cat`` of the pieces' gradients (zeros
    for a piece without one), as torch's: each view's own backward would zero-fill a full-size gradient
    and the engine would add them, a launch and a pass over the whole tensor per piece."""

    @staticmethod
    def forward(ctx, x, sizes, dim):
        ctx.dim = dim
        out, start = [], 0
        for size in sizes:
            out.append(views.narrow(x, dim, start, size))
            start += size
        return tuple(out)

    @staticmethod
    def backward(ctx, *grads):
        return cat(grads, ctx.dim), None, None


@op(aliases=("unsafe_chunk",), samples=lambda t: [
    t.S("chunk", lambda x: x.chunk(2, 0), t.NC(t.rn(5, 2), "F")),
    t.S("unsafe_chunk", lambda x: x.unsafe_chunk(3, 1), t.rn(2, 4))])
def chunk(x, chunks, dim=0):
    dim = L.normalize_dim(dim, x.ndim, "chunk")
    size = math.ceil(x.shape[dim] / chunks) if x.shape[dim] else 1
    return split(x, max(size, 1), dim)


@op(samples=lambda t: [t.S("unbind", lambda x: x.unbind(1), t.rn(2, 3))])
def unbind(x, dim=0):
    dim = L.normalize_dim(dim, x.ndim, "unbind")
    return tuple(views.select_(x, dim, i) for i in range(x.shape[dim]))


@op(samples=lambda t: [
    t.S("repeat", lambda x: x.repeat(2, 3), t.rn(2, 3)),
    t.S("repeat-new-dims", lambda x: x.repeat(2, 1, 2), t.NC(t.rn(3, 2), "F"))])
def repeat(x, *sizes):
    sizes = views._shape_arg(sizes)
    if len(sizes) < x.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of "
                           "tensor")
    x = x.reshape((1,) * (len(sizes) - x.ndim) + tuple(x.shape))
    interleaved = []
    for r, n in zip(sizes, x.shape):
        interleaved += [r, n]
    expanded = x.reshape([v for n in x.shape for v in (1, n)]).expand(interleaved)
    return expanded.reshape([r * n for r, n in zip(sizes, x.shape)])


@op(samples=lambda t: [
    t.S("tile", lambda x: x.tile((2, 1)), t.rn(2, 3)),
    t.S("tile-short-dims", lambda x: tile(x, (2,)), t.NC(t.rn(3, 2), "F")),
    t.S("tile-long-dims", lambda x: x.tile(2, 1, 2), t.rn(3))])
def tile(x, *dims):
    """``repeat`` with ``dims`` padded by leading 1s to x's rank (numpy's tile)."""
    dims = views._shape_arg(dims)
    return repeat(x, (1,) * (x.ndim - len(dims)) + dims)


@op(samples=lambda t: [
    t.S("repeat_interleave", lambda x: x.repeat_interleave(2, 1), t.rn(2, 3)),
    t.S("repeat_interleave-flat", lambda x: repeat_interleave(x, 3), t.NC(t.rn(2, 2), "F")),
    t.S("repeat_interleave-counts", lambda x: x.repeat_interleave(t.const([2, 0, 1]), dim=0, output_size=3),
        t.rn(3, 2)),
    t.S("repeat_interleave-one-count", lambda x: x.repeat_interleave(t.const([2]), dim=-1), t.rn(2, 2))])
def repeat_interleave(x, repeats=None, dim=None, *, output_size=None):
    """Each element (each slice along ``dim``; of the flattened ``x`` without one) ``repeats`` times
    in a row; ``repeats``: an int, or a tensor of counts, one or one per slice.
    ``repeat_interleave(counts)`` alone gives each index ``counts[i]`` times."""
    if repeats is None:
        x, repeats, dim = arange(x.numel(), device=x.device), x, 0
    if dim is None:
        x, dim = x.reshape(-1), 0
    dim = L.normalize_dim(dim, x.ndim, "repeat_interleave")
    n = x.shape[dim] if x.ndim else 1
    if hasattr(repeats, "_layout"):
        index = np.repeat(np.arange(n), repeat_counts(repeats, n))
        out = x.index_select(dim, tensor(index, dtype=dt.int64, device=x.device))
    else:
        if repeats < 0:
            raise RuntimeError(f"repeat_interleave: repeats must be non-negative, got {repeats}")
        sizes = list(x.shape)
        sizes.insert(dim + 1, repeats)
        out = x.unsqueeze(dim + 1).expand(sizes).flatten(dim, dim + 1)
    if output_size is not None and output_size != out.shape[dim]:
        raise RuntimeError(f"repeat_interleave: output_size={output_size} does not match the repeated size "
                           f"{out.shape[dim]} along dim {dim}")
    return out


def repeat_counts(repeats, n):
    """The repeat counts a tensor of them gives ``n`` slices (one count serves them all), as ints."""
    if repeats.dtype.is_floating_point or repeats.dtype == dt.bool_:
        raise RuntimeError(f"repeat_interleave: repeats must be an integer tensor, got {repeats.dtype}")
    if repeats.ndim > 1:
        raise RuntimeError(f"repeat_interleave only accepts a 1-D tensor of repeats, got shape {list(repeats.shape)}")
    counts = repeats.reshape(-1).tolist()
    if len(counts) == 1:
        counts *= n
    if len(counts) != n:
        raise RuntimeError(f"repeat_interleave: repeats must have the same size as input along dim, but got "
                           f"repeats.size(0) = {len(counts)} and input.size(dim) = {n}")
    if any(c < 0 for c in counts):
        raise RuntimeError(f"repeat_interleave: repeats can not be negative, got {repeats.tolist()}")
    return counts


def _tri_mask(x, diagonal, lower):
    rows = arange(x.shape[-2], device=x.device).reshape((-1, 1))
    cols = arange(x.shape[-1], device=x.device).reshape((1, -1))
    return (cols - rows <= diagonal) if lower else (cols - rows >= diagonal)


@op(samples=lambda t: [
    t.S("tril", lambda x: x.tril(), t.rn(4, 4)),
    t.S("tril-offset", lambda x: tril(x, -1), t.NC(t.rn(3, 4), "F"))])
def tril(x, diagonal=0):
    if x.ndim < 2:
        raise RuntimeError("tril: input tensor must have at least 2 dimensions")
    return x.masked_fill(~_tri_mask(x, diagonal, True), 0)


@op(samples=lambda t: [
    t.S("triu", lambda x: x.triu(1), t.rn(3, 4)),
    t.S("triu-batched", lambda x: triu(x), t.rn(2, 3, 3))])
def triu(x, diagonal=0):
    if x.ndim < 2:
        raise RuntimeError("triu: input tensor must have at least 2 dimensions")
    return x.masked_fill(~_tri_mask(x, diagonal, False), 0)


@op(samples=lambda t: [
    t.S("flip", lambda x: x.flip(0), t.rn(3, 4)),
    t.S("flip-dims", lambda x: flip(x, (0, 1)), t.NC(t.rn(3, 4), "gap")),
    # flip_view, the view flip copies
    t.S("flip_view", lambda x: views.flip_view(x, (0,)), t.rn(3, 4)),
    t.S("flip_view-2dims", lambda x: views.flip_view(x, (0, 1)) * 1, t.NC(t.rn(3, 4), "F"))])
def flip(x, dims):
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    dims = tuple(L.normalize_dim(d, x.ndim, "flip") for d in dims)
    return views.flip_view(x, dims).clone()


@op(samples=lambda t: [
    t.S("roll", lambda x: x.roll(1, 1), t.rn(3, 4)),
    t.S("roll-flat", lambda x: roll(x, -2), t.NC(t.rn(3, 4), "F")),
    t.S("roll-multi", lambda x: x.roll((1, 2), (0, 1)), t.rn(3, 4))])
def roll(x, shifts, dims=None):
    if dims is None:
        return roll(x.reshape(-1), shifts, 0).reshape(x.shape)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise RuntimeError(f"roll: shifts and dimensions must align. shifts: {len(shifts)}, dims: {len(dims)}")
    for s, d in zip(shifts, dims):
        d = L.normalize_dim(d, x.ndim, "roll")
        n = x.shape[d]
        if n == 0:
            continue
        s %= n
        if s:
            x = cat([x.narrow(d, n - s, s), x.narrow(d, 0, n - s)], d)
    return x


@op(samples=lambda t: [
    t.S("rot90", lambda x: x.rot90(), t.rn(3, 4)),
    t.S("rot90-twice", lambda x: rot90(x, 2, (0, 2)), t.NC(t.rn(2, 3, 2), "F")),
    t.S("rot90-back", lambda x: x.rot90(-1, (1, 0)), t.rn(2, 3)),
    t.S("rot90-none", lambda x: x.rot90(4), t.rn(2, 3))])
def rot90(x, k=1, dims=(0, 1)):
    """A quarter turn ``k`` times, from dims[0] towards dims[1] (a copy, as torch's)."""
    dims = tuple(dims)
    if len(dims) != 2:
        raise RuntimeError(f"rot90: expected total rotation dims == 2, but got dims = {len(dims)}")
    if x.ndim < 2:
        raise RuntimeError(f"rot90: expected total dims >= 2, but got total dims = {x.ndim}")
    d0, d1 = (L.normalize_dim(d, x.ndim, "rot90") for d in dims)
    if d0 == d1:
        raise RuntimeError(f"rot90: expected rotation dims to be different, but got dim0 = {d0} and dim1 = {d1}")
    k %= 4
    if k == 1:
        return flip(x, d1).transpose(d0, d1)
    if k == 3:
        return flip(x, d0).transpose(d0, d1)
    return flip(x, (d0, d1)) if k == 2 else x.clone()


@op(samples=lambda t: [t.S("flipud", lambda x: x.flipud(), t.rn(3, 2))])
def flipud(x):
    if x.ndim < 1:
        raise RuntimeError("flipud: Input must be >= 1-d.")
    return flip(x, 0)


@op(samples=lambda t: [t.S("fliplr", lambda x: x.fliplr(), t.NC(t.rn(2, 3), "F"))])
def fliplr(x):
    if x.ndim < 2:
        raise RuntimeError(f"fliplr: Input must be >= 2-d (got a {x.ndim}-D tensor).")
    return flip(x, 1)


class ConstantPad(Function):
    @staticmethod
    def forward(ctx, x, pads, value):
        shape = list(x.shape)
        for i in range(len(pads) // 2):
            d = x.ndim - 1 - i
            shape[d] += pads[2 * i] + pads[2 * i + 1]
        out = new_like_shape(shape, x.dtype, x)
        out.fill_(value)
        region = out._layout
        ctx.slices = []
        for i in range(len(pads) // 2):
            d = x.ndim - 1 - i
            lo, hi = pads[2 * i], pads[2 * i + 1]
            start, length = max(lo, 0), x.shape[d] + min(lo, 0) + min(hi, 0)
            region = L.narrow(region, d, start, max(length, 0))
            ctx.slices.append((d, -min(lo, 0), start, max(length, 0)))
        src = x._layout
        for d, src_start, _, length in ctx.slices:
            src = L.narrow(src, d, src_start, length)
        kernel("copy", x)(buf(x), src, buf(out), region)
        ctx.meta = (x.shape, x.dtype)
        return out

    @staticmethod
    def backward(ctx, g):
        shape, dtype = ctx.meta
        inner = g
        for d, _, start, length in ctx.slices:
            inner = inner.narrow(d, start, length)
        if inner.shape == shape:
            return inner, None, None
        return views.StridedScatter.apply(inner, shape, _inner_layout(shape, ctx.slices)), None, None


def _inner_layout(shape, slices):
    layout = L.Layout(shape)
    for d, src_start, _, length in slices:
        layout = L.narrow(layout, d, src_start, length)
    return layout


def _source_positions(mode, n, lo, hi):
    """For one padded dim of size n: which input position each output position reads."""
    positions = range(-lo, n + hi)
    if mode == "reflect":
        period = 2 * (n - 1)
        return [period - i % period if i % period >= n else i % period for i in positions]
    if mode == "replicate":
        return [min(max(i, 0), n - 1) for i in positions]
    # circular, as torch's: negative pads crop first, and the positive ones wrap around what is left
    first, kept = max(-lo, 0), n + min(lo, 0) + min(hi, 0)
    return [first + i % kept for i in range(-max(lo, 0), kept + max(hi, 0))]


@op(method=False, samples=lambda t: [
    t.S("pad", lambda x: pad(x, (1, 2)), t.rn(3, 4)),
    t.S("pad-2d-value", lambda x: pad(x, (1, 0, 2, 1), value=0.5), t.NC(t.rn(3, 4), "F")),
    t.S("pad-negative", lambda x: pad(x, (-1, 2, 1, -1)), t.rn(3, 4)),
    t.S("pad-public", lambda x: pad(x, (2, 1, 0, 1)), t.rn(2, 3))])
def pad(x, pad, mode="constant", value=None):
    """``torch.nn.functional.pad``: pads the last len(pad) // 2 dims, last dim first. The
    non-constant modes gather (differentiably) the input positions each output reads."""
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise RuntimeError(f"pad: padding length {len(pad)} must be even and at most 2 * {x.ndim}")
    pad = tuple(int(p) for p in pad)
    if mode == "constant":
        return ConstantPad.apply(x, pad, 0 if value is None else value)
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(f"pad: mode '{mode}' is not one of 'constant', 'reflect', 'replicate', "
                                  f"'circular'")
    if value:
        raise RuntimeError(f"pad: padding mode '{mode}' doesn't take in value argument")
    return _GATHER_PADS.get((mode, len(pad) // 2), _gather_pad)(x, pad, mode)


def _gather_pad(x, pad, mode):
    """pad in a non-constant mode: each padded dim gathers the input positions its outputs read."""
    for i in range(len(pad) // 2):
        d, (lo, hi) = x.ndim - 1 - i, pad[2 * i:2 * i + 2]
        n = x.shape[d]
        limit = {"reflect": n - 1, "circular": n + min(lo, 0) + min(hi, 0), "replicate": math.inf if n else 0}[mode]
        if max(lo, hi) > limit or min(lo, hi) < -n:
            raise RuntimeError(f"pad: {mode} padding ({lo}, {hi}) of dim {d} of an input of shape "
                               f"{list(x.shape)} must be at most {limit} (and the dim non-empty)")
        index = tensor(_source_positions(mode, n, lo, hi), dtype=dt.int64, device=x.device)
        x = x.index_select(d, index)
    return x


# PyTorch's names of the padding ops on autocast lists (float32 under CPU autocast)
_GATHER_PADS = {(mode, dims): autocast_op(name)(_gather_pad) for (mode, dims), name in {
    ("reflect", 1): "reflection_pad1d", ("reflect", 2): "reflection_pad2d", ("replicate", 1): "replication_pad1d",
    ("replicate", 2): "replication_pad2d", ("replicate", 3): "replication_pad3d"}.items()}
