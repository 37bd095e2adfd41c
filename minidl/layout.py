"""Index math for strided tensors: pure Python, no arrays.

A tensor's elements live in a flat buffer. A *layout* says where: element
``(i0, i1, ..., ik)`` sits at ``offset + i0*strides[0] + ... + ik*strides[k]``
(strides counted in elements, any sign, zero for broadcast dimensions).
Every view (transpose, slice, expand, diagonal ...) is just a new layout over
the same buffer, and every device's kernels follow the formula above.
"""
from __future__ import annotations

import math
import operator


class Size(tuple):
    """A tensor's shape: a tuple of ints that prints like ``minidl.Size([2, 3])``."""

    def numel(self) -> int:
        return math.prod(self)

    def __repr__(self) -> str:
        return f"minidl.Size({list(self)})"


_strides_cache: dict = {}


def contiguous_strides(shape) -> tuple:
    """Row-major strides: the last dimension moves fastest (memoised: shapes repeat a lot)."""
    try:
        return _strides_cache[shape]
    except (KeyError, TypeError):
        pass
    strides = _row_major(shape)
    if len(_strides_cache) > 4096:
        _strides_cache.clear()
    try:
        _strides_cache[shape] = strides
    except TypeError:
        pass
    return strides


def _row_major(shape) -> tuple:
    strides = [1] * len(shape)
    step = 1
    for d in range(len(shape) - 1, -1, -1):
        strides[d] = step
        step *= max(shape[d], 1)
    return tuple(strides)


class Layout:
    """Shape + strides + offset. Immutable; derived facts are cached."""

    __slots__ = ("shape", "strides", "offset", "numel", "_contiguous")

    def __init__(self, shape, strides=None, offset=0, contiguous=None):
        self.shape = shape if type(shape) is Size else Size(shape)
        self.strides = contiguous_strides(self.shape) if strides is None else tuple(strides)
        self.offset = offset
        self.numel = math.prod(self.shape)
        self._contiguous = True if strides is None else contiguous

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_contiguous(self) -> bool:
        """True when the elements are packed row-major (size-1 dims may have any stride)."""
        if self._contiguous is None:
            self._contiguous = is_contiguous(self.shape, self.strides)
        return self._contiguous

    def position(self, index) -> int:
        """Buffer position of the element at a multi-index."""
        return self.offset + sum(i * s for i, s in zip(index, self.strides))

    def span(self):
        """(lowest, highest) buffer position touched; (offset, offset-1) when empty."""
        if self.numel == 0:
            return self.offset, self.offset - 1
        lo = hi = self.offset
        for n, s in zip(self.shape, self.strides):
            if s > 0:
                hi += (n - 1) * s
            else:
                lo += (n - 1) * s
        return lo, hi

    def __repr__(self) -> str:
        return f"Layout(shape={tuple(self.shape)}, strides={self.strides}, offset={self.offset})"


def is_contiguous(shape, strides) -> bool:
    if 0 in shape:
        return True  # no elements: contiguous whatever the strides, as in PyTorch
    expected = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n == 1:
            continue
        if s != expected:
            return False
        expected *= n
    return True


# ----------------------------------------------------------------------------- dims
def normalize_dim(dim, ndim: int, op: str = "op") -> int:
    """Wrap a possibly negative dim; 0-d tensors accept dims -1 and 0 as PyTorch does."""
    dim = operator.index(dim)
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"{op}: dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim % n


def normalize_dims(dims, ndim: int, op: str = "op") -> tuple:
    """A sorted tuple of distinct dims; None or () means all of them."""
    if dims is None:
        return tuple(range(ndim))
    if isinstance(dims, int) or hasattr(dims, "__index__"):
        dims = (dims,)
    out = sorted({normalize_dim(d, ndim, op) for d in dims})
    if len(out) != len(dims):
        raise RuntimeError(f"{op}: dim {tuple(dims)} appears multiple times in the list of dims")
    return tuple(out) if ndim else ()


# ----------------------------------------------------------------------------- broadcasting
def broadcast_shapes(*shapes, op: str = "broadcast") -> Size:
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for shape in shapes:
        for i, n in enumerate(shape, ndim - len(shape)):
            if n != 1 and out[i] != n:
                if out[i] != 1:
                    names = " and ".join(str(list(s)) for s in shapes)
                    raise RuntimeError(f"{op}: shapes {names} cannot be broadcast together "
                                       f"(dimension {i}: {out[i]} vs {n})")
                out[i] = n
    return Size(out)


_scalar_views: dict = {}   # (shape, offset) -> a 0-d layout expanded to shape (layouts are immutable)


def expand(layout: Layout, shape, op: str = "expand") -> Layout:
    """View of ``layout`` broadcast to ``shape`` (new or size-1 dims get stride 0); -1 keeps a size."""
    if shape == layout.shape:
        return layout
    shape = tuple(shape)
    if not layout.shape and -1 not in shape:   # (a number read for every element: the same few each step)
        key = (shape, layout.offset)
        found = _scalar_views.get(key)
        if found is None:
            if len(_scalar_views) > 256:
                _scalar_views.clear()
            found = _scalar_views[key] = Layout(shape, (0,) * len(shape), layout.offset)
        return found
    lead = len(shape) - layout.ndim
    if lead < 0:
        raise RuntimeError(f"{op}: the number of sizes provided ({len(shape)}) must be greater or equal "
                           f"to the number of dimensions in the tensor ({layout.ndim})")
    sizes, strides = [], []
    for i, n in enumerate(shape):
        if i < lead:
            if n < 0:
                raise RuntimeError(f"{op}: the expanded size {n} is not allowed in a leading, non-existing dimension")
            sizes.append(n)
            strides.append(0)
            continue
        have, st = layout.shape[i - lead], layout.strides[i - lead]
        if n < -1:
            raise RuntimeError(f"{op}: invalid size {n} in {list(shape)}")
        if n == -1 or n == have:
            sizes.append(have)
            strides.append(st)
        elif have == 1:
            sizes.append(n)
            strides.append(0)
        else:
            raise RuntimeError(f"{op}: the expanded size of the tensor ({n}) must match the existing size "
                               f"({have}) at non-singleton dimension {i}; target {list(shape)}, "
                               f"tensor {list(layout.shape)}")
    if tuple(sizes) == layout.shape:
        return layout
    return Layout(sizes, strides, layout.offset)


# ----------------------------------------------------------------------------- views
def permute(layout: Layout, dims) -> Layout:
    dims = tuple(normalize_dim(d, layout.ndim, "permute") for d in dims)
    if sorted(dims) != list(range(layout.ndim)):
        raise RuntimeError(f"permute: dims {dims} are not a permutation of the {layout.ndim} dimensions "
                           f"of a tensor of shape {list(layout.shape)}")
    return Layout([layout.shape[d] for d in dims], [layout.strides[d] for d in dims], layout.offset)


def transpose(layout: Layout, d0: int, d1: int) -> Layout:
    d0, d1 = normalize_dim(d0, layout.ndim, "transpose"), normalize_dim(d1, layout.ndim, "transpose")
    if not layout.ndim:  # a 0-d tensor's dims -1 and 0 both name its one (absent) dim
        return layout
    order = list(range(layout.ndim))
    order[d0], order[d1] = order[d1], order[d0]
    return permute(layout, order)


def narrow(layout: Layout, dim: int, start: int, length: int) -> Layout:
    dim = normalize_dim(dim, layout.ndim, "narrow")
    n = layout.shape[dim]
    if start < 0:
        start += n
    if not (0 <= start <= n and 0 <= length and start + length <= n):
        raise IndexError(f"narrow: start {start} + length {length} exceeds dimension {dim} of size {n}")
    shape = list(layout.shape)
    shape[dim] = length
    return Layout(shape, layout.strides, layout.offset + start * layout.strides[dim])


def slice_dim(layout: Layout, dim: int, start, stop, step) -> Layout:
    """Python slice semantics on one dim; any nonzero step, negative too."""
    if step == 0:
        raise ValueError("slice step cannot be zero")
    n = layout.shape[dim]
    start, stop, step = slice(start, stop, step).indices(n)
    count = len(range(start, stop, step))
    shape, strides = list(layout.shape), list(layout.strides)
    shape[dim] = count
    strides[dim] = layout.strides[dim] * step
    offset = layout.offset + (start * layout.strides[dim] if count else 0)
    return Layout(shape, strides, offset)


def select(layout: Layout, dim: int, index: int) -> Layout:
    """Drop ``dim`` by fixing it at ``index`` (negative counts from the end)."""
    n = layout.shape[dim]
    if not -n <= index < n:
        raise IndexError(f"index {index} is out of bounds for dimension {dim} with size {n}")
    index %= n
    shape, strides = list(layout.shape), list(layout.strides)
    offset = layout.offset + index * strides[dim]
    del shape[dim], strides[dim]
    return Layout(shape, strides, offset)


def unsqueeze(layout: Layout, dim: int) -> Layout:
    dim = normalize_dim(dim, layout.ndim + 1, "unsqueeze")
    shape, strides = list(layout.shape), list(layout.strides)
    inner = strides[dim] * shape[dim] if dim < layout.ndim else 1
    shape.insert(dim, 1)
    strides.insert(dim, inner)
    return Layout(shape, strides, layout.offset, layout._contiguous)


def squeeze(layout: Layout, dims=None) -> Layout:
    dims = normalize_dims(dims, layout.ndim, "squeeze")
    keep = [d for d in range(layout.ndim) if not (d in dims and layout.shape[d] == 1)]
    return Layout([layout.shape[d] for d in keep], [layout.strides[d] for d in keep], layout.offset,
                  layout._contiguous)


def diagonal(layout: Layout, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Layout:
    d1, d2 = normalize_dim(dim1, layout.ndim, "diagonal"), normalize_dim(dim2, layout.ndim, "diagonal")
    if d1 == d2:
        raise RuntimeError(f"diagonal: dimensions cannot be identical {dim1}, {dim2}")
    n1, n2 = layout.shape[d1], layout.shape[d2]
    s1, s2 = layout.strides[d1], layout.strides[d2]
    if offset >= 0:
        length = max(min(n1, n2 - offset), 0)
        start = layout.offset + (offset * s2 if length else 0)
    else:
        length = max(min(n1 + offset, n2), 0)
        start = layout.offset + (-offset * s1 if length else 0)
    keep = [d for d in range(layout.ndim) if d not in (d1, d2)]
    return Layout([layout.shape[d] for d in keep] + [length],
                  [layout.strides[d] for d in keep] + [s1 + s2], start)


def infer_shape(shape, numel: int, op: str = "view") -> tuple:
    """Resolve a single -1 in a requested shape."""
    shape = tuple(operator.index(n) for n in shape)
    unknown = [i for i, n in enumerate(shape) if n == -1]
    if len(unknown) > 1:
        raise RuntimeError(f"{op}: only one dimension can be inferred, got shape {list(shape)}")
    if any(n < -1 for n in shape):
        raise RuntimeError(f"{op}: invalid shape dimension in {list(shape)}")
    known = math.prod(n for n in shape if n != -1)
    if unknown:
        if known == 0 or numel % known:
            raise RuntimeError(f"{op}: shape {list(shape)} is invalid for input of size {numel}")
        shape = shape[:unknown[0]] + (numel // known,) + shape[unknown[0] + 1:]
    elif known != numel:
        raise RuntimeError(f"{op}: shape {list(shape)} is invalid for input of size {numel}")
    return shape


def view_strides(layout: Layout, shape):
    """Strides that show ``layout``'s elements in ``shape`` without a copy, or None if impossible.

    Old dims are grouped into chunks that are one evenly strided run (each
    stride equals the next stride times the next size). A view is possible
    when the new dims, read from the back, tile those chunks exactly.
    """
    if layout.numel == 0 or layout.ndim == 0 or layout.is_contiguous:
        return contiguous_strides(shape)
    old_shape, old_strides = layout.shape, layout.strides
    new_strides = [0] * len(shape)
    view_d = len(shape) - 1
    base_stride = old_strides[-1]
    chunk_numel = view_numel = 1
    for d in range(len(old_shape) - 1, -1, -1):
        chunk_numel *= old_shape[d]
        chunk_ends = d == 0 or (old_shape[d - 1] != 1 and old_strides[d - 1] != chunk_numel * base_stride)
        if not chunk_ends:
            continue
        while view_d >= 0 and (view_numel < chunk_numel or shape[view_d] == 1):
            new_strides[view_d] = view_numel * base_stride
            view_numel *= shape[view_d]
            view_d -= 1
        if view_numel != chunk_numel:
            return None
        if d > 0:
            base_stride = old_strides[d - 1]
            chunk_numel = view_numel = 1
    return tuple(new_strides) if view_d == -1 else None


# ----------------------------------------------------------------------------- kernel planning
def collapse(shape, *strides_list):
    """Merge adjacent dims that every operand walks as one run; drop size-1 dims.

    Returns (shape, [strides...]) describing the same element order with as few
    dims as possible, which keeps kernels' inner loops long.
    """
    dims = [d for d in range(len(shape)) if shape[d] != 1]
    if not dims:
        return (1,), [(0,) for _ in strides_list]
    out_shape = [shape[dims[0]]]
    out_strides = [[s[dims[0]]] for s in strides_list]
    for d in dims[1:]:
        n = shape[d]
        if all(st[-1] == s[d] * n for st, s in zip(out_strides, strides_list)):
            out_shape[-1] *= n
            for st, s in zip(out_strides, strides_list):
                st[-1] = s[d]
        else:
            out_shape.append(n)
            for st, s in zip(out_strides, strides_list):
                st.append(s[d])
    return tuple(out_shape), [tuple(st) for st in out_strides]


def reduction_plan(layout: Layout, dims):
    """Split a layout into kept (outer) and reduced (inner) dims for a reduction kernel.

    Returns (outer_shape, outer_strides, inner_shape, inner_strides), each
    collapsed; the output has ``prod(outer_shape)`` elements in row-major order.
    """
    kept = [d for d in range(layout.ndim) if d not in dims]
    o_shape, (o_strides,) = collapse([layout.shape[d] for d in kept], [layout.strides[d] for d in kept])
    i_shape, (i_strides,) = collapse([layout.shape[d] for d in dims], [layout.strides[d] for d in dims])
    return o_shape, o_strides, i_shape, i_strides


def reduced_shape(shape, dims, keepdim: bool) -> tuple:
    if keepdim:
        return tuple(1 if d in dims else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in dims)
