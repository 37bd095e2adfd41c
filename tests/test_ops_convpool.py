"""Convolution and pooling in 1 and 3 spatial dims (and adaptive, Lp, unpooling) against PyTorch where op_db's
samples do not look: ties and NaN in max pooling (indices and gradients), integer inputs, the modules
(repr, state_dict, padding modes, ConvTranspose's output_size), the errors, and the ONNX graphs of the
outputs the registry samples leave out (indices, unpooling, divisor_override)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from minidl.onnx import TracerWarning

torch = pytest.importorskip("torch")
onnxruntime = pytest.importorskip("onnxruntime")
TF = torch.nn.functional
RNG = np.random.default_rng(45)


def _both(fn_ours, fn_torch, *arrays, grad=True):
    """Outputs (and float64 gradients for one random cotangent) of both, compared."""
    ours = [minidl.tensor(a, requires_grad=grad) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=grad) for a in arrays]
    got, want = fn_ours(*ours), fn_torch(*theirs)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        assert tuple(g.shape) == tuple(w.shape) and g.dtype.name == str(w.dtype).removeprefix("torch.")
        np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), rtol=1e-12, atol=1e-12)
    if grad:
        cot = RNG.standard_normal(tuple(want[0].shape))
        g_ours = minidl.autograd.grad(got[0], ours, minidl.tensor(cot))
        g_theirs = torch.autograd.grad(want[0], theirs, torch.tensor(cot))
        for g, w in zip(g_ours, g_theirs):
            np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name, args", [
    ("max_pool1d", dict(kernel_size=3, stride=1, padding=1, return_indices=True)),
    ("max_pool3d", dict(kernel_size=2, stride=1, return_indices=True)),
    ("max_pool3d", dict(kernel_size=(3, 2, 2), stride=2, padding=1, dilation=(1, 2, 1), ceil_mode=True,
                        return_indices=True)),
    ("adaptive_max_pool1d", dict(output_size=4, return_indices=True)),
    ("adaptive_max_pool2d", dict(output_size=(3, 2), return_indices=True)),
    ("adaptive_max_pool3d", dict(output_size=(2, 3, 4), return_indices=True)),
])
def test_max_pooling_ties_pick_the_first_and_route_the_gradient_there(name, args):
    """Few distinct values: every window holds ties; torch takes the first in row-major order."""
    spatial = int(name[-2])
    x = RNG.integers(0, 3, (2, 2) + (5, 6, 7)[:spatial]).astype(np.float64)
    _both(lambda t: getattr(F, name)(t, **args), lambda t: getattr(TF, name)(t, **args), x)


@pytest.mark.parametrize("name", ["max_pool1d", "max_pool3d", "adaptive_max_pool3d"])
def test_max_pooling_propagates_nan(name):
    spatial = int(name[-2])
    x = RNG.standard_normal((1, 2) + (4, 4, 4)[:spatial])
    x.reshape(-1)[[1, 6]] = np.nan
    args = dict(output_size=2) if "adaptive" in name else dict(kernel_size=2)
    got, got_idx = getattr(F, name)(minidl.tensor(x), **args, return_indices=True)
    want, want_idx = getattr(TF, name)(torch.tensor(x), **args, return_indices=True)
    np.testing.assert_array_equal(got.numpy(), want.numpy())      # (NaN where torch has NaN)
    np.testing.assert_array_equal(got_idx.numpy(), want_idx.numpy())


@pytest.mark.parametrize("name, args", [
    ("max_pool1d", dict(kernel_size=2, return_indices=True)), ("max_pool3d", dict(kernel_size=2, padding=1)),
    ("avg_pool1d", dict(kernel_size=3, padding=1, ceil_mode=True)),
    ("avg_pool3d", dict(kernel_size=2, stride=1, padding=1, count_include_pad=False)),
    ("avg_pool3d", dict(kernel_size=(1, 2, 3), divisor_override=4)),
])
def test_integer_pooling_is_exact_as_torchs(name, args):
    spatial = int(name[-2])
    x = RNG.integers(-50, 50, (2, 3) + (5, 6, 7)[:spatial])
    _both(lambda t: getattr(F, name)(t, **args), lambda t: getattr(TF, name)(t, **args), x, grad=False)


def test_conv3d_and_conv_transpose_match_torch_with_every_argument():
    x, w, b = RNG.standard_normal((2, 4, 5, 4, 6)), RNG.standard_normal((6, 2, 2, 3, 2)), RNG.standard_normal(6)
    args = dict(stride=(2, 1, 2), padding=(1, 2, 0), dilation=(2, 1, 1), groups=2)
    _both(lambda *t: F.conv3d(*t, **args), lambda *t: TF.conv3d(*t, **args), x, w, b)
    wt = RNG.standard_normal((4, 3, 3, 2, 2))
    args = dict(stride=(3, 1, 2), padding=(1, 0, 1), output_padding=(2, 0, 1), groups=2, dilation=(1, 2, 1))
    _both(lambda *t: F.conv_transpose3d(*t, **args), lambda *t: TF.conv_transpose3d(*t, **args), x, wt)
    args = dict(stride=2, padding=1, output_padding=1, groups=4, dilation=2)
    _both(lambda *t: F.conv_transpose1d(*t, **args), lambda *t: TF.conv_transpose1d(*t, **args),
          x[:, :, 0, 0], wt[:, :2, :, 0, 0])


def test_lp_pool_of_mixed_signs_follows_torchs_formula():
    """Odd p over windows of negative sum: torch's sign(a) * relu(|a|) is a, so its root is negative (p = 1) or
    NaN (p = 3), not an Lp norm."""
    x = RNG.standard_normal((2, 3, 4, 6, 6))
    for p in (1.0, 3.0, 2.0):
        _both(lambda t: F.lp_pool3d(t, p, 2), lambda t: TF.lp_pool3d(t, p, 2), x, grad=False)
        _both(lambda t: F.lp_pool1d(t, p, 3, 2), lambda t: TF.lp_pool1d(t, p, 3, 2), x[:, :, 0, 0], grad=False)


@pytest.mark.parametrize("p", [2.0, 1.5])
def test_lp_pool_gradient_over_a_window_of_zeros_is_zero_as_torchs(p):
    """The root's derivative is infinite at 0; torch's relu stops it there (NaN before)."""
    x = RNG.standard_normal((1, 2, 4, 4, 4))
    x[0, 0, :2, :2, :2] = 0.0
    _both(lambda t: F.lp_pool3d(t, p, 2), lambda t: TF.lp_pool3d(t, p, 2), x)
    _both(lambda t: F.lp_pool1d(t, p, 2), lambda t: TF.lp_pool1d(t, p, 2), x[:, :, 0, 0])


@pytest.mark.parametrize("n", [1, 2, 3])
def test_max_unpool_of_an_empty_batch_as_torchs(n):
    shape = (0, 2) + (3,) * n
    got = getattr(F, f"max_unpool{n}d")(minidl.zeros(*shape), minidl.zeros(*shape, dtype=minidl.int64), 2)
    want = getattr(TF, f"max_unpool{n}d")(torch.zeros(shape), torch.zeros(shape, dtype=torch.long), 2)
    assert tuple(got.shape) == tuple(want.shape)


def test_max_unpool_inverts_max_pool_and_checks_its_indices():
    x = RNG.standard_normal((2, 3, 4, 6, 4))
    pooled, idx = F.max_pool3d(minidl.tensor(x), 2, return_indices=True)
    tpooled, tidx = TF.max_pool3d(torch.tensor(x), 2, return_indices=True)
    np.testing.assert_array_equal(F.max_unpool3d(pooled, idx, 2, output_size=(5, 7, 5)).numpy(),
                                  TF.max_unpool3d(tpooled, tidx, 2, output_size=(5, 7, 5)).numpy())
    with pytest.raises(RuntimeError, match=r"max_unpool3d: Found an invalid max index: \d+ \(output volumes are of "
                                           r"size 4x6x4\)"):
        F.max_unpool3d(pooled, idx + 50, 2)
    with pytest.raises(ValueError, match=r"invalid output_size .* \(dim 1 must be between 4 and 8\)"):
        F.max_unpool3d(pooled, idx, 2, output_size=(4, 8, 4))


@pytest.mark.parametrize("call, error, message", [
    (lambda: F.conv3d(minidl.randn(2, 3, 4), minidl.randn(2, 2, 1, 1, 1)), RuntimeError,
     r"Expected 4D \(unbatched\) or 5D \(batched\) input to conv3d, but got input of size: \[2, 3, 4\]"),
    (lambda: F.conv3d(minidl.randn(1, 3, 4, 4, 4), minidl.randn(2, 2, 1, 1, 1)), RuntimeError,
     r"conv3d: weight of shape \[2, 2, 1, 1, 1\] with groups=1 does not fit an input with 3 channels"),
    (lambda: F.conv_transpose1d(minidl.randn(4, 4, 4), minidl.randn(2, 3, 2)), RuntimeError,
     r"conv_transpose1d: weight of shape \[2, 3, 2\] with groups=1 does not fit an input with 4 channels"),
    (lambda: F.conv3d(minidl.randn(1, 2, 4, 4, 4), minidl.randn(2, 2, 1, 1, 1), stride=2, padding="same"),
     RuntimeError, r"padding='same' is not supported for strided convolutions"),
    (lambda: F.conv_transpose3d(minidl.randn(1, 2, 2, 2, 2), minidl.randn(2, 2, 1, 1, 1), stride=2,
                                output_padding=2), RuntimeError, r"conv_transpose3d: output padding must be smaller"),
    (lambda: F.conv3d(minidl.randn(1, 2, 4, 4, 4), minidl.randn(2, 2, 1, 1, 1, dtype=minidl.float64)),
     RuntimeError, r"conv3d: input \(float32\), weight \(float64\)"),
    (lambda: F.max_pool3d(minidl.randn(1, 2, 4, 4, 4), 2, padding=2), RuntimeError,
     r"max_pool3d: pad should be at most half of effective kernel size"),
    (lambda: F.max_pool3d(minidl.randn(1, 2, 4, 4, 4), (2, 2)), RuntimeError,
     r"max_pool3d: kernel_size must either be a single int, or a tuple of 3 ints, got \[2, 2\]"),
    (lambda: F.max_pool1d(minidl.randn(1, 2, 4), 2, stride=0), RuntimeError,
     r"max_pool1d: stride must be greater than zero"),
    (lambda: F.avg_pool3d(minidl.randn(1, 2, 1, 4, 4), 2), RuntimeError,
     r"avg_pool3d: input size \(1x4x4\) with padding \(0, 0, 0\) is too small for kernel \(2, 2, 2\)"),
    (lambda: F.adaptive_max_pool2d(minidl.randn(2, 3, 4), (2,)), RuntimeError,
     r"adaptive_max_pool2d: output_size must have 2 elements"),
    (lambda: F.adaptive_avg_pool3d(minidl.ones(1, 2, 2, 2, dtype=minidl.int64), 1), NotImplementedError,
     r"adaptive_avg_pool3d: not implemented for int64"),
    (lambda: F.max_pool3d(minidl.randn(2, 3), 2), RuntimeError, r"max_pool3d: expected a 4D \(unbatched\) or 5D"),
])
def test_bad_arguments_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call()


def _same_module(name, *args, **kwargs):
    ours, theirs = getattr(nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
    assert repr(ours) == repr(theirs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict({k: minidl.tensor(v.detach().numpy()) for k, v in theirs.state_dict().items()})
    return ours.double(), theirs.double()


@pytest.mark.parametrize("name, args, kwargs", [
    ("Conv3d", (4, 6, (2, 3, 2)), dict(stride=(1, 2, 1), padding=1, groups=2, padding_mode="circular")),
    ("Conv3d", (4, 2, 3), dict(padding="same", padding_mode="reflect", bias=False)),
    ("Conv3d", (4, 2, 2), dict(padding="same", dilation=(1, 2, 1), padding_mode="replicate")),
    ("ConvTranspose1d", (4, 2, 3), dict(stride=2, output_padding=1, dilation=1)),
    ("ConvTranspose3d", (4, 2, 2), dict(stride=2, groups=2, bias=False)),
    ("MaxPool1d", (2,), dict(stride=1, return_indices=True)), ("MaxPool3d", (2,), dict(padding=1, ceil_mode=True)),
    ("AvgPool1d", (3,), dict(padding=1)), ("AvgPool3d", (2,), dict(divisor_override=3)),
    ("AdaptiveAvgPool1d", (3,), {}), ("AdaptiveAvgPool3d", ((2, None, 1),), {}),
    ("AdaptiveMaxPool1d", (3,), dict(return_indices=True)), ("AdaptiveMaxPool2d", ((2, 3),), {}),
    ("AdaptiveMaxPool3d", (2,), {}), ("LPPool1d", (2, 3), dict(stride=2)), ("LPPool2d", (1.5, 2), {}),
    ("LPPool3d", (2, 2), dict(ceil_mode=True)),
])
def test_modules_match_torchs(name, args, kwargs):
    ours, theirs = _same_module(name, *args, **kwargs)
    spatial = 1 if "1d" in name else 2 if "2d" in name else 3
    x = np.abs(RNG.standard_normal((2, 4) + (5, 6, 7)[:spatial])) + 0.1
    got, want = ours(minidl.tensor(x)), theirs(torch.tensor(x))
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(g.detach().numpy(), w.detach().numpy(), rtol=1e-10, atol=1e-10)


def test_max_unpool_modules_and_conv_transpose_output_size():
    for n in (1, 2, 3):
        ours, theirs = _same_module(f"MaxUnpool{n}d", 2, stride=2)
        x = RNG.standard_normal((2, 3) + (4,) * n)
        pooled, idx = getattr(TF, f"max_pool{n}d")(torch.tensor(x), 2, return_indices=True)
        got = ours(minidl.tensor(pooled.numpy()), minidl.tensor(idx.numpy()), output_size=(5,) * n)
        np.testing.assert_array_equal(got.numpy(), theirs(pooled, idx, output_size=(5,) * n).numpy())
    ours, theirs = _same_module("ConvTranspose3d", 4, 2, 3, stride=2)
    x = RNG.standard_normal((4, 5, 6, 7))
    got, want = ours(minidl.tensor(x), output_size=[12, 13, 16]), theirs(torch.tensor(x), output_size=[12, 13, 16])
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match=r"requested an output size of \[20, 13, 16\], but valid sizes range from "
                                         r"\[11, 13, 15\] to \[12, 14, 16\]"):
        ours(minidl.tensor(x), output_size=[20, 13, 16])


def _onnx(fn, *inputs):
    """What ONNX Runtime computes for the export of ``fn`` on ``inputs``, beside minidl's eager outputs."""
    with minidl.no_grad():
        want = fn(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TracerWarning)
        program = minidl.onnx.export(fn, inputs, output_names=[f"out{i}" for i in range(len(want))])
    session = onnxruntime.InferenceSession(program.model_proto.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    got = session.run(None, {i.name: t.numpy() for i, t in zip(session.get_inputs(), inputs)})
    for g, w in zip(got, want):
        assert g.dtype == w.numpy().dtype
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fn", [
    lambda x: F.max_pool3d(x, 2, stride=1, padding=1, return_indices=True),
    lambda x: F.max_pool1d(x[0, 0], 3, stride=2, ceil_mode=True, return_indices=True),
    lambda x: F.adaptive_max_pool3d(x, (2, 3, 4), return_indices=True),
    lambda x: F.adaptive_max_pool2d(x[0], (3, 2), return_indices=True),
    lambda x: F.adaptive_avg_pool3d(x, (3, 2, 4)),
    lambda x: F.avg_pool3d(x, 2, stride=1, padding=1, divisor_override=3),
    lambda x: F.max_unpool3d(*F.max_pool3d(x, 2, return_indices=True), 2, output_size=(5, 7, 7)),
    lambda x: F.max_unpool2d(*F.max_pool2d(x[0], 2, return_indices=True), 2),
    lambda x: F.lp_pool3d(x, 2.5, 2),
], ids=["max_pool3d", "max_pool1d-unbatched", "adaptive_max_pool3d", "adaptive_max_pool2d-unbatched",
        "adaptive_avg_pool3d", "avg_pool3d-divisor", "max_unpool3d", "max_unpool2d-unbatched", "lp_pool3d"])
def test_onnx_export_of_pooling_outputs(fn):
    _onnx(fn, minidl.tensor(np.abs(RNG.standard_normal((2, 3, 5, 7, 6))).astype(np.float32)))


def test_onnx_export_of_conv_modules():
    minidl.manual_seed(0)
    model = nn.Sequential(nn.Conv3d(2, 4, 3, padding=1, groups=2), nn.ConvTranspose3d(4, 3, 2, stride=2,
                                                                                     output_padding=1, dilation=2))
    _onnx(model, minidl.randn(2, 2, 3, 4, 3))
    _onnx(nn.ConvTranspose1d(2, 3, 3, stride=2, padding=1, groups=1), minidl.randn(2, 5))


@pytest.mark.parametrize("n, shape, kernel, kwargs", [
    (2, (2, 3, 9, 10), (3, 2), dict(output_size=(4, 5))),
    (2, (3, 16, 16), 1, dict(output_ratio=(0.5, 0.5))),
    (3, (2, 2, 7, 8, 9), 2, dict(output_size=(3, 4, 5))),
    (3, (2, 7, 8, 9), (2, 3, 2), dict(output_ratio=0.5)),
])
def test_fractional_max_pool_with_given_draws_is_torchs(n, shape, kernel, kwargs):
    """The same draws place the same windows (torch's float32 arithmetic included); ties go to the first."""
    for dtype in (np.float64, np.float32):
        x = RNG.integers(0, 4, shape).astype(dtype)
        draws = RNG.uniform(0, 1, (shape[0] if len(shape) == n + 2 else 1, shape[-n - 1], n)).astype(dtype)
        name = f"fractional_max_pool{n}d"
        _both(lambda t: getattr(F, name)(t, kernel, return_indices=True, _random_samples=minidl.tensor(draws),
                                         **kwargs),
              lambda t: getattr(TF, name)(t, kernel, return_indices=True, _random_samples=torch.tensor(draws),
                                          **kwargs), x, grad=dtype is np.float64)


def test_fractional_max_pool_modules_and_errors():
    draws = RNG.uniform(0, 1, (2, 3, 2))
    ours = nn.FractionalMaxPool2d(3, output_ratio=0.5, _random_samples=minidl.tensor(draws))
    theirs = torch.nn.FractionalMaxPool2d(3, output_ratio=0.5, _random_samples=torch.tensor(draws))
    assert repr(ours) == repr(theirs) and list(ours.state_dict()) == list(theirs.state_dict())
    x = RNG.standard_normal((2, 3, 9, 10))
    np.testing.assert_array_equal(ours(minidl.tensor(x)).numpy(), theirs(torch.tensor(x)).numpy())
    assert tuple(nn.FractionalMaxPool3d(2, output_size=3)(minidl.randn(2, 5, 5, 5)).shape) == (2, 3, 3, 3)
    with pytest.raises(ValueError, match="output_ratio must be between 0 and 1"):
        nn.FractionalMaxPool3d(2, output_ratio=1.5)
    with pytest.raises(RuntimeError, match=r"fractional_max_pool2d\(\): pool height 3 too large relative to input "
                                           r"height 4"):
        F.fractional_max_pool2d(minidl.randn(1, 1, 4, 4), 3, output_size=3)
    with pytest.raises(ValueError, match="fractional_max_pool3d requires specifying either an output_size or an "
                                         "output_ratio"):
        F.fractional_max_pool3d(minidl.randn(1, 1, 4, 4, 4), 2)
