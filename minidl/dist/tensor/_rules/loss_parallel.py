"""Cross-entropy on logits split by class (torch's loss_parallel): never gathered.

Each rank holds some classes' logits of every row. The loss of a row is logsumexp over all classes minus the
target's logit, so three numbers per row cross the ranks: the row's maximum (all-reduce max, for a stable
exponent), the sum of the exponentials (all-reduce sum) and the target's logit (all-reduce sum of each rank's
pick, zero where another rank holds the class). Label smoothing adds one: the sum of the row's (weighted)
logits. The all-reduces are differentiable (a partial sum made whole: its gradient reaches every part whole),
so the backward is autograd's, each rank's gradient its classes' softmax minus the one-hot, with no message.
"""
from __future__ import annotations

import contextvars
import functools

from ....autograd.grad_mode import no_grad
from ..placement_types import Partial, Replicate, Shard
from ._whole import reduced

active = contextvars.ContextVar("minidl_loss_parallel", default=False)   # (per thread: a sim rank is one)


def rule(args, kwargs):
    """The sharding rule of ``_cross_entropy_rows`` inside loss_parallel(): the logits (rows, classes) split on
    the class dimension by one mesh dimension, and on the others whole or split by rows (data parallel); the
    targets split by rows as the logits (a plain tensor where the rows are whole), class weights whole. The
    per-row losses lie as the rows; a sum or mean is a partial sum over the row-splitting dimensions (a mean:
    each rank's sum over the whole count), whole elsewhere."""
    from .._api import DTensor, _named
    x, target, weight = args[:3]
    reduction = args[6]
    mesh = x.device_mesh
    split = [d for d, p in enumerate(x.placements) if p == Shard(1)]
    rows = tuple(d for d, p in enumerate(x.placements) if p == Shard(0))
    if len(split) != 1 or any(not (p.is_replicate() or p == Shard(0)) for d, p in enumerate(x.placements)
                              if d != split[0]):
        raise NotImplementedError(f"loss_parallel: the logits (rows, classes) must be split on the class dimension "
                                  f"by exactly one mesh dimension, and on the others whole or split by rows, got "
                                  f"{_named(x.placements)}")
    if rows and not isinstance(target, DTensor):
        raise NotImplementedError(f"loss_parallel: logits placed {_named(x.placements)} split their rows; pass the "
                                  f"targets as a DTensor split by rows alike (a plain tensor is taken as whole)")
    by_rows = tuple(Shard(0) if d in rows else Replicate() for d in range(mesh.ndim))
    wanted = [x.placements] + [by_rows] * isinstance(target, DTensor) + \
        [(Replicate(),) * mesh.ndim] * isinstance(weight, DTensor)
    sizes, offsets = x._spec.local_box()
    if reduction == "none":
        out, shape = by_rows, (x.shape[0],)
    else:
        out, shape = tuple(Partial() if d in rows else Replicate() for d in range(mesh.ndim)), ()
    loss = functools.partial(_loss, mesh, split[0], rows, offsets[1], sizes[1], x.shape[1])
    return wanted, out, shape, loss


def _loss(mesh, tp, rows, first, count, classes, x, target, weight, ignore_index, smoothing, logits, reduction):
    """This rank's rows' losses from its classes [first, first + count) of ``classes``, reduced as asked (a mean
    over the count of every rank's rows: those of the ``rows`` mesh dimensions too)."""
    from ....ops.creation import full

    def total(v, op="sum"):   # (the rows' values summed, or maxed, over the ranks of the tp dimension)
        return reduced(v, mesh, (tp,), op)
    n = x.shape[0]
    counted = target != ignore_index
    mine = (counted & (target >= first) & (target < first + count)).to(x.dtype)
    held = x.gather(1, ((target - first) * mine.to(target.dtype)).unsqueeze(1)).squeeze(1) if count else x.sum(1)
    picked = total(held * mine)
    if logits:
        with no_grad():
            top = total(x.amax(1) if count else full((n,), float("-inf"), dtype=x.dtype, device=x.device), "max")
        lse = total((x - top.unsqueeze(1)).exp().sum(1)).log() + top
    else:
        lse = 0.0   # (nll_loss: the inputs are log-probabilities already)
    kept = counted.to(x.dtype)
    row_weight = kept if weight is None else weight[target * counted.to(target.dtype)] * kept
    loss = (lse - picked) * row_weight
    if smoothing > 0:
        mine_w = None if weight is None else weight[first:first + count]
        weighted = total(x.sum(1) if mine_w is None else (x * mine_w).sum(1))
        weight_sum = classes if weight is None else weight.sum()
        loss = (1 - smoothing) * loss + smoothing * (lse * weight_sum - weighted) / classes * kept
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.sum() / reduced(row_weight.sum(), mesh, rows)
