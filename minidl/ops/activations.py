"""torch.nn.functional's activations beyond relu, gelu and silu, and their torch-level twins (torch.selu, ...).

The parameter-free ones are formulas of the table (``formulas/table.py``: relu6, hardswish, ...), declared
here. The parameterised ones (hardtanh, threshold, the shrinks; celu's forward) are composed of compare and
``where``: no new kernel code, and autograd of ``where`` gives exactly torch's subgradients (at each
kink, and at NaN as torch's vectorised loops give them), where a binary formula taking the parameter
as a scalar operand would save one or two passes forward but still need a composed backward. The
functional forms that take ``inplace`` are nn.functional's, over the ``_name`` ops declared here (as
``_silu`` for F.silu).
"""
from __future__ import annotations

import numpy as np

from .. import layout as L
from ..autograd import Function
from . import elementwise as ew
from .elementwise import _unary_samples, sigmoid, where  # noqa: F401 (sigmoid: made from the table)
from .creation import empty_like, fill_random_
from .reduction import softmax
from .registry import OPS, op


def _float_input(name, x):
    if not x.dtype.is_floating_point:
        raise NotImplementedError(f"{name}: not implemented for {x.dtype.name} tensors (it takes floating point "
                                  f"tensors; shape {list(x.shape)})")


# torch's SELU constants (the table's selu multiplies them in float64: 1.7580993408473766, 1.0507009873554805)
SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


def _floats_only(key):
    """The table's unary op of that name as op ``key``, refusing integer tensors as torch's kernels do."""
    name = key.lstrip("_")
    formula = getattr(ew, name)

    def fn(input):
        _float_input(name, input)
        return formula(input)
    fn.__name__ = fn.__qualname__ = key
    return fn


def _samples_of(key):
    """The unary samples of the table's op, run through the declared op ``key``."""
    return lambda t: _unary_samples(t, key.lstrip("_"), OPS[key].function)


# ``_name`` in nn.functional: those whose public function adds ``inplace`` (nn/functional.py)
_relu6 = op("_relu6", method=False, namespace="nn.functional", samples=_samples_of("_relu6"))(ew.relu6)
_hardswish = op("_hardswish", method=False, namespace="nn.functional",
                samples=_samples_of("_hardswish"))(_floats_only("_hardswish"))
_hardsigmoid = op("_hardsigmoid", method=False, namespace="nn.functional",
                  samples=_samples_of("_hardsigmoid"))(_floats_only("_hardsigmoid"))
_mish = op("_mish", method=False, namespace="nn.functional", samples=_samples_of("_mish"))(_floats_only("_mish"))
selu = op("selu", method=False, samples=_samples_of("selu"))(_floats_only("selu"))
# integers computed in floating point, as torch's
softsign = op("softsign", method=False, namespace="nn.functional", samples=_samples_of("softsign"))(ew.softsign)
tanhshrink = op("tanhshrink", method=False, namespace="nn.functional", samples=_samples_of("tanhshrink"))(ew.tanhshrink)


def _scalar(x, value):
    """A parameter as torch's kernels read it: converted to x's dtype (truncated for integers)."""
    return value if x.dtype.is_floating_point else int(value)


def _zero_or_nan(x):
    """+0 where x is finite, NaN where it is NaN (the shrinks' middle, as torch's), with no gradient."""
    return x - x


@op("_hardtanh", method=False, namespace="nn.functional", samples=lambda t: [
    t.S("hardtanh", lambda x: _hardtanh(x, -0.5, 0.5), t.avoid((3, 4), [-0.5, 0.5])),
    t.S("hardtanh-default", _hardtanh, t.NC(t.avoid((4, 3), [-1.0, 1.0], -2, 2), "F"))])
def _hardtanh(input, min_val=-1.0, max_val=1.0):
    """clamp's values (its -0 and NaN), but torch's gradient: 0 at the bounds as beyond them, and at NaN."""
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val cannot be greater than max_val (got {min_val} > {max_val})")
    lo, hi = _scalar(input, min_val), _scalar(input, max_val)
    out = input.clamp(lo, hi)
    return where((input > lo) & (input < hi), input, out.detach()) if input.requires_grad else out


@op(method=False, samples=lambda t: [
    t.S("threshold", lambda x: threshold(x, 0.3, -2.0), t.avoid((3, 4), [0.3]))])
def threshold(input, threshold, value):
    """``value`` where input <= threshold, else input."""
    return where(input <= _scalar(input, threshold), _scalar(input, value), input)


@op(samples=lambda t: [t.S("hardshrink", lambda x: x.hardshrink(0.4), t.avoid((3, 4), [-0.4, 0.4]))])
def hardshrink(input, lambd=0.5):
    """+0 on [-lambd, lambd] (nowhere for a negative lambd, as torch's), input elsewhere."""
    _float_input("hardshrink", input)
    return where((input < -lambd) | (input > lambd), input, _zero_or_nan(input))


@op(method=False, namespace="nn.functional", samples=lambda t: [
    t.S("softshrink", lambda x: softshrink(x, 0.4), t.avoid((3, 4), [-0.4, 0.4]))])
def softshrink(input, lambd=0.5):
    """+0 on [-lambd, lambd], input moved lambd towards 0 elsewhere."""
    _float_input("softshrink", input)
    if lambd < 0:
        raise RuntimeError(f"softshrink: lambda must be in range [0, inf) for input dtype {input.dtype.name}, but "
                           f"found to be {lambd}")
    return where((input < -lambd) | (input > lambd), input - input.sign() * lambd, _zero_or_nan(input))


class Celu(Function):
    """input where > 0, else alpha * expm1(input / alpha) (also at NaN). Its backward is torch's,
    g * inv * alpha * exp(x * inv) with inv = 1 / (alpha rounded to float32), as torch's backward takes it,
    not expm1's own (y + 1), which cancels to 0 below x = -37 alpha."""

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.save_for_backward(x)
        ctx.alpha = alpha
        pos = x > 0
        inside = where(pos, 0.0, x) * (1.0 / alpha)   # (times 1/alpha, as torch's kernel, not / alpha)
        return where(pos, x, inside.expm1() * alpha)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        alpha = ctx.alpha
        inv = 1.0 / float(np.float32(alpha))
        return where(x > 0, g, g * inv * alpha * (x * inv).exp()), None


@op(method=False, samples=lambda t: [
    t.S("celu", lambda x: celu(x, 0.7), t.nonzero(3, 4)),
    t.S("celu", lambda x: celu(x, 1.5), t.nonzero(4), second_order=True)])
def celu(input, alpha=1.0):
    """torch.celu: input where > 0, else alpha * expm1(input / alpha)."""
    _float_input("celu", input)
    if alpha == 0:
        raise RuntimeError("celu: ZeroDivisionError: alpha cannot be 0 for CELU")
    return Celu.apply(input, alpha)


@op(method=False, namespace="nn.functional", samples=lambda t: [
    t.S("glu", lambda x: glu(x), t.rn(3, 4)), t.S("glu-dim0", lambda x: glu(x, 0), t.NC(t.rn(4, 3), "F"))])
def glu(input, dim=-1):
    """a * sigmoid(b), a and b the two halves of input along dim."""
    if input.ndim == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    d = L.normalize_dim(dim, input.ndim, "glu")
    if input.shape[d] % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {d} is size {input.shape[d]} "
                           f"(glu of shape {list(input.shape)})")
    a, b = input.chunk(2, d)
    return a * sigmoid(b)


def _prelu_weight(input, weight):
    """weight shaped to broadcast over input's channels (dim 1; one channel below 2 dims)."""
    if weight.ndim > 1:
        raise RuntimeError(f"prelu: Expected `weight` to be a scalar or 1D tensor, but got: ndim = {weight.ndim}")
    if weight.numel() == 1:
        return weight.reshape(())
    channels = input.shape[1] if input.ndim >= 2 else 1
    if weight.numel() != channels:
        raise RuntimeError(f"prelu: Mismatch of parameter numbers and input channel size. Found parameter numbers "
                           f"= {weight.numel()} and channel size = {channels} (input shape {list(input.shape)}).")
    return weight.reshape((1, channels) + (1,) * (input.ndim - 2))


@op(samples=lambda t: [
    t.S("prelu-channels", lambda x, w: prelu(x, w), t.nonzero(2, 3, 4), t.rn(3)),
    t.S("prelu-one", lambda x, w: x.prelu(w), t.nonzero(3, 4), t.rn(1))])
def prelu(input, weight):
    """input where > 0, else weight * input, one weight per channel (or one for all)."""
    return where(input > 0, input, _prelu_weight(input, weight) * input)


def _softmin_dim(ndim):
    """torch's implicit dim of softmin (and softmax): 0 for 0, 1 and 3 dims, else 1."""
    return 0 if ndim in (0, 1, 3) else 1


@op(method=False, namespace="nn.functional", samples=lambda t: [
    t.S("softmin", lambda x: softmin(x, 1), t.rn(3, 4)),
    t.S("softmin-dtype", lambda x: softmin(x, 0, dtype=t.float64), t.NC(t.rn(3, 4), "F"))])
def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """softmax(-input) along dim (torch's implicit choice when None)."""
    return softmax(-input, _softmin_dim(input.ndim) if dim is None else dim, dtype=dtype)


@op(method=False, samples=lambda t: [
    t.S("rrelu-eval", lambda x: rrelu(x, 0.1, 0.3), t.nonzero(3, 4))])
def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, generator=None):
    """input where > 0, else input times a slope: drawn from U(lower, upper) for each element in training,
    their mean (lower + upper) / 2 otherwise (leaky_relu)."""
    _float_input("rrelu", input)
    if training:
        slope = fill_random_(empty_like(input), "uniform", float(lower), float(upper), generator, "rrelu")
    else:
        slope = (lower + upper) / 2
    return where(input > 0, input, input * slope)

