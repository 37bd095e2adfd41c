"""Elementwise math of issue 44 (erfinv, digamma, zeta, Bessel's I, fmod, xlogy, ...): the hand-written special
functions against mpmath's arbitrary precision where torch's own are only approximations, and torch's edge cases
and errors (signed zeros, poles, NaN, dtypes, refused inputs), on the CPU and on 'cuda' (the simulator where
there is no GPU)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import minidl

from cuda_support import cuda  # noqa: F401 (the fixture)

torch = pytest.importorskip("torch")
mpmath = pytest.importorskip("mpmath")

_rng = np.random.default_rng(44)
NEAR_ONE = 1 - 10.0 ** -_rng.uniform(1, 15.9, 12)
# function -> (minidl's, mpmath's, points): domains' interiors, their edges and the far tails
SPECIAL = {
    "erfinv": (minidl.erfinv, mpmath.erfinv,
               [0.0, 1e-300, 1e-8, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99, *NEAR_ONE, *-NEAR_ONE]),
    "digamma": (minidl.digamma, mpmath.digamma, [1e-8, 0.5, 1.4616321449683622, 3.0, 9.9, 10.5, 1e5, 1e300,
                                                 -0.5, -2.7, -10.25, -1e-8]),
    "lgamma": (minidl.lgamma, mpmath.loggamma, [1e-8, 0.5, 3.0, 100.0, 1e300]),
    "zeta(3, q)": (lambda q: minidl.special.zeta(3.0, q), lambda q: mpmath.zeta(3, q), [0.01, 0.7, 5.0, 1e3, -2.5]),
    "zeta(4.5, q)": (lambda q: minidl.special.zeta(4.5, q), lambda q: mpmath.zeta(4.5, q), [0.25, 1.0, 9.0, 40.0]),
    "i0": (minidl.i0, lambda x: mpmath.besseli(0, x), [0.0, 1e-5, 2.0, -7.5, 29.9, 30.1, 100.0, 700.0]),
    "i1": (minidl.special.i1, lambda x: mpmath.besseli(1, x), [1e-5, 2.0, -7.5, 29.9, 30.1, -100.0, 700.0]),
    "i0e": (minidl.special.i0e, lambda x: mpmath.besseli(0, x) * mpmath.exp(-abs(x)), [0.5, -30.1, 1e4, 1e10]),
    "i1e": (minidl.special.i1e, lambda x: mpmath.besseli(1, x) * mpmath.exp(-abs(x)), [0.5, -30.1, 1e4, 1e10]),
    "erfcx": (minidl.special.erfcx, lambda x: mpmath.exp(x * x) * mpmath.erfc(x), [-20.0, -1.0, 0.0, 3.0, 25.9,
                                                                                  26.1, 1e3, 1e15]),
    "igamma(2.5, x)": (lambda x: minidl.igamma(2.5, x), lambda x: mpmath.gammainc(2.5, 0, x, regularized=True),
                       [1e-3, 0.5, 3.4, 3.6, 20.0, 60.0]),
    "igammac(40, x)": (lambda x: minidl.igammac(40.0, x),
                       lambda x: mpmath.gammainc(40, x, mpmath.inf, regularized=True), [1.0, 30.0, 41.0, 80.0, 200.0]),
    "ndtri": (minidl.special.ndtri, lambda p: mpmath.sqrt(2) * mpmath.erfinv(2 * p - 1),
              [1e-30, 1e-10, 0.02, 0.5, 0.7, 1 - 2 ** -40]),
}


@pytest.mark.parametrize("name", SPECIAL)
def test_special_functions_agree_with_arbitrary_precision(name):
    ours, exact, points = SPECIAL[name]
    got = ours(minidl.tensor(points, dtype=minidl.float64)).numpy()
    with mpmath.workdps(40):
        want = np.array([float(mpmath.re(exact(mpmath.mpf(p)))) for p in points])
    np.testing.assert_allclose(got, want, rtol=2e-13, atol=1e-15)  # (atol: digamma at its root)


@pytest.mark.parametrize("name, ours, theirs, points", [
    ("erfinv", minidl.erfinv, torch.erfinv, [-1.0, 1.0, -0.0, 1.5, -np.inf, np.nan]),
    ("digamma", minidl.digamma, torch.digamma, [0.0, -0.0, -1.0, -3.0, np.inf, -np.inf, np.nan]),
    ("lgamma", minidl.lgamma, torch.lgamma, [0.0, -0.0, -1.0, -4.0, np.inf, -np.inf, np.nan]),
    ("i0", minidl.i0, torch.i0, [-np.inf, np.inf, np.nan, 800.0]),
    ("i1e", minidl.special.i1e, torch.special.i1e, [-np.inf, np.inf, np.nan, -0.0]),
    ("erfcx", minidl.special.erfcx, torch.special.erfcx, [-np.inf, -30.0, np.inf, np.nan]),
    ("sinc", minidl.sinc, torch.sinc, [0.0, -0.0, 1.0, 0.5, np.inf, np.nan]),
    ("entr", minidl.special.entr, torch.special.entr, [0.0, -1.0, 0.5, np.inf, np.nan]),
    ("ndtr", minidl.special.ndtr, torch.special.ndtr, [-40.0, 0.0, 8.0, np.inf, -np.inf]),
    ("ndtri", minidl.special.ndtri, torch.special.ndtri, [0.0, 1.0, -0.5, 1.5, np.nan, 1e-300]),
    ("log_ndtr", minidl.special.log_ndtr, torch.special.log_ndtr, [-40.0, -1.0, 0.0, 8.0, np.inf, -np.inf]),
])
def test_poles_signed_zeros_and_infinities_as_torch(name, ours, theirs, points):
    got = ours(minidl.tensor(points, dtype=minidl.float64)).numpy()
    want = theirs(torch.tensor(points, dtype=torch.float64)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, equal_nan=True)
    assert (np.signbit(got) == np.signbit(want))[want == 0].all()


PAIRS = [(p, q) for p in (0.0, -0.0, 2.5, -2.5, np.inf, np.nan, 1.0)
         for q in (0.0, -0.0, 0.75, -0.75, np.inf, -1.0, np.nan)]


@pytest.mark.parametrize("name", ["fmod", "hypot", "copysign", "xlogy", "nextafter", "special.xlog1py"])
def test_binary_ops_at_every_pair_of_special_values_as_torch(name):
    a, b = (np.array(v) for v in zip(*PAIRS))
    ours, theirs = minidl, torch
    for part in name.split("."):
        ours, theirs = getattr(ours, part), getattr(theirs, part)
    got = ours(minidl.tensor(a), minidl.tensor(b)).numpy()
    want = theirs(torch.tensor(a), torch.tensor(b)).numpy()
    np.testing.assert_array_equal(got, want)
    assert (np.signbit(got) == np.signbit(want))[want == 0].all()


def test_integer_fmod_gcd_lcm_as_torch_and_their_refusals():
    a, b = [7, -7, 7, -7, 0, 12, -4, 0], [3, 3, -3, -3, 5, -18, 6, 0]
    ta, tb, ma, mb = torch.tensor(a), torch.tensor(b), minidl.tensor(a), minidl.tensor(b)
    assert minidl.gcd(ma, mb).tolist() == torch.gcd(ta, tb).tolist()
    assert minidl.lcm(ma, mb).tolist() == torch.lcm(ta, tb).tolist()
    assert minidl.fmod(ma[:-1], mb[:-1]).tolist() == torch.fmod(ta[:-1], tb[:-1]).tolist()
    with pytest.raises(RuntimeError, match=r"fmod: ZeroDivisionError .*int64 by int64"):
        minidl.fmod(ma, mb)
    with pytest.raises(RuntimeError, match="gcd: expected integer tensors, got float32 and int64"):
        minidl.gcd(minidl.tensor([1.0]), mb)


def test_dtypes_and_refusals_of_the_composites():
    assert minidl.float_power(minidl.tensor([2]), 2).dtype is minidl.float64
    assert minidl.float_power(minidl.tensor([2.0]), minidl.tensor([0.5])).dtype is minidl.float64
    with pytest.raises(RuntimeError, match="float_power_: the base must be float64"):
        minidl.tensor([2.0]).float_power_(2)
    assert minidl.sinc(minidl.tensor([0, 1])).dtype is minidl.float32
    assert minidl.ldexp(minidl.tensor([1.0]), minidl.tensor([-2])).tolist() == [0.25]
    with pytest.raises(RuntimeError, match="heaviside: values must be a tensor of the input's dtype float32"):
        minidl.heaviside(minidl.tensor([1.0]), minidl.tensor([1]))
    with pytest.raises(RuntimeError, match="polygamma: n must be a non-negative integer, got -1"):
        minidl.polygamma(-1, minidl.tensor([1.0]))
    values = [-0.0, 0.0, -1.0, np.inf, -np.inf, np.nan]
    assert minidl.signbit(minidl.tensor(values)).tolist() == torch.signbit(torch.tensor(values)).tolist()
    assert minidl.isposinf(minidl.tensor(values)).tolist() == torch.isposinf(torch.tensor(values)).tolist()
    assert minidl.isneginf(minidl.tensor([1, -2])).tolist() == [False, False]
    x = minidl.tensor([1.0])
    assert minidl.positive(x) is x


def test_frexp_as_torch_at_the_edges_of_the_exponent_range():
    values = [0.0, -0.0, 8.0, -0.3, 1 - 2 ** -53, 2.0 ** -1074, 2.0 ** -1022, 1.7e308, np.inf, np.nan]
    mantissa, exponent = minidl.frexp(minidl.tensor(values, dtype=minidl.float64))
    want = torch.frexp(torch.tensor(values, dtype=torch.float64))
    np.testing.assert_array_equal(mantissa.numpy(), want.mantissa.numpy())
    assert exponent.dtype is minidl.int32 and exponent.tolist() == want.exponent.tolist()


def test_logit_eps_and_its_gradient_as_torch():
    values = [0.05, 0.5, 0.97, 0.0, 1.0]
    for eps in (None, 0.1):
        x, tx = minidl.tensor(values, dtype=minidl.float64, requires_grad=True), \
            torch.tensor(values, dtype=torch.float64, requires_grad=True)
        y, ty = minidl.logit(x, eps), torch.logit(tx, eps)
        np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-14)
        y[:3].sum().backward()
        ty[:3].sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-14)


def test_float32_erfcx_and_log_ndtr_in_the_range_where_exp_x2_overflows_float32():
    erfcx_points, log_ndtr_points = [9.0, 9.5, 10.25, 17.0, 25.9, 26.1], [-12.0, -13.5, -20.0, -36.0, -37.5]
    for ours, theirs, points in ((minidl.special.erfcx, torch.special.erfcx, erfcx_points),
                                 (minidl.special.log_ndtr, torch.special.log_ndtr, log_ndtr_points)):
        got = ours(minidl.tensor(points)).numpy()
        np.testing.assert_allclose(got, theirs(torch.tensor(points)).numpy(), rtol=1e-6)


def test_float32_ndtri_keeps_its_relative_accuracy_near_one_half():
    p = torch.tensor([0.5000021, 0.5 + 2 ** -23, 0.5 - 2 ** -24, 0.4999, 0.50001, 0.3, 0.76])
    got = minidl.special.ndtri(minidl.tensor(p.numpy())).numpy()
    np.testing.assert_allclose(got, torch.special.ndtri(p.double()).numpy(), rtol=2e-6)


def test_mvlgamma_at_and_below_its_domain_as_torch():
    values = [1.0, 0.9, 0.5, 0.0, -0.5, -3.5, -1.25, 1.2]
    got = minidl.mvlgamma(minidl.tensor(values, dtype=minidl.float64), 3).numpy()
    np.testing.assert_allclose(got, torch.mvlgamma(torch.tensor(values, dtype=torch.float64), 3).numpy(),
                               rtol=1e-13)


@pytest.mark.parametrize("ours, theirs, points", [
    (minidl.logit, torch.logit, [-1.0, 0.0, 0.5, 1.0, 2.0, np.nan]),
    (minidl.special.entr, torch.special.entr, [-1.0, 0.0, 0.5, np.inf, np.nan])])
def test_gradients_at_the_edges_of_the_domain_as_torch(ours, theirs, points):
    x = minidl.tensor(points, dtype=minidl.float64, requires_grad=True)
    tx = torch.tensor(points, dtype=torch.float64, requires_grad=True)
    ours(x).sum().backward()
    theirs(tx).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), tx.grad.numpy())


def test_polygamma_in_place_takes_the_order_after_the_tensor():
    x = minidl.tensor([1.0, 2.5])
    assert x.polygamma_(1) is x
    np.testing.assert_allclose(x.numpy(), torch.tensor([1.0, 2.5]).polygamma_(1).numpy(), rtol=1e-6)


def test_rsub_of_bools_refused_as_torch():
    flags = minidl.tensor([True, False])
    with pytest.raises(RuntimeError, match="rsub: subtraction, the `-` operator, with two bool tensors"):
        minidl.rsub(flags, flags)
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with two bool tensors"):
        torch.rsub(torch.tensor([True]), torch.tensor([False]))


def test_sgn_exported_to_onnx_gives_0_for_nan_as_torch():
    import io
    import onnxruntime

    class Sgn(minidl.nn.Module):
        def forward(self, x):
            return minidl.sgn(x)

    values = [np.nan, -2.0, 0.0, -0.0, 3.0, np.inf]
    buffer = io.BytesIO()
    minidl.onnx.export(Sgn(), (minidl.tensor(values),), buffer, input_names=["x"])
    session = onnxruntime.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, {"x": np.array(values, np.float32)})
    np.testing.assert_array_equal(got, torch.sgn(torch.tensor(values)).numpy())


def test_special_namespace_names_torchs_functions():
    for name in ("expit", "erf", "erfc", "erfinv", "logit", "digamma", "psi", "gammaln", "multigammaln", "i0",
                 "i0e", "i1", "i1e", "xlogy", "xlog1py", "zeta", "entr", "ndtr", "ndtri", "log_ndtr", "erfcx",
                 "polygamma", "gammainc", "gammaincc", "sinc", "exp2", "expm1", "log1p", "logsumexp", "softmax",
                 "log_softmax", "round"):
        assert callable(getattr(minidl.special, name)) and hasattr(torch.special, name), name
    assert not hasattr(minidl, "zeta") and not hasattr(minidl.Tensor, "i1")  # (torch.special's only)


@pytest.mark.parametrize("name", ["erfinv", "digamma", "i0", "zeta(3, q)", "erfcx"])
def test_cuda_computes_the_special_functions_as_the_cpu(name, cuda):
    ours, _, points = SPECIAL[name]
    cpu = ours(minidl.tensor(points, dtype=minidl.float64)).numpy()
    got = ours(minidl.tensor(points, dtype=minidl.float64, device="cuda")).cpu().numpy()
    np.testing.assert_allclose(got, cpu, rtol=1e-14, atol=0)



@pytest.mark.parametrize("name", [f"{shift}chebyshev_polynomial_{kind}" for shift in ("", "shifted_")
                                  for kind in "tuvw"]
                         + ["hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
                            "legendre_polynomial_p"])
def test_polynomials_as_torch_for_fractional_and_negative_degrees_and_at_the_ends(name):
    x = np.array([[-1.0], [-0.3], [0.0], [0.5], [1.0], [2.5]])
    n = np.array([-2.0, -0.5, 0.0, 0.7, 1.0, 2.0, 3.9, 7.0, 11.0])
    got = getattr(minidl.special, name)(minidl.tensor(x), minidl.tensor(n)).numpy()
    want = getattr(torch.special, name)(torch.tensor(x), torch.tensor(n)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert getattr(minidl.special, name)(minidl.tensor([2]), minidl.tensor([3])).dtype is minidl.float32
