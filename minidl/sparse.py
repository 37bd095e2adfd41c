"""Sparse COO tensors (PyTorch's ``sparse_coo`` layout): the gradient of an embedding table whose
batch touched a few of its rows, kept as those rows.

A sparse COO tensor of size (s_0, ..., s_{k-1}, d_0, ...) has k *sparse* dims and the rest dense:
``indices`` is an int64 (k, nnz) tensor of positions in the sparse dims, ``values`` an
(nnz, d_0, ...) tensor of what sits at each, and every other element is zero. A position may
appear more than once (the tensor is then *uncoalesced*, and the entries add up); ``coalesce()``
sums the repeats and sorts the positions.

The work is done by dense primitives, so every device that has them has sparse tensors:
coalescing sorts the linearised positions (``argsort``) and sums each run of equal ones into one
row (``index_add_``, the ``put`` primitive with accumulate: a segment sum); making it dense, or
adding it into a dense tensor, is the same ``put`` (``index_put_(..., accumulate=True)``).
"""
from __future__ import annotations

import inspect
import math
import numbers
import sys

from . import _dtype as dt
from . import ops
from ._device import explicit_default
from ._layouts import sparse_coo
from ._tensor import Tensor
from .layout import Size
from .printing import tensor_repr


def sparse_coo_tensor(indices, values, size=None, *, dtype=None, device=None, requires_grad=False,
                      check_invariants=None, is_coalesced=None) -> "SparseCOOTensor":
    """``torch.sparse_coo_tensor``: ``values[i]`` at position ``indices[:, i]`` (repeats add up).
    ``size`` defaults to the smallest holding every index, then the values' trailing dims."""
    if requires_grad:
        raise NotImplementedError("sparse_coo_tensor: sparse tensors that require grad are not supported (sparse "
                                  "tensors here are gradients: nn.Embedding(sparse=True) makes them)")
    if device is None:
        device = explicit_default()   # (as torch's: on the default device, if one was set)
    indices = indices if isinstance(indices, Tensor) else ops.tensor(indices, device=device)
    indices = indices.long()   # (torch takes any integer or float indices and makes them int64)
    values = values if isinstance(values, Tensor) else ops.tensor(values, dtype=dtype, device=device)
    if device is not None:
        indices, values = indices.to(device), values.to(device)
    if dtype is not None:
        values = values.to(dtype)
    if size is None and indices.ndim == 2:
        top = indices.amax(dim=1).tolist() if indices.shape[1] else [-1] * indices.shape[0]
        size = [i + 1 for i in top] + list(values.shape[1:])
    return SparseCOOTensor(indices, values, size, coalesced=bool(is_coalesced))


def dense_to_sparse(x: Tensor, sparse_dim=None) -> "SparseCOOTensor":
    """``Tensor.to_sparse``: the nonzero elements of ``x`` (or, with ``sparse_dim`` k < ndim, the
    slices x[i_0, ..., i_{k-1}] holding a nonzero), coalesced."""
    k = x.ndim if sparse_dim is None else sparse_dim
    if not 0 < k <= x.ndim:
        raise RuntimeError(f"to_sparse: sparse_dim={sparse_dim} for a tensor of {x.ndim} dims; it must be in "
                           f"1..{x.ndim}")
    occupied = x != 0
    if k < x.ndim:
        occupied = occupied.flatten(k).any(dim=k)
    indices = occupied.nonzero().t().contiguous()
    out = SparseCOOTensor(indices, x[tuple(indices)], x.shape, coalesced=True)
    out._source = x
    return out


class SparseCOOTensor:
    """A sparse COO tensor: made by ``sparse_coo_tensor``, ``Tensor.to_sparse`` or a sparse
    embedding's backward. It adds (to sparse or, as ``dense + sparse``, to dense tensors), scales
    by numbers, coalesces, moves between devices and turns dense; other ops refuse it by name."""

    __slots__ = ("_idx", "_vals", "_size", "_coalesced", "_source")
    is_sparse = True
    layout = sparse_coo
    grad = None

    def __init__(self, indices: Tensor, values: Tensor, size, coalesced: bool = False, check: bool = True):
        size = tuple(int(s) for s in size)
        if check:
            _check(indices, values, size)
        self._idx, self._vals, self._size = indices, values, size
        self._coalesced = coalesced or indices.shape[1] <= 1
        self._source = None  # the dense tensor ``to_sparse`` made this from (see _values_root)

    # -- what it is -------------------------------------------------------------------------------
    @property
    def shape(self) -> Size:
        return Size(self._size)

    def size(self, dim=None):
        return self.shape if dim is None else self._size[dim]

    def dim(self) -> int:
        return len(self._size)

    ndim = property(dim)

    @property
    def dtype(self):
        return self._vals.dtype

    @property
    def device(self):
        return self._vals.device

    def numel(self) -> int:
        return math.prod(self._size)

    def sparse_dim(self) -> int:
        return self._idx.shape[0]

    def dense_dim(self) -> int:
        return self._vals.ndim - 1

    def _nnz(self) -> int:
        return self._idx.shape[1]

    def _indices(self) -> Tensor:
        return self._idx

    def _values(self) -> Tensor:
        return self._vals

    def indices(self) -> Tensor:
        self._need_coalesced("indices")
        return self._idx

    def values(self) -> Tensor:
        self._need_coalesced("values")
        return self._vals

    def is_coalesced(self) -> bool:
        return self._coalesced

    def _need_coalesced(self, what):
        if not self._coalesced:
            raise RuntimeError(f"Cannot get {what} on an uncoalesced tensor, please call .coalesce() first")

    def _values_root(self, grad):
        """As a root of backward: the tensor its graph starts from, and that tensor's gradient. For
        ``x.to_sparse()`` that is x and all of ``grad`` (dense or sparse, of this shape), zeros' places
        too, as torch's; otherwise the values and the part of ``grad`` at this tensor's indices."""
        if self._source is not None:
            return self._source, grad.to_dense()
        return self._vals, grad.to_dense()[tuple(self._idx)]

    # -- conversions ------------------------------------------------------------------------------
    def coalesce(self) -> "SparseCOOTensor":
        """The same tensor with each position once (repeats summed) and positions in row-major order."""
        if self._coalesced:
            return self
        key = self._positions()
        order = key.argsort(stable=True)
        key = key[order]
        first = ops.ones(key.shape[0], dtype=dt.bool_, device=key.device)
        first[1:] = key[1:] != key[:-1]
        segment = first.cumsum(0) - 1                     # the output row of each sorted entry
        rows = key[first]
        values = ops.zeros((rows.shape[0],) + tuple(self._vals.shape[1:]), dtype=self.dtype, device=self.device)
        values.index_add_(0, segment, self._vals.detach()[order])
        return SparseCOOTensor(self._unravel(rows), values, self._size, coalesced=True, check=False)

    def to_dense(self) -> Tensor:
        out = ops.zeros(self._size, dtype=self.dtype, device=self.device)
        return out.index_put_(tuple(self._idx), self._vals, accumulate=True)

    def to(self, *args, **kwargs) -> "SparseCOOTensor":
        """As ``Tensor.to``: another device and/or dtype (for the values; indices stay int64)."""
        values = self._vals.to(*args, **kwargs)
        return SparseCOOTensor(self._idx.to(values.device), values, self._size, self._coalesced)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        return self.to("cuda" if device is None else device)

    def double(self):
        return self.to(dt.float64)

    def float(self):
        return self.to(dt.float32)

    def clone(self) -> "SparseCOOTensor":
        return SparseCOOTensor(self._idx.clone(), self._vals.clone(), self._size, self._coalesced)

    # -- autograd: through the values (to_sparse of a tensor that requires grad keeps its graph, as torch's)
    @property
    def requires_grad(self) -> bool:
        return self._vals.requires_grad

    @property
    def grad_fn(self):
        return self._vals.grad_fn

    @property
    def is_leaf(self) -> bool:
        return self._vals.grad_fn is None

    def detach(self) -> "SparseCOOTensor":
        return SparseCOOTensor(self._idx, self._vals.detach(), self._size, self._coalesced, check=False)

    def detach_(self) -> "SparseCOOTensor":
        self._vals = self._vals.detach()
        return self

    def requires_grad_(self, requires_grad: bool = True) -> "SparseCOOTensor":
        if requires_grad:
            raise NotImplementedError("requires_grad_: sparse tensors that require grad are not supported")
        return self

    # -- arithmetic -------------------------------------------------------------------------------
    def add(self, other, alpha=1) -> "SparseCOOTensor":
        """sparse + sparse: both tensors' entries, uncoalesced. (dense + sparse is dense: write the
        dense tensor first, as in torch.)"""
        if not isinstance(other, SparseCOOTensor):
            raise RuntimeError("add(sparse, dense) is not supported. Use add(dense, sparse) instead.")
        self._same_size(other, "add")
        values = other._vals if alpha == 1 else other._vals * alpha
        result = dt.result_type(self._vals, values)
        total = SparseCOOTensor(ops.cat([self._idx, other._idx], dim=1),
                                ops.cat([self._vals.to(result), values.to(result)]), self._size, check=False)
        return total.coalesce() if self._coalesced and other._coalesced else total   # (as torch's)

    __add__ = add

    def add_(self, other, alpha=1) -> "SparseCOOTensor":
        total = self.add(other, alpha)
        self._idx, self._vals, self._coalesced = total._idx, total._vals.to(self.dtype), total._coalesced
        return self

    __iadd__ = add_

    def mul(self, other) -> "SparseCOOTensor":
        return SparseCOOTensor(self._idx, self._vals * _scalar(other, "mul"), self._size, self._coalesced)

    __mul__ = __rmul__ = mul

    def mul_(self, other) -> "SparseCOOTensor":
        self._vals = self._vals * _scalar(other, "mul_")
        return self

    def div(self, other) -> "SparseCOOTensor":
        return SparseCOOTensor(self._idx, self._vals / _scalar(other, "div"), self._size, self._coalesced)

    __truediv__ = div

    def div_(self, other) -> "SparseCOOTensor":
        self._vals = self._vals / _scalar(other, "div_")
        return self

    def neg(self) -> "SparseCOOTensor":
        return SparseCOOTensor(self._idx, -self._vals, self._size, self._coalesced)

    __neg__ = neg

    def zero_(self) -> "SparseCOOTensor":
        """No entries left (what ``zero_grad(set_to_none=False)`` does to a sparse gradient)."""
        self._idx = self._idx[:, :0]
        self._vals = self._vals[:0]
        self._coalesced = True
        return self

    def _added_to(self, dense: Tensor, alpha=1, in_place=False) -> Tensor:
        """dense + alpha * self (into ``dense`` itself when ``in_place``): a dense tensor."""
        if tuple(dense.shape) != self._size:
            raise RuntimeError(f"add: expected 'self' and 'other' to have same size, but self has size "
                               f"{list(dense.shape)} while other has size {list(self._size)}")
        values = self._vals if alpha == 1 else self._vals * alpha
        result = dt.result_type(dense, values)
        if not in_place:
            dense = dense.to(result, copy=True)
        elif result.category > dense.dtype.category:
            raise RuntimeError(f"add_: result type {result.name} can't be cast to the desired output type "
                               f"{dense.dtype.name}")
        return dense.index_put_(tuple(self._idx), values.to(dense.dtype), accumulate=True)

    # -- helpers ----------------------------------------------------------------------------------
    def _same_size(self, other, op):
        if other._size != self._size:
            raise RuntimeError(f"{op}: expected 'self' and 'other' to have same size, but self has size "
                               f"{list(self._size)} while other has size {list(other._size)}")

    def _positions(self) -> Tensor:
        """Each entry's row-major position among the sparse dims (int64)."""
        key = ops.zeros(self._nnz(), dtype=dt.int64, device=self.device)
        for d in range(self.sparse_dim()):
            key = key * self._size[d] + self._idx[d]
        return key

    def _unravel(self, positions: Tensor) -> Tensor:
        rows = []
        for d in reversed(range(self.sparse_dim())):
            rows.append(positions % self._size[d])
            positions = positions // self._size[d]
        return ops.stack(rows[::-1]) if rows else positions.reshape(0, -1)

    def __repr__(self):
        extras = [f"size={tuple(self._size)}", f"nnz={self._nnz()}"]
        if self.dtype not in (dt.get_default_dtype(), dt.int64, dt.bool_):
            extras.append(f"dtype=minidl.{self.dtype.name}")
        if self.device.type != "cpu":
            extras.append(f"device='{self.device}'")
        extras.append("layout=minidl.sparse_coo")
        return (_field("tensor(indices=", self._idx) + ",\n" + _field("       values=", self._vals) + ",\n       "
                + ", ".join(extras) + ")")

    __str__ = __repr__

    def __len__(self):
        return self._size[0]

    def __getattr__(self, name):
        """Any other op refuses a sparse tensor, by name (a method here, or a function it reached)."""
        op = name if name in ops.registry.methods() else _calling_op()
        if op is None:
            raise AttributeError(f"'SparseCOOTensor' object has no attribute {name!r}")
        raise NotImplementedError(f"{op}: sparse COO tensors are not supported (got one of size {list(self._size)}, "
                                  f"{self.dtype.name}, on {self.device}); sparse tensors add, scale, coalesce and "
                                  f"move between devices: call .to_dense() for anything else")


def _check(indices, values, size):
    """The invariants (checked, not assumed: a bad index would write outside the table)."""
    if not isinstance(indices, Tensor) or indices.dtype is not dt.int64 or indices.ndim != 2:
        what = f"{indices.dtype.name} tensor of shape {list(indices.shape)}" if isinstance(indices, Tensor) else \
            type(indices).__name__
        raise RuntimeError(f"sparse_coo_tensor: indices must be an int64 tensor of shape (sparse_dim, nnz), got a {what}")
    k, nnz = indices.shape
    if values.ndim < 1 or values.shape[0] != nnz:
        raise RuntimeError(f"sparse_coo_tensor: values of shape {list(values.shape)} for {nnz} indices; values must "
                           f"have nnz = {nnz} rows")
    if len(size) != k + values.ndim - 1 or tuple(size[k:]) != tuple(values.shape[1:]):
        raise RuntimeError(f"sparse_coo_tensor: size {list(size)} does not fit {k} sparse dims and values of shape "
                           f"{list(values.shape)} (size must be {k} sparse sizes, then {list(values.shape[1:])})")
    if indices.device != values.device:
        raise RuntimeError(f"sparse_coo_tensor: indices on {indices.device} and values on {values.device}; they "
                           f"must be on one device")
    if nnz and not indices.is_meta:   # (meta indices have no values to check)
        low, high = indices.amin(dim=1).tolist(), indices.amax(dim=1).tolist()
        for d in range(k):
            if low[d] < 0 or high[d] >= size[d]:
                bad = low[d] if low[d] < 0 else high[d]
                raise RuntimeError(f"sparse_coo_tensor: index {bad} in sparse dim {d} is out of bounds for size "
                                   f"{size[d]} (size {list(size)})")
    if math.prod(size[:k]) >= 2 ** 63:
        raise RuntimeError(f"sparse_coo_tensor: the sparse sizes {list(size[:k])} hold more than 2**63 positions")


def _scalar(other, op):
    if isinstance(other, numbers.Number):
        return other
    if isinstance(other, Tensor) and other.ndim == 0:
        return other.item()
    raise NotImplementedError(f"{op}: a sparse COO tensor multiplies or divides by a number or a 0-d tensor only, "
                              f"got {type(other).__name__}{' of shape ' + str(list(other.shape)) if isinstance(other, Tensor) else ''}")


def _field(prefix, t):
    """``prefix`` then t's repr, its later lines indented under the first."""
    lines = tensor_repr(t, in_sparse=True).split("\n")
    return "\n".join([prefix + lines[0]] + [(" " * len(prefix) + line).rstrip() for line in lines[1:]])


def _calling_op():
    """The name of the registered op running below this call, if any: found by its function's
    code, or, for an op that is a Function's ``apply``, by that Function class."""
    by_class, codes = {}, {}
    for d in ops.registry.OPS.values():
        fn = inspect.unwrap(d.function)
        owner = getattr(fn, "__self__", None)
        if isinstance(owner, type):
            by_class.setdefault(owner, d.name)
        else:
            codes.setdefault(getattr(fn, "__code__", None), []).append(d.name)
    by_code = {code: names[0] for code, names in codes.items() if len(names) == 1}   # (factory-made: ambiguous)
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "apply":
            name = by_class.get(frame.f_locals.get("cls"))
        else:
            name = by_code.get(frame.f_code)
        if name is not None:
            return name
        frame = frame.f_back
    return None


def _embedding_gradient(rows: Tensor, values: Tensor, size) -> SparseCOOTensor:
    """The sparse gradient of an embedding table (``ops.embedding``'s sparse_grad rule): the looked-up
    rows, each with its gradient, uncoalesced (valid by construction: they indexed the table)."""
    return SparseCOOTensor(rows.unsqueeze(0), values, size, check=False)


def _add_into_dense(dense: Tensor, sparse: SparseCOOTensor, alpha, in_place) -> Tensor:
    """``add``'s rule for a sparse operand: dense + alpha * sparse (into ``dense`` when in place)."""
    return sparse._added_to(dense, alpha, in_place)


ops.registry.attach_rule("embedding", "sparse_grad", _embedding_gradient)
ops.registry.attach_rule("add", "sparse_input", _add_into_dense)
