"""The CUDA attention kernels (csrc/attention.cu, behind F.scaled_dot_product_attention on 'cuda') against
PyTorch's scaled_dot_product_attention, forward and every gradient, on the simulator where there is no GPU
(cuda_support.py). The cases are test_sdpa_fused.py's: causal with L < S and L > S, bool and additive masks
broadcast with stride 0, GQA, head dims up to 128, fully masked rows."""
from __future__ import annotations

import numpy as np
import pytest

import minidl
import minidl.nn.functional as F

from cuda_support import cuda_device
from test_sdpa_fused import _inputs, _mask, _torch, count_calls

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module", autouse=True)
def cuda():
    return cuda_device()


@pytest.fixture
def calls(monkeypatch):
    return count_calls(monkeypatch, "cuda")


def _on_cuda(arrays, kw, dtype):
    q, k, v = (minidl.tensor(a, dtype=dtype, device="cuda", requires_grad=True) for a in arrays)
    kw = {n: minidl.tensor(a, dtype=None if a.dtype == bool else dtype, device="cuda") if n == "attn_mask" else a
          for n, a in kw.items()}
    return F.scaled_dot_product_attention(q, k, v, **kw), (q, k, v)


def _host(t):
    return t.detach().cpu().numpy()


def _check(arrays, kw, rng, dtype, torch_dtype, tol):
    out, leaves = _on_cuda(arrays, kw, dtype)
    expected, torch_leaves = _torch(arrays, kw, dtype=torch_dtype)
    assert out.device.type == "cuda" and tuple(out.shape) == tuple(expected.shape)
    np.testing.assert_allclose(_host(out), expected.detach().numpy(), rtol=tol, atol=tol)
    g = rng.standard_normal(tuple(out.shape))
    out.backward(minidl.tensor(g, dtype=dtype, device="cuda"))
    expected.backward(torch.tensor(g, dtype=expected.dtype))
    for mine, theirs in zip(leaves, torch_leaves):
        np.testing.assert_allclose(_host(mine.grad), theirs.grad.numpy(), rtol=10 * tol, atol=10 * tol)


@pytest.mark.parametrize("name", ["plain", "causal L < S", "causal L > S", "bool mask over heads",
                                  "additive mask over batch", "gqa causal", "gqa mask", "head dim 128",
                                  "broadcast batch", "2-D"])
def test_cuda_attention_matches_torch_in_float64(name, calls):
    arrays, kw, rng = _inputs(name)
    _check(arrays, kw, rng, minidl.float64, torch.float64, 1e-12)
    assert calls == {"attention": 1, "attention_backward": 1}


@pytest.mark.parametrize("name", ["plain", "gqa causal", "additive mask over batch"])
def test_cuda_attention_matches_torch_in_float32(name):
    arrays, kw, rng = _inputs(name, seed=1)
    _check(arrays, kw, rng, minidl.float32, torch.float32, 1e-5)


def test_cuda_attention_with_a_transposed_mask_and_fully_masked_rows():
    """A mask read through arbitrary strides (a transposed view), with a row no key may take part in: zeros and
    no gradient there, as torch."""
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s) for s in ((2, 5, 8), (2, 11, 8), (2, 11, 4))]
    mask_t = _mask(rng, "float", (2, 11, 5))
    mask_t[:, :, 2] = -np.inf
    mask = minidl.tensor(mask_t, device="cuda").transpose(1, 2)
    q, k, v = (minidl.tensor(a, device="cuda", requires_grad=True) for a in arrays)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in arrays)
    expected = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv,
                                                                attn_mask=torch.tensor(mask_t).transpose(1, 2))
    np.testing.assert_allclose(_host(out), expected.detach().numpy(), rtol=1e-12, atol=1e-12)
    assert not _host(out)[:, 2].any()
    g = rng.standard_normal(tuple(out.shape))
    out.backward(minidl.tensor(g, device="cuda"))
    expected.backward(torch.tensor(g))
    for mine, theirs in zip((q, k, v), (tq, tk, tv)):
        np.testing.assert_allclose(_host(mine.grad), theirs.grad.numpy(), rtol=1e-11, atol=1e-11)
    assert not _host(q.grad)[:, 2].any()


@pytest.mark.parametrize("name", ["causal L < S", "causal L > S", "gqa mask", "bool mask over L, S"])
def test_cuda_attention_over_many_small_tiles(name, monkeypatch):
    """Staged tiles of 5 rows in blocks of 8 (not dividing the lengths): every tile and block boundary, causal
    limits inside a tile, and the grid-stride loop over more blocks than the grid has."""
    from minidl.kernels.cuda.primitives import attention as launcher
    arrays, kw, rng = _inputs(name, seed=4)
    E, Ev = arrays[0].shape[-1], arrays[2].shape[-1]
    monkeypatch.setattr(launcher, "ROWS", 8)
    monkeypatch.setattr(launcher, "SHARED_BYTES", 5 * (E + Ev + 2) * 8)
    _check(arrays, kw, rng, minidl.float64, torch.float64, 1e-12)


def test_cuda_attention_refuses_head_dims_beyond_shared_memory(monkeypatch):
    from minidl.kernels.cuda.primitives import attention as launcher
    monkeypatch.setattr(launcher, "SHARED_BYTES", 100)
    arrays, kw, _ = _inputs("plain")
    with pytest.raises(ValueError, match=r"attention: head dims E=16, Ev=16 need 272 bytes of shared memory"):
        _on_cuda(arrays, kw, minidl.float64)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cuda_half_dtypes_are_computed_in_float32(dtype, calls):
    arrays, kw, _ = _inputs("causal L < S", seed=2)
    half = getattr(minidl, dtype)
    out, leaves = _on_cuda(arrays, kw, half)
    assert out.dtype is half and calls["attention"] == 1
    rounded = [t.detach().float().cpu().numpy().astype(np.float64) for t in leaves]   # the values the kernel saw
    expected, _ = _torch(rounded, kw, dtype=torch.float32)
    np.testing.assert_allclose(out.detach().float().cpu().numpy(), expected.detach().numpy(), rtol=1e-2, atol=1e-2)
    out.sum().backward()
    assert all(t.grad.dtype is half and t.grad.device.type == "cuda" for t in leaves)
