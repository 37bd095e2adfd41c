"""GELU (erf and tanh forms) and SiLU, single ops of the formula table, against PyTorch: values and
gradients at ordinary and extreme inputs (infinities, NaN, signed zeros), in float64, float32 and
bfloat16, on the CPU and on 'cuda' (the simulator where there is no GPU)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import minidl
import minidl.nn as nn
import minidl.nn.functional as F

from cuda_support import cuda_device

torch = pytest.importorskip("torch")
TF = torch.nn.functional

EXTREMES = [-np.inf, -1e300, -1e30, -40.0, -10.0, -3.0, -1.0, -1e-30, -0.0, 0.0, 1e-30, 0.5, 3.0, 10.0, 40.0,
            1e30, 1e300, np.inf, np.nan]
ACTIVATIONS = {  # name -> (ours, torch's)
    "gelu": (F.gelu, TF.gelu),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), lambda x: TF.gelu(x, approximate="tanh")),
    "silu": (F.silu, TF.silu),
}
TORCH_DTYPE = {minidl.float64: torch.float64, minidl.float32: torch.float32, minidl.bfloat16: torch.bfloat16}


def _value_and_grad(fn, tensor, values, dtype, device="cpu"):
    """fn's output and the input's gradient for the upstream gradient ``1 + index / 10``, as float64 numpy."""
    x = tensor(values, dtype=dtype, device=device, requires_grad=True)
    y = fn(x)
    upstream = tensor([1 + i / 10 for i in range(len(values))], dtype=dtype, device=device)
    (y * upstream).sum().backward()
    as_np = (lambda t: t.detach().cpu().to(torch.float64).numpy()) if tensor is torch.tensor else \
        (lambda t: t.detach().cpu().to(minidl.float64).numpy())
    return as_np(y), as_np(x.grad)


def _same(ours, theirs, rtol, atol=0.0):
    """Equal within tolerance, NaN where torch has NaN, and zeros of torch's sign."""
    np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=atol, equal_nan=True)
    zeros = theirs == 0
    np.testing.assert_array_equal(np.signbit(ours[zeros]), np.signbit(theirs[zeros]))


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_float64_matches_torch_at_the_extremes(name):
    ours, theirs = ACTIVATIONS[name]
    y, g = _value_and_grad(ours, minidl.tensor, EXTREMES, minidl.float64)
    ty, tg = _value_and_grad(theirs, torch.tensor, EXTREMES, torch.float64)
    _same(y, ty, rtol=1e-13)
    _same(g, tg, rtol=1e-13)


def _torch_in_float64(theirs, values, dtype):
    """torch's values and gradients computed in float64 at the inputs rounded to ``dtype``. torch's own float32 and
    bfloat16 kernels differ by CPU (with AVX-512, float32 gelu(inf) is NaN and gelu's lower tail flushes to -0;
    the tanh form's x**3 overflows into a NaN gradient at 1e30): its float64 ones do not."""
    rounded = minidl.tensor(values, dtype=dtype).to(minidl.float64).numpy()
    return _value_and_grad(theirs, torch.tensor, list(rounded), torch.float64)


@pytest.mark.parametrize("name", list(ACTIVATIONS))
@pytest.mark.parametrize("dtype, rtol, atol", [(minidl.float32, 2e-6, 1e-6), (minidl.bfloat16, 1e-2, 1e-3)])
def test_lower_precisions_match_torch(name, dtype, rtol, atol):
    """(atol: 1 + erf(x) cancels for negative x, where float32's results differ from torch's in a few ulps of 1.)"""
    values = list(np.linspace(-8, 8, 41)) + [-1e30, 1e30, -np.inf, np.inf, np.nan]
    ours, theirs = ACTIVATIONS[name]
    y, g = _value_and_grad(ours, minidl.tensor, values, dtype)
    ty, tg = _torch_in_float64(theirs, values, dtype)
    assert ours(minidl.zeros(2, dtype=dtype)).dtype is dtype
    np.testing.assert_allclose(y, ty, rtol=rtol, atol=atol, equal_nan=True)
    np.testing.assert_allclose(g, tg, rtol=rtol, atol=atol, equal_nan=True)


def _exact(name, x):
    """Value and slope of each activation at float64 x, from closed forms without cancellation (erfc in the tails)."""
    erfc = np.vectorize(math.erfc)
    if name == "gelu":
        cdf, pdf = 0.5 * erfc(-x / math.sqrt(2)), np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
        return x * cdf, cdf + x * pdf
    if name == "gelu_tanh":
        dz = math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * x * x)
        s = 1 / (1 + np.exp(-2 * math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
        return x * s, s + 2 * x * s * (1 - s) * dz
    s = 1 / (1 + np.exp(-x))
    return x * s, s * (1 + x * (1 - s))


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_float32_within_one_rounding_of_the_exact_values(name):
    """The CPU's vectorised float32 runs (float64 polynomials inside) against the exact values: at most one
    float32 ulp off, far into the lower tail where 1 + erf(x) cancels in the formula (torch's float32 is
    off by up to 100% there, so torch is no oracle)."""
    x = np.concatenate([np.linspace(-20, 20, 40001), np.geomspace(1e-30, 1, 2001), -np.geomspace(1e-30, 1, 2001)])
    x = x.astype(np.float32)
    y, g = _value_and_grad(ACTIVATIONS[name][0], lambda v, **kw: minidl.tensor(np.asarray(v), **kw), x,
                           minidl.float32)
    upstream = np.array([1 + i / 10 for i in range(len(x))], np.float32).astype(np.float64)
    value, slope = _exact(name, x.astype(np.float64))
    with np.errstate(over="ignore", invalid="ignore"):
        for ours, exact in ((y, value), (g, upstream * slope)):
            ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
            assert np.all(np.abs(ours - exact) <= ulp), x[np.abs(ours - exact) > ulp][:5]


@pytest.mark.parametrize("name", list(ACTIVATIONS))
@pytest.mark.parametrize("dtype", [minidl.float64, minidl.float32])
def test_cuda_matches_torch_at_the_extremes(name, dtype):
    cuda_device()
    ours, theirs = ACTIVATIONS[name]
    y, g = _value_and_grad(ours, minidl.tensor, EXTREMES, dtype, device="cuda")
    ty, tg = _torch_in_float64(theirs, EXTREMES, dtype)
    rtol, atol = (1e-13, 0.0) if dtype is minidl.float64 else (2e-6, 1e-6)
    np.testing.assert_allclose(y, ty, rtol=rtol, atol=atol, equal_nan=True)
    # the CUDA kernel takes the tanh form's x**3 in float32, which overflows into a NaN gradient at +-1e30 (as
    # torch's float32 kernels do); the CPU's float32 runs compute in float64 and give the true slopes
    overflow = np.isnan(g) & (np.abs(np.array(EXTREMES)) == 1e30) if name == "gelu_tanh" and \
        dtype is minidl.float32 else np.zeros(len(g), bool)
    np.testing.assert_allclose(g[~overflow], tg[~overflow], rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_one_op_forward_and_one_node_backward(name):
    """The activation is a single op: its output's history is one node, straight onto the input's."""
    x = minidl.randn(5, dtype=minidl.float64, requires_grad=True)
    y = ACTIVATIONS[name][0](x)
    (node, _), = y.grad_fn.next_functions
    assert type(node).__name__ == "AccumulateGrad"


def test_silu_in_place_keeps_the_input_for_its_gradient():
    values = [-3.0, -0.5, 0.0, 2.0]
    x = minidl.tensor(values, dtype=minidl.float64, requires_grad=True)
    h = x * 2
    assert F.silu(h, inplace=True) is h
    h.sum().backward()
    tx = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    th = tx * 2
    TF.silu(th, inplace=True).sum().backward()
    np.testing.assert_allclose(h.detach().numpy(), th.detach().numpy(), rtol=1e-15)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-15)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        F.silu(minidl.ones(2, requires_grad=True), inplace=True)


def test_modules_and_a_bad_approximate():
    x = minidl.randn(3, 4)
    assert minidl.equal(nn.GELU("tanh")(x), F.gelu(x, approximate="tanh")) and minidl.equal(nn.SiLU()(x), F.silu(x))
    with pytest.raises(RuntimeError, match="approximate argument must be either none or tanh"):
        F.gelu(x, approximate="erf")
    with pytest.raises(RuntimeError, match="approximate argument must be either none or tanh"):
        nn.GELU("fast")(x)
    with pytest.raises(RuntimeError, match="approximate argument must be either none or tanh"):
        TF.gelu(torch.zeros(2), approximate="erf")  # (the oracle says the same)

