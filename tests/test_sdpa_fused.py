"""The fused attention kernel (the ``attention`` primitives behind F.scaled_dot_product_attention) on the CPU.

Oracles: PyTorch's scaled_dot_product_attention (float64, forward and every gradient), minidl's unfused
composition of tensor ops (``F._sdpa_unfused``), and central finite differences on tiny shapes. The
shapes cross the kernel's query and key blocks (32 and 64) with odd and unequal lengths.
"""
from __future__ import annotations

import numpy as np
import pytest

import minidl
import minidl.nn.functional as F
from minidl import kernels
from minidl.layout import Layout
from test_gradcheck import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")


def count_calls(monkeypatch, device, names=("attention", "attention_backward")):
    """How many times each primitive of ``names`` (attention's) runs on ``device`` (a dict that the wrapped
    kernels update)."""
    count = dict.fromkeys(names, 0)
    for name in count:
        fn = kernels.get(name, device)

        def counted(*args, _fn=fn, _name=name):
            count[_name] += 1
            return _fn(*args)
        monkeypatch.setitem(kernels._registry, (device, name), counted)
    return count


@pytest.fixture
def calls(monkeypatch):
    return count_calls(monkeypatch, "cpu")


def _mask(rng, kind, shape):
    if kind == "bool":
        m = rng.random(shape) < 0.7
        m[..., 3] = False
        return m
    m = rng.standard_normal(shape)
    m[rng.random(shape) < 0.2] = -np.inf
    return m


# name: query, key, value shapes and keyword arguments (mask: kind and shape)
CASES = {
    "plain": ((2, 3, 37, 16), (2, 3, 70, 16), (2, 3, 70, 16), {}),
    "causal L < S": ((2, 2, 33, 16), (2, 2, 70, 16), (2, 2, 70, 8), dict(is_causal=True)),
    "causal L > S": ((1, 2, 75, 16), (1, 2, 40, 16), (1, 2, 40, 16), dict(is_causal=True)),
    "bool mask over L, S": ((2, 2, 35, 16), (2, 2, 67, 16), (2, 2, 67, 16), dict(mask=("bool", (35, 67)))),
    "bool mask over heads": ((2, 3, 9, 16), (2, 3, 11, 16), (2, 3, 11, 5), dict(mask=("bool", (1, 3, 9, 11)))),
    "additive mask over batch": ((2, 3, 9, 16), (2, 3, 65, 16), (2, 3, 65, 16), dict(mask=("float", (2, 1, 9, 65)))),
    "gqa causal": ((2, 6, 34, 16), (2, 2, 34, 16), (2, 2, 34, 24), dict(enable_gqa=True, is_causal=True)),
    "gqa mask": ((1, 4, 7, 32), (1, 1, 9, 32), (1, 1, 9, 32), dict(enable_gqa=True, mask=("float", (7, 9)))),
    "head dim 64, scale": ((1, 2, 21, 64), (1, 2, 19, 64), (1, 2, 19, 64), dict(scale=0.3)),
    "head dim 128": ((1, 1, 13, 128), (1, 1, 66, 128), (1, 1, 66, 96), {}),
    "broadcast batch": ((2, 3, 5, 16), (1, 3, 7, 16), (3, 7, 16), {}),
    "3-D": ((3, 40, 16), (3, 41, 16), (3, 41, 16), dict(is_causal=True)),
    "2-D": ((6, 16), (9, 16), (9, 3), dict(mask=("bool", (6, 9)))),
}


def _inputs(name, seed=0):
    rng = np.random.default_rng(seed)
    qs, ks, vs, kw = CASES[name]
    kw = dict(kw)
    arrays = [rng.standard_normal(s) for s in (qs, ks, vs)]
    if "mask" in kw:
        kw["attn_mask"] = _mask(rng, *kw.pop("mask"))
    return arrays, kw, rng


def _minidl(arrays, kw, fn=F.scaled_dot_product_attention, dtype=minidl.float64):
    q, k, v = (minidl.tensor(a, dtype=dtype, requires_grad=True) for a in arrays)
    kw = {n: minidl.tensor(a, dtype=None if a.dtype == bool else dtype) if n == "attn_mask" else a
          for n, a in kw.items()}
    return fn(q, k, v, **kw), (q, k, v)


def _torch(arrays, kw, dtype=torch.float64):
    q, k, v = (torch.tensor(a, dtype=dtype, requires_grad=True) for a in arrays)
    kw = {n: torch.tensor(a, dtype=None if a.dtype == bool else dtype) if n == "attn_mask" else a
          for n, a in kw.items()}
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, **kw), (q, k, v)


def _unfused(q, k, v, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    return F._sdpa_unfused(q, k, v, attn_mask, 0.0, is_causal, scale, enable_gqa)


def _np(t):
    return t.detach().numpy()


@pytest.mark.parametrize("name", list(CASES))
def test_fused_matches_torch_and_the_unfused_path_in_float64(name, calls):
    arrays, kw, rng = _inputs(name)
    out, leaves = _minidl(arrays, kw)
    assert calls["attention"] == 1
    expected, torch_leaves = _torch(arrays, kw)
    unfused, unfused_leaves = _minidl(arrays, kw, _unfused)
    assert tuple(out.shape) == tuple(expected.shape)
    np.testing.assert_allclose(_np(out), _np(expected), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_np(out), _np(unfused), rtol=1e-12, atol=1e-12)
    g = rng.standard_normal(tuple(out.shape))
    out.backward(minidl.tensor(g))
    assert calls["attention_backward"] == 1
    expected.backward(torch.tensor(g))
    unfused.backward(minidl.tensor(g))
    for mine, theirs, composed in zip(leaves, torch_leaves, unfused_leaves):
        np.testing.assert_allclose(_np(mine.grad), theirs.grad.numpy(), rtol=1e-11, atol=1e-11)
        np.testing.assert_allclose(_np(mine.grad), _np(composed.grad), rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("name", ["plain", "gqa causal", "additive mask over batch"])
def test_fused_float32_matches_torch(name):
    arrays, kw, rng = _inputs(name, seed=1)
    out, leaves = _minidl(arrays, kw, dtype=minidl.float32)
    expected, torch_leaves = _torch(arrays, kw, dtype=torch.float32)
    assert out.dtype is minidl.float32
    np.testing.assert_allclose(_np(out), _np(expected), rtol=1e-5, atol=1e-5)
    g = rng.standard_normal(tuple(out.shape)).astype(np.float32)
    out.backward(minidl.tensor(g))
    expected.backward(torch.tensor(g))
    for mine, theirs in zip(leaves, torch_leaves):
        np.testing.assert_allclose(_np(mine.grad), theirs.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_dtypes_are_computed_in_float32(dtype):
    arrays, kw, _ = _inputs("causal L < S", seed=2)
    half = getattr(minidl, dtype)
    out, leaves = _minidl(arrays, kw, dtype=half)
    assert out.dtype is half
    rounded = [_np(t.float()).astype(np.float64) for t in leaves]       # the values the kernel saw
    expected, _ = _torch(rounded, kw, dtype=torch.float32)
    np.testing.assert_allclose(_np(out.float()), _np(expected), rtol=1e-2, atol=1e-2)
    out.sum().backward()
    assert all(t.grad.dtype is half for t in leaves)


@pytest.mark.parametrize("causal, mask", [(False, None), (True, None), (False, "bool"), (False, "float")])
def test_fused_gradients_match_finite_differences(causal, mask):
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(s) for s in ((2, 2, 3, 4), (2, 1, 5, 4), (2, 1, 5, 3)))
    m = None if mask is None else minidl.tensor(_mask(rng, mask, (2, 1, 3, 5)))
    gradcheck(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal, scale=0.8,
                                                             enable_gqa=True), [q, k, v])


def test_fully_masked_rows_give_zeros_and_no_gradient():
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal(s) for s in ((2, 5, 8), (2, 70, 8), (2, 70, 4))]
    allowed = rng.random((5, 70)) < 0.5
    allowed[2] = False
    for mask in (allowed, np.where(allowed, 0.0, -np.inf)):
        out, (q, k, v) = _minidl(arrays, dict(attn_mask=mask))
        expected, _ = _torch(arrays, dict(attn_mask=mask))
        np.testing.assert_allclose(_np(out), _np(expected), rtol=1e-12, atol=1e-12)
        assert not _np(out)[:, 2].any()
        out.backward(minidl.tensor(rng.standard_normal(tuple(out.shape))))
        assert not _np(q.grad)[:, 2].any() and np.isfinite(_np(k.grad)).all()


def test_strided_inputs_are_read_in_place_or_packed():
    """Heads split from a (B, L, H, E) projection (unit inner stride: read in place) and a query whose last dim
    is strided (packed first) give torch's values."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 37, 3, 16))
    qt = rng.standard_normal((2, 3, 16, 37))
    q = minidl.tensor(qt, requires_grad=True)
    k = minidl.tensor(x, requires_grad=True)
    out = F.scaled_dot_product_attention(q.mT, k.transpose(1, 2), k.transpose(1, 2), is_causal=True)
    tq, tk = torch.tensor(qt, requires_grad=True), torch.tensor(x, requires_grad=True)
    expected = torch.nn.functional.scaled_dot_product_attention(tq.mT, tk.transpose(1, 2), tk.transpose(1, 2),
                                                                is_causal=True)
    np.testing.assert_allclose(_np(out), _np(expected), rtol=1e-12, atol=1e-12)
    out.sum().backward()
    expected.sum().backward()
    np.testing.assert_allclose(_np(q.grad), tq.grad.numpy(), rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(_np(k.grad), tk.grad.numpy(), rtol=1e-11, atol=1e-11)


def test_a_mask_that_requires_grad_takes_the_unfused_path(calls):
    arrays, kw, _ = _inputs("additive mask over batch")
    mask = minidl.tensor(kw["attn_mask"], requires_grad=True)
    q, k, v = (minidl.tensor(a, requires_grad=True) for a in arrays)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert calls["attention"] == 0
    out.sum().backward()
    tmask = torch.tensor(kw["attn_mask"], requires_grad=True)
    tq, tk, tv = (torch.tensor(a) for a in arrays)
    torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=tmask).sum().backward()
    np.testing.assert_allclose(_np(mask.grad), tmask.grad.numpy(), rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("causal, mask", [(True, None), (False, "bool")])
def test_second_derivatives_match_finite_differences(causal, mask):
    """Under create_graph the backward is written with differentiable ops (GQA heads, masks, causal)."""
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal(s) for s in ((1, 2, 3, 2), (1, 1, 4, 2), (1, 1, 4, 2)))
    m = None if mask is None else minidl.tensor(_mask(rng, mask, (3, 4)))
    gradgradcheck(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal,
                                                                 enable_gqa=True), [q, k, v])


@pytest.mark.parametrize("name", ["gqa causal", "additive mask over batch"])
def test_the_threaded_kernels_give_the_same_results(name, monkeypatch):
    """Two threads over (batch, head, query block) forward and (batch, key/value head) backward, forced on
    small shapes: torch's values."""
    from minidl.kernels.cpu import strided
    monkeypatch.setattr(strided, "PARALLEL_MIN", 0)
    before = minidl.get_num_threads()
    minidl.set_num_threads(2)
    try:
        arrays, kw, rng = _inputs(name, seed=7)
        out, leaves = _minidl(arrays, kw)
        out.backward(minidl.ones(tuple(out.shape), dtype=minidl.float64))
    finally:
        minidl.set_num_threads(before)
    expected, torch_leaves = _torch(arrays, kw)
    expected.sum().backward()
    np.testing.assert_allclose(_np(out), _np(expected), rtol=1e-12, atol=1e-12)
    for mine, theirs in zip(leaves, torch_leaves):
        np.testing.assert_allclose(_np(mine.grad), theirs.grad.numpy(), rtol=1e-11, atol=1e-11)


def test_kernel_errors_name_the_primitive():
    f = kernels.get("attention", "cpu")
    q, k, v = np.zeros(2 * 3 * 4), np.zeros(2 * 5 * 4), np.zeros(2 * 5 * 3)
    out, lse = np.zeros(2 * 3 * 3), np.zeros(2 * 3)
    ql, kl, vl = Layout((1, 2, 3, 4)), Layout((1, 2, 5, 4)), Layout((1, 2, 5, 3))
    with pytest.raises(ValueError, match=r"attention: expected query \(B, H, L, E\)"):
        f(q, ql, k, Layout((1, 2, 5, 3)), v, vl, None, None, out, lse, 1.0, False, 0.0, 0, 0)
    with pytest.raises(ValueError, match="attention: expected query.*Hkv dividing H"):
        f(q, ql, np.zeros(60), Layout((1, 3, 5, 4)), np.zeros(45), Layout((1, 3, 5, 3)), None, None, out, lse, 1.0,
          False, 0.0, 0, 0)
    with pytest.raises(ValueError, match="attention: key's layout reaches"):
        f(q, ql, k[:10], kl, v, vl, None, None, out, lse, 1.0, False, 0.0, 0, 0)
    with pytest.raises(ValueError, match="attention: lse buffer"):
        f(q, ql, k, kl, v, vl, None, None, out, lse[:1], 1.0, False, 0.0, 0, 0)
    with pytest.raises(ValueError, match="attention: mask of shape"):
        f(q, ql, k, kl, v, vl, np.zeros(15), Layout((1, 1, 3, 5)), out, lse, 1.0, False, 0.0, 0, 0)
    with pytest.raises(TypeError, match="attention: float32 or float64"):
        f(*(a.astype(np.int64) for a in (q,)), ql, k, kl, v, vl, None, None, out, lse, 1.0, False, 0.0, 0, 0)
    with pytest.raises(ValueError, match=r"attention: dropout_p must be in \[0, 1\), got 1.0"):
        f(q, ql, k, kl, v, vl, None, None, out, lse, 1.0, False, 1.0, 0, 0)
