"""nn.functional's margin, embedding, likelihood and CTC losses, written over other ops.

All but ``ctc_loss`` are compositions (compare, ``where``, clamps, sums), so autograd gives their
gradients and their ONNX graphs are those of the ops they call (``lowerings.composite``). ``ctc_loss``
runs the CTC forward (alpha) recursion in log space, vectorised over the batch and the extended labels with
a loop over time only; its backward is torch's, from the beta recursion. The reduction helpers live here
because these ops need them; nn.functional's older losses import them from here.
"""
from __future__ import annotations

import math

import numpy as np

from .. import _dtype as dt
from ..autograd import Function
from .autocast_mode import autocast_op
from .core import grad_enabled
from .cross_entropy import REDUCTIONS
from .creation import arange, full, ones_like, tensor, zeros_like
from .distances import pairwise_distance
from .elementwise import minimum, where
from .shape_ops import cat, stack
from .registry import op

NEG_INF = float("-inf")


# ----------------------------------------------------------------------------- reductions
def _check_reduction(reduction):
    if reduction not in REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")


def _reduce(loss, reduction):
    """The loss reduced as ``reduction`` asks ('mean', 'sum' or 'none')."""
    _check_reduction(reduction)
    if reduction == "mean":
        return loss.mean()
    return loss.sum() if reduction == "sum" else loss


def _legacy_reduction(size_average, reduce, reduction):
    """``reduction`` from the deprecated size_average/reduce pair where either is given."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if not reduce:
        return "none"
    return "mean" if size_average else "sum"


def _no_grad_through(name, argument, x):
    """Refuse, as torch, an argument that requires grad where the op has no gradient for it."""
    if x is not None and x.requires_grad and grad_enabled():
        raise RuntimeError(f"The function '{name}' is not differentiable with respect to argument '{argument}'. "
                           f"This input cannot have requires_grad True.")


def _positive(z):
    """z where z > 0, else 0 (also at NaN, as torch's margin kernels skip it)."""
    return where(z > 0, z, zeros_like(z))


# ----------------------------------------------------------------------------- pairwise margins
def _margin_ranking_samples(t):
    y = np.sign(t.rn(4, 3))
    return [t.S("margin_ranking_loss", lambda a, b: margin_ranking_loss(a, b, t.const(y), margin=0.3), t.rn(4, 3),
                t.rn(4, 3)),
            t.S("margin_ranking_loss-none", lambda a, b: margin_ranking_loss(a, b, t.const(y[:1]), reduction="none"),
                t.rn(4, 3), t.rn(1, 3))]


@op(method=False, namespace="nn.functional", samples=_margin_ranking_samples)
@autocast_op("margin_ranking_loss")
def margin_ranking_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None, reduction="mean"):
    """max(0, -target * (input1 - input2) + margin), reduced; the three broadcast but share one ndim."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    if not input1.ndim == input2.ndim == target.ndim:
        raise RuntimeError(f"margin_ranking_loss : All input tensors should have same dimension but got sizes: "
                           f"input1: {list(input1.shape)}, input2: {list(input2.shape)}, "
                           f"target: {list(target.shape)}")
    return _reduce((-target * (input1 - input2) + margin).clamp_min(0), reduction)


def _hinge_samples(t):
    y = np.sign(t.rn(3, 4))
    return [t.S("hinge_embedding_loss", lambda x: hinge_embedding_loss(x, t.const(y), margin=0.7), t.rn(3, 4)),
            t.S("hinge_embedding_loss-none", lambda x: hinge_embedding_loss(x, t.const(y[:1]), reduction="none"),
                t.rn(3, 4))]


@op(method=False, namespace="nn.functional", samples=_hinge_samples)
@autocast_op("hinge_embedding_loss")
def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None, reduction="mean"):
    """input where target is 1, max(0, margin - input) where it is -1 (both terms for other targets)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    zeros = zeros_like(input)
    loss = where(target != 1, (margin - input).clamp_min(0), zeros) + where(target != -1, input, zeros)
    return _reduce(loss, reduction)


def _soft_margin_samples(t):
    y = t.rn(3, 4)
    return [t.S("soft_margin_loss", lambda x: soft_margin_loss(x, t.const(y)), t.rn(3, 4)),
            t.S("soft_margin_loss-none", lambda x: soft_margin_loss(x, t.const([1.0, -1.0, 1.0]), reduction="none"),
                t.rn(2, 3))]


@op(method=False, namespace="nn.functional", samples=_soft_margin_samples)
@autocast_op("soft_margin_loss")
def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """log(1 + exp(-target * input)), reduced."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    _no_grad_through("soft_margin_loss", "target", target)
    return _reduce((-input * target).exp().log1p(), reduction)


def _logsigmoid(x):
    """log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), stable both ways."""
    return x.clamp_max(0) - (-x.abs()).exp().log1p()


@op(method=False, namespace="nn.functional", samples=lambda t: [
    t.S("multilabel_soft_margin_loss", lambda x: multilabel_soft_margin_loss(x, t.const([[1.0, 0, 1], [0, 0, 1]])),
        t.rn(2, 3)),
    t.S("multilabel_soft_margin_loss-weight", lambda x, y: multilabel_soft_margin_loss(
        x, y, weight=t.const([0.5, 2.0, 1.0]), reduction="none"), t.rn(2, 3), t.uniform(0, 1, 2, 3))])
def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """The per-class logistic loss (weighted), averaged over the last (class) dim, then reduced."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    loss = -(target * _logsigmoid(input) + (1 - target) * _logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    class_dim = input.ndim - 1
    return _reduce(loss.sum(class_dim) / input.shape[class_dim], reduction)


# ----------------------------------------------------------------------------- triplets
def _check_triplet(anchor, positive, negative, margin):
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    if not anchor.ndim == positive.ndim == negative.ndim:
        raise RuntimeError(f"The anchor, positive, and negative tensors are expected to have the same number of "
                           f"dimensions, but got: anchor {anchor.ndim}D, positive {positive.ndim}D, and negative "
                           f"{negative.ndim}D inputs")


def _triplet(dist_pos, dist_neg, dist_swap, margin, reduction):
    if dist_swap is not None:
        dist_neg = minimum(dist_neg, dist_swap)
    return _reduce((margin + dist_pos - dist_neg).clamp_min(0), reduction)


@op(method=False, namespace="nn.functional", samples=lambda t: [
    t.S("triplet_margin_loss", lambda a, p, n: triplet_margin_loss(a, p, n), t.rn(3, 4), t.rn(3, 4), t.rn(3, 4)),
    t.S("triplet_margin_loss-p1-swap", lambda a, p, n: triplet_margin_loss(a, p, n, margin=2.0, p=1, swap=True,
                                                                           reduction="none"),
        t.rn(3, 4), t.rn(3, 4), t.rn(3, 4)),
    t.S("triplet_margin_loss-p3-unbatched", lambda a, p, n: triplet_margin_loss(a, p, n, margin=3.0, p=3),
        t.rn(4), t.rn(4), t.rn(4))])
@autocast_op("triplet_margin_loss")
def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2.0, eps=1e-6, swap=False, size_average=None,
                        reduce=None, reduction="mean"):
    """max(0, margin + d(anchor, positive) - d(anchor, negative)), d the pairwise p-distance (with
    ``swap``, the smaller of d(anchor, negative) and d(positive, negative))."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    _check_triplet(anchor, positive, negative, margin)
    swapped = pairwise_distance(positive, negative, p, eps) if swap else None
    return _triplet(pairwise_distance(anchor, positive, p, eps), pairwise_distance(anchor, negative, p, eps),
                    swapped, margin, reduction)


def _l1_distance(x, y):
    return (x - y).abs().sum(-1)


@op(method=False, namespace="nn.functional", samples=lambda t: [
    t.S("triplet_margin_with_distance_loss", lambda a, p, n: triplet_margin_with_distance_loss(a, p, n),
        t.rn(3, 4), t.rn(3, 4), t.rn(3, 4)),
    t.S("triplet_margin_with_distance_loss-l1-swap", lambda a, p, n: triplet_margin_with_distance_loss(
        a, p, n, distance_function=_l1_distance, margin=2.0, swap=True, reduction="sum"),
        t.rn(3, 4), t.rn(3, 4), t.rn(3, 4))])
def triplet_margin_with_distance_loss(anchor, positive, negative, *, distance_function=None, margin=1.0, swap=False,
                                      reduction="mean"):
    """triplet_margin_loss with any distance ``(x, y) -> tensor`` (default: the pairwise 2-distance)."""
    _check_reduction(reduction)
    _check_triplet(anchor, positive, negative, margin)
    distance = distance_function if distance_function is not None else pairwise_distance
    swapped = distance(positive, negative) if swap else None
    return _triplet(distance(anchor, positive), distance(anchor, negative), swapped, margin, reduction)


def _cosine_samples(t):
    y = np.sign(t.rn(3))
    return [t.S("cosine_embedding_loss", lambda a, b: cosine_embedding_loss(a, b, t.const(y), margin=-0.2),
                t.rn(3, 4), t.rn(3, 4)),
            t.S("cosine_embedding_loss-unbatched", lambda a, b: cosine_embedding_loss(a, b, t.const(-1.0),
                                                                                      reduction="sum"),
                t.rn(4), t.rn(4))]


@op(method=False, namespace="nn.functional", samples=_cosine_samples)
@autocast_op("cosine_embedding_loss")
def cosine_embedding_loss(input1, input2, target, margin=0.0, size_average=None, reduce=None, reduction="mean"):
    """1 - cos(input1, input2) where target is 1, max(0, cos - margin) where it is -1 (0 elsewhere); cos over
    the last dim, with 1e-12 added to each squared magnitude as torch's."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    dim = target.ndim
    if dim > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    if input1.ndim != dim + 1 or input2.ndim != dim + 1:
        raise RuntimeError(f"{dim}D target tensor expects {dim + 1}D input tensors, but found inputs with sizes "
                           f"{list(input1.shape)} and {list(input2.shape)}.")
    prod = (input1 * input2).sum(dim)
    denom = (((input1 * input1).sum(dim) + 1e-12) * ((input2 * input2).sum(dim) + 1e-12)).sqrt()
    cos = prod / denom
    zeros = zeros_like(cos)
    loss = where(target == 1, 1 - cos, zeros) + where(target == -1, (cos - margin).clamp_min(0), zeros)
    return _reduce(loss, reduction)


# ----------------------------------------------------------------------------- class margins
def _class_frames(name, input, target):
    """input as (frames, classes) after torch's shape checks (a 0-d input is one frame of one class)."""
    if not (input.ndim == 0 or input.ndim <= 2 and input.shape[-1] != 0):
        raise RuntimeError(f"{name}: Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
                           f"{list(input.shape)}")
    frames = input.shape[0] if input.ndim == 2 else 1
    return input.reshape(frames, input.shape[-1] if input.ndim else 1)


def _out_of_range(name, target, low, high):
    """Whether some target lies outside [low, high), after checking its dtype is int64 as torch's."""
    if target.dtype.name != "int64":
        raise RuntimeError(f"{name}: expected target of scalar type Long (int64) but found {target.dtype.name}")
    return bool(((target < low) | (target >= high)).any())


def _multi_margin_samples(t):
    return [
        t.S("multi_margin_loss", lambda x: multi_margin_loss(x, t.const(np.array([2, 0, 3]))), t.rn(3, 4)),
        t.S("multi_margin_loss-p2-weight", lambda x: multi_margin_loss(
            x, t.const(np.array([1, 3, 0])), p=2, margin=0.5, weight=t.const([0.5, -1.0, 2.0, 1.5]),
            reduction="none"), t.rn(3, 4)),
        t.S("multi_margin_loss-unbatched", lambda x: multi_margin_loss(x, t.const(np.array([1])), reduction="sum"),
            t.rn(4))]


@op(method=False, namespace="nn.functional", samples=_multi_margin_samples)
@autocast_op("multi_margin_loss")
def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None, reduce=None,
                      reduction="mean"):
    """sum over the classes j other than the target y of max(0, margin - x[y] + x[j])^p (times weight[y]),
    divided by the number of classes; input (C,) or (N, C), target int64 class indices."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    if p != 1 and p != 2:
        raise ValueError("only p == 1 and p == 2 supported")
    if weight is not None and weight.ndim != 1:
        raise ValueError("weight must be one-dimensional")
    _no_grad_through("multi_margin_loss", "weight", weight)
    x = _class_frames("multi_margin_loss", input, target)
    frames, classes = x.shape
    if target.ndim > 1 or target.numel() != frames:
        raise RuntimeError(f"multi_margin_loss: inconsistent target size, expected {frames} but got "
                           f"{list(target.shape)}")
    if weight is not None and weight.numel() != classes:
        raise RuntimeError(f"multi_margin_loss: inconsistent weight size, expected {classes} but got "
                           f"{list(weight.shape)}")
    y = target.reshape(frames, 1)
    if _out_of_range("multi_margin_loss", y, 0, classes):
        raise RuntimeError(f"multi_margin_loss: target out of range (classes: {classes})")
    z = margin - x.gather(1, y) + x
    h = where(arange(classes, device=x.device) == y, zeros_like(z), _positive(z))
    if p == 2:
        h = h * h
    if weight is not None:
        h = h * weight.to(x.dtype).gather(0, y.reshape(frames)).reshape(frames, 1)
    loss = h.sum(1) / classes
    return _reduce(loss if target.ndim else loss.reshape(()), reduction)


def _multilabel_samples(t):
    targets = np.array([[3, 0, -1, 1], [1, 1, 2, -1], [0, 1, 2, 3]])
    return [
        t.S("multilabel_margin_loss", lambda x: multilabel_margin_loss(x, t.const(targets)), t.rn(3, 4)),
        t.S("multilabel_margin_loss-none", lambda x: multilabel_margin_loss(x, t.const(targets), reduction="none"),
            t.rn(3, 4)),
        t.S("multilabel_margin_loss-unbatched", lambda x: multilabel_margin_loss(
            x, t.const(np.array([2, -1, 0, 1, 4]))), t.rn(5))]


@op(method=False, namespace="nn.functional", samples=_multilabel_samples)
@autocast_op("multilabel_margin_loss")
def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """sum over the target classes j and the other classes k of max(0, 1 - (x[j] - x[k])), divided by the
    number of classes; each row of int64 ``target`` lists its classes up to the first -1 (a class listed
    twice counts twice, as torch's)."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    x = _class_frames("multilabel_margin_loss", input, target)
    frames, classes = x.shape
    batched = input.ndim == 2
    if tuple(target.shape) != tuple(input.shape) if batched else target.ndim > 1 or target.numel() != classes:
        raise RuntimeError(f"multilabel_margin_loss: inconsistent target size: {list(target.shape)} for input of "
                           f"size: {list(input.shape)}")
    y = target.reshape(frames, classes)
    if _out_of_range("multilabel_margin_loss", y, -1, classes):
        raise RuntimeError(f"multilabel_margin_loss: argument #2 'target' is out of range (classes: {classes})")
    listed = (y < 0).to(x.dtype).cumsum(1) == 0                                     # before the first -1
    hits = (y.unsqueeze(2) == arange(classes, device=x.device)).logical_and(listed.unsqueeze(2))  # [frame, slot, c]
    count = hits.to(x.dtype).sum(1)                                                # times each class is listed
    z = 1 - x.unsqueeze(2) + x.unsqueeze(1)                                        # [j, k]: 1 - x[j] + x[k]
    h = where((count == 0).unsqueeze(1), _positive(z), zeros_like(z))
    loss = (h * count.unsqueeze(2)).sum((1, 2)) / classes
    return _reduce(loss if batched else loss.reshape(()), reduction)


# ----------------------------------------------------------------------------- likelihoods
def _gaussian_var(input, var):
    """var checked and shaped as torch's: a float for all, input's shape, or one dim short of it or of size 1
    where input's is not (one variance per row)."""
    if isinstance(var, (int, float)):
        if var < 0:
            raise ValueError("var has negative entry/entries")
        return var * ones_like(input)
    if bool((var < 0).any()):
        raise ValueError("var has negative entry/entries")
    shape, vshape = tuple(input.shape), tuple(var.shape)
    if vshape == shape:
        return var
    if shape[:-1] == vshape:
        return var.unsqueeze(-1)
    if len(shape) == len(vshape) and sum(v for i, v in zip(shape, vshape) if i != v) == 1:
        return var
    raise ValueError(f"var is of incorrect size: {list(vshape)} for input of size {list(shape)}")


def _gaussian_samples(t):
    return [
        t.S("gaussian_nll_loss", lambda x, y, v: gaussian_nll_loss(x, y, v), t.rn(3, 4), t.rn(3, 4), t.pos(3, 4)),
        t.S("gaussian_nll_loss-row-var-full", lambda x, y, v: gaussian_nll_loss(x, y, v, full=True, reduction="sum"),
            t.rn(3, 4), t.rn(3, 4), t.pos(3)),
        t.S("gaussian_nll_loss-clamped", lambda x: gaussian_nll_loss(   # (var constant: its gradient ignores eps)
            x, t.const(np.zeros((2, 3))), t.const([[0.1, 0.9, 1.2], [0.05, 0.5, 2.0]]), eps=0.3, reduction="none"),
            t.rn(2, 3))]


@op(method=False, namespace="nn.functional", samples=_gaussian_samples)
def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """0.5 * (log(var) + (input - target)^2 / var) (+ 0.5 log(2 pi) when ``full``), var clamped below at eps
    with no effect on its gradient (torch clamps a copy in place under no_grad)."""
    var = _gaussian_var(input, var)
    if reduction not in REDUCTIONS:
        raise ValueError(f"{reduction} is not valid")
    clamped = var.clamp_min(eps)
    if var.requires_grad and grad_enabled():
        clamped = clamped.detach() + (var - var.detach())
    loss = 0.5 * (clamped.log() + (input - target) ** 2 / clamped)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


@op(method=False, namespace="nn.functional", samples=lambda t: [
    t.S("poisson_nll_loss", lambda x, y: poisson_nll_loss(x, y), t.rn(3, 4), t.uniform(0, 3, 3, 4)),
    t.S("poisson_nll_loss-full", lambda x, y: poisson_nll_loss(x, y, log_input=False, full=True, eps=1e-3,
                                                               reduction="none"),
        t.pos(3, 4), t.uniform(0.2, 3, 3, 4))])
@autocast_op("poisson_nll_loss")
def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                     reduction="mean"):
    """exp(input) - target * input (log_input), else input - target * log(input + eps); ``full`` adds
    Stirling's approximation of log(target!) where target > 1."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_reduction(reduction)
    loss = input.exp() - target * input if log_input else input - target * (input + eps).log()
    if full:
        stirling = target * target.log() - target + 0.5 * (2 * math.pi * target).log()
        loss = loss + where(target <= 1, zeros_like(stirling), stirling)
    return _reduce(loss, reduction)


# ----------------------------------------------------------------------------- CTC
def _shift(a, k, forward, value=NEG_INF):
    """a (N, S) moved k places along S, towards higher s (``forward``) or lower, filled with ``value``."""
    size = a.shape[1]
    k = min(k, size)
    fill = full((a.shape[0], k), value, dtype=a.dtype, device=a.device)
    return cat([fill, a[:, :size - k]], 1) if forward else cat([a[:, k:], fill], 1)


class CtcLoss(Function):
    """The negative log-likelihood of each batch row's target under (T, N, C) log-probabilities, by the alpha
    recursion over the extended labels ``ext`` (N, S), blanks between and around the targets: ``skip`` (N, S)
    marks the labels reachable from two places back, ``valid`` (N, S) those within a row's target, ``ends``
    (N, S) its last label and last blank, ``steps`` (T, N) the time steps within a row's input. The backward
    is torch's, from the beta recursion: g * (exp(lp) - the sum over each label's positions s of
    exp(alpha + beta - lp + nll)) within the input, 0 past it (and for an infinite loss if ``zero_infinity``)."""

    @staticmethod
    def forward(ctx, lp, ext, skip, valid, ends, steps, zero_infinity):
        lpe = where(valid, lp.gather(2, ext.unsqueeze(0).expand((lp.shape[0],) + tuple(ext.shape))), NEG_INF)
        first = steps[0].unsqueeze(1) & (arange(ext.shape[1], device=lp.device) < 2)
        alpha = where(first, lpe[0], NEG_INF)
        alphas = [alpha]
        for t in range(1, lp.shape[0]):
            moved = stack([alpha, _shift(alpha, 1, True), where(skip, _shift(alpha, 2, True), NEG_INF)]).logsumexp(0)
            alpha = where(steps[t].unsqueeze(1), lpe[t] + moved, alpha)
            alphas.append(alpha)
        nll = -where(ends, alpha, NEG_INF).logsumexp(1)
        ctx.save_for_backward(lp)
        ctx.lpe, ctx.alphas, ctx.meta = lpe, stack(alphas), (ext, skip, ends, steps, zero_infinity, nll)
        return nll

    @staticmethod
    def backward(ctx, g):
        if grad_enabled():   # (torch has no double backward of ctc_loss either)
            raise NotImplementedError("ctc_loss: the derivative of its backward (double backward) is not implemented")
        lp, = ctx.saved_tensors
        ext, skip, ends, steps, zero_infinity, nll = ctx.meta
        lpe, last_step = ctx.lpe, steps.sum(0).unsqueeze(1) - 1         # (N, 1): each row's last step
        beta, betas = full(tuple(ends.shape), NEG_INF, dtype=lp.dtype, device=lp.device), []
        for t in range(lp.shape[0] - 1, -1, -1):
            moved = stack([beta, _shift(beta, 1, False), _shift(where(skip, beta, NEG_INF), 2, False)]).logsumexp(0)
            beta = where(last_step == t, where(ends, lpe[t], NEG_INF), where(last_step > t, lpe[t] + moved, NEG_INF))
            betas.append(beta)
        posterior = (ctx.alphas + stack(betas[::-1]) - lpe + nll.unsqueeze(1)).exp()
        posterior = where(lpe == NEG_INF, zeros_like(posterior), posterior)
        labels = (ext.unsqueeze(2) == arange(lp.shape[2], device=lp.device)).to(lp.dtype)   # (N, S, C)
        occupancy = (posterior.transpose(0, 1) @ labels).transpose(0, 1)
        grad = where(steps.unsqueeze(2), (lp.exp() - occupancy) * g.unsqueeze(1), zeros_like(lp))
        if zero_infinity:
            grad = where(nll.isinf().unsqueeze(1), zeros_like(grad), grad)
        return grad, None, None, None, None, None, None


def _host_lengths(name, lengths, batch):
    """The lengths (a tensor, a sequence or an int) as a list of ints, one per batch row."""
    if hasattr(lengths, "dtype"):
        if lengths.dtype.is_floating_point or lengths.dtype.name == "bool":
            raise RuntimeError(f"ctc_loss: {name} must be integral, got {lengths.dtype.name}")
        lengths = lengths.reshape(-1).tolist()
    values = [int(n) for n in (lengths if isinstance(lengths, (list, tuple)) else [lengths])]
    if len(values) != batch:
        raise RuntimeError(f"ctc_loss: {name} must be of size batch_size ({batch}), got {len(values)}")
    return values


def _padded_targets(targets, target_lengths, batch, blank, device):
    """(N, S) int64 targets on ``device``, blank past each row's length, from padded (N, S') or concatenated
    1-D ones (on any device, as torch's)."""
    longest = max(target_lengths, default=0)
    if targets.dtype.is_floating_point or targets.dtype.name == "bool":
        raise RuntimeError(f"ctc_loss: targets must be integral, got {targets.dtype.name}")
    targets = targets.to(device)
    if targets.ndim == 1:
        if targets.shape[0] != sum(target_lengths):
            raise RuntimeError(f"ctc_loss: expected concatenated targets of size {sum(target_lengths)} (the sum "
                               f"of target_lengths), but got size {targets.shape[0]}")
        if not targets.shape[0]:
            return full((batch, longest), blank, dtype=dt.int64, device=device)
        starts = tensor(np.cumsum([0] + target_lengths[:-1]), device=device).unsqueeze(1)
        places = (starts + arange(longest, device=device)).clamp_max(targets.shape[0] - 1)
        rows = targets.to(dt.int64).gather(0, places.reshape(-1)).reshape(batch, longest)
    else:
        if targets.ndim != 2 or targets.shape[0] != batch or targets.shape[1] < longest:
            raise RuntimeError(f"ctc_loss: expected targets of size ({batch}, at least {longest}) or concatenated, "
                               f"but got size {list(targets.shape)}")
        rows = targets[:, :longest].to(dt.int64)
    within = arange(longest, device=device) < tensor(target_lengths, device=device).unsqueeze(1)
    return where(within, rows, blank)


def _ctc_samples(t):
    def log_probs(values):   # (made by the sweep's leaf through log_softmax, as torch's samples)
        return values.log_softmax(-1)

    def lengths(*values):
        return t.const(np.array(values))
    padded = np.array([[1, 2, 2], [3, 1, 0]])
    return [
        t.S("ctc_loss", lambda x: ctc_loss(log_probs(x), t.const(padded), lengths(5, 4), lengths(3, 2)),
            t.rn(5, 2, 4)),
        t.S("ctc_loss-concatenated-sum", lambda x: ctc_loss(log_probs(x), t.const(np.array([2, 2, 1, 3, 1])), (5, 3),
                                                            (2, 3), blank=0, reduction="sum"), t.rn(5, 2, 4)),
        t.S("ctc_loss-unbatched-zero-infinity", lambda x: ctc_loss(log_probs(x), t.const(np.array([1, 1, 2])), 3, 3,
                                                                   reduction="none", zero_infinity=True),
            t.rn(4, 3)),
        t.S("ctc_loss-blank-last", lambda x: ctc_loss(log_probs(x), t.const(padded), lengths(4, 5), lengths(2, 0),
                                                      blank=3, reduction="none"), t.rn(5, 2, 4))]


@op(method=False, namespace="nn.functional", samples=_ctc_samples)
@autocast_op("ctc_loss")
def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction="mean", zero_infinity=False):
    """The Connectionist Temporal Classification loss of (T, N, C) (or unbatched (T, C)) log-probabilities
    against padded (N, S) or concatenated targets; 'mean' divides each row's loss by its target length."""
    _check_reduction(reduction)
    if log_probs.ndim not in (2, 3) or not log_probs.dtype.is_floating_point:
        raise RuntimeError(f"ctc_loss: expected floating point log_probs of shape (T, N, C) or (T, C), but got "
                           f"{log_probs.dtype.name} of shape {list(log_probs.shape)}")
    lp = log_probs if log_probs.ndim == 3 else log_probs.unsqueeze(1)
    steps_total, batch, classes = lp.shape
    if not 0 <= blank < classes:
        raise RuntimeError(f"ctc_loss: blank must be in label range [0, {classes}), got {blank}")
    in_lengths = _host_lengths("input_lengths", input_lengths, batch)
    tg_lengths = _host_lengths("target_lengths", target_lengths, batch)
    if any(n < 0 or n > steps_total for n in in_lengths) or any(n < 0 for n in tg_lengths):
        raise RuntimeError(f"ctc_loss: input_lengths must lie in [0, {steps_total}] and target_lengths be at least "
                           f"0, got {in_lengths} and {tg_lengths}")
    device = lp.device
    rows = _padded_targets(targets, tg_lengths, batch, blank, device)
    ext = cat([stack([full(tuple(rows.shape), blank, dtype=rows.dtype, device=device), rows], 2).reshape(batch, -1),
               full((batch, 1), blank, dtype=rows.dtype, device=device)], 1)
    places = arange(ext.shape[1], device=device)
    twice = 2 * tensor(tg_lengths, device=device).unsqueeze(1)
    skip = (places >= 2) & (ext != blank) & (ext != _shift(ext, 2, True, blank))
    ends = (places == twice) | ((places == twice - 1) & (twice > 0))
    steps = arange(steps_total, device=device).unsqueeze(1) < tensor(in_lengths, device=device)
    nll = CtcLoss.apply(lp, ext, skip, places <= twice, ends, steps, bool(zero_infinity))
    if any(n == 0 and m == 0 for n, m in zip(in_lengths, tg_lengths)):   # (no steps, no target: certain)
        nll = where((tensor(in_lengths, device=device) == 0) & (twice.squeeze(1) == 0), zeros_like(nll), nll)
    if zero_infinity:
        nll = where(nll == float("inf"), zeros_like(nll), nll)
    if reduction == "mean":
        return (nll / tensor(tg_lengths, dtype=nll.dtype, device=device).clamp_min(1)).mean()
    if reduction == "sum":
        return nll.sum()
    return nll if log_probs.ndim == 3 else nll.squeeze(0)

