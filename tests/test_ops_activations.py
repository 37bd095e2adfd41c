"""nn.functional's activations beyond relu, gelu and silu, against PyTorch where op_db's samples do not
look: values and gradients at the extremes and at the kinks (signed zeros, NaN, infinities), integer
inputs, the in-place forms, the modules (constructors, repr, parameters, train/eval), and the errors."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

import minidl
import minidl.nn as nn
import minidl.nn.functional as F

from cuda_support import cuda_device
from test_activation_ops import EXTREMES, _same, _value_and_grad

torch = pytest.importorskip("torch")
TF = torch.nn.functional

FORMULAS = ("relu6", "hardswish", "hardsigmoid", "mish", "selu", "softsign", "tanhshrink")
KINKS = [-6.5, -6.0, -3.0, -1.5, -1.0, -0.5, -0.4, 0.4, 0.5, 1.0, 1.5, 3.0, 6.0, 6.5]
PARAMETERISED = {  # name -> (ours, torch's), each with parameters that put kinks among KINKS
    "hardtanh": (F.hardtanh, TF.hardtanh),
    "hardtanh-0-6": (lambda x: F.hardtanh(x, 0.0, 6.0), lambda x: TF.hardtanh(x, 0.0, 6.0)),
    "threshold": (lambda x: F.threshold(x, -0.0, 7.0), lambda x: TF.threshold(x, -0.0, 7.0)),
    "threshold-1.5": (lambda x: F.threshold(x, 1.5, -2.0), lambda x: TF.threshold(x, 1.5, -2.0)),
    "hardshrink": (F.hardshrink, TF.hardshrink),
    "hardshrink-3": (lambda x: F.hardshrink(x, 3.0), lambda x: TF.hardshrink(x, 3.0)),
    "softshrink": (F.softshrink, TF.softshrink),
    "softshrink-0.4": (lambda x: F.softshrink(x, 0.4), lambda x: TF.softshrink(x, 0.4)),
    "celu": (F.celu, TF.celu),
    "celu-0.3": (lambda x: F.celu(x, 0.3), lambda x: TF.celu(x, 0.3)),
    "rrelu-eval": (F.rrelu, TF.rrelu),
}
ALL = {**{n: (getattr(F, n), getattr(TF, n)) for n in FORMULAS}, **PARAMETERISED}


@pytest.mark.parametrize("name", list(ALL))
def test_float64_matches_torch_at_the_extremes_and_kinks(name):
    """Values and gradients as torch's, NaN where torch has NaN, zeros of torch's sign (the subgradient
    torch picks at each kink included)."""
    ours, theirs = ALL[name]
    # NaN first: torch's gradients at NaN are those of its vectorised loops there (its scalar loop over the
    # last few elements may differ), and those are the ones minidl gives
    values = [np.nan] + EXTREMES + KINKS
    y, g = _value_and_grad(ours, minidl.tensor, values, minidl.float64)
    ty, tg = _value_and_grad(theirs, torch.tensor, values, torch.float64)
    _same(y, ty, rtol=1e-13)
    _same(g, tg, rtol=1e-13)


@pytest.mark.parametrize("name", FORMULAS)
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_float32_matches_torch(name, device):
    if device == "cuda":
        cuda_device()
    values = [np.nan, -1e30, 1e30, -np.inf, np.inf] + list(np.linspace(-8, 8, 43))   # (NaN first: see above)
    ours, theirs = ALL[name]
    y, g = _value_and_grad(ours, minidl.tensor, values, minidl.float32, device=device)
    ty, tg = _value_and_grad(theirs, torch.tensor, values, torch.float32)
    np.testing.assert_allclose(y, ty, rtol=2e-6, atol=1e-6, equal_nan=True)
    np.testing.assert_allclose(g, tg, rtol=2e-6, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("call", [
    lambda F, x: F.relu6(x), lambda F, x: F.hardtanh(x, -2.5, 3.5), lambda F, x: F.hardtanh(x),
    lambda F, x: F.threshold(x, -1.5, 9.7), lambda F, x: F.softsign(x), lambda F, x: F.tanhshrink(x)])
@pytest.mark.parametrize("dtype", ["int64", "int32"])
def test_integer_inputs_as_torch(call, dtype):
    """Integer parameters truncated as torch's kernels read them; softsign and tanhshrink in float32."""
    values = [-8, -3, -2, -1, 0, 1, 2, 3, 7]
    want = call(TF, torch.tensor(values, dtype=getattr(torch, dtype)))
    got = call(F, minidl.tensor(values, dtype=getattr(minidl, dtype)))
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)


@pytest.mark.parametrize("name", ["hardswish", "hardsigmoid", "mish", "selu", "celu", "hardshrink", "softshrink"])
def test_float_only_activations_refuse_integers(name):
    with pytest.raises(NotImplementedError):
        getattr(TF, name)(torch.tensor([1, 2]))   # (the oracle refuses them too)
    with pytest.raises(NotImplementedError, match=f"{name}: not implemented for int64"):
        getattr(F, name)(minidl.tensor([1, 2]))


def test_glu_prelu_and_softmin_match_torch_with_gradients():
    rng = np.random.default_rng(0)
    w = rng.standard_normal(3)
    cases = [(lambda F, x, w: F.glu(x, 1) * w[:1].sum(), (2, 4, 4)), (lambda F, x, w: F.prelu(x, w), (2, 3, 4)),
             (lambda F, x, w: F.prelu(x, w[:1]), (3,)), (lambda F, x, w: F.softmin(x, 0) * w[0], (2, 3, 4)),
             (lambda F, x, w: F.softmin(x, -1, dtype=x.dtype) * w[0], (4, 3))]
    for call, shape in cases:
        xv = rng.standard_normal(shape)
        ours = [minidl.tensor(v, requires_grad=True) for v in (xv, w)]
        theirs = [torch.tensor(v, requires_grad=True) for v in (xv, w)]
        y, ty = call(F, *ours), call(TF, *theirs)
        y.sum().backward()
        ty.sum().backward()
        np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-12)
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name, args", [("hardtanh", (-0.5, 0.5)), ("relu6", ()), ("hardswish", ()),
                                        ("hardsigmoid", ()), ("mish", ()), ("selu", ()), ("celu", (0.5,)),
                                        ("threshold", (0.2, -1.0)), ("rrelu", ())])
def test_in_place_forms_write_the_input_and_keep_torch_gradients(name, args):
    values = [-3.0, -0.7, -0.2, 0.3, 0.6, 2.0, 7.0]
    x = minidl.tensor(values, dtype=minidl.float64, requires_grad=True)
    tx = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    h, th = x * 2, tx * 2
    assert getattr(F, name)(h, *args, inplace=True) is h
    getattr(TF, name)(th, *args, inplace=True)
    h.sum().backward()
    th.sum().backward()
    np.testing.assert_allclose(h.detach().numpy(), th.detach().numpy(), rtol=1e-13)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-11)   # (torch: a vectorised exp)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        getattr(F, name)(minidl.ones(2, requires_grad=True), *args, inplace=True)


def test_functional_in_place_names():
    for name, args in [("hardtanh_", ()), ("selu_", ()), ("celu_", (0.5,)), ("threshold_", (0.1, 5.0)),
                       ("rrelu_", ())]:
        values = [-2.0, -0.5, 0.05, 0.5, 2.0]
        x, tx = minidl.tensor(values, dtype=minidl.float64), torch.tensor(values, dtype=torch.float64)
        assert getattr(F, name)(x, *args) is x
        getattr(TF, name)(tx, *args)
        np.testing.assert_allclose(x.numpy(), tx.numpy(), rtol=1e-14)


MODULES = [("Hardtanh", (), {}), ("Hardtanh", (-2.0, 3.0), {"inplace": True}), ("Hardtanh", (), {"min_value": 0.5}),
           ("ReLU6", (), {}), ("ReLU6", (True,), {}), ("Hardswish", (True,), {}), ("Hardsigmoid", (True,), {}),
           ("Mish", (True,), {}), ("SELU", (True,), {}), ("CELU", (0.5,), {}), ("CELU", (), {"inplace": True}),
           ("GLU", (), {}), ("GLU", (0,), {}), ("PReLU", (), {}), ("PReLU", (4, 0.1), {}), ("Softsign", (), {}),
           ("Threshold", (0.1, 20), {}), ("Threshold", (0.1, 2.0, True), {}), ("Softmin", (1,), {}),
           ("Softmin", (), {}), ("Hardshrink", (), {}), ("Softshrink", (0.3,), {}), ("Tanhshrink", (), {}),
           ("RReLU", (), {}), ("RReLU", (0.1, 0.2, True), {})]


@pytest.mark.parametrize("name, args, kwargs", MODULES)
def test_modules_as_torch(name, args, kwargs):
    """The same repr (constructor defaults, extra_repr), the same parameters, the same outputs in eval mode."""
    with pytest.warns(FutureWarning) if "min_value" in kwargs else contextlib.nullcontext():
        ours = getattr(nn, name)(*args, **kwargs).eval()
    with pytest.warns(FutureWarning) if "min_value" in kwargs else contextlib.nullcontext():
        theirs = getattr(torch.nn, name)(*args, **kwargs).eval()
    assert repr(ours) == repr(theirs)
    assert [(n, tuple(p.shape)) for n, p in ours.named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in theirs.named_parameters()]
    for p, tp in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_array_equal(p.detach().numpy(), tp.detach().numpy())
    values = np.random.default_rng(1).standard_normal((2, 4, 6)).astype(np.float32) * 3
    got = ours(minidl.tensor(values))
    want = theirs(torch.tensor(values))
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=2e-6, atol=1e-6)


def test_rrelu_in_training_draws_one_slope_per_negative_element_in_its_range():
    minidl.manual_seed(0)
    values = np.linspace(-3, 3, 400)
    x = minidl.tensor(values, requires_grad=True)
    y = nn.RReLU(0.1, 0.3).train()(x)
    y.sum().backward()
    neg = values < 0
    slope = y.detach().numpy()[neg] / values[neg]
    assert 0.1 <= slope.min() and slope.max() <= 0.3 and len(np.unique(slope)) > 100
    np.testing.assert_allclose(x.grad.numpy()[neg], slope, rtol=1e-12)
    np.testing.assert_array_equal(y.detach().numpy()[~neg], values[~neg])
    np.testing.assert_array_equal(x.grad.numpy()[~neg], 1.0)


@pytest.mark.parametrize("ours, theirs, message", [
    (lambda: F.glu(minidl.ones(3, 5)), lambda: TF.glu(torch.ones(3, 5)), "dimension 1 is size 5"),
    (lambda: F.glu(minidl.tensor(1.0)), lambda: TF.glu(torch.tensor(1.0)), "glu does not support scalars"),
    (lambda: F.prelu(minidl.ones(2, 3), minidl.ones(2)), lambda: TF.prelu(torch.ones(2, 3), torch.ones(2)),
     r"parameter numbers = 2 and channel size = 3"),
    (lambda: F.prelu(minidl.ones(3), minidl.ones(3)), lambda: TF.prelu(torch.ones(3), torch.ones(3)),
     r"parameter numbers = 3 and channel size = 1"),
    (lambda: F.prelu(minidl.ones(2, 3), minidl.ones(1, 3)), lambda: TF.prelu(torch.ones(2, 3), torch.ones(1, 3)),
     "scalar or 1D tensor, but got: ndim = 2"),
    (lambda: F.softshrink(minidl.ones(2), -1.0), lambda: TF.softshrink(torch.ones(2), -1.0), "lambda must be"),
    (lambda: F.celu(minidl.ones(2), 0.0), lambda: TF.celu(torch.ones(2), 0.0), "alpha cannot be 0"),
])
def test_errors_name_the_op_and_the_sizes(ours, theirs, message):
    with pytest.raises(RuntimeError):
        theirs()   # (the oracle refuses it too)
    with pytest.raises(RuntimeError, match=message):
        ours()


def test_hardtanh_bounds_out_of_order():
    with pytest.raises(ValueError, match="min_val cannot be greater than max_val"):
        F.hardtanh(minidl.ones(2), 2.0, 1.0)
    with pytest.raises(ValueError):
        TF.hardtanh(torch.ones(2), 2.0, 1.0)
    with pytest.raises(AssertionError):
        nn.Hardtanh(1.0, 1.0)
    with pytest.raises(AssertionError):
        torch.nn.Hardtanh(1.0, 1.0)


def test_torch_level_names_and_methods():
    """torch.selu, celu, threshold, hardshrink, prelu, rrelu and Tensor.hardshrink, Tensor.prelu exist in minidl."""
    x = minidl.tensor([-1.0, 0.25, 2.0])
    w = minidl.tensor([0.1])
    assert minidl.equal(x.hardshrink(0.3), minidl.hardshrink(x, 0.3)) and minidl.equal(x.prelu(w), F.prelu(x, w))
    for name in ("selu", "celu", "threshold", "rrelu"):
        assert callable(getattr(minidl, name)) and not hasattr(minidl.Tensor, name)


@pytest.mark.parametrize("dim", [-3, 2])
def test_glu_dim_out_of_range_raises_as_torch(dim):
    """A dim outside [-ndim, ndim) is torch's IndexError, naming glu, never a quiet wrap to another dim."""
    with pytest.raises(IndexError, match="out of range"):
        TF.glu(torch.randn(4, 6), dim)
    with pytest.raises(IndexError, match=r"glu: dimension out of range .*\[-2, 1\].* got " + str(dim)):
        F.glu(minidl.randn(4, 6), dim)
