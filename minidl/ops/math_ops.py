"""Elementwise math composed of the table's ops: torch's functions that are a line or two of others
(logit, float_power, sinc, polygamma, ...), and torch.special's functions of that kind (entr, ndtr, ...)."""
from __future__ import annotations

import math

from .. import _dtype as dt
from ..autograd import Function
from .core import as_operand
from .elementwise import (Zeta, _operands, _promote, clamp, copysign, digamma, erf, erfc, erfcx, i0, i1, isinf, isnan,
                          lgamma, log, log1p, logaddexp, sign, sin, where, xlogy)
from .inplace import rebased
from .registry import op


def _as_float(x):
    """x, or x in the default float dtype when it holds integers (torch's float ops do so)."""
    return x if x.dtype.is_floating_point else x.to(dt.get_default_dtype())


@op(inplace=rebased, samples=lambda t: [
    t.S("logit", logit, t.uniform(0.05, 0.95, 3, 4)),
    t.S("logit-eps", lambda x: x.logit(eps=0.2), t.avoid((4, 3), [0.2, 0.8], 0.02, 0.98))])
def logit(x, eps=None):
    """log(x / (1 - x)); with ``eps``, x clamped to [eps, 1 - eps] first (no gradient beyond)."""
    x = _as_float(x)
    if eps is not None:
        x = clamp(x, eps, 1 - eps)
    return Logit.apply(x)


class Logit(Function):
    """log(x / (1 - x)) with torch's derivative 1 / (x (1 - x)): +inf at 0 and 1 (the chain rule through the
    quotient gives NaN at 1), NaN outside [0, 1]."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return log(x / (1 - x))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return where((x < 0) | (x > 1), math.nan, g / (x * (1 - x)))


def _float_power_inplace(fn, name):
    def float_power_(self, exponent):
        if self.dtype is not dt.float64:
            raise RuntimeError(f"{name}: the base must be float64 (in place, the result's dtype), "
                               f"got {self.dtype.name}")
        return rebased(fn, name)(self, exponent)
    float_power_.__name__ = name
    return float_power_


@op(inplace=_float_power_inplace, samples=lambda t: [
    t.S("float_power", float_power, t.pos(3, 4), t.rn(4)),
    t.S("float_power-scalar", lambda a: a.float_power(3), t.rn(3, 2))])
def float_power(a, b):
    """a ** b computed in float64 (as torch: complex aside, the result is always float64)."""
    if not hasattr(a, "_layout"):
        a = as_operand(float(a), b)
    a = a.to(dt.float64)
    return a ** (b.to(dt.float64) if hasattr(b, "_layout") else float(b))


@op(samples=lambda t: [t.S("logaddexp2", logaddexp2, t.rn(3, 4), t.rn(4) * 3)])
def logaddexp2(a, b):
    """log2(2^a + 2^b), as logaddexp in base e."""
    return logaddexp(*(x * math.log(2) for x in _operands(a, b))) / math.log(2)


@op(inplace=rebased, samples=lambda t: [t.S("sgn", sgn, t.nonzero(3, 4))])
def sgn(x):
    """sign, for real tensors (torch's sgn differs only for complex ones)."""
    return sign(x)


@op()
def signbit(x):
    """Whether x's sign bit is set: -0.0 and NaNs with the sign too (integers: x < 0)."""
    if not x.dtype.is_floating_point:
        return x < 0
    return copysign(x.new_ones(()), x.detach()) < 0


@op(inplace=rebased)
def heaviside(x, values):
    """0 where x < 0, 1 where x > 0, ``values`` where x == 0 (one dtype for both, as torch asks)."""
    if not hasattr(values, "_layout") or values.dtype is not x.dtype:
        raise RuntimeError(f"heaviside: values must be a tensor of the input's dtype {x.dtype.name}, got "
                           f"{getattr(values, 'dtype', type(values).__name__)}")
    return where(x == 0, values, (x > 0).to(x.dtype))


@op(inplace=rebased, samples=lambda t: [t.S("sinc", sinc, t.rn(3, 4) * 2)])
def sinc(x):
    """sin(pi x) / (pi x), 1 at 0 (where its derivative is 0)."""
    x = _as_float(x)
    zero = x == 0
    safe = where(zero, 1.0, x) * math.pi
    return where(zero, 1.0, sin(safe) / safe)


@op()
def isposinf(x):
    return x == math.inf if x.dtype.is_floating_point else x != x


@op()
def isneginf(x):
    return x == -math.inf if x.dtype.is_floating_point else x != x


@op()
def isreal(x):
    """True everywhere: minidl's tensors are real."""
    return (x == x) | isnan(x)


@op(samples=lambda t: [t.S("positive", lambda x: positive(x) * 2, t.rn(3, 4))])
def positive(x):
    """x itself, as torch (which refuses bool tensors)."""
    if x.dtype is dt.bool_:
        raise TypeError("positive: the `+` operator does not work on bool tensors")
    return x


@op(samples=lambda t: [t.S("rsub", lambda a, b: rsub(a, b, alpha=2), t.rn(3, 4), t.rn(4))])
def rsub(x, other, alpha=1):
    """other - alpha * x; two bools refused, as torch's ``-``."""
    if x.dtype is dt.bool_ and getattr(other, "dtype", None) is dt.bool_:
        raise RuntimeError("rsub: subtraction, the `-` operator, with two bool tensors is not supported; "
                           "use the `^` or logical_xor() operator instead")
    return as_operand(other, x) - (x * alpha if alpha != 1 else x)


def _rdiv(self, other):
    return as_operand(other, self) / self


_rdiv.__name__ = _rdiv.__qualname__ = "__rdiv__"
op("__rdiv__", method=_rdiv, namespace=None, samples=lambda t: [
    t.S("__rdiv__", lambda x: x.__rdiv__(2.0), t.nonzero(3, 4))])(_rdiv)


@op(inplace=rebased, samples=lambda t: [
    t.S("ldexp", lambda x: ldexp(x, t.const([[1, -2, 0]], dt.int64)), t.rn(4, 3))])
def ldexp(x, other):
    """x * 2 ** other, in x's float dtype (the default one for integers)."""
    x, other = _operands(x, other)
    result = _promote(x, other)
    if not result.is_floating_point:
        result = dt.get_default_dtype()
    return x.to(result) * (as_operand(2.0, x) ** other.to(result))


@op(samples=lambda t: [t.S("frexp", lambda x: frexp(x)[0], t.rn(3, 4) * 5)])
def frexp(x):
    """(mantissa, exponent): x = mantissa * 2 ** exponent, 0.5 <= |mantissa| < 1 (0, inf and NaN: (x, 0)); the
    mantissa's gradient is 2 ** -exponent."""
    if not x.dtype.is_floating_point:
        raise RuntimeError(f"frexp: expected a floating point tensor, got {x.dtype.name}")
    v = x.detach()
    finite = ~isinf(v) & ~isnan(v) & (v != 0)
    e = where(finite, (v.abs().log2().floor() + 1), 0.0)
    m = _scaled(v, -e)
    e = where(finite & (m.abs() >= 1), e + 1, where(finite & (m.abs() < 0.5), e - 1, e))  # (log2 rounds there)
    return where(finite, _scaled(x, -e), x), e.to(dt.int32)


def _scaled(x, e):
    """x * 2 ** e in two halves, so that neither power overflows or underflows on its own."""
    half = (e / 2).floor()
    return x * 2.0 ** half * 2.0 ** (e - half)


def _polygamma_method(self, n):
    """x.polygamma(n) is polygamma(n, x), as in torch."""
    return polygamma(n, self)


_polygamma_method.__name__ = _polygamma_method.__qualname__ = "polygamma"


def _polygamma_inplace(fn, name):
    """x.polygamma_(n): the tensor comes first, as in the method."""
    return rebased(lambda x, n: fn(n, x), name)


@op(method=_polygamma_method, inplace=_polygamma_inplace, samples=lambda t: [
    t.S("polygamma", lambda x: polygamma(2, x) + x.polygamma(0), t.pos(3, 4))])
def polygamma(n, x):
    """The n-th derivative of digamma: (-1)^(n+1) n! zeta(n + 1, x) for n >= 1."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise RuntimeError(f"polygamma: n must be a non-negative integer, got {n!r}")
    x = _as_float(x)
    if n == 0:
        return digamma(x)
    return Zeta.apply(as_operand(float(n + 1), x), x) * ((-1) ** (n + 1) * math.factorial(n))


@op(inplace=rebased, samples=lambda t: [t.S("mvlgamma", lambda x: mvlgamma(x, 3), t.uniform(1.2, 3, 3, 4))])
def mvlgamma(x, p):
    """The multivariate log-gamma of dimension p: sum over j < p of lgamma(x - j/2), plus p(p-1)/4 log(pi).
    Like torch 2.13, no check of x > (p-1)/2: below, the sum of lgamma's (inf at its poles) comes back."""
    x = _as_float(x)
    if p < 1:
        raise RuntimeError(f"mvlgamma: p has to be greater than or equal to 1, got {p}")
    total = lgamma(x)
    for j in range(1, p):
        total = total + lgamma(x - j / 2)
    return total + p * (p - 1) / 4 * math.log(math.pi)


# ----------------------------------------------------------------------------- torch.special's own
@op(method=False, namespace="special", samples=lambda t: [t.S("entr", entr, t.pos(3, 4))])
def entr(x):
    """-x log x for x > 0, 0 at 0, -inf below (NaN stays)."""
    return Entr.apply(_as_float(x))


class Entr(Function):
    """entr with torch's derivative -(1 + log x) everywhere: +inf at 0, NaN below (the value is a constant there)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return where(x > 0, -xlogy(x, where(x > 0, x, 1.0)), where(x == 0, 0.0, where(x < 0, -math.inf, x)))

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * -(log(x) + 1)


@op(method=False, namespace="special", samples=lambda t: [t.S("ndtr", ndtr, t.rn(3, 4) * 2)])
def ndtr(x):
    """The standard normal CDF."""
    return erfc(_as_float(x) * -math.sqrt(0.5)) * 0.5


@op(method=False, namespace="special", samples=lambda t: [t.S("log_ndtr", log_ndtr, t.rn(3, 4) * 4)])
def log_ndtr(x):
    """log of the normal CDF, accurate in both tails: log1p(-erfc(x/sqrt 2)/2) above -1, and through erfcx
    (log(erfcx(-x/sqrt 2)/2) - x^2/2) below, where the CDF underflows."""
    x = _as_float(x)
    low = where(x < -1, x, -1.0)
    high = where(x < -1, -1.0, x)
    return where(x < -1, (erfcx(low * -math.sqrt(0.5)) * 0.5).log() - low * low * 0.5,
                 log1p(erfc(high * math.sqrt(0.5)) * -0.5))




@op(method=False, namespace="special")
def spherical_bessel_j0(x):
    """sin(x) / x: 1 at 0, 0 at +-inf (not differentiable, as torch's)."""
    x = _as_float(x).detach()
    safe = where(x == 0, 1.0, x)
    return where(x == 0, 1.0, where(isinf(x), 0.0, sin(safe) / safe))


@op(method=False, namespace="special")
def modified_bessel_i0(x):
    """i0, outside autograd (torch's has no derivative)."""
    return i0(x.detach())


@op(method=False, namespace="special")
def modified_bessel_i1(x):
    """special.i1, outside autograd (torch's has no derivative)."""
    return i1(x.detach())


class Ndtri(Function):
    """The inverse of the normal CDF: Abramowitz and Stegun's rational guess (26.2.23, within 4.5e-4) in the
    nearer tail, then Newton steps. In the tails (p or 1 - p below 1/4) on log_ndtr(x) = log(q), which keep full
    relative accuracy however small q is, the upper half by symmetry, ndtri(p) = -ndtri(1 - p) (1 - p is exact
    there); in the centre on erf(x / sqrt 2) / 2 = p - 1/2 (exact there), which keeps the relative accuracy of a
    y near 0. Its derivative is 1 / pdf(y)."""

    @staticmethod
    def forward(ctx, p):
        q = where(p < 0.5, p, 1 - p)
        t = (where(q > 0, q, 0.5).log() * -2).sqrt()
        guess = -(t - (2.515517 + t * (0.802853 + t * 0.010328)) / (1 + t * (1.432788 + t * (0.189269 + t * 0.001308))))
        x, target = guess, where(q > 0, q, 0.5).log()
        for _ in range(4):
            lower = log_ndtr(x)   # Newton: x -= (log Phi(x) - log q) / (pdf(x) / Phi(x))
            x = x - (lower - target) * (x * x * 0.5 + lower).exp() * math.sqrt(2 * math.pi)
        centre, offset = where(p < 0.5, guess, -guess), p - 0.5
        for _ in range(3):   # Newton: x -= (Phi(x) - p) / pdf(x), with Phi(x) - 1/2 = erf(x / sqrt 2) / 2
            step = (erf(centre * math.sqrt(0.5)) * 0.5 - offset) * (centre * centre * 0.5).exp()
            centre = centre - step * math.sqrt(2 * math.pi)
        y = where(q >= 0.25, centre, where(p < 0.5, x, -x))
        y = where(q == 0, where(p < 0.5, -math.inf, math.inf), y)
        y = where((p < 0) | (p > 1) | isnan(p), math.nan, y)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * (y * y * 0.5).exp() * math.sqrt(2 * math.pi)


@op(method=False, namespace="special", samples=lambda t: [t.S("ndtri", ndtri, t.uniform(0.02, 0.98, 3, 4))])
def ndtri(p):
    """The standard normal quantile: the x with ndtr(x) = p."""
    return Ndtri.apply(_as_float(p))


# ----------------------------------------------------------------------------- orthogonal polynomials
def _polynomial(name, first, step, argument=lambda x: x):
    """torch.special's polynomial ``name``(x, n) of degree trunc(n) (0 for a negative degree), by its three-term
    recurrence: P_0 = 1, P_1 = first(y), P_(k+1) = step(k, y, P_k, P_(k-1)) for y = argument(x). Not differentiable,
    as torch's; the degree is read per element, so the loop runs to the largest."""
    def polynomial(x, n):
        x, n = _operands(x, n)
        result = _promote(x, n)
        if not result.is_floating_point:
            result = dt.get_default_dtype()
        y, degree = argument(x.detach().to(result)), n.detach().to(result).trunc()
        previous, current = y.new_ones(y.shape), first(y)
        out = where(degree == 0, 1.0, where(degree == 1, current, 0.0))
        for k in range(1, int(degree.max().item()) if degree.numel() else 0):
            previous, current = current, step(k, y, current, previous)
            out = where(degree == k + 1, current, out)
        return out
    polynomial.__name__ = polynomial.__qualname__ = name
    polynomial.__doc__ = f"torch.special.{name}(x, n), by its recurrence (see _polynomial)."
    return polynomial


def _shifted(x):
    return x + x - 1


def _chebyshev(k, y, p, q):
    return (y + y) * p - q


_SPECIAL = {"method": False, "namespace": "special"}
chebyshev_polynomial_t = op(**_SPECIAL)(_polynomial("chebyshev_polynomial_t", lambda y: y, _chebyshev))
chebyshev_polynomial_u = op(**_SPECIAL)(_polynomial("chebyshev_polynomial_u", lambda y: y + y, _chebyshev))
chebyshev_polynomial_v = op(**_SPECIAL)(_polynomial("chebyshev_polynomial_v", lambda y: y + y - 1, _chebyshev))
chebyshev_polynomial_w = op(**_SPECIAL)(_polynomial("chebyshev_polynomial_w", lambda y: y + y + 1, _chebyshev))
shifted_chebyshev_polynomial_t = op(**_SPECIAL)(_polynomial("shifted_chebyshev_polynomial_t", lambda y: y,
                                                            _chebyshev, _shifted))
shifted_chebyshev_polynomial_u = op(**_SPECIAL)(_polynomial("shifted_chebyshev_polynomial_u", lambda y: y + y,
                                                            _chebyshev, _shifted))
shifted_chebyshev_polynomial_v = op(**_SPECIAL)(_polynomial("shifted_chebyshev_polynomial_v", lambda y: y + y - 1,
                                                            _chebyshev, _shifted))
shifted_chebyshev_polynomial_w = op(**_SPECIAL)(_polynomial("shifted_chebyshev_polynomial_w", lambda y: y + y + 1,
                                                            _chebyshev, _shifted))
hermite_polynomial_h = op(**_SPECIAL)(_polynomial("hermite_polynomial_h", lambda y: y + y,
                                                  lambda k, y, p, q: (y + y) * p - q * (2 * k)))
hermite_polynomial_he = op(**_SPECIAL)(_polynomial("hermite_polynomial_he", lambda y: y,
                                                   lambda k, y, p, q: y * p - q * k))
laguerre_polynomial_l = op(**_SPECIAL)(_polynomial("laguerre_polynomial_l", lambda y: 1 - y,
                                                   lambda k, y, p, q: ((2 * k + 1 - y) * p - q * k) / (k + 1)))
legendre_polynomial_p = op(**_SPECIAL)(_polynomial("legendre_polynomial_p", lambda y: y,
                                                   lambda k, y, p, q: (y * p * (2 * k + 1) - q * k) / (k + 1)))
