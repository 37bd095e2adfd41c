"""nn.functional: layers and losses as functions, composed from the public Tensor API."""
from __future__ import annotations

import math
import warnings

import minidl
from minidl.amp import autocast_op, computed_in_float32
from minidl.ops import (_cross_entropy_rows, _fused_attention, _fused_dropout, _gelu, _gelu_tanh,  # noqa: F401
                        _recurrence, _silu, _split_heads, adaptive_avg_pool2d, avg_pool2d, batch_norm, conv1d,
                        conv2d, conv_transpose2d, embedding, fold, group_norm, layer_norm, linear, max_pool2d,
                        rms_norm, unfold)
from minidl.ops import (_hardsigmoid, _hardswish, _hardtanh, _mish, _relu6, celu as _celu, glu,  # noqa: F401
                        hardshrink, prelu, rrelu as _rrelu, selu as _selu, softmin, softshrink, softsign, tanhshrink,
                        threshold as _threshold)
from minidl.ops import (bilinear, cosine_similarity, embedding_bag, instance_norm, local_response_norm,  # noqa: F401
                        pairwise_distance, pdist)
from minidl.ops import (affine_grid, channel_shuffle, grid_sample, interpolate, pixel_shuffle,  # noqa: F401
                        pixel_unshuffle)
from minidl.ops import (_legacy_reduction, _no_grad_through, _reduce, cosine_embedding_loss,  # noqa: F401
                               ctc_loss, gaussian_nll_loss, hinge_embedding_loss, margin_ranking_loss,
                               multi_margin_loss, multilabel_margin_loss, multilabel_soft_margin_loss,
                               poisson_nll_loss, soft_margin_loss, triplet_margin_loss,
                               triplet_margin_with_distance_loss)
from minidl.ops import (adaptive_avg_pool1d, adaptive_avg_pool3d, adaptive_max_pool1d,  # noqa: F401
                        adaptive_max_pool2d, adaptive_max_pool3d, avg_pool1d, avg_pool3d, conv3d, conv_transpose1d,
                        conv_transpose3d, fractional_max_pool2d, fractional_max_pool3d, lp_pool1d, lp_pool2d,
                        lp_pool3d, max_pool1d, max_pool3d, max_unpool1d, max_unpool2d, max_unpool3d)

__all__ = [
    "linear", "relu", "relu_", "gelu", "silu", "leaky_relu", "elu", "softplus", "sigmoid", "tanh", "logsigmoid",
    "softmax", "log_softmax", "dropout", "embedding", "layer_norm", "one_hot", "pad", "normalize", "mse_loss",
    "l1_loss", "smooth_l1_loss", "huber_loss", "nll_loss", "cross_entropy", "binary_cross_entropy",
    "binary_cross_entropy_with_logits", "kl_div", "rms_norm",
    "hardtanh", "hardtanh_", "relu6", "hardswish", "hardsigmoid", "mish", "selu", "selu_", "celu", "celu_", "glu",
    "prelu", "softsign", "threshold", "threshold_", "softmin", "hardshrink", "softshrink", "tanhshrink", "rrelu",
    "rrelu_", "margin_ranking_loss", "hinge_embedding_loss", "soft_margin_loss", "multilabel_soft_margin_loss",
    "triplet_margin_loss", "triplet_margin_with_distance_loss", "cosine_embedding_loss", "multi_margin_loss",
    "multilabel_margin_loss", "gaussian_nll_loss", "poisson_nll_loss", "ctc_loss",
]


# -- layers ------------------------------------------------------------------------------------
def relu(input, inplace: bool = False):
    return input.relu_() if inplace else input.relu()


def relu_(input):
    return input.relu_()


def _inplace_result(input, out, inplace):
    if inplace:
        return input.copy_(out)
    return out


@computed_in_float32  # as torch: one float32 pass, rounded once to the half dtype
def gelu(input, approximate: str = "none"):
    if approximate == "none":
        return _gelu(input)
    if approximate == "tanh":
        return _gelu_tanh(input)
    raise RuntimeError(f"approximate argument must be either none or tanh, got {approximate!r}")


def _in_place(op, input, inplace, *args):
    """op(input, *args), written into input when ``inplace``. The gradient still reads the input as it
    was (as torch's in-place activations): a copy of it is kept when a graph is recorded."""
    x = input.clone() if inplace and input.requires_grad and minidl.is_grad_enabled() else input
    return _inplace_result(input, op(x, *args), inplace)


def silu(input, inplace: bool = False):
    return _in_place(_silu, input, inplace)


def hardtanh(input, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
    return _in_place(_hardtanh, input, inplace, min_val, max_val)


def hardtanh_(input, min_val: float = -1.0, max_val: float = 1.0):
    return hardtanh(input, min_val, max_val, inplace=True)


def relu6(input, inplace: bool = False):
    return _in_place(_relu6, input, inplace)


def hardswish(input, inplace: bool = False):
    return _in_place(_hardswish, input, inplace)


def hardsigmoid(input, inplace: bool = False):
    return _in_place(_hardsigmoid, input, inplace)


def mish(input, inplace: bool = False):
    return _in_place(_mish, input, inplace)


def selu(input, inplace: bool = False):
    return _in_place(_selu, input, inplace)


def selu_(input):
    return selu(input, inplace=True)


def celu(input, alpha: float = 1.0, inplace: bool = False):
    return _in_place(_celu, input, inplace, alpha)


def celu_(input, alpha: float = 1.0):
    return celu(input, alpha, inplace=True)


def threshold(input, threshold: float, value: float, inplace: bool = False):
    return _in_place(_threshold, input, inplace, threshold, value)


def threshold_(input, threshold: float, value: float):
    return _in_place(_threshold, input, True, threshold, value)


def rrelu(input, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False, inplace: bool = False):
    return _in_place(_rrelu, input, inplace, lower, upper, training)


def rrelu_(input, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False):
    return rrelu(input, lower, upper, training, inplace=True)


def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False):
    out = minidl.where(input > 0, input, input * negative_slope)
    return _inplace_result(input, out, inplace)


@autocast_op("elu")
def elu(input, alpha: float = 1.0, inplace: bool = False):
    neg = minidl.where(input > 0, 0.0, input)
    out = minidl.where(input > 0, input, alpha * neg.expm1())
    return _inplace_result(input, out, inplace)


@autocast_op("softplus")
def softplus(input, beta: float = 1.0, threshold: float = 20.0):
    scaled = input * beta
    over = scaled > threshold
    safe = minidl.where(over, 0.0, scaled)
    return minidl.where(over, input, safe.exp().log1p() / beta)


def sigmoid(input):
    return input.sigmoid()


def tanh(input):
    return input.tanh()


@autocast_op("logsigmoid")
def logsigmoid(input):
    """log(sigmoid(x)), stable on both sides and exact in gradient everywhere."""
    pos = input >= 0
    xp = minidl.where(pos, input, 0.0)
    xn = minidl.where(pos, 0.0, input)
    return minidl.where(pos, -(-xp).exp().log1p(), xn - xn.exp().log1p())


def _softmax_dim(ndim):
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    if dim is None:
        dim = _softmax_dim(input.ndim)
    return input.softmax(dim, dtype=dtype)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    if dim is None:
        dim = _softmax_dim(input.ndim)
    return input.log_softmax(dim, dtype=dtype)


def _check_dropout_p(p) -> None:
    """The one check of a dropout probability (functions and modules)."""
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    _check_dropout_p(p)
    if not training or p == 0.0:
        return input
    if p == 1.0:
        out = input * 0.0
    elif input.dtype in (minidl.float32, minidl.float64):
        out = _fused_dropout(input, p)
    else:
        mask = minidl.empty(tuple(input.shape), dtype=input.dtype, device=input.device).bernoulli_(1.0 - p)
        out = input * (mask * (1.0 / (1.0 - p)))
    return _inplace_result(input, out, inplace)


def one_hot(tensor, num_classes: int = -1):
    if tensor.dtype is not minidl.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if num_classes == -1:
        num_classes = int(tensor.max().item()) + 1 if tensor.numel() else 0
    if tensor.numel() and (int(tensor.min().item()) < 0 or int(tensor.max().item()) >= num_classes):
        raise RuntimeError("Class values must be non-negative and smaller than num_classes.")
    classes = minidl.arange(num_classes, device=tensor.device)
    return (tensor.unsqueeze(-1) == classes).long()


def pad(input, pad, mode: str = "constant", value=None):
    return minidl.pad(input, pad, mode=mode, value=value)


def normalize(input, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None):
    denom = input.norm(p, dim, keepdim=True).clamp(min=eps).expand_as(input)
    return input / denom


# -- losses ------------------------------------------------------------------------------------
def _check_same_size(input, target, name):
    if tuple(input.shape) != tuple(target.shape):
        import warnings
        warnings.warn(f"Using a target size ({tuple(target.shape)}) that is different to the input size "
                      f"({tuple(input.shape)}) in {name}. This will likely lead to incorrect results due to "
                      "broadcasting. Please ensure they have the same size.", stacklevel=3)


@autocast_op("mse_loss")
def mse_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", weight=None):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_same_size(input, target, "mse_loss")
    d = input - target
    loss = d * d
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


@autocast_op("l1_loss")
def l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", weight=None):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_same_size(input, target, "l1_loss")
    loss = (input - target).abs()
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


@autocast_op("smooth_l1_loss")
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    _check_same_size(input, target, "smooth_l1_loss")
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    d = (input - target).abs()
    if beta == 0.0:
        return _reduce(d, reduction)
    loss = minidl.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta)
    return _reduce(loss, reduction)


@autocast_op("huber_loss")
def huber_loss(input, target, reduction: str = "mean", delta: float = 1.0, weight=None):
    d = (input - target).abs()
    loss = minidl.where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def _class_rows(name, input, target, weight):
    """(input as (rows, C) logits, target as (rows,) int64, the shape of an unreduced loss), after torch's
    checks; class dim 1 of an N-d input is moved last (one copy)."""
    if input.ndim < 1:
        raise ValueError(f"Expected 1 or more dimensions (got {input.ndim})")
    if target.dtype is not minidl.int64 and (target.dtype is not minidl.uint8 or input.ndim > 2):
        allowed = "int64 or uint8 (Long or Byte)" if input.ndim <= 2 else "int64 (Long) for input of 3 or more dims"
        raise RuntimeError(f"{name}: expected target dtype to be {allowed}, but got {target.dtype.name}")
    n_classes = input.shape[0 if input.ndim == 1 else 1]
    if weight is not None and tuple(weight.shape) != (n_classes,):
        raise RuntimeError(f"weight tensor should be defined either for all {n_classes} classes or no classes but "
                           f"got weight tensor of shape: {list(weight.shape)}")
    _no_grad_through(name, "weight", weight)
    if input.ndim == 1:
        if target.ndim > 1 or target.numel() != 1:
            raise ValueError(f"For 1D input, 1D target must have size 1, but got target size: {target.numel()}")
        return input.reshape(1, n_classes), target.reshape(1).to(minidl.int64), tuple(target.shape)
    if input.ndim == 2:
        if target.ndim != 1:
            raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
        if target.shape[0] != input.shape[0]:
            raise ValueError(f"Expected input batch_size ({input.shape[0]}) to match target batch_size "
                             f"({target.shape[0]}).")
        return input, target.to(minidl.int64), tuple(target.shape)
    expected = (input.shape[0],) + tuple(input.shape[2:])
    if tuple(target.shape) != expected:
        raise RuntimeError(f"Expected target size {list(expected)}, got {list(target.shape)}")
    return input.movedim(1, -1).reshape(-1, n_classes), target.reshape(-1), expected


def _class_loss(name, input, target, weight, ignore_index, label_smoothing, logits, reduction):
    """cross_entropy (``logits``) or nll_loss against class indices: one kernel each way."""
    if logits and input.dtype in (minidl.float16, minidl.bfloat16) and minidl.is_autocast_enabled(input.device.type):
        input = input.float()   # (torch's cross_entropy takes log_softmax, float32 under autocast, then nll_loss)
    rows, classes, shape = _class_rows(name, input, target, weight)
    loss = _cross_entropy_rows(rows, classes, weight, ignore_index, label_smoothing, logits, reduction)
    return loss.reshape(shape) if reduction == "none" else loss


@autocast_op("nll_loss")
def nll_loss(input, target, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
             reduction: str = "mean"):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    return _class_loss("nll_loss", input, target, weight, ignore_index, 0.0, False, reduction)


def _weight_broadcast(weight, ndim):
    # weight (C,) against (N, C, d1, ...)
    return weight.reshape((1, -1) + (1,) * (ndim - 2))


@autocast_op("cross_entropy")
def cross_entropy(input, target, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                  reduction: str = "mean", label_smoothing: float = 0.0):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    if not target.dtype.is_floating_point:
        return _class_loss("cross_entropy", input, target, weight, ignore_index, label_smoothing, True, reduction)
    class_dim = 0 if input.ndim == 1 else 1   # class probabilities: composed (log_softmax is one kernel)
    n_classes = input.shape[class_dim]
    logp = input.log_softmax(class_dim)
    if tuple(target.shape) != tuple(input.shape):
        raise RuntimeError(f"Expected target of shape {tuple(input.shape)}, got {tuple(target.shape)}")
    if label_smoothing > 0.0:
        target = target * (1 - label_smoothing) + label_smoothing / n_classes
    terms = logp * target
    if weight is not None:
        terms = terms * (weight if input.ndim == 1 else _weight_broadcast(weight, input.ndim))
    if reduction == "none":
        return -terms.sum(class_dim)
    if reduction == "sum":
        return -terms.sum()
    if reduction == "mean":
        return -terms.sum() / (input.numel() // n_classes if input.numel() else 1)
    raise ValueError(f"{reduction} is not a valid value for reduction")


@autocast_op("binary_cross_entropy")
def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction: str = "mean"):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Using a target size ({tuple(target.shape)}) that is different to the input size "
                         f"({tuple(input.shape)}) is deprecated. Please ensure they have the same size.")
    log_x = input.log().clamp(min=-100.0)
    log_1mx = (1.0 - input).log().clamp(min=-100.0)
    loss = -(target * log_x + (1.0 - target) * log_1mx)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


@autocast_op("binary_cross_entropy_with_logits")
def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction: str = "mean", pos_weight=None):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"Target size ({tuple(target.shape)}) must be the same as input size "
                         f"({tuple(input.shape)})")
    ls = logsigmoid(input)
    if pos_weight is not None:
        log_weight = (pos_weight - 1) * target + 1
        loss = (1 - target) * input - log_weight * ls
    else:
        loss = (1 - target) * input - ls
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


@autocast_op("kl_div")
def kl_div(input, target, size_average=None, reduce=None, reduction: str = "mean", log_target: bool = False):
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if log_target:
        loss = target.exp() * (target - input)
    else:
        pos = target > 0
        safe = minidl.where(pos, target, 1.0)
        loss = minidl.where(pos, target * safe.log(), 0.0) - target * input
    if reduction == "batchmean":
        return loss.sum() / (input.shape[0] if input.ndim else 1)
    return _reduce(loss, reduction)


# ----------------------------------------------------------------------------- convolution, pooling
def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                            return_indices=True):
    return max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


__all__ += ["dropout1d", "dropout2d", "dropout3d"]


def _feature_dropout(input, p: float, training: bool, inplace: bool):
    """torch's feature_dropout: zero whole (sample, channel) slices of an input of 2 or more dims
    (dims 0 and 1 are N and C; the rest are shared by the mask), scaling the kept ones by 1/(1-p)."""
    if input.ndim < 2:
        raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        out = input * 0.0
    else:
        shape = tuple(input.shape[:2]) + (1,) * (input.ndim - 2)
        mask = minidl.empty(shape, dtype=input.dtype, device=input.device).bernoulli_(1.0 - p)
        out = input * (mask * (1.0 / (1.0 - p)))
    return _inplace_result(input, out, inplace)


def _unbatched_feature_dropout(input, p: float, training: bool, inplace: bool):
    """_feature_dropout of an input without a batch dim (its dim 0 is the channels)."""
    out = _feature_dropout(input.unsqueeze(0), p, training, inplace).squeeze(0)
    return input if inplace else out


def _deprecated_dims_warning(name: str, ndim: int, spatial: str, dims: str) -> None:
    warnings.warn(
        f"{name}: Received a {ndim}-D input to {name}, which is deprecated "
        "and will result in an error in a future release. To retain the behavior "
        f"and silence this warning, please use dropout instead. Note that {name} "
        f"exists to provide channel-wise dropout on inputs with {spatial} spatial dimensions, "
        f"a channel dimension, and an optional batch dimension (i.e. {dims} inputs).",
        stacklevel=3,
    )


def dropout1d(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels of a (N, C, L) input, or of an unbatched (C, L) one."""
    _check_dropout_p(p)
    ndim = input.ndim
    if ndim not in (2, 3):
        raise RuntimeError(
            f"dropout1d: Expected 2D or 3D input, but received a {ndim}D input. "
            "Note that dropout1d exists to provide channel-wise dropout on inputs with 1 "
            "spatial dimension, a channel dimension, and an optional batch dimension "
            "(i.e. 2D or 3D inputs).")
    if ndim == 3:
        return _feature_dropout(input, p, training, inplace)
    return _unbatched_feature_dropout(input, p, training, inplace)


def dropout2d(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """As torch's: zero whole channels of dim 1. A 4D input is (N, C, H, W); a 3D input is taken as
    (N, C, L) (channel-wise 1D dropout, with torch's warning); other dims warn as deprecated, a 2D
    input (N, C) then drops single elements, and fewer than 2 dims raise."""
    _check_dropout_p(p)
    ndim = input.ndim
    if ndim not in (3, 4):
        _deprecated_dims_warning("dropout2d", ndim, "2", "3D or 4D")
    if ndim == 3:
        warnings.warn(
            "dropout2d: Received a 3D input to dropout2d and assuming that channel-wise "
            "1D dropout behavior is desired - input is interpreted as shape (N, C, L), where C "
            "is the channel dim. This behavior will change in a future release to interpret the "
            "input as one without a batch dimension, i.e. shape (C, H, W). To maintain the 1D "
            "channel-wise dropout behavior, please switch to using dropout1d instead.",
            stacklevel=2,
        )
    return _feature_dropout(input, p, training, inplace)


def dropout3d(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zero whole channels of a (N, C, D, H, W) input; any other input (warned about unless 4D) is
    taken as unbatched, its dim 0 being the channels."""
    _check_dropout_p(p)
    ndim = input.ndim
    if ndim not in (4, 5):
        _deprecated_dims_warning("dropout3d", ndim, "3", "4D or 5D")
    if ndim == 5:
        return _feature_dropout(input, p, training, inplace)
    return _unbatched_feature_dropout(input, p, training, inplace)


# ----------------------------------------------------------------------------- attention
__all__ += ["scaled_dot_product_attention"]
__all__ += ["instance_norm", "local_response_norm", "embedding_bag", "cosine_similarity", "pairwise_distance",
            "pdist", "bilinear"]
__all__ += ["interpolate", "grid_sample", "affine_grid", "pixel_shuffle", "pixel_unshuffle", "channel_shuffle",
            "upsample", "upsample_nearest", "upsample_bilinear"]


def _attention(query, key, value, mask, dropout_p: float, scale: float):
    """softmax(query @ key^T * scale + mask) @ value, and the weights (after dropout).

    ``mask`` is None, bool (True = the key takes part) or additive float, broadcastable to the
    scores (..., L, S). A query row that no key may take part in gets all-zero weights, as
    PyTorch's SDPA gives, where a plain softmax would give NaN (and NaN gradients).
    """
    scores = (query @ key.mT) * scale   # scaling the packed scores, not a strided view of the query: cheaper
    dead = None
    if mask is not None:
        if mask.dtype is minidl.bool:
            scores = scores.masked_fill(mask.logical_not(), -math.inf)
            dead = mask.any(-1, keepdim=True).logical_not()
        else:
            scores = scores + mask
            dead = (mask == -math.inf).all(-1, keepdim=True)
        if not bool(dead.any()):
            dead = None
    if dead is not None:
        scores = scores.masked_fill(dead, 0.0)   # finite rows: softmax and its gradient stay finite
    weights = scores.softmax(-1)
    if dead is not None:
        weights = weights.masked_fill(dead, 0.0)
    if dropout_p > 0.0:
        weights = dropout(weights, dropout_p)
    return weights @ value, weights


def _check_attention_mask(mask, scores_shape, where: str) -> None:
    if mask.dtype is not minidl.bool and not mask.dtype.is_floating_point:
        raise TypeError(f"{where}: attn_mask must be bool or floating point, got {mask.dtype}")
    try:
        fits = minidl.broadcast_shapes(tuple(mask.shape), scores_shape) == tuple(scores_shape)
    except RuntimeError:
        fits = False
    if not fits:
        raise RuntimeError(f"{where}: attn_mask of shape {list(mask.shape)} does not broadcast to the "
                           f"attention scores' shape {list(scores_shape)} (..., L, S)")


@autocast_op("scaled_dot_product_attention")
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale=None, enable_gqa: bool = False):
    """Attention over (..., L, E) queries, (..., S, E) keys and (..., S, Ev) values; leading dims
    broadcast. Boolean ``attn_mask``: True = take part; float: added to the scores. ``is_causal``:
    query i sees keys 0..i (top-left aligned). Dropout on the weights applies whenever
    ``dropout_p > 0`` (the functional form has no training flag). Fully masked rows give zeros.

    Without dropout this is one kernel each way (``_fused_attention``), which never stores the L x S
    scores; dropout and a mask that requires grad take the composition of tensor ops (``_sdpa_unfused``)."""
    where = "scaled_dot_product_attention"
    if min(query.ndim, key.ndim, value.ndim) < 2:
        raise RuntimeError(f"{where}: query, key and value need at least 2 dims (..., seq, features), got "
                           f"shapes {list(query.shape)}, {list(key.shape)}, {list(value.shape)}")
    if query.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
        raise RuntimeError(f"{where}: expected query (..., L, E), key (..., S, E) and value (..., S, Ev), got "
                           f"{list(query.shape)}, {list(key.shape)} and {list(value.shape)}")
    if not (query.dtype is key.dtype is value.dtype):
        raise RuntimeError(f"{where}: expected query, key and value of one dtype, got {query.dtype}, "
                           f"{key.dtype} and {value.dtype}")
    if not 0.0 <= dropout_p <= 1.0:
        raise ValueError(f"{where}: dropout_p must be between 0 and 1, got {dropout_p}")
    lead, heads = 2, ()               # key/value dims before (S, E) that broadcast with the query's batch dims
    if enable_gqa:
        for t in (key, value):
            _check_kv_heads(t, query.shape[-3])
        lead, heads = 3, (query.shape[-3],)
    try:
        batch = minidl.broadcast_shapes(tuple(query.shape[:-2]), tuple(key.shape[:-lead]) + heads,
                                        tuple(value.shape[:-lead]) + heads)
    except RuntimeError:
        raise RuntimeError(f"{where}: the batch dims of query {list(query.shape)}, key {list(key.shape)} and "
                           f"value {list(value.shape)} do not broadcast") from None
    L, S = query.shape[-2], key.shape[-2]
    if is_causal and attn_mask is not None:
        raise RuntimeError(f"{where}: pass either attn_mask or is_causal=True, not both")
    if attn_mask is not None:
        _check_attention_mask(attn_mask, tuple(batch) + (L, S), where)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    if (dropout_p < 1.0 and (attn_mask is None or not attn_mask.requires_grad)
            and query.numel() and key.numel() and value.numel()):
        return _fused_attention(query, key, value, attn_mask, scale, is_causal, enable_gqa, dropout_p)
    return _sdpa_unfused(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def _sdpa_unfused(query, key, value, attn_mask, dropout_p: float, is_causal: bool, scale: float, enable_gqa: bool):
    """scaled_dot_product_attention's checked arguments, composed of tensor ops (``_attention``): the path of
    dropout and of a mask that requires grad, and the fused kernel's oracle in the tests."""
    if enable_gqa:
        key, value = _repeat_kv_heads(key, query.shape[-3]), _repeat_kv_heads(value, query.shape[-3])
    if is_causal:
        attn_mask = minidl.ones(query.shape[-2], key.shape[-2], dtype=minidl.bool, device=query.device).tril()
    elif attn_mask is not None and attn_mask.dtype is not minidl.bool:
        attn_mask = attn_mask.to(query.dtype)
    return _attention(query, key, value, attn_mask, dropout_p, scale)[0]


def _check_kv_heads(x, heads: int) -> None:
    if x.ndim < 3 or heads % x.shape[-3]:
        raise RuntimeError(f"scaled_dot_product_attention(enable_gqa=True): {heads} query heads are not a "
                           f"multiple of the key/value heads of shape {list(x.shape)} (..., H, S, E)")


def _repeat_kv_heads(x, heads: int):
    """Grouped-query attention: (..., Hkv, S, E) -> (..., heads, S, E), each key head serving
    heads // Hkv consecutive query heads."""
    _check_kv_heads(x, heads)
    groups = heads // x.shape[-3]
    if groups == 1:
        return x
    lead, (h, s, e) = tuple(x.shape[:-3]), tuple(x.shape[-3:])
    return x.unsqueeze(-3).expand(lead + (h, groups, s, e)).reshape(lead + (heads, s, e))


# ----------------------------------------------------------------------------- interpolate's deprecated aliases
def _deprecated(name):
    warnings.warn(f"`nn.functional.{name}` is deprecated. Use `nn.functional.interpolate` instead.", stacklevel=3)


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None):
    """interpolate's old name (deprecated, as in torch)."""
    _deprecated("upsample")
    return interpolate(input, size, scale_factor, mode, align_corners, recompute_scale_factor)


def upsample_nearest(input, size=None, scale_factor=None):
    """interpolate(mode='nearest') (deprecated)."""
    _deprecated("upsample_nearest")
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """interpolate(mode='bilinear', align_corners=True) (deprecated)."""
    _deprecated("upsample_bilinear")
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)
