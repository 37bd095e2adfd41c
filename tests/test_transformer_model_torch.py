"""nn.Transformer (the full encoder-decoder) against PyTorch: constructor, state_dict names,
initialisation, generate_square_subsequent_mask, shape errors, and forward values and every gradient
(inputs and parameters) in float64 with torch's weights copied by name, eval mode, dropout 0.
"""
from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

import minidl
import minidl.nn as nn

RTOL = ATOL = 1e-6
E, H, FF = 8, 2, 12

pytestmark = [
    # torch's own notices: no nested-tensor fast path without batch_first, bool padding with a float mask
    pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning"),
    pytest.mark.filterwarnings("ignore:Support for mismatched:UserWarning"),
]


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


def npy(t):
    return t.detach().numpy()


def T(a, requires_grad=False):
    return minidl.tensor(np.asarray(a), requires_grad=requires_grad)


def _pair(torch, seed=0, **kw):
    """The same tiny Transformer in both libraries (float64, eval), torch's weights loaded into minidl."""
    args = dict(d_model=E, nhead=H, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=FF, dropout=0.0)
    args.update(kw)
    torch.manual_seed(seed)
    theirs = torch.nn.Transformer(**args).double().eval()
    mine = nn.Transformer(**args).double().eval()
    tsd = theirs.state_dict()
    assert list(mine.state_dict()) == list(tsd)
    mine.load_state_dict({k: T(v.detach().numpy()) for k, v in tsd.items()})
    return mine, theirs


def _padding(rng, n, S):
    pad = rng.random((n, S)) < 0.4
    pad[:, 0] = False                          # every query keeps a key
    return pad


def _compare(torch, mine, theirs, arrays, call, seed=0):
    """``call(model, lib, src, tgt)`` in both libraries; the output, the input gradients and every
    parameter's gradient (of a random projection of the output) must agree."""
    t_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    m_in = [T(a, requires_grad=True) for a in arrays]
    t_out = call(theirs, torch, *t_in)
    m_out = call(mine, minidl, *m_in)
    assert tuple(m_out.shape) == tuple(t_out.shape)
    np.testing.assert_allclose(npy(m_out), t_out.detach().numpy(), rtol=RTOL, atol=ATOL)
    u = np.random.default_rng(seed).standard_normal(tuple(t_out.shape))
    (t_out * torch.tensor(u)).sum().backward()
    (m_out * T(u)).sum().backward()
    for t, m in zip(t_in, m_in):
        np.testing.assert_allclose(npy(m.grad), t.grad.numpy(), rtol=RTOL, atol=ATOL)
    t_params = dict(theirs.named_parameters())
    names = [name for name, _ in mine.named_parameters()]
    assert names == list(t_params)
    for name, p in mine.named_parameters():
        assert p.grad is not None, name
        np.testing.assert_allclose(npy(p.grad), t_params[name].grad.numpy(), rtol=RTOL, atol=ATOL, err_msg=name)


def _inputs(rng, n, S, L, batch_first):
    src = rng.standard_normal((n, S, E) if batch_first else (S, n, E))
    tgt = rng.standard_normal((n, L, E) if batch_first else (L, n, E))
    return [src, tgt]


# ----------------------------------------------------------------------------- forward and gradients
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_forward_and_gradients_with_causal_and_padding_masks(torch, batch_first, norm_first):
    rng = np.random.default_rng(1)
    n, S, L = 2, 5, 4
    mine, theirs = _pair(torch, batch_first=batch_first, norm_first=norm_first)
    src_pad, tgt_pad = _padding(rng, n, S), _padding(rng, n, L)

    def call(model, lib, src, tgt):
        Tr = lib.nn.Transformer
        return model(src, tgt, tgt_mask=Tr.generate_square_subsequent_mask(L, dtype=lib.float64),
                     src_key_padding_mask=lib.tensor(src_pad), tgt_key_padding_mask=lib.tensor(tgt_pad),
                     memory_key_padding_mask=lib.tensor(src_pad))

    _compare(torch, mine, theirs, _inputs(rng, n, S, L, batch_first), call)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_forward_and_gradients_without_masks(torch, batch_first, norm_first):
    rng = np.random.default_rng(2)
    mine, theirs = _pair(torch, seed=1, batch_first=batch_first, norm_first=norm_first)
    _compare(torch, mine, theirs, _inputs(rng, 3, 3, 5, batch_first), lambda m, lib, s, t: m(s, t))


def test_all_masks_causal_hints_and_gelu(torch):
    """src_mask and memory_mask too (bool and float), explicit is_causal hints, gelu, no bias."""
    rng = np.random.default_rng(3)
    n, S, L = 2, 4, 3
    mine, theirs = _pair(torch, seed=2, batch_first=True, activation="gelu", bias=False)
    src_mask = rng.random((S, S)) < 0.3
    src_mask[:, 0] = False
    memory_mask = np.where(rng.random((L, S)) < 0.3, -np.inf, rng.standard_normal((L, S)))
    memory_mask[:, 0] = 0.0
    mem_pad = _padding(rng, n, S)

    def call(model, lib, src, tgt):
        causal = lib.nn.Transformer.generate_square_subsequent_mask(L, dtype=lib.float64)
        return model(src, tgt, src_mask=lib.tensor(src_mask), tgt_mask=causal, memory_mask=lib.tensor(memory_mask),
                     memory_key_padding_mask=lib.tensor(mem_pad), src_is_causal=False, tgt_is_causal=True)

    _compare(torch, mine, theirs, _inputs(rng, n, S, L, True), call)


def test_unbatched_inputs(torch):
    rng = np.random.default_rng(4)
    mine, theirs = _pair(torch, seed=3)
    pad = np.array([False, False, True, False])

    def call(model, lib, src, tgt):
        return model(src, tgt, tgt_mask=lib.nn.Transformer.generate_square_subsequent_mask(5, dtype=lib.float64),
                     src_key_padding_mask=lib.tensor(pad), memory_key_padding_mask=lib.tensor(pad))

    _compare(torch, mine, theirs, [rng.standard_normal((4, E)), rng.standard_normal((5, E))], call)


# ----------------------------------------------------------------------------- the mask
@pytest.mark.parametrize("sz", [0, 1, 4])
@pytest.mark.parametrize("dtype", [None, "float64", "bool"])
def test_generate_square_subsequent_mask_matches_torch(torch, sz, dtype):
    mine = nn.Transformer.generate_square_subsequent_mask(sz, dtype=None if dtype is None else getattr(minidl, dtype))
    theirs = torch.nn.Transformer.generate_square_subsequent_mask(sz, dtype=None if dtype is None
                                                                  else getattr(torch, dtype))
    assert tuple(mine.shape) == tuple(theirs.shape) == (sz, sz)
    assert str(mine.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    np.testing.assert_array_equal(npy(mine), theirs.numpy())
    assert not mine.requires_grad


def test_generate_square_subsequent_mask_values_and_device():
    m = nn.Transformer.generate_square_subsequent_mask(3, device="cpu")
    assert m.dtype is minidl.float32 and m.device.type == "cpu"
    np.testing.assert_array_equal(npy(m), [[0, -np.inf, -np.inf], [0, 0, -np.inf], [0, 0, 0]])
    assert isinstance(inspect.getattr_static(nn.Transformer, "generate_square_subsequent_mask"), staticmethod)


# ----------------------------------------------------------------------------- construction
def test_constructor_signature_and_forward_signature_match_torch(torch):
    def params(fn):
        return [(p.name, p.default) for p in inspect.signature(fn).parameters.values()]

    mine, theirs = params(nn.Transformer.__init__), params(torch.nn.Transformer.__init__)
    assert [p for p in mine if p[0] != "activation"] == [p for p in theirs if p[0] != "activation"]
    assert dict(mine)["activation"] is nn.functional.relu            # torch's default is its F.relu
    assert params(nn.Transformer.forward) == params(torch.nn.Transformer.forward)


def test_state_dict_names_shapes_and_attributes_match_torch(torch):
    kw = dict(d_model=E, nhead=H, num_encoder_layers=2, num_decoder_layers=3, dim_feedforward=FF)
    mine, theirs = nn.Transformer(**kw), torch.nn.Transformer(**kw)
    msd, tsd = mine.state_dict(), theirs.state_dict()
    assert list(msd) == list(tsd)
    assert all(tuple(msd[k].shape) == tuple(tsd[k].shape) for k in tsd)
    assert [n for n, _ in mine.named_modules()] == [n for n, _ in theirs.named_modules()]
    assert (mine.d_model, mine.nhead, mine.batch_first) == (E, H, False)
    assert len(mine.encoder.layers) == 2 and len(mine.decoder.layers) == 3
    assert mine.encoder.norm.eps == 1e-5 and mine.decoder.layers[0].norm_first is False
    assert mine.encoder.layers[0].dropout.p == 0.1
    nb = nn.Transformer(E, H, 1, 1, FF, bias=False, layer_norm_eps=1e-3, dtype=minidl.float64)
    tnb = torch.nn.Transformer(E, H, 1, 1, FF, bias=False, layer_norm_eps=1e-3, dtype=torch.float64)
    assert list(nb.state_dict()) == list(tnb.state_dict())
    assert nb.decoder.norm.eps == 1e-3 and all(p.dtype is minidl.float64 for p in nb.parameters())


def test_default_sizes():
    minidl.manual_seed(0)
    model = nn.Transformer()
    assert (model.d_model, model.nhead, len(model.encoder.layers), len(model.decoder.layers)) == (512, 8, 6, 6)
    assert tuple(model.encoder.layers[0].linear1.weight.shape) == (2048, 512)


def test_init_is_xavier_uniform_on_every_matrix_and_layers_differ():
    minidl.manual_seed(0)
    model = nn.Transformer(16, 2, 2, 2, 32)
    for name, p in model.named_parameters():
        a = npy(p)
        if p.dim() > 1:
            fan_out, fan_in = p.shape[0], int(np.prod(p.shape[1:]))
            bound = math.sqrt(6.0 / (fan_in + fan_out))
            assert np.abs(a).max() <= bound, name
            assert np.abs(a).max() > 0.8 * bound, name                  # spread over the whole range
            assert abs(a.std() - bound / math.sqrt(3)) < 0.2 * bound, name
        elif name.endswith("in_proj_bias") or name.endswith("out_proj.bias"):
            assert not a.any(), name
        elif ".norm" in name or name.startswith(("encoder.norm", "decoder.norm")):
            np.testing.assert_array_equal(a, 1.0 if name.endswith("weight") else 0.0, err_msg=name)
    # re-initialised after the layers were cloned: each layer starts from its own weights
    w0, w1 = (npy(layer.linear1.weight) for layer in model.encoder.layers)
    assert not np.array_equal(w0, w1)


def test_custom_encoder_and_decoder_are_used_and_reinitialised(torch):
    layer = nn.TransformerEncoderLayer(E, H, FF, dropout=0.0)
    custom = nn.TransformerEncoder(layer, 1)
    before = npy(custom.layers[0].linear1.weight).copy()
    model = nn.Transformer(E, H, num_decoder_layers=1, dim_feedforward=FF, dropout=0.0, custom_encoder=custom,
                           custom_decoder=nn.TransformerDecoder(nn.TransformerDecoderLayer(E, H, FF, dropout=0.0), 1))
    assert model.encoder is custom and model.encoder.norm is None
    assert not np.array_equal(npy(custom.layers[0].linear1.weight), before)
    tnn = torch.nn
    t_model = tnn.Transformer(E, H, num_decoder_layers=1, dim_feedforward=FF,
                              custom_encoder=tnn.TransformerEncoder(tnn.TransformerEncoderLayer(E, H, FF), 1,
                                                                    enable_nested_tensor=False),
                              custom_decoder=tnn.TransformerDecoder(tnn.TransformerDecoderLayer(E, H, FF), 1))
    assert list(model.state_dict()) == list(t_model.state_dict())
    out = model(minidl.randn(3, 2, E), minidl.randn(4, 2, E))
    assert tuple(out.shape) == (4, 2, E)


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("batch_first", [False, True])
def test_shape_errors_match_torch(torch, batch_first):
    mine = nn.Transformer(E, H, 1, 1, FF, batch_first=batch_first)
    theirs = torch.nn.Transformer(E, H, 1, 1, FF, batch_first=batch_first)

    def shaped(n, seq, feat):
        return (n, seq, feat) if batch_first else (seq, n, feat)

    cases = [(shaped(2, 3, E), shaped(3, 4, E), "the batch number of src and tgt must be equal"),
             (shaped(2, 3, 4), shaped(2, 4, E), "the feature number of src and tgt must be equal to d_model"),
             (shaped(2, 3, E), shaped(2, 4, 6), "the feature number of src and tgt must be equal to d_model"),
             ((3, 4), (4, E), "the feature number of src and tgt must be equal to d_model")]
    for src, tgt, msg in cases:
        with pytest.raises(RuntimeError, match=msg):
            theirs(torch.randn(*src), torch.randn(*tgt))
        with pytest.raises(RuntimeError, match=msg):
            mine(minidl.randn(*src), minidl.randn(*tgt))


@pytest.mark.parametrize("hint", ["src_is_causal", "tgt_is_causal", "memory_is_causal"])
def test_a_causal_hint_needs_its_mask(torch, hint):
    src, tgt = (3, 2, E), (4, 2, E)
    with pytest.raises(RuntimeError, match="Need attn_mask"):
        torch.nn.Transformer(E, H, 1, 1, FF)(torch.randn(*src), torch.randn(*tgt), **{hint: True})
    with pytest.raises(RuntimeError, match="is_causal=True is a hint"):
        nn.Transformer(E, H, 1, 1, FF)(minidl.randn(*src), minidl.randn(*tgt), **{hint: True})


def test_exported():
    assert "Transformer" in nn.__all__ and nn.Transformer is minidl.nn.transformer.Transformer
