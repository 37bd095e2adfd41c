"""Attention: scaled_dot_product_attention, MultiheadAttention and the Transformer layers.

Oracles: a numpy implementation of attention written here (masks, causal, scale, GQA), central
finite differences of a module's parameters and inputs, binomial statistics for dropout, and
PyTorch (forward values and every gradient, weights copied by state_dict name, float64) where
torch imports.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from test_gradcheck import gradcheck, gradgradcheck

RTOL = ATOL = 1e-6


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def T(a, requires_grad=False):
    return minidl.tensor(np.asarray(a), requires_grad=requires_grad)


def npy(t):
    return np.asarray(t.detach().numpy(), dtype=np.float64)


# ----------------------------------------------------------------------------- numpy reference
def ref_attention(q, k, v, mask=None, causal=False, scale=None, weights=False):
    """softmax(q k^T * scale + mask) v in numpy (and the softmax, if ``weights``); bool mask:
    True = take part; fully masked rows -> 0."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    L, S = scores.shape[-2:]
    allowed = np.ones(scores.shape, dtype=bool)
    if causal:
        allowed &= np.arange(S)[None, :] <= np.arange(L)[:, None]
    if mask is not None and mask.dtype == bool:
        allowed &= mask
    elif mask is not None:
        scores = scores + mask
        allowed &= ~np.isneginf(mask)
    scores = np.where(allowed, scores, -np.inf)
    live = allowed.any(-1, keepdims=True)
    top = np.where(live, scores.max(-1, keepdims=True), 0.0)
    e = np.where(allowed, np.exp(scores - top), 0.0)
    w = np.where(live, e / np.where(live, e.sum(-1, keepdims=True), 1.0), 0.0)
    return (np.matmul(w, v), w) if weights else np.matmul(w, v)


def ref_multihead(mha, q, k, v, blocked, padding):
    """MultiheadAttention (batch_first) in numpy from its parameters: project, append bias_k/v and a
    zero key if asked, attend per head (blocked/padding: True = may not attend), merge, out_proj."""
    p = {name: npy(t) for name, t in mha.named_parameters()}
    E, H = mha.embed_dim, mha.num_heads
    if "in_proj_weight" in p:
        wq, wk, wv = np.split(p["in_proj_weight"], 3)
    else:
        wq, wk, wv = p["q_proj_weight"], p["k_proj_weight"], p["v_proj_weight"]
    bq, bk, bv = np.split(p.get("in_proj_bias", np.zeros(3 * E)), 3)
    Q, K, V = q @ wq.T + bq, k @ wk.T + bk, v @ wv.T + bv
    n, L = Q.shape[:2]
    allowed = ~(blocked[None, None] | padding[:, None, None, :])
    extra = []
    if "bias_k" in p:
        extra.append((p["bias_k"], p["bias_v"]))
    if mha.add_zero_attn:
        extra.append((np.zeros((1, 1, E)), np.zeros((1, 1, E))))
    for ek, ev in extra:
        K = np.concatenate([K, np.broadcast_to(ek, (n, 1, E))], 1)
        V = np.concatenate([V, np.broadcast_to(ev, (n, 1, E))], 1)
        allowed = np.concatenate([allowed, np.ones((n, 1, L, 1), dtype=bool)], -1)

    def heads(x):
        return x.reshape(n, x.shape[1], H, E // H).transpose(0, 2, 1, 3)

    out, w = ref_attention(heads(Q), heads(K), heads(V), np.broadcast_to(allowed, (n, H, L, K.shape[1])),
                           weights=True)
    out = out.transpose(0, 2, 1, 3).reshape(n, L, E) @ p["out_proj.weight"].T + p.get("out_proj.bias", 0.0)
    return out, w


CASES = {
    "plain": dict(q=(2, 3, 4, 5), k=(2, 3, 6, 5), v=(2, 3, 6, 7)),
    "bool mask (L, S)": dict(q=(2, 3, 4, 5), k=(2, 3, 6, 5), v=(2, 3, 6, 7), mask=("bool", (4, 6))),
    "float mask over batch": dict(q=(2, 3, 4, 5), k=(2, 3, 6, 5), v=(2, 3, 6, 7), mask=("float", (2, 1, 4, 6))),
    "bool mask (N, 1, 1, S)": dict(q=(2, 3, 4, 5), k=(2, 3, 6, 5), v=(2, 3, 6, 7), mask=("bool", (2, 1, 1, 6))),
    "causal L < S": dict(q=(2, 4, 5), k=(2, 6, 5), v=(2, 6, 3), causal=True),
    "causal L > S": dict(q=(2, 6, 5), k=(2, 4, 5), v=(2, 4, 3), causal=True),
    "scale": dict(q=(3, 4, 5), k=(3, 6, 5), v=(3, 6, 2), scale=0.3),
    "5-D batch": dict(q=(2, 2, 3, 4, 5), k=(2, 2, 3, 6, 5), v=(2, 2, 3, 6, 7), mask=("float", (6,))),
    "broadcast batch": dict(q=(2, 3, 4, 5), k=(1, 3, 6, 5), v=(3, 6, 7)),
    "2-D": dict(q=(4, 5), k=(6, 5), v=(6, 2), mask=("bool", (4, 6))),
}


def _case(rng, spec):
    q, k, v = (rng.standard_normal(spec[n]) for n in ("q", "k", "v"))
    mask = None
    if "mask" in spec:
        kind, shape = spec["mask"]
        if kind == "bool":
            mask = rng.random(shape) < 0.7
            mask[..., 0] = True             # every query keeps a key (see the fully-masked tests)
        else:
            mask = rng.standard_normal(shape)
            mask[rng.random(shape) < 0.2] = -np.inf
            mask[..., 0] = 0.0
    return q, k, v, mask


@pytest.mark.parametrize("name", list(CASES))
def test_sdpa_matches_numpy_and_finite_differences(rng, name):
    spec = CASES[name]
    q, k, v, mask = _case(rng, spec)
    kw = dict(is_causal=spec.get("causal", False), scale=spec.get("scale"))
    out = F.scaled_dot_product_attention(T(q), T(k), T(v), attn_mask=None if mask is None else T(mask), **kw)
    expected = ref_attention(q, k, v, mask, kw["is_causal"], kw["scale"])
    assert tuple(out.shape) == expected.shape
    np.testing.assert_allclose(npy(out), expected, rtol=1e-12, atol=1e-12)
    m = None if mask is None else T(mask)
    gradcheck(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=m, **kw), [q, k, v])


def test_sdpa_float_mask_gets_a_gradient():
    rng = np.random.default_rng(1)
    q, k, v, mask = (rng.standard_normal(s) for s in ((2, 3, 4), (2, 5, 4), (2, 5, 3), (3, 5)))
    gradcheck(lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), [q, k, v, mask])


def test_sdpa_fully_masked_rows_give_zeros_and_zero_gradients():
    rng = np.random.default_rng(2)
    q, k, v = (T(rng.standard_normal(s), requires_grad=True) for s in ((2, 4, 3), (2, 5, 3), (2, 5, 2)))
    allowed = rng.random((4, 5)) < 0.6
    allowed[:, 0] = True
    allowed[2] = False
    additive = np.where(allowed, 0.0, -np.inf)
    for mask in (T(allowed), T(additive)):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        np.testing.assert_allclose(npy(out), ref_attention(npy(q), npy(k), npy(v), allowed), rtol=1e-12, atol=1e-12)
        assert not npy(out)[:, 2].any()
        q.grad = None
        out.backward(T(rng.standard_normal(tuple(out.shape))))
        assert np.isfinite(npy(q.grad)).all() and np.isfinite(npy(k.grad)).all()
        assert not npy(q.grad)[:, 2].any() and npy(q.grad)[:, 1].any()


def test_sdpa_grouped_query_attention_repeats_each_key_head():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(s) for s in ((2, 6, 4, 5), (2, 2, 7, 5), (2, 2, 7, 3)))
    out = F.scaled_dot_product_attention(T(q), T(k), T(v), enable_gqa=True)
    expected = ref_attention(q, np.repeat(k, 3, axis=1), np.repeat(v, 3, axis=1))
    np.testing.assert_allclose(npy(out), expected, rtol=1e-12, atol=1e-12)
    with pytest.raises(RuntimeError, match="multiple"):
        F.scaled_dot_product_attention(T(q), T(k[:, :1].repeat(4, 1)), T(v[:, :1].repeat(4, 1)), enable_gqa=True)


def test_sdpa_errors_name_the_shapes():
    q, k, v = minidl.randn(2, 4, 5), minidl.randn(2, 6, 5), minidl.randn(2, 6, 3)
    with pytest.raises(RuntimeError, match="either attn_mask or is_causal"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=minidl.ones(4, 6, dtype=minidl.bool), is_causal=True)
    with pytest.raises(RuntimeError, match=r"attn_mask of shape \[4, 5\].*\[2, 4, 6\]"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=minidl.ones(4, 5, dtype=minidl.bool))
    with pytest.raises(RuntimeError, match=r"\[2, 4, 5\], \[2, 6, 4\]"):
        F.scaled_dot_product_attention(q, minidl.randn(2, 6, 4), v)
    with pytest.raises(RuntimeError, match="do not broadcast"):
        F.scaled_dot_product_attention(q, minidl.randn(3, 6, 5), minidl.randn(3, 6, 3))
    with pytest.raises(TypeError, match="bool or floating"):
        F.scaled_dot_product_attention(q, k, v, attn_mask=minidl.ones(4, 6, dtype=minidl.int64))


# ----------------------------------------------------------------------------- dropout
def test_sdpa_dropout_is_seeded_and_has_the_right_statistics():
    """Zero queries give uniform weights 1/S, and an identity value matrix returns the weights:
    each must be 0 (probability p) or 1 / (S (1 - p))."""
    p, S = 0.3, 64
    q, k, v = minidl.zeros(8, 64, 4), minidl.randn(8, S, 4), minidl.eye(S)
    minidl.manual_seed(5)
    a = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
    minidl.manual_seed(5)
    b = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
    c = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
    w = npy(a)
    assert np.array_equal(w, npy(b)) and not np.array_equal(w, npy(c))
    kept = w != 0
    np.testing.assert_allclose(w[kept], 1.0 / (S * (1 - p)), rtol=1e-6)
    n = w.size
    assert abs((~kept).mean() - p) < 5 * math.sqrt(p * (1 - p) / n)
    np.testing.assert_allclose(npy(F.scaled_dot_product_attention(q, k, v)), 1.0 / S, rtol=1e-6)


def test_multihead_attention_dropout_only_in_training():
    minidl.manual_seed(0)
    mha = nn.MultiheadAttention(8, 2, dropout=0.5, batch_first=True).double()
    x = minidl.randn(4, 32, 8, dtype=minidl.float64)
    mha.eval()
    ref_out, ref_w = mha(x, x, x, average_attn_weights=False)
    again_out, _ = mha(x, x, x)
    assert np.array_equal(npy(ref_out), npy(again_out))
    mha.train()
    minidl.manual_seed(1)
    out1, w1 = mha(x, x, x, average_attn_weights=False)
    minidl.manual_seed(1)
    out2, _ = mha(x, x, x)
    assert np.array_equal(npy(out1), npy(out2)) and not np.allclose(npy(out1), npy(ref_out))
    ratio = npy(w1) / npy(ref_w)                     # each weight dropped (0) or scaled by 1 / (1 - p)
    assert np.all(np.isclose(ratio, 0.0) | np.isclose(ratio, 2.0))
    assert abs(np.isclose(ratio, 0.0).mean() - 0.5) < 5 * math.sqrt(0.25 / ratio.size)


def test_encoder_layer_dropout_is_seeded_in_training():
    minidl.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.2, batch_first=True).double()
    x = minidl.randn(3, 5, 8, dtype=minidl.float64)
    runs = []
    for seed in (7, 7, 8):
        minidl.manual_seed(seed)
        layer.zero_grad()
        out = layer(x)
        out.sum().backward()
        runs.append((npy(out), npy(layer.linear1.weight.grad)))
    assert np.array_equal(runs[0][0], runs[1][0]) and np.array_equal(runs[0][1], runs[1][1])
    assert not np.allclose(runs[0][0], runs[2][0])
    layer.eval()
    assert np.array_equal(npy(layer(x)), npy(layer(x)))


# ----------------------------------------------------------------------------- no-torch module checks
def module_gradcheck(module, inputs, call, eps=1e-6, rtol=1e-5, atol=1e-7, seed=0):
    """Autograd's gradients of <u, call(module, *inputs)> for every parameter and float input,
    against central differences along three random directions each."""
    rng = np.random.default_rng(seed)
    leaves = [T(a, requires_grad=True) for a in inputs]
    out = call(module, *leaves)
    u = T(rng.standard_normal(tuple(out.shape)))
    module.zero_grad()
    (out * u).sum().backward()
    targets = [(p, p.grad) for p in module.parameters()] + [(x, x.grad) for x in leaves]

    def phi():
        with minidl.no_grad():
            return float((call(module, *leaves) * u).sum())

    for tensor, grad in targets:
        for _ in range(3):
            d = rng.standard_normal(tuple(tensor.shape))
            with minidl.no_grad():
                tensor.add_(T(eps * d))
                plus = phi()
                tensor.sub_(T(2 * eps * d))
                minus = phi()
                tensor.add_(T(eps * d))
            np.testing.assert_allclose(float(np.sum(npy(grad) * d)), (plus - minus) / (2 * eps), rtol=rtol, atol=atol)


def test_multihead_attention_gradients_by_finite_differences():
    minidl.manual_seed(0)
    rng = np.random.default_rng(0)
    mha = nn.MultiheadAttention(6, 2, kdim=4, vdim=3, add_bias_kv=True, add_zero_attn=True).double().eval()
    q, k, v = rng.standard_normal((3, 2, 6)), rng.standard_normal((4, 2, 4)), rng.standard_normal((4, 2, 3))
    pad = T(np.array([[False, False, True, False], [True, False, False, False]]))
    mask = T(rng.standard_normal((3, 4)))
    module_gradcheck(mha, [q, k, v], lambda m, q, k, v: m(q, k, v, key_padding_mask=pad, attn_mask=mask)[0])
    self_attn = nn.MultiheadAttention(4, 2, batch_first=True).double()
    module_gradcheck(self_attn, [rng.standard_normal((2, 3, 4))],
                     lambda m, x: m(x, x, x, average_attn_weights=False)[1] + m(x, x, x)[0].sum())


def test_multihead_attention_second_order_gradients():
    minidl.manual_seed(0)
    mha = nn.MultiheadAttention(4, 2).double()
    pad = T(np.array([[False, True, False]]))
    x = np.random.default_rng(2).standard_normal((3, 1, 4))
    gradgradcheck(lambda x: mha(x, x, x, key_padding_mask=pad)[0], [x])


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_layers_gradients_by_finite_differences(norm_first):
    minidl.manual_seed(0)
    rng = np.random.default_rng(1)
    enc = nn.TransformerEncoderLayer(4, 2, 6, dropout=0.0, activation="gelu", norm_first=norm_first).double()
    causal = T(np.triu(np.ones((3, 3), dtype=bool), 1))
    module_gradcheck(enc, [rng.standard_normal((3, 2, 4))], lambda m, x: m(x, src_mask=causal, is_causal=True))
    dec = nn.TransformerDecoderLayer(4, 2, 6, dropout=0.0, batch_first=True, norm_first=norm_first).double()
    mem_pad = T(np.array([[False, True, False, False], [False, False, False, True]]))
    module_gradcheck(dec, [rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 4))],
                     lambda m, t, mem: m(t, mem, tgt_mask=causal, memory_key_padding_mask=mem_pad))


@pytest.mark.parametrize("kw", [dict(), dict(kdim=3, vdim=5, add_bias_kv=True, add_zero_attn=True, bias=False)])
def test_multihead_attention_matches_numpy(kw):
    minidl.manual_seed(0)
    rng = np.random.default_rng(9)
    mha = nn.MultiheadAttention(8, 2, batch_first=True, **kw).double()
    n, L, S = 3, 4, 5
    q = rng.standard_normal((n, L, 8))
    k, v = rng.standard_normal((n, S, mha.kdim)), rng.standard_normal((n, S, mha.vdim))
    blocked, padding = rng.random((L, S)) < 0.3, rng.random((n, S)) < 0.3
    blocked[:, 0] = padding[:, 0] = False
    expected, w = ref_multihead(mha, q, k, v, blocked, padding)
    for am, kpm in ((T(blocked), T(padding)), (T(np.where(blocked, -np.inf, 0.0)), T(padding))):
        out, per_head = mha(T(q), T(k), T(v), key_padding_mask=kpm, attn_mask=am, average_attn_weights=False)
        np.testing.assert_allclose(npy(out), expected, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(npy(per_head), w, rtol=1e-10, atol=1e-12)
    averaged = mha(T(q), T(k), T(v), key_padding_mask=T(padding), attn_mask=T(blocked))[1]
    np.testing.assert_allclose(npy(averaged), w.mean(1), rtol=1e-10, atol=1e-12)


def test_multihead_attention_parameters_and_init():
    minidl.manual_seed(0)
    E = 64
    mha = nn.MultiheadAttention(E, 8)
    assert list(mha.state_dict()) == ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    w = npy(mha.in_proj_weight)
    bound = math.sqrt(6.0 / (E + 3 * E))                # xavier_uniform_ on (3E, E)
    assert w.shape == (3 * E, E) and np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.02 * bound
    assert not npy(mha.in_proj_bias).any() and not npy(mha.out_proj.bias).any()
    separate = nn.MultiheadAttention(E, 8, kdim=5, vdim=7, bias=False, add_bias_kv=True)
    assert {k: tuple(v.shape) for k, v in separate.state_dict().items()} == {
        "q_proj_weight": (E, E), "k_proj_weight": (E, 5), "v_proj_weight": (E, 7), "bias_k": (1, 1, E),
        "bias_v": (1, 1, E), "out_proj.weight": (E, E)}


def test_encoder_stacks_independent_copies():
    layer = nn.TransformerEncoderLayer(8, 2, 16)
    enc = nn.TransformerEncoder(layer, 3, norm=nn.LayerNorm(8))
    keys = list(enc.state_dict())
    assert keys[:2] == ["layers.0.self_attn.in_proj_weight", "layers.0.self_attn.in_proj_bias"]
    assert keys[-2:] == ["norm.weight", "norm.bias"] and len(keys) == 3 * 12 + 2
    weights = [l.linear1.weight for l in enc.layers]
    assert len({id(w) for w in weights + [layer.linear1.weight]}) == 4
    with minidl.no_grad():
        weights[0].zero_()
    assert npy(weights[1]).any()


def test_errors_name_the_layer_and_shapes():
    with pytest.raises(ValueError, match="embed_dim 10 is not divisible by num_heads 4"):
        nn.MultiheadAttention(10, 4)
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        nn.TransformerEncoderLayer(8, 2, activation="tanh")
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    x = minidl.randn(2, 5, 8)
    with pytest.raises(RuntimeError, match=r"MultiheadAttention: attn_mask of shape \[5, 4\].*\[5, 5\]"):
        mha(x, x, x, attn_mask=minidl.zeros(5, 4))
    with pytest.raises(RuntimeError, match=r"key_padding_mask of shape \[2, 4\].*\[2, 5\]"):
        mha(x, x, x, key_padding_mask=minidl.zeros(2, 4, dtype=minidl.bool))
    with pytest.raises(RuntimeError, match=r"expected query with 8 features.*\[2, 5, 6\]"):
        mha(minidl.randn(2, 5, 6), x, x)
    with pytest.raises(RuntimeError, match="different batch sizes"):
        mha(x, minidl.randn(3, 5, 8), minidl.randn(3, 5, 8))
    with pytest.raises(RuntimeError, match="is_causal=True is a hint"):
        mha(x, x, x, is_causal=True)
    with pytest.raises(TypeError, match="only bool and floating point attn_mask"):
        mha(x, x, x, attn_mask=minidl.zeros(5, 5, dtype=minidl.int64))


# ----------------------------------------------------------------------------- against PyTorch
def _copy_weights(mine, theirs):
    tsd = theirs.state_dict()
    assert list(mine.state_dict()) == list(tsd)
    mine.load_state_dict({k: minidl.tensor(v.detach().numpy()) for k, v in tsd.items()})


def compare_with_torch(torch, make, call, arrays, masks=(), seed=0):
    """Build ``make(ns)`` in both libraries (torch's weights copied by name, float64, eval mode), run
    ``call(module, *inputs, *masks)`` and compare every output, every input gradient and every parameter
    gradient. ``arrays`` are the float inputs (differentiated); ``masks`` numpy masks (not)."""
    torch.manual_seed(seed)
    theirs = make(torch.nn).double().eval()
    mine = make(nn).double().eval()
    _copy_weights(mine, theirs)
    rng = np.random.default_rng(seed)
    t_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    m_in = [T(a, requires_grad=True) for a in arrays]
    t_out = call(theirs, *t_in, *[torch.tensor(m) for m in masks])
    m_out = call(mine, *m_in, *[T(m) for m in masks])
    t_out = [o for o in (t_out if isinstance(t_out, tuple) else (t_out,)) if o is not None]
    m_out = [o for o in (m_out if isinstance(m_out, tuple) else (m_out,)) if o is not None]
    assert len(t_out) == len(m_out)
    t_loss, m_loss = 0, 0
    for t, m in zip(t_out, m_out):
        assert tuple(m.shape) == tuple(t.shape)
        np.testing.assert_allclose(npy(m), t.detach().numpy(), rtol=RTOL, atol=ATOL)
        u = rng.standard_normal(tuple(t.shape))
        t_loss = t_loss + (t * torch.tensor(u)).sum()
        m_loss = m_loss + (m * T(u)).sum()
    t_loss.backward()
    m_loss.backward()
    for t, m in zip(t_in, m_in):
        np.testing.assert_allclose(npy(m.grad), t.grad.numpy(), rtol=RTOL, atol=ATOL)
    t_params = dict(theirs.named_parameters())
    for name, p in mine.named_parameters():
        np.testing.assert_allclose(npy(p.grad), t_params[name].grad.numpy(), rtol=RTOL, atol=ATOL, err_msg=name)


def _masks(rng, L, S, n=None, heads=None, kind="bool"):
    """A MultiheadAttention-style attn_mask (True / -inf = blocked) that leaves every query a key."""
    shape = (L, S) if heads is None else (n * heads, L, S)
    blocked = rng.random(shape) < 0.4
    blocked[..., 0] = False
    return blocked if kind == "bool" else np.where(blocked, -np.inf, rng.standard_normal(shape))


def _padding(rng, n, S):
    pad = rng.random((n, S)) < 0.3
    pad[:, 0] = False
    return pad


MHA_CASES = ["self", "self batch_first", "separate qkv", "cross (key is value)", "kdim vdim", "no bias",
             "bias_kv zero_attn", "unbatched"]


@pytest.mark.parametrize("case", MHA_CASES)
@pytest.mark.parametrize("masks", ["none", "padding", "bool attn_mask", "float 3-D attn_mask", "both"])
@pytest.mark.parametrize("weights", ["averaged", "per head", "none"])
def test_multihead_attention_matches_torch(torch, case, masks, weights):
    rng = np.random.default_rng(0)
    E, H, n, L, S = 8, 2, 3, 4, 5
    kw = dict(batch_first=case == "self batch_first")
    if case == "kdim vdim":
        kw.update(kdim=3, vdim=6)
    if case == "no bias":
        kw.update(bias=False)
    if case == "bias_kv zero_attn":
        kw.update(add_bias_kv=True, add_zero_attn=True)
    self_attn = case.startswith("self")
    if case == "unbatched":
        n = 1
    if self_attn:
        S = L
    kdim, vdim = kw.get("kdim", E), kw.get("vdim", E)

    def shaped(seq, feat):
        if case == "unbatched":
            return rng.standard_normal((seq, feat))
        return rng.standard_normal((n, seq, feat) if kw["batch_first"] else (seq, n, feat))

    arrays = [shaped(L, E)] if self_attn else [shaped(L, E), shaped(S, kdim)]
    if case != "cross (key is value)" and not self_attn:
        arrays.append(shaped(S, vdim))
    mask_names, mask_arrays = [], []
    if masks in ("padding", "both"):
        pad = _padding(rng, n, S)
        mask_names.append("key_padding_mask")
        mask_arrays.append(pad[0] if case == "unbatched" else pad)
    if masks in ("bool attn_mask", "both"):
        mask_names.append("attn_mask")
        mask_arrays.append(_masks(rng, L, S))
    if masks == "float 3-D attn_mask":
        mask_names.append("attn_mask")
        mask_arrays.append(_masks(rng, L, S, n, H, kind="float"))
    options = dict(need_weights=weights != "none", average_attn_weights=weights == "averaged")

    def call(m, *args):
        inputs, given = args[:len(arrays)], dict(zip(mask_names, args[len(arrays):]))
        q = inputs[0]
        k = inputs[1] if len(inputs) > 1 else q
        v = inputs[2] if len(inputs) > 2 else k
        return m(q, k, v, **given, **options)

    compare_with_torch(torch, lambda ns: ns.MultiheadAttention(E, H, **kw), call, arrays, mask_arrays)


def test_multihead_attention_fully_masked_rows_match_torch_without_weights(torch):
    """PyTorch gives zeros for a query with no key left when need_weights=False (NaN otherwise)."""
    rng = np.random.default_rng(4)
    blocked = _masks(rng, 4, 4)
    blocked[1] = True
    pad = np.zeros((2, 4), dtype=bool)
    pad[1] = True
    compare_with_torch(torch, lambda ns: ns.MultiheadAttention(8, 2, batch_first=True),
                       lambda m, x, am, kpm: m(x, x, x, attn_mask=am, key_padding_mask=kpm, need_weights=False),
                       [rng.standard_normal((2, 4, 8))], [blocked, pad])


@pytest.mark.parametrize("mask", ["none", "bool", "float", "causal"])
def test_sdpa_matches_torch(torch, mask):
    rng = np.random.default_rng(5)
    q, k, v = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((2, 3, 6, 5)), rng.standard_normal((2, 3, 6, 7))
    if mask == "causal":
        k, v = k[:, :, :4], v[:, :, :4]
    kw = {"is_causal": True} if mask == "causal" else {}
    masks = []
    if mask == "bool":
        m = rng.random((2, 1, 4, 6)) < 0.6
        m[..., 2, :] = False                       # a fully masked row: zeros in both
        masks = [m]
    if mask == "float":
        masks = [rng.standard_normal((4, 6))]

    def make(ns):      # no parameters: an Identity stands in for the module
        return ns.Identity()

    def call(_, q, k, v, *m):
        lib = minidl if isinstance(q, minidl.Tensor) else torch
        return lib.nn.functional.scaled_dot_product_attention(q, k, v, *m, scale=0.4, **kw)

    compare_with_torch(torch, make, call, [q, k, v], masks)


ENCODER_CASES = {
    "post-norm relu": dict(),
    "pre-norm gelu batch_first": dict(norm_first=True, activation="gelu", batch_first=True),
    "callable activation, no bias": dict(activation="silu", bias=False),
}


@pytest.mark.parametrize("name", list(ENCODER_CASES))
@pytest.mark.parametrize("masks", ["none", "bool causal + padding", "float causal"])
def test_encoder_layer_matches_torch(torch, name, masks):
    rng = np.random.default_rng(6)
    kw = ENCODER_CASES[name]
    n, L, E = 3, 5, 8
    x = rng.standard_normal((n, L, E) if kw.get("batch_first") else (L, n, E))
    causal = np.triu(np.ones((L, L), dtype=bool), 1)
    mask_arrays, names, extra = [], [], {}
    if masks == "bool causal + padding":
        mask_arrays, names, extra = [causal, _padding(rng, n, L)], ["src_mask", "src_key_padding_mask"], {
            "is_causal": True}
    if masks == "float causal":
        mask_arrays, names = [np.where(causal, -np.inf, 0.0)], ["src_mask"]

    def make(ns):
        args = dict(kw)
        if args.get("activation") == "silu":      # a callable, not one of the names the layer knows
            args["activation"] = ns.functional.silu
        return ns.TransformerEncoderLayer(E, 2, 16, **args)

    compare_with_torch(torch, make, lambda m, x, *ms: m(x, **dict(zip(names, ms)), **extra), [x], mask_arrays)


def test_encoder_stack_matches_torch(torch):
    rng = np.random.default_rng(7)

    def make(ns):
        layer = ns.TransformerEncoderLayer(8, 2, 16, batch_first=True, norm_first=True)
        kw = {"enable_nested_tensor": False} if ns is torch.nn else {}
        return ns.TransformerEncoder(layer, 2, norm=ns.LayerNorm(8), **kw)

    compare_with_torch(torch, make, lambda m, x, pad: m(x, src_key_padding_mask=pad),
                       [rng.standard_normal((3, 5, 8))], [_padding(rng, 3, 5)])


@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask:UserWarning")  # torch's own
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_decoder_layer_and_stack_match_torch(torch, norm_first, batch_first):
    rng = np.random.default_rng(8)
    n, L, S, E = 2, 4, 5, 8
    tgt = rng.standard_normal((n, L, E) if batch_first else (L, n, E))
    memory = rng.standard_normal((n, S, E) if batch_first else (S, n, E))
    causal = np.triu(np.full((L, L), -np.inf), 1)
    masks = [causal, _masks(rng, L, S), _padding(rng, n, L), _padding(rng, n, S)]
    names = ["tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask"]

    def make_layer(ns):
        return ns.TransformerDecoderLayer(E, 2, 16, batch_first=batch_first, norm_first=norm_first)

    def call(m, t, mem, *ms):
        return m(t, mem, **dict(zip(names, ms)), tgt_is_causal=True)

    compare_with_torch(torch, make_layer, call, [tgt, memory], masks)
    compare_with_torch(torch, lambda ns: ns.TransformerDecoder(make_layer(ns), 2, norm=ns.LayerNorm(E)), call,
                       [tgt, memory], masks)
