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

active = contextvars.ContextVar("minidl_loss_parallel", default=False)   # (per thread: a sim rank is one)


def rule(args, kwargs):
    """The sharding rule of ``_cross_entropy_rows`` inside loss_parallel(): the logits split on their class
    dimension by one mesh dimension, whole on the others; the targets (a plain tensor, or a DTensor) and class
    weights whole; the loss whole."""
    from .._api import DTensor, _named
    x, target, weight = args[:3]
    logits, reduction = args[5], args[6]
    mesh = x.device_mesh
    split = [d for d, p in enumerate(x.placements) if p == Shard(1)]
    if len(split) != 1 or any(not p.is_replicate() for d, p in enumerate(x.placements) if d != split[0]):
        raise NotImplementedError(f"loss_parallel: the logits must be split on the class dimension by exactly one "
                                  f"mesh dimension and whole on the others, got {_named(x.placements)}")
    whole = (Replicate(),) * mesh.ndim
    wanted = [x.placements] + [whole for a in (target, weight) if isinstance(a, DTensor)]
    sizes, offsets = x._spec.local_box()
    shape = (x.shape[0],) if reduction == "none" else ()
    loss = functools.partial(_loss, mesh, split[0], offsets[1], sizes[1], x.shape[1])
    return wanted, whole, shape, loss


def _loss(mesh, tp, first, count, classes, x, target, weight, ignore_index, smoothing, logits, reduction):
    """The rows' losses from this rank's classes [first, first + count) of ``classes``, reduced as asked."""
    from ....ops.creation import full
    from .._api import DTensor
    whole = (Replicate(),) * mesh.ndim

    def total(v, op="sum"):   # (the rows' values summed, or maxed, over the ranks of the tp dimension)
        placed = tuple(Partial(op) if d == tp else Replicate() for d in range(mesh.ndim))
        return DTensor.from_local(v, mesh, placed).redistribute(placements=whole).to_local()
    rows = x.shape[0]
    counted = target != ignore_index
    mine = (counted & (target >= first) & (target < first + count)).to(x.dtype)
    held = x.gather(1, ((target - first) * mine.to(target.dtype)).unsqueeze(1)).squeeze(1) if count else x.sum(1)
    picked = total(held * mine)
    if logits:
        with no_grad():
            top = total(x.amax(1) if count else full((rows,), float("-inf"), dtype=x.dtype, device=x.device), "max")
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
    return loss.sum() if reduction == "sum" else loss.sum() / row_weight.sum()
