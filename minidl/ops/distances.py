"""Similarities and distances between vectors (nn.functional's cosine_similarity, pairwise_distance, pdist) and the
bilinear form, composed of reductions, indexing and einsum: no kernel of their own, so every device has them."""
from __future__ import annotations

from ..autograd import no_grad
from .autocast_mode import autocast_op
from .creation import triu_indices
from .linalg import einsum
from .reduction import norm
from .registry import op
from .views import broadcast_tensors


def _float_inputs(name, *tensors):
    for x in tensors:
        if not x.dtype.is_floating_point:
            raise RuntimeError(f"{name}: expected floating point inputs, got "
                               f"{', '.join(t.dtype.name for t in tensors)} "
                               f"(shapes {', '.join(str(list(t.shape)) for t in tensors)})")


def _clamped_norm(x, dim, eps):
    """x's 2-norm along dim (kept), raised to eps where below it -- in value only: as torch, which clamps the
    norm in place without autograd, the gradient is the unclamped norm's."""
    n = norm(x, 2, dim, keepdim=True)
    with no_grad():
        lift = n.clamp_min(eps) - n
    return n + lift


@op(method=False, samples=lambda t: [
    t.S("cosine_similarity", lambda a, b: cosine_similarity(a, b), t.rn(3, 4), t.rn(3, 4)),
    # (norms above eps: where eps bites, torch's gradient is not the derivative; tests/test_ops_norm_distance.py)
    t.S("cosine_similarity-broadcast", lambda a, b: cosine_similarity(a, b, -1, eps=0.05), t.pos(2, 1, 3),
        t.rn(4, 3)),
    t.S("cosine_similarity", lambda a, b: cosine_similarity(a, b), t.rn(2, 3), t.rn(2, 3), second_order=True)])
@autocast_op("cosine_similarity")
def cosine_similarity(x1, x2, dim: int = 1, eps: float = 1e-8):
    """sum(x1 * x2) / (max(|x1|, eps) * max(|x2|, eps)) along ``dim`` after broadcasting; each vector is divided by
    its norm before the product (no overflow of |x1| * |x2|)."""
    _float_inputs("cosine_similarity", x1, x2)
    x1, x2 = broadcast_tensors(x1, x2)
    return ((x1 / _clamped_norm(x1, dim, eps)) * (x2 / _clamped_norm(x2, dim, eps))).sum(dim)


@op(method=False, samples=lambda t: [
    t.S("pairwise_distance", lambda a, b: pairwise_distance(a, b), t.rn(3, 4), t.rn(3, 4)),
    t.S("pairwise_distance-p1-keepdim", lambda a, b: pairwise_distance(a, b, 1, keepdim=True), t.rn(2, 3),
        t.rn(3) + 4.0),
    t.S("pairwise_distance-p3", lambda a, b: pairwise_distance(a, b, 3.0, eps=0.5), t.rn(4), t.rn(4))])
def pairwise_distance(x1, x2, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False):
    """The p-norm of x1 - x2 + eps along the last dim of the larger operand (torch adds eps to every difference)."""
    dim = max(x1.ndim, x2.ndim) - 1
    return norm(x1 - x2 + eps, p, dim if dim >= 0 else None, keepdim)


@op(method=False, samples=lambda t: [
    t.S("pdist", lambda x: pdist(x), t.rn(4, 3)),
    t.S("pdist-p1", lambda x: pdist(x, 1), t.distinct(3, 2)),
    t.S("pdist-inf", lambda x: pdist(x, float("inf")), t.distinct(4, 2))])
@autocast_op("pdist")
def pdist(input, p: float = 2.0):
    """The p-norm distance between every pair of rows i < j of a matrix, in row-major order of the pairs: the
    upper triangle of cdist(input, input), from the differences of the rows of each pair."""
    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D (shape {list(input.shape)})")
    _float_inputs("pdist", input)
    if p < 0:
        raise RuntimeError(f"pdist only supports non-negative p values, got {p}")
    i, j = triu_indices(input.shape[0], input.shape[0], 1, device=input.device)
    return norm(input[i] - input[j], p, 1)


@op(method=False, samples=lambda t: [
    t.S("bilinear", lambda a, b, w, c: bilinear(a, b, w, c), t.rn(2, 3), t.rn(2, 4), t.rn(5, 3, 4), t.rn(5)),
    t.S("bilinear-1d-no-bias", lambda a, b, w: bilinear(a, b, w), t.rn(3), t.rn(2), t.rn(2, 3, 2)),
    t.S("bilinear-3d", lambda a, b, w: bilinear(a, b, w), t.rn(2, 2, 3), t.rn(2, 2, 3), t.rn(4, 3, 3))])
@autocast_op("bilinear")
def bilinear(input1, input2, weight, bias=None):
    """out[..., o] = sum_ij input1[..., i] weight[o, i, j] input2[..., j] + bias[o]: one einsum."""
    if (weight.ndim != 3 or input1.ndim != input2.ndim or input1.ndim == 0
            or tuple(input1.shape[:-1]) != tuple(input2.shape[:-1])
            or (input1.shape[-1], input2.shape[-1]) != tuple(weight.shape[1:])):
        raise RuntimeError(f"bilinear: expected input1 (..., in1), input2 (..., in2) with the same leading dims and "
                           f"weight (out, in1, in2), got {list(input1.shape)}, {list(input2.shape)} and "
                           f"{list(weight.shape)}")
    given = {"input1": input1, "input2": input2, "weight": weight, "bias": bias}
    if len({t.dtype for t in given.values() if t is not None}) > 1:
        raise RuntimeError("bilinear: All tensors must have the same dtype, got "
                           + ", ".join(f"{k}: {t.dtype.name}" for k, t in given.items() if t is not None))
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise RuntimeError(f"bilinear: expected bias of shape [{weight.shape[0]}], got {list(bias.shape)}")
    # (under CPU autocast einsum's products run in the lower precision, as torch's; the form keeps the inputs' dtype)
    out = einsum("...i,oij,...j->...o", input1, weight, input2).to(input1.dtype)
    return out if bias is None else out + bias
