"""The embedding lookup: rows of a table by index, and the gradient that lands on those rows only.

With ``sparse=True`` the table's gradient is a sparse COO tensor of the looked-up rows, built by
the op's ``sparse_grad`` rule, which the sparse tensor's module (``minidl.sparse``, above the ops)
attaches to this declaration: ``rule(row indices, values, table size)``.
"""
from __future__ import annotations

from .. import _dtype as dt
from .. import _tracing
from ..autograd import Function, no_grad
from .creation import zeros
from .registry import OPS, op
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
        rows, values = input.reshape(-1).clone(), g.reshape(-1, ctx.size[1])   # (the gradient's own rows)
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
    if input.numel():
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
