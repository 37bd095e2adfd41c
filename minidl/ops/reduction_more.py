"""More reductions and scans, composed from the primitives' ops: nansum, nanmean, aminmax, cummax, cummin,
logcumsumexp, the trapezoid rules, cov, corrcoef, renorm and dist.

The running scans (cummax, cummin, logcumsumexp) have no kernel of their own: ``running`` builds them from
an elementwise op in log2(n) doubling steps (Hillis and Steele's inclusive scan), each one launch of that op.
"""
from __future__ import annotations

import math
import warnings
from collections import namedtuple

from .. import _dtype as dt
from ..layout import normalize_dim
from .creation import arange, eye
from .elementwise import logaddexp, maximum, minimum, where
from .inplace import rebased
from .reduction import amax, amin, norm, sum
from .registry import op
from .shape_ops import cat

return_types = {"aminmax": namedtuple("aminmax", ["min", "max"]),
                "cummax": namedtuple("cummax", ["values", "indices"]),
                "cummin": namedtuple("cummin", ["values", "indices"])}


def running(combine, x, dim, fill=None):
    """The inclusive scan of ``combine`` along ``dim``: after the step of shift k every element holds the
    combination of the (up to) 2k elements ending at it. The shifted-in slots hold ``fill``, or, when None,
    the first element (right for an idempotent combine such as max)."""
    n = x.shape[dim]
    y, k = x, 1
    while k < n:
        shape = _sized(y.shape, dim, k)
        head = y.narrow(dim, 0, 1).expand(shape) if fill is None else y.new_full(shape, fill)
        y = combine(y, cat([head, y.narrow(dim, 0, n - k)], dim))
        k *= 2
    return y


def _sized(shape, dim, k):
    return tuple(shape[:dim]) + (k,) + tuple(shape[dim + 1:])


def _along(n, dim, ndim, device):
    """0..n-1 laid along ``dim`` of an ``ndim``-D tensor (to broadcast against it)."""
    return arange(n, device=device).reshape(tuple(n if d == dim else 1 for d in range(ndim)))


# ----------------------------------------------------------------------------- NaN-ignoring reductions
def _without_nan(x):
    return where(x.isnan(), 0, x) if x.dtype.is_floating_point else x


@op(samples=lambda t: [
    t.S("nansum", lambda x: nansum(x.masked_fill(t.const([[True, False, False], [False, False, True]]),
                                                 math.nan), 1), t.rn(2, 3)),
    t.S("nansum-all", lambda x: x.nansum(), t.rn(3, 4))])
def nansum(x, dim=None, keepdim=False, *, dtype=None):
    """sum with NaNs counted as zero (their gradient is zero)."""
    return sum(_without_nan(x), dim, keepdim, dtype)


@op(samples=lambda t: [
    t.S("nanmean", lambda x: nanmean(x.masked_fill(t.const([[True, False, False], [False, False, False]]),
                                                   math.nan), 1, keepdim=True), t.rn(2, 3)),
    t.S("nanmean-all", lambda x: x.nanmean(), t.rn(3, 4))])
def nanmean(x, dim=None, keepdim=False, *, dtype=None):
    """The mean of the values that are not NaN (NaN where there are none)."""
    if not (x.dtype if dtype is None else dt.to_dtype(dtype)).is_floating_point:
        raise RuntimeError(f"nanmean(): expected input to have floating point dtype but got {x.dtype.name}")
    return nansum(x, dim, keepdim, dtype=dtype) / (~x.isnan()).sum(dim, keepdim)


@op(samples=lambda t: [
    t.S("aminmax", lambda x: aminmax(x, dim=1).max - x.aminmax(dim=1, keepdim=True).min.squeeze(1),
        t.distinct(3, 4)),
    t.S("aminmax-all", lambda x: aminmax(x).min * 2 + aminmax(x).max, t.distinct(2, 3))])
def aminmax(x, *, dim=None, keepdim=False):
    """(min, max) at once, as amin and amax."""
    return return_types["aminmax"](amin(x, dim, keepdim), amax(x, dim, keepdim))


# ----------------------------------------------------------------------------- running extremes
def _cum_extreme(name, combine, x, dim):
    """cummax / cummin: the running extreme and the index it came from. torch moves the index on to every
    later element equal to the running extreme (its test is >= for cummax, <= for cummin), and to every NaN
    once one is met: so the index is the last place at or before it where the input equals the extreme."""
    dim = normalize_dim(dim, x.ndim, name)
    scalar = x.ndim == 0
    src = x.reshape((1,)) if scalar else x
    plain = src.detach()
    values = running(combine, plain, dim)
    took = plain == values
    if plain.dtype.is_floating_point:
        took = took | plain.isnan()
    places = _along(src.shape[dim], dim, src.ndim, src.device)
    indices = running(maximum, where(took, places, 0), dim)
    values = src.gather(dim, indices)           # (the gradient goes back to the element each value came from)
    if scalar:
        values, indices = values.reshape(()), indices.reshape(())
    return return_types[name](values, indices)


@op(samples=lambda t: [
    t.S("cummax", lambda x: cummax(x, 1).values, t.distinct(3, 5)),
    t.S("cummax-dim0", lambda x: x.cummax(0)[0], t.distinct(6, 2))])
def cummax(x, dim):
    return _cum_extreme("cummax", maximum, x, dim)


@op(samples=lambda t: [t.S("cummin", lambda x: cummin(x, -1).values, t.distinct(2, 7))])
def cummin(x, dim):
    return _cum_extreme("cummin", minimum, x, dim)


@op(samples=lambda t: [
    t.S("logcumsumexp", lambda x: logcumsumexp(x, 1), t.rn(3, 5)),
    t.S("logcumsumexp-dim0", lambda x: x.logcumsumexp(0), t.rn(4, 2))])
def logcumsumexp(x, dim):
    """log(cumsum(exp(x))) without overflow: a running logaddexp."""
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"logcumsumexp(): expected a floating point input, got {x.dtype.name}")
    dim = normalize_dim(dim, x.ndim, "logcumsumexp")
    return running(logaddexp, x, dim, fill=-math.inf) if x.ndim else x.clone()


# ----------------------------------------------------------------------------- the trapezoid rule
def _spacing(y, x, dx, dim, name):
    """The gaps between the sample points along ``dim``: a tensor from ``x``, else the number ``dx``."""
    if x is not None and dx is not None:
        raise RuntimeError(f"{name}: pass either x or dx, not both")
    if x is None:
        return 1 if dx is None else dx
    if x.ndim == 1:
        if x.shape[0] != y.shape[dim]:
            raise RuntimeError(f"{name}: there must be one `x` value for each sample point: x has "
                               f"{x.shape[0]}, y has {y.shape[dim]} along dim {dim}")
        x = x.reshape(tuple(x.shape[0] if d == dim else 1 for d in range(y.ndim)))
    n = x.shape[dim]
    return x.narrow(dim, 1, n - 1) - x.narrow(dim, 0, n - 1)


def _pairs(y, dim):
    n = y.shape[dim]
    return y.narrow(dim, 0, n - 1) + y.narrow(dim, 1, n - 1)


def _trapezoid(y, x, dx, dim, name):
    dim = normalize_dim(dim, y.ndim, name)
    step = _spacing(y, x, dx, dim, name)
    if y.shape[dim] == 0:
        return y.new_zeros(tuple(s for d, s in enumerate(y.shape) if d != dim))
    if hasattr(step, "_layout"):
        return (_pairs(y, dim) * step).sum(dim) / 2.0
    return (y.sum(dim) - (y.narrow(dim, 0, 1) + y.narrow(dim, -1 % y.shape[dim], 1)).squeeze(dim) * 0.5) * step


@op(method=False, samples=lambda t: [
    t.S("trapezoid", lambda y: trapezoid(y, dx=0.5), t.rn(3, 4)),
    t.S("trapezoid-x", lambda y, x: trapezoid(y, x, dim=0), t.rn(4, 3), t.rn(4))])
def trapezoid(y, x=None, *, dx=None, dim=-1):
    """The trapezoid rule along ``dim``, at the points ``x`` or spaced ``dx`` (default 1) apart."""
    return _trapezoid(y, x, dx, dim, "trapezoid")


@op(method=False, samples=lambda t: [t.S("trapz", lambda y, x: trapz(y, x), t.rn(2, 4), t.rn(2, 4))])
def trapz(y, x=None, *, dx=None, dim=-1):
    return _trapezoid(y, x, dx, dim, "trapz")


@op(method=False, samples=lambda t: [
    t.S("cumulative_trapezoid", lambda y: cumulative_trapezoid(y, dx=2.0), t.rn(3, 4)),
    t.S("cumulative_trapezoid-x", lambda y, x: cumulative_trapezoid(y, x, dim=0), t.rn(4, 3), t.rn(4, 3))])
def cumulative_trapezoid(y, x=None, *, dx=None, dim=-1):
    """The running trapezoid rule: one element fewer than y along ``dim``."""
    dim = normalize_dim(dim, y.ndim, "cumulative_trapezoid")
    step = _spacing(y, x, dx, dim, "cumulative_trapezoid")
    if y.shape[dim] == 0:
        return (y * 0.5).narrow(dim, 0, 0)
    if hasattr(step, "_layout"):          # (torch's order of operations: integers stay integers until the end)
        return (_pairs(y, dim) * step).cumsum(dim) / 2.0
    return (step / 2.0 * _pairs(y, dim)).cumsum(dim)


# ----------------------------------------------------------------------------- covariance
def _weights(fweights, aweights, observations):
    """The observations' weights: fweights (integer counts) times aweights; None when neither is given."""
    w = None
    for name, given in (("fweights", fweights), ("aweights", aweights)):
        if given is None:
            continue
        if given.ndim > 1 or given.numel() != observations:
            raise RuntimeError(f"cov(): expected {name} to have one element per observation ({observations}), "
                               f"got shape {list(given.shape)}")
        if name == "fweights" and given.dtype.category != 1:
            raise RuntimeError(f"cov(): expected fweights to have integral dtype, got {given.dtype.name}")
        if bool((given < 0).any()):
            raise RuntimeError(f"cov(): {name} cannot be negative")
        w = given if w is None else w * given
    return w


@op(samples=lambda t: [
    t.S("cov", lambda x: cov(x), t.rn(3, 5)),
    t.S("cov-weights", lambda x, a: cov(x, correction=0, fweights=t.const([1, 2, 1, 3]), aweights=a),
        t.rn(2, 4), t.pos(4))])
def cov(input, *, correction=1, fweights=None, aweights=None):
    """The covariance matrix of the variables in ``input``'s rows (observations in its columns), as
    torch's: weighted by fweights * aweights, divided by the weights' sum less ``correction``."""
    if input.ndim > 2:
        raise RuntimeError(f"cov(): expected input to have two or fewer dimensions but got an input with "
                           f"{input.ndim} dimensions")
    x = input.reshape((1, -1)) if input.ndim < 2 else input
    observations = x.shape[1]
    w = _weights(fweights, aweights, observations)
    total = w.sum() if w is not None else observations
    mean = (x if w is None else x * w).sum(1) / total
    if w is not None and aweights is not None and correction != 0:
        scale = total - correction * (w * aweights).sum() / total
    else:
        scale = total - correction
    if float(scale) <= 0:
        warnings.warn("cov(): degrees of freedom is <= 0. Correction should be strictly less than the number of "
                      "observations.", UserWarning, stacklevel=2)
        scale = scale * 0
    x = x - mean.unsqueeze(1)
    return ((x @ (x if w is None else x * w).t()) / scale).squeeze()


@op(samples=lambda t: [t.S("corrcoef", corrcoef, t.rn(3, 6))])
def corrcoef(input):
    """Pearson's correlation coefficients: cov scaled by the standard deviations, clipped to [-1, 1]."""
    c = cov(input)
    if c.ndim == 0:
        return c / c
    std = (c * eye(c.shape[0], dtype=c.dtype, device=c.device)).sum(1).sqrt()
    return (c / std.reshape((-1, 1)) / std.reshape((1, -1))).clamp(-1, 1)


# ----------------------------------------------------------------------------- norms
@op(inplace=rebased, samples=lambda t: [
    t.S("renorm", lambda x: renorm(x, 2, 0, 1.0), t.rn(3, 4)),
    t.S("renorm-p1-dim1", lambda x: x.renorm(1, 1, 2.5), t.rn(3, 4))])
def renorm(input, p, dim, maxnorm):
    """Each slice along ``dim`` whose p-norm exceeds maxnorm scaled down to norm maxnorm (torch's factor:
    maxnorm / (norm + 1e-7))."""
    if not input.dtype.is_floating_point:
        raise RuntimeError(f"renorm: expected a floating point input, got {input.dtype.name}")
    if p <= 0:
        raise RuntimeError(f"renorm: non-positive-norm not supported (p = {p})")
    if maxnorm < 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm}")
    if input.ndim < 2:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {input.ndim} dimensions")
    dim = normalize_dim(dim, input.ndim, "renorm")
    size = norm(input, p, tuple(d for d in range(input.ndim) if d != dim), keepdim=True)
    factor = where(size > maxnorm, maxnorm / (size + 1e-7), 1.0)
    return input * factor


@op(namespace=None, samples=lambda t: [
    t.S("dist", lambda a, b: dist(a, b), t.rn(3, 4), t.rn(4)),
    t.S("dist-p3", lambda a, b: a.dist(b, 3), t.rn(2, 3), t.rn(2, 3))])
def dist(input, other, p=2):
    """The p-norm of input - other (broadcast). torch's ``torch.dist(a, b)`` is ``a.dist(b)`` here: the
    name ``minidl.dist`` is the distributed package (torch's ``torch.distributed``)."""
    return norm(input - other, p)
