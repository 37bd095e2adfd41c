"""Dropout inside the fused attention kernels (F.scaled_dot_product_attention with dropout_p > 0).

The spec is the unfused composition (``F._sdpa_unfused``: softmax, then ``F.dropout`` on the weights, whose
mask is ``bernoulli_(1 - p)`` over the whole weights tensor): with the same generator state the fused path
must keep exactly the same weights (bit-identical kept set), give the same output and gradients, and leave the
generator where the composition leaves it. Gradients are also checked by finite differences, reseeding before
every evaluation so each one draws the same mask. CUDA runs on the simulator where there is no GPU.
"""
from __future__ import annotations

import numpy as np
import pytest

import minidl
import minidl.nn.functional as F
from cuda_support import cuda_device
from test_gradcheck import gradcheck, gradgradcheck
from test_sdpa_fused import _inputs, _np, count_calls

CASES = ["plain", "causal L < S", "causal L > S", "bool mask over heads", "additive mask over batch", "gqa causal",
         "broadcast batch", "3-D", "2-D"]
P = 0.3


def _run(fn, arrays, kw, dtype, device, seed=11):
    """fn's output, the gradients of q, k, v for a fixed upstream gradient, and the generator's next draw."""
    q, k, v = (minidl.tensor(a, dtype=dtype, device=device, requires_grad=True) for a in arrays)
    kw = {n: minidl.tensor(a, dtype=None if a.dtype == bool else dtype, device=device) if n == "attn_mask" else a
          for n, a in kw.items()}
    minidl.manual_seed(seed)
    out = fn(q, k, v, **kw)
    g = np.random.default_rng(1).standard_normal(tuple(out.shape))
    out.backward(minidl.tensor(g, dtype=dtype, device=device))
    after = minidl.rand(4, device=device)
    return [t.detach().cpu().float().numpy() if dtype in (minidl.float16, minidl.bfloat16)
            else t.detach().cpu().numpy() for t in (out, q.grad, k.grad, v.grad, after)]


def _unfused(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False, dropout_p=P):
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    return F._sdpa_unfused(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def _fused(q, k, v, **kw):
    return F.scaled_dot_product_attention(q, k, v, dropout_p=P, **kw)


def _kept(device, dtype, p, seed, shape):
    """Which weights the fused kernel keeps, read off its output: uniform weights (q = 0) times v = identity
    give out[..., i, j] = Z_ij / S, zero exactly where weight (i, j) was dropped."""
    *batch, L, S = shape
    q = minidl.zeros(*batch, L, 8, dtype=dtype, device=device)
    k = minidl.zeros(*batch, S, 8, dtype=dtype, device=device)
    v = minidl.eye(S, dtype=dtype, device=device).expand(*batch, S, S)
    minidl.manual_seed(seed)
    return F.scaled_dot_product_attention(q, k, v, dropout_p=p).cpu().numpy() != 0


def _bernoulli_kept(device, dtype, p, seed, shape):
    """What F.dropout keeps over weights of ``shape``: its bernoulli_(1 - p) mask from the same seed."""
    minidl.manual_seed(seed)
    return minidl.empty(shape, dtype=dtype, device=device).bernoulli_(1 - p).cpu().numpy() == 1


@pytest.fixture(params=["cpu", "cuda"])
def device(request):
    if request.param == "cuda":
        cuda_device()
    return request.param


@pytest.mark.parametrize("dtype, p", [("float32", 0.3), ("float64", 0.3), ("float32", 0.9), ("float64", 0.05)])
def test_the_kept_weights_are_bit_identical_to_the_unfused_draw(device, dtype, p):
    dtype = getattr(minidl, dtype)
    shape = (2, 3, 37, 70)
    kept = _kept(device, dtype, p, 5, shape)
    np.testing.assert_array_equal(kept, _bernoulli_kept(device, dtype, p, 5, shape))
    assert abs(kept.mean() - (1 - p)) < 0.02


def test_the_cpu_and_cuda_kernels_keep_the_same_weights():
    cuda_device()
    shape = (3, 33, 65)
    np.testing.assert_array_equal(_kept("cpu", minidl.float32, P, 9, shape),
                                  _kept("cuda", minidl.float32, P, 9, shape))


@pytest.mark.parametrize("name", CASES)
def test_fused_dropout_matches_the_unfused_path_in_float64(name, device, monkeypatch):
    calls = count_calls(monkeypatch, device)
    arrays, kw, _ = _inputs(name)
    fused = _run(_fused, arrays, kw, minidl.float64, device)
    assert calls == {"attention": 1, "attention_backward": 1}
    unfused = _run(_unfused, arrays, kw, minidl.float64, device)
    for mine, composed in zip(fused, unfused):
        np.testing.assert_allclose(mine, composed, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype, tol", [("float32", 1e-5), ("float16", 2e-2), ("bfloat16", 1e-1)])
def test_fused_dropout_matches_the_unfused_path_in_lower_precision(dtype, tol):
    arrays, kw, _ = _inputs("gqa causal")
    dtype = getattr(minidl, dtype)
    fused, unfused = (_run(fn, arrays, kw, dtype, "cpu") for fn in (_fused, _unfused))
    for mine, composed in zip(fused, unfused):
        np.testing.assert_allclose(mine, composed, rtol=tol, atol=tol)


def _reseeded(fn, seed=3):
    """fn drawing the same dropout mask on every call (as finite differences need)."""
    def call(*args):
        minidl.manual_seed(seed)
        return fn(*args)
    return call


@pytest.mark.parametrize("causal", [False, True])
def test_fused_dropout_gradients_match_finite_differences(causal):
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(s) for s in ((2, 2, 4, 4), (2, 1, 6, 4), (2, 1, 6, 3)))
    gradcheck(_reseeded(lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, dropout_p=0.4, is_causal=causal, enable_gqa=True)), [q, k, v])


def test_second_derivatives_draw_the_same_mask_again():
    """Under create_graph the backward is written with tensor ops and draws the dropout factors again from the
    forward's generator state: its first derivatives equal the kernel's, and its second match finite
    differences."""
    rng = np.random.default_rng(6)
    arrays = [rng.standard_normal(s) for s in ((1, 2, 5, 4), (1, 2, 7, 4), (1, 2, 7, 3))]
    grads = []
    for create_graph in (False, True):
        q, k, v = (minidl.tensor(a, requires_grad=True) for a in arrays)
        minidl.manual_seed(8)
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
        grads.append([_np(t) for t in minidl.autograd.grad(out.sum(), (q, k, v), create_graph=create_graph)])
    for kernel, composed in zip(*grads):
        np.testing.assert_allclose(composed, kernel, rtol=1e-12, atol=1e-12)
    gradgradcheck(_reseeded(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)), arrays)


def test_dropout_one_drops_everything_without_a_kernel_or_a_draw(monkeypatch):
    calls = count_calls(monkeypatch, "cpu")
    arrays, kw, _ = _inputs("plain")
    fused, unfused = (_run(lambda q, k, v, fn=fn: fn(q, k, v, dropout_p=1.0), arrays, kw, minidl.float64, "cpu")
                      for fn in (F.scaled_dot_product_attention, _unfused))
    assert calls["attention"] == 0 and not fused[0].any()
    for mine, composed in zip(fused, unfused):
        np.testing.assert_array_equal(mine, composed)
