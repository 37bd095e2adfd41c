"""Convolution, pooling and normalization against direct-loop numpy references, plus gradient checks."""
from __future__ import annotations

import numpy as np
import pytest

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from test_gradcheck import gradcheck

rng = np.random.default_rng(7)


def ref_conv2d(x, w, b, stride, padding, dilation, groups):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.zeros((n, c, h + 2 * ph, wd + 2 * pw))
    xp[:, :, ph:ph + h, pw:pw + wd] = x
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    og = o // groups
    for ni in range(n):
        for oc in range(o):
            g = oc // og
            for i in range(oh):
                for j in range(ow):
                    acc = 0.0 if b is None else b[oc]
                    for ci in range(cg):
                        for ki in range(kh):
                            for kj in range(kw):
                                acc += w[oc, ci, ki, kj] * xp[ni, g * cg + ci, i * sh + ki * dh, j * sw + kj * dw]
                    out[ni, oc, i, j] = acc
    return out


def ref_pool(x, k, s, p, d, mode, ceil_mode=False, count_include_pad=True):
    n, c, h, w = x.shape
    outs = []
    for dim, size in ((0, h), (1, w)):
        span = size + 2 * p[dim] - d[dim] * (k[dim] - 1) - 1
        o = (-(-span // s[dim]) if ceil_mode else span // s[dim]) + 1
        if ceil_mode and (o - 1) * s[dim] >= size + p[dim]:
            o -= 1
        outs.append(o)
    oh, ow = outs
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            vals, count = [], 0
            for ki in range(k[0]):
                for kj in range(k[1]):
                    y, xx = i * s[0] - p[0] + ki * d[0], j * s[1] - p[1] + kj * d[1]
                    if y < h + p[0] and xx < w + p[1]:
                        count += 1
                    if 0 <= y < h and 0 <= xx < w:
                        vals.append(x[:, :, y, xx])
            vals = np.stack(vals)
            if mode == "max":
                out[:, :, i, j] = vals.max(0)
            else:
                out[:, :, i, j] = vals.sum(0) / (count if count_include_pad else len(vals))
    return out


CONV_CASES = [
    dict(stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1),
    dict(stride=(2, 1), padding=(1, 2), dilation=(1, 1), groups=1),
    dict(stride=(1, 2), padding=(2, 1), dilation=(2, 1), groups=2),
    dict(stride=(3, 3), padding=(1, 1), dilation=(1, 2), groups=4),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=str)
@pytest.mark.parametrize("dtype", [minidl.float64, minidl.float32])
def test_conv2d_matches_loops(case, dtype):
    g = case["groups"]
    x = rng.standard_normal((2, 4, 7, 6))
    w = rng.standard_normal((4, 4 // g, 3, 2))
    b = rng.standard_normal(4)
    got = F.conv2d(minidl.tensor(x, dtype=dtype), minidl.tensor(w, dtype=dtype), minidl.tensor(b, dtype=dtype),
                   **case)
    assert got.dtype is dtype
    tol = 1e-12 if dtype is minidl.float64 else 1e-4
    np.testing.assert_allclose(got.numpy(), ref_conv2d(x, w, b, **case), rtol=tol, atol=tol)


def test_conv2d_same_padding_odd_total_and_unbatched():
    x, w = rng.standard_normal((3, 5, 6)), rng.standard_normal((2, 3, 2, 4))
    got = F.conv2d(minidl.tensor(x), minidl.tensor(w), padding="same")
    assert tuple(got.shape) == (2, 5, 6)
    xp = np.zeros((1, 3, 6, 9))
    xp[0, :, 0:5, 1:7] = x  # total padding (1, 3): PyTorch puts the extra row/column last
    np.testing.assert_allclose(got.numpy(), ref_conv2d(xp, w, None, (1, 1), (0, 0), (1, 1), 1)[0], atol=1e-12)
    assert tuple(F.conv2d(minidl.tensor(x), minidl.tensor(w), padding="valid").shape) == (2, 4, 3)


def test_conv1d_matches_loops():
    x, w, b = rng.standard_normal((2, 4, 9)), rng.standard_normal((6, 2, 3)), rng.standard_normal(6)
    got = F.conv1d(minidl.tensor(x), minidl.tensor(w), minidl.tensor(b), stride=2, padding=1, dilation=2, groups=2)
    ref = ref_conv2d(x[:, :, None], w[:, :, None], b, (1, 2), (0, 1), (1, 2), 2)[:, :, 0]
    np.testing.assert_allclose(got.numpy(), ref, atol=1e-12)


def test_conv_transpose2d_is_the_adjoint_of_conv2d():
    # <conv(x), y> == <x, conv_transpose(y)> for every x, y
    case = dict(stride=(2, 3), padding=(1, 0), dilation=(1, 2), groups=2)
    x, w = rng.standard_normal((2, 4, 8, 9)), rng.standard_normal((6, 2, 3, 2))
    y = F.conv2d(minidl.tensor(x), minidl.tensor(w), **case)
    u = rng.standard_normal(tuple(y.shape))
    z = F.conv_transpose2d(minidl.tensor(u), minidl.tensor(w), stride=(2, 3), padding=(1, 0), groups=2,
                           dilation=(1, 2), output_padding=(1, 0))
    assert tuple(z.shape) == x.shape
    np.testing.assert_allclose(np.sum(y.numpy() * u), np.sum(x * z.numpy()), rtol=1e-10)


@pytest.mark.parametrize("args", [
    dict(k=(2, 2), s=(2, 2), p=(0, 0), d=(1, 1)),
    dict(k=(3, 2), s=(1, 2), p=(1, 1), d=(1, 1)),
    dict(k=(2, 3), s=(2, 1), p=(1, 0), d=(2, 1), ceil=True),
    dict(k=(3, 3), s=(2, 2), p=(1, 1), d=(1, 1), ceil=True),
], ids=str)
def test_pools_match_loops(args):
    x = rng.standard_normal((2, 3, 7, 6))
    k, s, p, d, ceil = args["k"], args["s"], args["p"], args["d"], args.get("ceil", False)
    got, idx = F.max_pool2d(minidl.tensor(x), k, s, p, d, ceil_mode=ceil, return_indices=True)
    np.testing.assert_array_equal(got.numpy(), ref_pool(x, k, s, p, d, "max", ceil))
    np.testing.assert_array_equal(np.take_along_axis(x.reshape(2, 3, -1), idx.numpy().reshape(2, 3, -1), 2),
                                  got.numpy().reshape(2, 3, -1))
    if d == (1, 1):
        for include in (True, False):
            got = F.avg_pool2d(minidl.tensor(x), k, s, p, ceil_mode=ceil, count_include_pad=include)
            np.testing.assert_allclose(got.numpy(), ref_pool(x, k, s, p, d, "avg", ceil, include), atol=1e-12)


def test_adaptive_avg_pool2d_matches_loops():
    x = rng.standard_normal((2, 3, 7, 5))
    got = F.adaptive_avg_pool2d(minidl.tensor(x), (3, 2)).numpy()
    for i in range(3):
        for j in range(2):
            a, b = (i * 7) // 3, -(-((i + 1) * 7) // 3)
            c, d = (j * 5) // 2, -(-((j + 1) * 5) // 2)
            np.testing.assert_allclose(got[:, :, i, j], x[:, :, a:b, c:d].mean((2, 3)), atol=1e-12)


def _check(fn, *inputs):
    gradcheck(fn, list(inputs))


def test_gradients_by_finite_differences():
    _check(lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, dilation=(1, 2), groups=2),
           rng.standard_normal((1, 2, 5, 5)), rng.standard_normal((2, 1, 2, 2)), rng.standard_normal(2))
    _check(lambda x, w: F.conv1d(x, w, padding="same"), rng.standard_normal((1, 2, 5)), rng.standard_normal((2, 2, 3)))
    _check(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, groups=2),
           rng.standard_normal((1, 2, 2, 3)), rng.standard_normal((2, 1, 3, 3)), rng.standard_normal(2))
    _check(lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
           rng.standard_normal((1, 2, 5, 4)))
    _check(lambda x: F.adaptive_avg_pool2d(x, (2, 3)), rng.standard_normal((1, 2, 5, 4)))
    _check(lambda x, w, b: F.batch_norm(x, None, None, w, b, True), rng.standard_normal((3, 2, 2, 2)),
           rng.standard_normal(2), rng.standard_normal(2))
    _check(lambda x, w, b: F.group_norm(x, 2, w, b), rng.standard_normal((2, 4, 3)), rng.standard_normal(4),
           rng.standard_normal(4))


def test_max_pool_gradient_routes_to_argmax():
    x = minidl.tensor([[[[1.0, 5.0, 2.0], [4.0, 3.0, 0.0], [7.0, 8.0, 6.0]]]], requires_grad=True)
    F.max_pool2d(x, 2, stride=1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], [[0, 2, 0], [0, 0, 0], [0, 2, 0]])


def test_batchnorm_running_stats_and_eval():
    bn = nn.BatchNorm2d(3, momentum=None)
    xs = [rng.standard_normal((4, 3, 2, 2)) for _ in range(3)]
    for x in xs:
        bn(minidl.tensor(x, dtype=minidl.float32))
    allx = np.stack(xs)
    np.testing.assert_allclose(bn.running_mean.numpy(), np.mean([x.mean((0, 2, 3)) for x in xs], 0), atol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy(), np.mean([x.var((0, 2, 3), ddof=1) for x in xs], 0),
                               atol=1e-5)
    assert int(bn.num_batches_tracked.item()) == 3 and allx.shape[0] == 3
    bn.eval()
    out = bn(minidl.tensor(xs[0], dtype=minidl.float32)).detach().numpy()
    ref = (xs[0] - bn.running_mean.numpy()[:, None, None]) / np.sqrt(bn.running_var.numpy()[:, None, None] + 1e-5)
    np.testing.assert_allclose(out, ref, atol=1e-5)


def test_dropout2d_zeroes_whole_channels():
    x = minidl.ones(8, 16, 3, 3)
    y = F.dropout2d(x, 0.5).numpy()
    per_channel = y.reshape(8, 16, 9)
    assert np.all((per_channel == 0).all(2) | (per_channel == 2).all(2))
    assert F.dropout2d(x, 0.5, training=False) is x
    assert nn.Dropout2d(0.3).eval()(x) is x


def test_errors_are_raised_before_kernels():
    x = minidl.randn(1, 2, 4, 4)
    with pytest.raises(RuntimeError):
        F.conv2d(x, minidl.randn(2, 3, 2, 2))
    with pytest.raises(RuntimeError):
        F.conv2d(x, minidl.randn(2, 2, 5, 5))
    with pytest.raises(RuntimeError):
        F.conv2d(x, minidl.randn(2, 2, 2, 2), stride=0)
    with pytest.raises(RuntimeError):
        F.max_pool2d(x, 2, padding=2)
    with pytest.raises(RuntimeError):
        F.conv2d(x, minidl.randn(2, 2, 2, 2), padding="same", stride=2)
    with pytest.raises(ValueError):
        minidl.kernels.get("im2col", "cpu")(np.zeros(3), np.zeros(100), (1, 2, 2, 1, 1, 1, 1, 0, 0, 1, 1, 2, 2))


def test_modules_shapes_and_state_dict_names():
    net = nn.Sequential(nn.Conv2d(1, 4, 3, padding="same"), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(4, 4, 3, groups=2, bias=False), nn.GroupNorm(2, 4), nn.AdaptiveAvgPool2d(1),
                        nn.Flatten(), nn.Linear(4, 2))
    out = net(minidl.randn(2, 1, 8, 8))
    assert tuple(out.shape) == (2, 2)
    out.sum().backward()
    assert set(net.state_dict()) == {"0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var",
                                     "1.num_batches_tracked", "4.weight", "5.weight", "5.bias", "8.weight", "8.bias"}
    assert tuple(nn.ConvTranspose2d(4, 6, 3, stride=2, groups=2).weight.shape) == (4, 3, 3, 3)
    assert tuple(nn.Conv1d(4, 6, 3)(minidl.randn(2, 4, 10)).shape) == (2, 6, 8)
    assert tuple(nn.AvgPool2d(2)(minidl.randn(1, 2, 5, 5)).shape) == (1, 2, 2, 2)
    assert tuple(nn.BatchNorm1d(3)(minidl.randn(4, 3)).shape) == (4, 3)


def _first_argmax_pool(x, k, s):
    """Loop reference of max pooling without padding: value and the first row-major argmax (NaN wins)."""
    n, c, h, w = x.shape
    oh, ow = (h - k) // s[0] + 1, (w - k) // s[1] + 1
    val, idx = np.empty((n, c, oh, ow)), np.empty((n, c, oh, ow), np.int64)
    for i in range(oh):
        for j in range(ow):
            win = x[:, :, i * s[0]:i * s[0] + k, j * s[1]:j * s[1] + k].reshape(n, c, -1)
            nan = np.isnan(win)
            at = np.where(nan.any(-1), nan.argmax(-1), win.argmax(-1))
            val[:, :, i, j] = np.take_along_axis(win, at[..., None], -1)[..., 0]
            idx[:, :, i, j] = (i * s[0] + at // k) * w + j * s[1] + at % k
    return val, idx


@pytest.mark.parametrize("stride", [(2, 2), (1, 1), (1, 2), (3, 2)], ids=str)
def test_max_pool_2x2_ties_nan_and_inf(stride):
    # the 2x2 window has its own kernel: ties keep the first tap, NaN and inf-inf windows still exact
    x = rng.integers(0, 3, size=(2, 3, 7, 8)).astype(float)         # many ties
    x[0, 0, 1, 1] = np.nan
    x[1, 2, 4, 4:6] = np.inf, -np.inf
    x[1, 1, 2, 2] = -np.inf
    got, idx = F.max_pool2d(minidl.tensor(x), 2, stride, return_indices=True)
    val, at = _first_argmax_pool(x, 2, stride)
    np.testing.assert_array_equal(got.numpy(), val)
    np.testing.assert_array_equal(idx.numpy(), at)


def test_conv_backward_twice_with_retain_graph():
    # the first backward uses the columns kept by forward and drops them; the second recomputes them
    x = minidl.tensor(rng.standard_normal((2, 3, 6, 5)), requires_grad=True)
    w = minidl.tensor(rng.standard_normal((4, 3, 3, 2)), requires_grad=True)
    y = F.conv2d(x, w, stride=(2, 1), padding=1)
    g = minidl.tensor(rng.standard_normal(tuple(y.shape)))
    first = minidl.autograd.grad(y, (x, w), g, retain_graph=True)
    second = minidl.autograd.grad(y, (x, w), g)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    ref = ref_conv2d(x.detach().numpy(), w.detach().numpy(), None, (2, 1), (1, 1), (1, 1), 1)
    np.testing.assert_allclose(y.detach().numpy(), ref, atol=1e-12)
