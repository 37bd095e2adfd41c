"""Batch norm as the fused ``batch_norm`` primitives (ops/batchnorm.py) against PyTorch in float64, forward and every
gradient, training and eval, on (N, C), (N, C, L), (N, C, H, W), (N, C, D, H, W), channels-last and strided inputs;
the running statistics after several steps (momentum, and None: the cumulative average); the unfused composition;
float32 with a large mean; second order; the in-place activation after BatchNorm; the errors."""
from __future__ import annotations

import numpy as np
import pytest

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from minidl import kernels

from test_sdpa_fused import count_calls as fused_calls

torch = pytest.importorskip("torch")

SHAPES = [(6, 3), (4, 3, 5), (2, 3, 4, 5), (2, 3, 2, 3, 4)]


def count_calls(monkeypatch, device):
    return fused_calls(monkeypatch, device, ("batch_norm", "batch_norm_backward"))


def _arrays(shape, seed=0):
    rng = np.random.default_rng(seed)
    C = shape[1]
    return dict(x=rng.standard_normal(shape) * 2 + 0.5, w=rng.standard_normal(C), b=rng.standard_normal(C),
                rm=rng.standard_normal(C), rv=rng.random(C) + 0.5, g=rng.standard_normal(shape))


def _host(t):
    return t.detach().cpu().numpy()


def run_both(a, training, affine=True, momentum=0.3, eps=1e-5, device="cpu", dtype=minidl.float64,
             arrange=lambda t: t):
    """Forward and backward of F.batch_norm on minidl (x made by ``arrange``) and on torch (float64): each side's
    (out, dx, dw, db, running_mean, running_var) as numpy arrays."""
    results = []
    for lib, F_, kw in ((minidl, F, {"dtype": dtype, "device": device}),
                        (torch, torch.nn.functional, {"dtype": torch.float64})):
        x = arrange(lib.tensor(a["x"], **kw)).requires_grad_()
        w, b = (lib.tensor(a[k], **kw).requires_grad_() if affine else None for k in ("w", "b"))
        rm, rv = lib.tensor(a["rm"], **kw), lib.tensor(a["rv"], **kw)
        out = F_.batch_norm(x, rm, rv, w, b, training=training, momentum=momentum, eps=eps)
        out.backward(lib.tensor(a["g"], **kw))
        grads = [x.grad] + ([w.grad, b.grad] if affine else [])
        results.append([_host(t) if lib is minidl else t.detach().numpy() for t in [out, *grads, rm, rv]])
    return results


def assert_match(mine, theirs, tol):
    for m, t in zip(mine, theirs):
        np.testing.assert_allclose(m, t, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("affine", [True, False], ids=["affine", "plain"])
def test_matches_torch_float64(shape, training, affine, monkeypatch):
    calls = count_calls(monkeypatch, "cpu")
    assert_match(*run_both(_arrays(shape), training, affine), 1e-12)
    assert calls == {"batch_norm": 1, "batch_norm_backward": 1}


@pytest.mark.parametrize("fmt, shape", [("channels_last", (2, 3, 4, 5)), ("channels_last_3d", (2, 3, 2, 3, 4))],
                         ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_channels_last_matches_torch_and_keeps_its_layout(fmt, shape, training):
    a = _arrays(shape, 1)
    assert_match(*run_both(a, training, arrange=lambda t: t.contiguous(memory_format=getattr(
        minidl if isinstance(t, minidl.Tensor) else torch, fmt))), 1e-12)
    x = minidl.tensor(a["x"]).contiguous(memory_format=getattr(minidl, fmt))
    out = F.batch_norm(x, None, None, training=True)
    assert out.is_contiguous(memory_format=getattr(minidl, fmt)) and not out.is_contiguous()


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_strided_input_matches_torch(training):
    a = _arrays((3, 4, 2, 5), 2)
    a["g"] = np.random.default_rng(3).standard_normal((3, 4, 5, 2))
    assert_match(*run_both(a, training, arrange=lambda t: t.transpose(2, 3)), 1e-12)


def _composed(x, rm, rv, w, b, training, momentum, eps):
    """The unfused formula with minidl's tensor ops (what batch_norm was before the primitives)."""
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    dims = (0,) + tuple(range(2, x.ndim))
    if training:
        count = x.numel() // x.shape[1]
        mean = x.mean(dims, keepdim=True)
        var = ((x - mean) ** 2).mean(dims, keepdim=True)
        with minidl.no_grad():
            rm.mul_(1 - momentum).add_(mean.reshape(-1) * momentum)
            rv.mul_(1 - momentum).add_(var.reshape(-1) * (momentum * count / (count - 1)))
    else:
        mean, var = rm.reshape(shape), rv.reshape(shape)
    return (x - mean) * (var + eps).rsqrt() * w.reshape(shape) + b.reshape(shape)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_matches_the_unfused_composition(training):
    a = _arrays((4, 3, 3, 2), 3)
    results = []
    for fn in (F.batch_norm, _composed):
        x, w, b = (minidl.tensor(a[k], requires_grad=True) for k in ("x", "w", "b"))
        rm, rv = minidl.tensor(a["rm"]), minidl.tensor(a["rv"])
        out = fn(x, rm, rv, w, b, training, 0.2, 1e-3)
        out.backward(minidl.tensor(a["g"]))
        results.append([_host(t) for t in (out, x.grad, w.grad, b.grad, rm, rv)])
    assert_match(*results, 1e-12)


@pytest.mark.parametrize("shape", [(64, 8), (8, 4, 6, 6)], ids=str)
def test_float32_with_a_large_mean_stays_accurate(shape):
    """Two passes over each channel: a mean of 1e3 beside a spread of 1 loses nothing to cancellation."""
    a = _arrays(shape, 4)
    a["x"] = a["x"] + 1e3
    mine, theirs = run_both(a, True, dtype=minidl.float32)
    for m, t in zip(mine, theirs):
        np.testing.assert_allclose(m, t, rtol=2e-4, atol=2e-4 * max(1.0, np.abs(t).max()))


@pytest.mark.parametrize("make, shape", [("BatchNorm1d", (5, 3)), ("BatchNorm1d", (5, 3, 4)),
                                         ("BatchNorm2d", (3, 3, 4, 2)), ("BatchNorm3d", (2, 3, 2, 3, 2))], ids=str)
@pytest.mark.parametrize("momentum", [0.1, None], ids=["momentum", "cumulative"])
def test_module_running_statistics_after_several_steps(make, shape, momentum):
    mine, theirs = getattr(nn, make)(3, momentum=momentum).double(), getattr(torch.nn, make)(3, momentum=momentum)
    theirs = theirs.double()
    rng = np.random.default_rng(5)
    for step in range(4):
        x = rng.standard_normal(shape) * (step + 1) + step
        out_mine, out_theirs = mine(minidl.tensor(x)), theirs(torch.tensor(x))
        np.testing.assert_allclose(_host(out_mine), out_theirs.detach().numpy(), rtol=1e-12, atol=1e-12)
    for name in ("running_mean", "running_var"):
        np.testing.assert_allclose(_host(getattr(mine, name)), getattr(theirs, name).numpy(), rtol=1e-12)
    assert mine.num_batches_tracked.item() == theirs.num_batches_tracked.item() == 4
    mine.eval(), theirs.eval()
    x = rng.standard_normal(shape)
    np.testing.assert_allclose(_host(mine(minidl.tensor(x))), theirs(torch.tensor(x)).detach().numpy(), rtol=1e-12,
                               atol=1e-12)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("shape", [(5, 3), (3, 3, 2, 2)], ids=str)
def test_second_order_gradients_match_torch(training, shape):
    """d/d(x, w) of <dL/dx, v> under create_graph (the backward composed of differentiable ops there)."""
    a = _arrays(shape, 6)
    v = np.random.default_rng(7).standard_normal(shape)
    results = []
    for lib, F_ in ((minidl, F), (torch, torch.nn.functional)):
        x, w, b = (lib.tensor(a[k], dtype=lib.float64, requires_grad=True) for k in ("x", "w", "b"))
        rm, rv = lib.tensor(a["rm"], dtype=lib.float64), lib.tensor(a["rv"], dtype=lib.float64)
        out = F_.batch_norm(x, rm, rv, w, b, training=training)
        loss = (out * out * lib.tensor(a["g"], dtype=lib.float64)).sum()
        gx, gw = lib.autograd.grad(loss, (x, w), create_graph=True)
        second = lib.autograd.grad((gx * lib.tensor(v, dtype=lib.float64)).sum() + (gw * gw).sum(), (x, w, b))
        results.append([t.detach().cpu().numpy() if lib is minidl else t.detach().numpy() for t in (gx, gw, *second)])
    assert_match(*results, 1e-10)


@pytest.mark.parametrize("act", ["relu", "leaky_relu"])
@pytest.mark.parametrize("functional", [True, False], ids=["F", "module"])
def test_inplace_activation_after_batch_norm_float64(act, functional):
    """DCGAN's Conv -> BatchNorm -> LeakyReLU(inplace=True): the backward reads the input, not the overwritten
    output, so the gradients stay right."""
    a = _arrays((4, 3, 3, 3), 8)
    results = []
    for lib, nn_, F_ in ((minidl, nn, F), (torch, torch.nn, torch.nn.functional)):
        bn = nn_.BatchNorm2d(3).double()
        with lib.no_grad():
            bn.weight.copy_(lib.tensor(a["w"])), bn.bias.copy_(lib.tensor(a["b"]))
        x = lib.tensor(a["x"], requires_grad=True)
        h = bn(x * 1.0)
        if functional:
            h = F_.relu(h, inplace=True) if act == "relu" else F_.leaky_relu(h, 0.2, inplace=True)
        else:
            h = (nn_.ReLU(inplace=True) if act == "relu" else nn_.LeakyReLU(0.2, inplace=True))(h)
        h.backward(lib.tensor(a["g"]))
        results.append([t.detach().cpu().numpy() if lib is minidl else t.detach().numpy()
                         for t in (h, x.grad, bn.weight.grad, bn.bias.grad)])
    assert_match(*results, 1e-12)


def test_float16_input_with_float32_statistics_keeps_its_dtype():
    a = _arrays((4, 3, 2), 9)
    x = minidl.tensor(a["x"], dtype=minidl.float16, requires_grad=True)
    rm, rv = minidl.tensor(a["rm"], dtype=minidl.float32), minidl.tensor(a["rv"], dtype=minidl.float32)
    out = F.batch_norm(x, rm, rv, training=True)
    out.backward(minidl.tensor(a["g"], dtype=minidl.float16))
    assert out.dtype is minidl.float16 and x.grad.dtype is minidl.float16
    tx = torch.tensor(a["x"], dtype=torch.float16).double()
    trm, trv = torch.tensor(a["rm"]), torch.tensor(a["rv"])
    expected = torch.nn.functional.batch_norm(tx, trm, trv, training=True)
    np.testing.assert_allclose(_host(out).astype(np.float64), expected.numpy(), atol=5e-3)
    np.testing.assert_allclose(_host(rm), trm.numpy(), atol=1e-5)
    np.testing.assert_allclose(_host(rv), trv.numpy(), atol=1e-5)


def test_errors_are_torchs():
    x = minidl.randn(4, 3, 2)
    with pytest.raises(RuntimeError, match="running_mean should contain 3 elements not 4"):
        F.batch_norm(x, minidl.zeros(4), minidl.ones(3))
    with pytest.raises(RuntimeError, match="weight should contain 3 elements not 2"):
        F.batch_norm(x, None, None, minidl.ones(2), training=True)
    with pytest.raises(ValueError, match="running_mean and running_var are required in eval mode"):
        F.batch_norm(x, None, None, training=False)
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
        F.batch_norm(minidl.randn(1, 3, 1), None, None, training=True)
    with pytest.raises(ValueError, match="expected at least 2D input"):
        F.batch_norm(minidl.randn(3), None, None, training=True)
    with pytest.raises(ValueError, match=r"expected 5D input \(got 4D input\)"):
        nn.BatchNorm3d(3)(minidl.randn(2, 3, 2, 2))


def test_the_kernels_check_their_buffers():
    x = np.zeros(12)
    with pytest.raises(ValueError, match="batch_norm: out buffer of 6"):
        kernels.get("batch_norm", "cpu")(x, np.zeros(6), (2, 3, 2), False, None, None, np.zeros(3), np.zeros(3),
                                         None, None, True, 0.1, 1e-5)
    with pytest.raises(ValueError, match="eval mode needs running_mean and running_var"):
        kernels.get("batch_norm", "cpu")(x, np.zeros(12), (2, 3, 2), False, None, None, np.zeros(3), np.zeros(3),
                                         None, None, False, 0.1, 1e-5)
    with pytest.raises(TypeError, match="float32 or float64"):
        kernels.get("batch_norm_backward", "cpu")(x.astype(np.int64), x.astype(np.int64), (2, 3, 2), False, None,
                                                  np.zeros(3), np.zeros(3), np.zeros(12), np.zeros(3), np.zeros(3),
                                                  True)
