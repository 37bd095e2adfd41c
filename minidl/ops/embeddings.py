"""The embedding lookup: rows of a table by index, and the gradient that lands on those rows only; and the
bags of embedding_bag, folded from those rows by bag id.

With ``sparse=True`` the table's gradient is a sparse COO tensor of the looked-up rows, built by
the op's ``sparse_grad`` rule, which the sparse tensor's module (``minidl.sparse``, above the ops)
attaches to this declaration: ``rule(row indices, values, table size)``.
"""
from __future__ import annotations

from .. import _dtype as dt
from .. import _tracing
from ..autograd import Function, no_grad
from .creation import arange, ones_like, zeros
from .elementwise import where
from .registry import OPS, op
from .search import searchsorted
from .sorting import bincount


class Embedding(Function):
    """weight[input], and backward: each looked-up row's gradient summed into its row (scaled by
    1 / its count in the batch with ``scale_grad_by_freq``; nothing for ``padding_idx``)."""

    @staticmethod
    def forward(ctx, weight, input, padding_idx, scale_grad_by_freq, sparse):
        ctx.save_for_backward(input)   # (an index changed in place before backward is an error)
        ctx.size, ctx.options = tuple(weight.shape), (padding_idx, scale_grad_by_freq, sparse)
        return weight[input]

    @staticmethod
    def backward(ctx, g):
        padding_idx, scale_grad_by_freq, sparse = ctx.options
        if sparse and scale_grad_by_freq:  # (at backward, as torch: the lookup itself computes)
            raise RuntimeError("embedding_backward: scale_grad_by_freq not supported with sparse gradients")
        (input,) = ctx.saved_tensors
        rows = input.reshape(-1).clone()
        values = g.reshape(rows.numel(), ctx.size[1])   # (the gradient's own rows; -1 cannot size 0 columns)
        if scale_grad_by_freq:
            values = values / bincount(rows, minlength=ctx.size[0])[rows].unsqueeze(1).to(values.dtype)
        if padding_idx is not None:
            keep = rows != padding_idx
            rows, values = rows[keep], values[keep]
        if sparse:
            return OPS["embedding"].rules["sparse_grad"](rows, values.clone(), ctx.size), None, None, None, None
        return zeros(ctx.size, dtype=g.dtype, device=g.device).index_add_(0, rows, values), None, None, None, None


# (padding_idx and scale_grad_by_freq give gradients that are not the derivative, on purpose: they
# are checked against torch in tests/test_sparse.py, not by finite differences)
@op(method=False, namespace="nn.functional", samples=lambda t: [
    t.S("embedding", lambda w: embedding(t.const([[0, 2], [2, 1]]), w), t.rn(3, 4), any_layout=False)])
def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False, sparse=False):
    """``torch.nn.functional.embedding``. ``max_norm``: first, in place and without autograd,
    every looked-up row whose ``norm_type`` norm exceeds it is scaled to norm max_norm."""
    if input.dtype not in (dt.int64, dt.int32):
        raise RuntimeError(f"embedding: expected the indices to be int64 or int32, got {input.dtype.name} "
                           f"(weight {list(weight.shape)})")
    if weight.ndim != 2:
        raise RuntimeError(f"embedding: weight must be 2-D (num_embeddings, embedding_dim), got shape "
                           f"{list(weight.shape)}")
    if padding_idx is not None:
        if not -weight.shape[0] <= padding_idx < weight.shape[0]:
            raise AssertionError(f"Padding_idx must be within num_embeddings (got {padding_idx} for "
                                 f"{weight.shape[0]} rows)")
        padding_idx %= weight.shape[0]
    input = input.long()
    if input.numel() and not input.is_meta:   # (meta indices have no values to check)
        lo, hi, rows = input.min(), input.max(), weight.shape[0]

        def check():   # (a replay checks again: minidl.compile)
            if int(lo) < 0 or int(hi) >= rows:
                raise IndexError(f"index out of range in self (embedding: indices from {int(lo)} to {int(hi)} "
                                 f"for {rows} rows)")
        _tracing.host_check(check)
    if max_norm is not None:
        _renorm_(weight, input, max_norm, norm_type)
    return Embedding.apply(weight, input, padding_idx, scale_grad_by_freq, sparse)


def _renorm_(weight, input, max_norm, norm_type):
    """torch's embedding_renorm_: the looked-up rows of norm above max_norm scaled down to it."""
    with no_grad():
        rows = input.reshape(-1).unique()
        norms = weight[rows].norm(norm_type, dim=1)
        big = norms > max_norm
        rows, norms = rows[big], norms[big]
        weight.index_put_((rows,), weight[rows] * (max_norm / (norms + 1e-7)).unsqueeze(1))


_BAG_MODES = ("sum", "mean", "max")


def _bags(input, offsets, include_last_offset):
    """The flat indices, the bag of each (``count``, one past the last bag, for an index after it) and the bag
    count, from a 2-D input of equal bags or a 1-D input cut at ``offsets``."""
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError(f"embedding_bag: if input is 2D, then offsets has to be None, as input is treated as a "
                             f"mini-batch of fixed length sequences; got offsets of shape {list(offsets.shape)}")
        count, length = input.shape
        return input.reshape(-1), arange(input.numel(), device=input.device) // max(length, 1), count
    if input.ndim != 1:
        raise ValueError(f"embedding_bag: input has to be 1D or 2D Tensor, but got Tensor of dimension {input.ndim}")
    if offsets is None or offsets.ndim != 1:
        raise ValueError("embedding_bag: offsets has to be a 1D Tensor but got "
                         + ("None" if offsets is None else f"shape {list(offsets.shape)}"))
    offsets = offsets.long()
    if offsets.numel() and not offsets.is_meta:
        first, last, length = offsets[0], offsets[-1], input.numel()
        bad = (first != 0) | (last > length)

        def check():   # (one read from the device, the bounds' only when they are wrong; a replay checks again)
            if bool(bad):
                raise ValueError(f"embedding_bag: offsets must start at 0 and not pass the input's length {length}, "
                                 f"got offsets from {int(first)} to {int(last)}")
        _tracing.host_check(check)
    count = offsets.numel() - 1 if include_last_offset else offsets.numel()
    bag = searchsorted(offsets, arange(input.numel(), device=input.device), right=True) - 1
    count = max(count, 0)
    return input, where(bag < count, bag, count), count


def _check_bag_arguments(input, weight, offsets, mode, per_sample_weights, scale_grad_by_freq, sparse):
    if weight.ndim != 2:
        raise ValueError(f"embedding_bag: weight has to be a 2D Tensor, but got Tensor of dimension {weight.ndim}")
    if input.dtype not in (dt.int64, dt.int32) or (offsets is not None and offsets.dtype not in (dt.int64, dt.int32)):
        raise RuntimeError(f"embedding_bag: expected the indices and offsets to be int64 or int32, got "
                           f"{input.dtype.name}" + ("" if offsets is None else f" and {offsets.dtype.name}"))
    if not weight.dtype.is_floating_point:
        raise RuntimeError(f"embedding_bag: expected a floating point weight, got {weight.dtype.name}")
    if mode not in _BAG_MODES:
        raise ValueError(f"embedding_bag: mode has to be one of sum, mean or max, got {mode!r}")
    if mode == "max" and (scale_grad_by_freq or sparse):
        raise ValueError("embedding_bag: max mode does not support " + ("scaling the gradient by the frequency"
                         if scale_grad_by_freq else "sparse weights"))
    if per_sample_weights is not None:
        if tuple(per_sample_weights.shape) != tuple(input.shape):
            raise ValueError(f"embedding_bag: If per_sample_weights ({list(per_sample_weights.shape)}) is not None, "
                             f"then it must have the same shape as the input ({list(input.shape)})")
        if per_sample_weights.dtype is not weight.dtype:
            raise RuntimeError(f"embedding_bag: per_sample_weights ({per_sample_weights.dtype.name}) must have the "
                               f"weight's dtype ({weight.dtype.name})")
        if mode != "sum":
            raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                      f"supported for mode='sum' (got mode='{mode}')")


def _embedding_bag_samples(t):
    def bags():   # (made inside each callable: test_cuda_ops puts it on its device)
        return t.const([2, 0, 1, 2, 3, 1])
    return [
        t.S("embedding_bag-sum-offsets", lambda w: embedding_bag(bags(), w, t.const([0, 2, 2]), mode="sum"),
            t.rn(4, 3)),
        t.S("embedding_bag-mean-2d", lambda w: embedding_bag(bags().reshape(2, 3), w), t.rn(4, 3)),
        t.S("embedding_bag-max-last-offset", lambda w: embedding_bag(bags(), w, t.const([0, 1, 4, 5]), mode="max",
                                                                      include_last_offset=True), t.distinct(4, 3)),
        t.S("embedding_bag-weighted-padding", lambda w, p: embedding_bag(
            bags(), w, t.const([0, 3]), mode="sum", per_sample_weights=p, padding_idx=1), t.rn(4, 3), t.rn(6)),
    ]


@op(method=False, namespace="nn.functional", samples=_embedding_bag_samples)
def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False, mode="mean",
                  sparse=False, per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """``torch.nn.functional.embedding_bag``: the sum, mean or max of the looked-up rows of each bag, without
    the padding_idx rows (an empty bag gives zeros). The rows are looked up by ``embedding`` (its gradient, renorm
    and frequency scaling), then folded by bag id in one index_add (sum, mean) or scatter_reduce amax (max)."""
    _check_bag_arguments(input, weight, offsets, mode, per_sample_weights, scale_grad_by_freq, sparse)
    if padding_idx is not None:
        if not -weight.shape[0] <= padding_idx < weight.shape[0]:
            raise AssertionError(f"embedding_bag: padding_idx must be within num_embeddings (got {padding_idx} "
                                 f"for {weight.shape[0]} rows)")
        padding_idx %= weight.shape[0]
    if per_sample_weights is not None:
        per_sample_weights = per_sample_weights.reshape(-1)
    input, bag, count = _bags(input, offsets, include_last_offset)
    rows = embedding(input, weight, None, max_norm, norm_type, scale_grad_by_freq, sparse)
    if padding_idx is not None:
        bag = where(input == padding_idx, count, bag)
    # indices in no bag (padding, after include_last_offset's last offset) fold into an extra bag, dropped at
    # the end: no mask, whose data-dependent size would make the host wait for the device
    out = zeros((count + 1, weight.shape[1]), dtype=weight.dtype, device=weight.device)
    if mode == "max":
        out = out.scatter_reduce(0, bag.unsqueeze(1).expand(-1, weight.shape[1]), rows, "amax", include_self=False)
        return out[:count]
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.unsqueeze(1)
    out = out.index_add(0, bag, rows)[:count]
    if mode == "sum":
        return out
    sizes = zeros((count + 1,), dtype=weight.dtype, device=weight.device)
    sizes = sizes.index_add(0, bag, ones_like(bag, dtype=weight.dtype))[:count]
    return out / sizes.clamp_min(1).unsqueeze(1)
