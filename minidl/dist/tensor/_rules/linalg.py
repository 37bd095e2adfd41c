"""matmul's sharding, mesh dimension by mesh dimension, for 2-D operands a (m, k) @ b (k, n):
S(0) @ R -> S(0) and R @ S(1) -> S(1) with no message; S(1) @ S(0) -> P(sum) (each rank multiplies its slices of
k: the sum of the products is the product); a partial sum times a replica stays a partial sum; R @ R -> R.
Other pairs are first made one of those: the side to move is the one a local slice makes right (R -> S costs
no message), else the shard is gathered."""
from __future__ import annotations

from ....ops.registry import attach_rule
from ..placement_types import Partial, Replicate, Shard


def _pair(pa, pb):
    """(a's placement, b's placement, the output's) for one mesh dimension."""
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


def matmul_rule(args, kwargs):
    a, b = args
    if getattr(a, "ndim", None) != 2 or getattr(b, "ndim", None) != 2 or kwargs:
        raise NotImplementedError("minidl.matmul's sharding rule takes two 2-D DTensors so far")
    pairs = [_pair(pa, pb) for pa, pb in zip(a.placements, b.placements)]
    return ([tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)], tuple(p[2] for p in pairs),
            (a.shape[0], b.shape[1]))


attach_rule("matmul", "sharding", matmul_rule)
