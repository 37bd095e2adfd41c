"""matmul's sharding, mesh dimension by mesh dimension, for 2-D operands a (m, k) @ b (k, n):
S(0) @ R -> S(0) and R @ S(1) -> S(1) with no message; S(1) @ S(0) -> P(sum) (each rank multiplies its slices of
k: the sum of the products is the product); a partial sum (or average) times a replica stays one; R @ R -> R.
Other pairs are first made one of those: the side to move is the one a local slice makes right (R -> S costs
no message), else the shard is gathered."""
from __future__ import annotations

from ....autograd.function import Function
from ....ops.registry import attach_rule
from ..placement_types import Partial, Replicate, Shard


def _linear_in(p):
    """``p``, or Replicate for a partial max or min: a product is linear in a sum or an average only."""
    return Replicate() if p.is_partial() and p.reduce_op not in Partial.LINEAR_REDUCE_OPS else p


def _pair(pa, pb):
    """(a's placement, b's placement, the output's) for one mesh dimension."""
    pa, pb = _linear_in(pa), _linear_in(pb)
    if pa.is_partial() and pb.is_partial():
        return Replicate(), pb, pb
    if pa.is_partial():
        return pa, Replicate(), pa
    if pb.is_partial():
        return Replicate(), pb, pb
    if pa == Shard(0):
        return pa, Replicate(), Shard(0)
    if pb == Shard(1):
        return Replicate(), pb, Shard(1)
    if pa == Shard(1) or pb == Shard(0):
        return Shard(1), Shard(0), Partial()
    return Replicate(), Replicate(), Replicate()


def _batched_pair(pa, pb, nd):
    """_pair for (..., m, k) @ (..., k, n) of ``nd`` dimensions: a shard of a batch dimension (either side's)
    is kept on both sides and the output; the last two dimensions pair as a matrix product's."""
    batch = next((p for p in (pa, pb) if p.is_shard() and p.dim < nd - 2), None)
    if batch is not None:
        return batch, batch, batch
    to2 = {nd - 2: 0, nd - 1: 1}
    ra, rb, ro = _pair(Shard(to2[pa.dim]) if pa.is_shard() else pa, Shard(to2[pb.dim]) if pb.is_shard() else pb)
    back = {0: nd - 2, 1: nd - 1}
    return tuple(Shard(back[p.dim]) if p.is_shard() else p for p in (ra, rb, ro))


def matmul_rule(args, kwargs):
    """Operands of equal ranks (2-D, or batches of matrices of equal batch shapes)."""
    a, b = args
    nd = getattr(a, "ndim", None)
    if nd is None or nd < 2 or getattr(b, "ndim", None) != nd or tuple(a.shape[:-2]) != tuple(b.shape[:-2]) \
            or kwargs:
        raise NotImplementedError("minidl.matmul's sharding rule takes two DTensors of one rank (2 or more) and "
                                  "equal batch dimensions so far")
    pairs = [_batched_pair(pa, pb, nd) for pa, pb in zip(a.placements, b.placements)]
    return ([tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)], tuple(p[2] for p in pairs),
            (*a.shape[:-1], b.shape[-1]))


attach_rule("matmul", "sharding", matmul_rule)
attach_rule("bmm", "sharding", matmul_rule)


def _linear_pair(px, pw, last):
    """(x's, w's, the bias's, the output's placement) on one mesh dimension for linear(x, w, b) = x @ w.T + b."""
    px, pw = _linear_in(px), _linear_in(pw)
    if px.is_partial() and pw.is_partial():
        px = Replicate()
    if pw == Shard(0) and not px.is_partial():      # column-parallel: each rank has some output features
        return Replicate(), pw, Shard(0), Shard(last)
    if pw == Shard(1) or px == Shard(last):          # row-parallel: each rank sums over its inputs
        return Shard(last), Shard(1), Replicate(), Partial()
    if px.is_shard():                                # split batch rows: the weight whole
        return px, Replicate(), Replicate(), px
    if px.is_partial() or pw.is_partial():
        return px if px.is_partial() else Replicate(), pw if pw.is_partial() else Replicate(), Replicate(), \
            Partial(px.reduce_op if px.is_partial() else pw.reduce_op)
    return Replicate(), Replicate(), Replicate(), Replicate()


def linear_rule(args, kwargs):
    from .._api import DTensor
    x, w = args[0], args[1]
    b = args[2] if len(args) > 2 else kwargs.get("bias")
    if not isinstance(x, DTensor) or not isinstance(w, DTensor) or (b is not None and not isinstance(b, DTensor)):
        raise NotImplementedError("minidl.linear's sharding rule takes input, weight and bias all as DTensors")
    last = x.ndim - 1
    pairs = [_linear_pair(px, pw, last) for px, pw in zip(x.placements, w.placements)]
    wanted = [tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)]
    if b is not None:
        wanted.append(tuple(p[2] for p in pairs))
    out = tuple(p[3] for p in pairs)
    shape = (*x.shape[:-1], w.shape[0])
    parts = 1
    for d, p in enumerate(out):
        if p.is_partial() and p.reduce_op == "sum":
            parts *= x.device_mesh.size(d)
    if b is None or parts == 1:
        return wanted, out, shape
    # (the output is a partial sum: each rank adds its share of the bias, so that the sum adds it once)
    return wanted, out, shape, _row_parallel(parts)


def _row_parallel(parts):
    def run(x_, w_, b_):
        return _linear(x_, w_) + _Share.apply(b_, parts)
    run.whole_gradients = (2,)
    return run


class _Share(Function):
    """A whole bias's share of a partial sum: bias / parts. Backward: the gradient whole, with no message —
    every rank's share gets the same gradient (a partial sum's gradient lies whole on each rank), so the sum
    of the parts' grad / parts is grad."""

    @staticmethod
    def forward(ctx, bias, parts):
        return bias / parts

    @staticmethod
    def backward(ctx, grad):
        return grad, None


_linear = None


def _attach_linear():
    global _linear
    from ....ops.registry import OPS
    _linear = OPS["linear"].function
    attach_rule("linear", "sharding", linear_rule)


_attach_linear()
