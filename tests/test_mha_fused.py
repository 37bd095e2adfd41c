"""MultiheadAttention and the Transformer layers on the fused attention kernel (``need_weights=False``).

Oracles: PyTorch's MultiheadAttention / TransformerEncoderLayer / TransformerDecoderLayer with the same weights
(float64, forward and every gradient), and, for dropout, minidl's composition ``F._attention`` called on the same
projections with the same seed. Lengths cross the kernel's query and key blocks (32 and 64).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from cuda_support import cuda_device
from test_attention import _copy_weights, _masks, _padding, compare_with_torch
from test_sdpa_fused import count_calls

torch = pytest.importorskip("torch")

E, H = 32, 2


@pytest.fixture
def calls(monkeypatch):
    return count_calls(monkeypatch, "cpu")


LAYERS = {   # name: MultiheadAttention keywords, self-attention?
    "self": (dict(), True),
    "self batch_first": (dict(batch_first=True), True),
    "cross, key is value": (dict(), False),
    "cross kdim vdim batch_first": (dict(kdim=12, vdim=20, batch_first=True), False),
    "bias_kv zero_attn": (dict(add_bias_kv=True, add_zero_attn=True), True),
    "unbatched": (dict(), False),
}
MASKS = ["none", "padding", "bool attn_mask", "float 3-D attn_mask", "bool attn_mask + padding", "causal hint",
         "causal hint + padding", "fully masked rows"]


def _call_args(rng, layer, masks):
    """The float inputs (numpy), the mask names and arrays, and whether the causal hint is given."""
    kw, self_attn = LAYERS[layer]
    n, L, S = (1 if layer == "unbatched" else 2), 37, (37 if self_attn or masks.startswith("causal") else 70)

    def shaped(seq, feat):
        if layer == "unbatched":
            return rng.standard_normal((seq, feat))
        return rng.standard_normal((n, seq, feat) if kw.get("batch_first") else (seq, n, feat))

    arrays = [shaped(L, E)] if self_attn else [shaped(L, E), shaped(S, kw.get("kdim", E))]
    if "vdim" in kw:
        arrays.append(shaped(S, kw["vdim"]))
    names, given = [], []
    if "padding" in masks:
        pad = _padding(rng, n, S)
        names.append("key_padding_mask")
        given.append(pad[0] if layer == "unbatched" else pad)
    if masks.startswith("bool attn_mask") or masks == "fully masked rows":
        blocked = _masks(rng, L, S)
        if masks == "fully masked rows":
            blocked[[3, 30]] = True
        names.append("attn_mask")
        given.append(blocked)
    if masks == "float 3-D attn_mask":
        names.append("attn_mask")
        given.append(_masks(rng, L, S, n, H, kind="float"))
    if masks.startswith("causal"):
        names.append("attn_mask")
        given.append(np.triu(np.ones((L, S), dtype=bool), 1))
    return arrays, names, given, masks.startswith("causal")


def _attend(arrays, names, causal, **options):
    """module(query, key, value, masks...) for compare_with_torch, from its float inputs and masks."""
    def call(m, *args):
        inputs, given = args[:len(arrays)], dict(zip(names, args[len(arrays):]))
        q = inputs[0]
        k = inputs[1] if len(inputs) > 1 else q
        v = inputs[2] if len(inputs) > 2 else k
        return m(q, k, v, **given, is_causal=causal, **options)
    return call


@pytest.mark.parametrize("layer, masks", [(layer, masks) for layer in LAYERS for masks in MASKS
                                          if not (layer == "bias_kv zero_attn" and masks == "causal hint")])
def test_multihead_attention_without_weights_runs_the_fused_kernel_as_torch(layer, masks, calls):
    arrays, names, given, causal = _call_args(np.random.default_rng(0), layer, masks)
    compare_with_torch(torch, lambda ns: ns.MultiheadAttention(E, H, **LAYERS[layer][0]),
                       _attend(arrays, names, causal, need_weights=False), arrays, given)
    assert calls == {"attention": 1, "attention_backward": 1}


def test_the_weights_keep_the_composition(calls):
    arrays, names, given, causal = _call_args(np.random.default_rng(1), "self", "bool attn_mask + padding")
    compare_with_torch(torch, lambda ns: ns.MultiheadAttention(E, H),
                       _attend(arrays, names, causal, average_attn_weights=False), arrays, given)
    assert calls == {"attention": 0, "attention_backward": 0}


def test_the_causal_hint_replaces_the_mask_as_in_torch(calls):
    """Without padding, torch's MultiheadAttention(need_weights=False) runs SDPA with is_causal=True and does not
    read attn_mask: a mask that blocks nothing gives the causal result in both."""
    rng = np.random.default_rng(2)
    compare_with_torch(torch, lambda ns: ns.MultiheadAttention(E, H, batch_first=True),
                       _attend([0], ["attn_mask"], True, need_weights=False),
                       [rng.standard_normal((2, 37, E))], [np.zeros((37, 37), dtype=bool)])
    assert calls["attention"] == 1


def test_the_causal_hint_keeps_the_mask_when_keys_are_appended(calls):
    """With bias_k and a zero key appended, torch's need_weights=False hides them behind its causal kernel while
    its need_weights=True (and minidl before the fused path) lets every query see them: minidl keeps the latter."""
    arrays, names, given, causal = _call_args(np.random.default_rng(5), "bias_kv zero_attn", "causal hint")
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(E, H, add_bias_kv=True, add_zero_attn=True).double().eval()
    mine = nn.MultiheadAttention(E, H, add_bias_kv=True, add_zero_attn=True).double().eval()
    mine.load_state_dict({k: minidl.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    (x,), (mask,) = arrays, given
    expected = theirs(*[torch.tensor(x)] * 3, attn_mask=torch.tensor(mask), is_causal=True)[0]
    out = mine(*[minidl.tensor(x)] * 3, attn_mask=minidl.tensor(mask), is_causal=True, need_weights=False)[0]
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-12, atol=1e-12)
    assert calls["attention"] == 1


ENCODER_DECODER = {
    "encoder post-norm, causal + padding": dict(),
    "encoder pre-norm batch_first gelu, float causal": dict(norm_first=True, batch_first=True, activation="gelu"),
    "decoder post-norm": dict(decoder=True),
    "decoder pre-norm batch_first": dict(decoder=True, norm_first=True, batch_first=True),
}


@pytest.mark.filterwarnings("ignore:Support for mismatched key_padding_mask:UserWarning")  # torch's own
@pytest.mark.parametrize("name", list(ENCODER_DECODER))
def test_transformer_layers_run_the_fused_kernel_as_torch(name, calls):
    rng = np.random.default_rng(3)
    kw = dict(ENCODER_DECODER[name])
    decoder = kw.pop("decoder", False)
    n, L, S = 2, 37, 70

    def seq(length):
        return rng.standard_normal((n, length, E) if kw.get("batch_first") else (length, n, E))

    causal = np.triu(np.ones((L, L), dtype=bool), 1)
    if "float" in name:
        causal = np.where(causal, -np.inf, 0.0)
    if decoder:
        names = ["tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask"]
        masks = [causal, _masks(rng, L, S), _padding(rng, n, L), _padding(rng, n, S)]
        arrays = [seq(L), seq(S)]

        def call(m, tgt, memory, *ms):
            return m(tgt, memory, **dict(zip(names, ms)), tgt_is_causal=True)
    else:
        names, masks, arrays = ["src_mask", "src_key_padding_mask"], [causal, _padding(rng, n, L)], [seq(L)]
        if "padding" not in name:
            names, masks = names[:1], masks[:1]

        def call(m, src, *ms):
            return m(src, **dict(zip(names, ms)), is_causal=True)

    make = (lambda ns: ns.TransformerDecoderLayer(E, H, 48, **kw)) if decoder else \
        (lambda ns: ns.TransformerEncoderLayer(E, H, 48, **kw))
    compare_with_torch(torch, make, call, arrays, masks)
    blocks = 2 if decoder else 1
    assert calls == {"attention": blocks, "attention_backward": blocks}


def test_on_cuda_an_encoder_layer_runs_the_cuda_kernel_as_torch(monkeypatch):
    """The same layer on 'cuda' (the simulator without a GPU): torch's output and every gradient, float64."""
    cuda_device()
    calls = count_calls(monkeypatch, "cuda")
    rng = np.random.default_rng(6)
    torch.manual_seed(0)
    theirs = torch.nn.TransformerEncoderLayer(16, 2, 24, batch_first=True).double().eval()
    mine = nn.TransformerEncoderLayer(16, 2, 24, batch_first=True).double().eval()
    _copy_weights(mine, theirs)
    mine.to("cuda")
    x, u = rng.standard_normal((2, 9, 16)), rng.standard_normal((2, 9, 16))
    masks = dict(src_mask=np.triu(np.ones((9, 9), dtype=bool), 1), src_key_padding_mask=_padding(rng, 2, 9))
    t_x = torch.tensor(x, requires_grad=True)
    expected = theirs(t_x, **{n: torch.tensor(m) for n, m in masks.items()}, is_causal=True)
    (expected * torch.tensor(u)).sum().backward()
    m_x = minidl.tensor(x, device="cuda", requires_grad=True)
    out = mine(m_x, **{n: minidl.tensor(m, device="cuda") for n, m in masks.items()}, is_causal=True)
    (out * minidl.tensor(u, device="cuda")).sum().backward()
    assert calls == {"attention": 1, "attention_backward": 1}
    np.testing.assert_allclose(out.detach().cpu().numpy(), expected.detach().numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(m_x.grad.cpu().numpy(), t_x.grad.numpy(), rtol=1e-10, atol=1e-10)
    t_params = dict(theirs.named_parameters())
    for name, p in mine.named_parameters():
        np.testing.assert_allclose(p.grad.cpu().numpy(), t_params[name].grad.numpy(), rtol=1e-10, atol=1e-10,
                                   err_msg=name)


def _composed(mha, x, blocked, p, seed):
    """Self-attention of ``mha`` (batch_first, in_proj_weight) written out: the projections, then the composition
    F._attention (bool mask True = take part) with dropout ``p`` drawn after ``manual_seed(seed)``."""
    n, L, _ = x.shape
    q, k, v = (F.linear(x, w, b).reshape(n, L, H, E // H).permute(0, 2, 1, 3)
               for w, b in zip(mha.in_proj_weight.split(E), mha.in_proj_bias.split(E)))
    minidl.manual_seed(seed)
    out = F._attention(q, k, v, None if blocked is None else minidl.tensor(~blocked), p, 1.0 / math.sqrt(E // H))[0]
    return mha.out_proj(out.permute(0, 2, 1, 3).reshape(n, L, E))


@pytest.mark.parametrize("masks", ["none", "bool attn_mask", "causal hint"])
def test_dropout_in_training_draws_as_the_composition(masks):
    """Same seed, same kept elements: the module's output and gradients equal F._attention's with that seed."""
    rng = np.random.default_rng(4)
    minidl.manual_seed(0)
    mha = nn.MultiheadAttention(E, H, dropout=0.3, batch_first=True).double().train()
    x = minidl.tensor(rng.standard_normal((2, 37, E)), requires_grad=True)
    blocked = None if masks == "none" else _masks(rng, 37, 37)
    if masks == "causal hint":
        blocked = np.triu(np.ones((37, 37), dtype=bool), 1)
    given = {} if blocked is None else dict(attn_mask=minidl.tensor(blocked))
    minidl.manual_seed(11)
    out = mha(x, x, x, need_weights=False, is_causal=masks == "causal hint", **given)[0]
    expected = _composed(mha, x, blocked, 0.3, seed=11)
    assert not np.allclose(out.detach().numpy(), _composed(mha, x, blocked, 0.0, seed=11).detach().numpy())
    np.testing.assert_allclose(out.detach().numpy(), expected.detach().numpy(), rtol=1e-12, atol=1e-12)
    g = minidl.tensor(rng.standard_normal(tuple(out.shape)))
    (mine,) = minidl.autograd.grad(out, [x], g)
    (composed,) = minidl.autograd.grad(expected, [x], g)
    np.testing.assert_allclose(mine.numpy(), composed.numpy(), rtol=1e-11, atol=1e-11)
