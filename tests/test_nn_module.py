"""Module system semantics: registration, state_dict, hooks, modes, repr; containers; init; utils; training."""
from __future__ import annotations

import copy
import math
from collections import OrderedDict

import numpy as np
import pytest

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from minidl.nn import init


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(2, 3)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(3, 1)
        self.scale = nn.Parameter(minidl.ones(1))
        self.register_buffer("steps", minidl.zeros(1, dtype=minidl.int64))
        self.register_buffer("cache", minidl.zeros(2), persistent=False)
        self.plain = 5

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x))) * self.scale


# -- Parameter ----------------------------------------------------------------------------------
def test_parameter():
    data = minidl.arange(3.0)
    p = nn.Parameter(data)
    assert isinstance(p, minidl.Tensor) and isinstance(p, nn.Parameter)
    assert p.requires_grad and p.is_leaf and p.grad_fn is None
    assert repr(p) == "Parameter containing:\ntensor([0., 1., 2.], requires_grad=True)"
    with minidl.no_grad():
        p.add_(1.0)
    assert data.tolist() == [1.0, 2.0, 3.0]            # shares memory with data
    q = nn.Parameter(minidl.ones(2), requires_grad=False)
    assert not q.requires_grad
    y = (p * p).sum()
    assert type(p * 2) is minidl.Tensor
    y.backward()
    assert p.grad.tolist() == [2.0, 4.0, 6.0]
    assert nn.Parameter().shape == (0,)
    c = copy.deepcopy(p)
    assert isinstance(c, nn.Parameter) and c.tolist() == p.tolist() and c.untyped_storage_id() != p.untyped_storage_id()
    with pytest.raises(RuntimeError):
        nn.Parameter(minidl.tensor([1, 2]))           # integer tensors can't require grad


# -- registration and iteration -----------------------------------------------------------------
def test_registration_and_named_members():
    net = Net()
    assert [n for n, _ in net.named_parameters()] == ["scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert [n for n, _ in net.named_parameters(prefix="m", recurse=False)] == ["m.scale"]
    assert len(list(net.parameters())) == 5
    assert [n for n, _ in net.named_buffers()] == ["steps", "cache"]
    assert [n for n, _ in net.named_children()] == ["fc1", "act", "fc2"]
    assert [n for n, _ in net.named_modules()] == ["", "fc1", "act", "fc2"]
    assert list(net.children())[0] is net.fc1 and list(net.modules())[0] is net
    assert net.plain == 5 and "plain" in net.__dict__
    # reassigning moves between kinds
    net.fc2 = None
    assert net.fc2 is None and [n for n, _ in net.named_children()] == ["fc1", "act"]
    assert "fc2" in net._modules and "(fc2): None" in repr(net)
    with pytest.raises(TypeError):
        net.fc1 = minidl.ones(1)
    with pytest.raises(TypeError):
        net.scale = minidl.ones(1)
    net.scale = None
    assert "scale" not in dict(net.named_parameters())
    net.steps = minidl.ones(1, dtype=minidl.int64)
    assert net._buffers["steps"].tolist() == [1]
    del net.fc1
    assert not hasattr(net, "fc1")
    with pytest.raises(AttributeError):
        net.nothing
    with pytest.raises(KeyError):
        net.register_buffer("a.b", None)
    with pytest.raises(KeyError):
        net.register_parameter("plain", None)
    with pytest.raises(TypeError):
        net.add_module("x", 3)
    assert net.get_submodule("act") is net.act


def test_shared_parameters_are_listed_once():
    lin = nn.Linear(2, 2)
    seq = nn.Sequential(lin, nn.ReLU(), lin)
    assert len(list(seq.parameters())) == 2
    assert [n for n, _ in seq.named_modules()] == ["", "0", "1"]
    assert list(seq.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_cannot_assign_before_init():
    class Bad(nn.Module):
        def __init__(self):
            self.p = nn.Parameter(minidl.ones(1))
            super().__init__()

    with pytest.raises(AttributeError):
        Bad()


# -- state dict ---------------------------------------------------------------------------------
def test_state_dict_keys_and_roundtrip():
    net = Net()
    sd = net.state_dict()
    assert list(sd) == ["scale", "steps", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert all(not v.requires_grad for v in sd.values())
    assert net.state_dict(keep_vars=True)["scale"] is net.scale
    other = Net()
    result = other.load_state_dict(sd)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert repr(result) == "<All keys matched successfully>"
    for k in sd:
        np.testing.assert_array_equal(other.state_dict()[k].numpy(), sd[k].numpy())
    # values are copied, not shared
    with minidl.no_grad():
        net.fc1.weight.add_(1.0)
    assert not np.array_equal(other.fc1.weight.detach().numpy(), net.fc1.weight.detach().numpy())
    seq = nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.Linear(3, 3)))
    assert list(seq.state_dict()) == ["0.weight", "0.bias", "1.0.weight", "1.0.bias"]


def test_load_state_dict_strict_errors():
    net = Net()
    sd = net.state_dict()
    del sd["fc1.bias"]
    sd["fc3.weight"] = minidl.ones(1)
    with pytest.raises(RuntimeError) as err:
        Net().load_state_dict(sd)
    msg = str(err.value)
    assert msg.startswith("Error(s) in loading state_dict for Net:")
    assert 'Missing key(s) in state_dict: "fc1.bias".' in msg
    assert 'Unexpected key(s) in state_dict: "fc3.weight".' in msg
    result = Net().load_state_dict(sd, strict=False)
    assert result.missing_keys == ["fc1.bias"] and result.unexpected_keys == ["fc3.weight"]
    bad = net.state_dict()
    bad["fc1.weight"] = minidl.ones(5, 5)
    with pytest.raises(RuntimeError, match="size mismatch for fc1.weight"):
        Net().load_state_dict(bad)
    with pytest.raises(RuntimeError, match="size mismatch"):
        Net().load_state_dict(bad, strict=False)


def test_load_state_dict_assign():
    net = Net()
    w = minidl.ones(3, 2)
    sd = net.state_dict()
    sd["fc1.weight"] = w
    net.load_state_dict(sd, assign=True)
    assert isinstance(net.fc1.weight, nn.Parameter) and net.fc1.weight.requires_grad
    assert net.fc1.weight.untyped_storage_id() == w.untyped_storage_id()
    assert net.steps is sd["steps"]


def test_non_persistent_buffer_not_in_state_dict():
    net = Net()
    assert "cache" not in net.state_dict()
    assert "cache" in dict(net.named_buffers())


# -- modes and transforms -----------------------------------------------------------------------
def test_train_eval():
    calls = []

    class Custom(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout()

        def train(self, mode=True):   # an override with a different meaning must not be called by internals
            calls.append(mode)
            return super().train(mode)

    net = nn.Sequential(nn.Linear(1, 1), Custom())
    assert all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())
    assert calls == [False, True]
    net.state_dict(), list(net.parameters()), repr(net)
    assert calls == [False, True]
    with pytest.raises(ValueError):
        net.train("yes")


def test_to_float_double_apply_zero_grad_requires_grad():
    net = Net()
    params_before = list(net.parameters())
    assert net.double() is net
    assert all(p.dtype is minidl.float64 and isinstance(p, nn.Parameter) and p.requires_grad
               for p in net.parameters())
    assert net.steps.dtype is minidl.int64 and net.cache.dtype is minidl.float64
    assert all(a is b for a, b in zip(net.parameters(), params_before))   # same objects, converted data
    net.to(minidl.float32)
    assert all(p.dtype is minidl.float32 for p in net.parameters())
    net.to("cpu").float()
    with pytest.raises(TypeError):
        net.to(minidl.int64)
    out = net(minidl.randn(4, 2)).sum()
    out.backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all(p.grad is not None and (p.grad.numpy() == 0).all() for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    seen = []
    net.apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Linear", "ReLU", "Linear", "Net"]
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())
    net.apply(lambda m: init.zeros_(m.bias) if isinstance(m, nn.Linear) else None)
    assert net.fc1.bias.tolist() == [0.0] * 3


# -- hooks --------------------------------------------------------------------------------------
def test_forward_hooks():
    lin = nn.Linear(2, 2)
    log = []

    def pre(module, args):
        log.append(("pre", module is lin))
        return (args[0] * 0,)

    def post(module, args, output):
        log.append(("post", args[0].tolist()))
        return output + 1

    h1 = lin.register_forward_pre_hook(pre)
    h2 = lin.register_forward_hook(post)
    out = lin(minidl.ones(1, 2))
    assert log == [("pre", True), ("post", [[0.0, 0.0]])]
    np.testing.assert_allclose(out.detach().numpy(), lin.bias.detach().numpy()[None] + 1)
    h1.remove()
    h2.remove()
    h2.remove()
    log.clear()
    out2 = lin(minidl.ones(1, 2))
    assert log == []
    np.testing.assert_allclose(out2.detach().numpy(), F.linear(minidl.ones(1, 2), lin.weight, lin.bias).detach().numpy())
    # kwargs hooks and prepend
    order = []
    lin.register_forward_hook(lambda m, a, o: order.append(1))
    lin.register_forward_hook(lambda m, a, o: order.append(0), prepend=True)
    lin.register_forward_hook(lambda m, a, kw, o: order.append(kw), with_kwargs=True)
    lin(input=minidl.ones(2))
    assert order[:2] == [0, 1] and list(order[2]) == ["input"]
    with lin.register_forward_pre_hook(lambda m, a: order.append("ctx")):
        lin(minidl.ones(2))
    assert "ctx" in order
    order.clear()
    lin._forward_hooks.clear()
    lin(minidl.ones(2))
    assert order == []


# -- repr ---------------------------------------------------------------------------------------
def test_repr():
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Sequential(nn.LayerNorm(3), nn.Dropout(0.1)),
                        nn.GELU(approximate="tanh"), nn.Flatten(), nn.Identity())
    assert repr(seq) == (
        "Sequential(\n"
        "  (0): Linear(in_features=2, out_features=3, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): Sequential(\n"
        "    (0): LayerNorm((3,), eps=1e-05, elementwise_affine=True, bias=True)\n"
        "    (1): Dropout(p=0.1, inplace=False)\n"
        "  )\n"
        "  (3): GELU(approximate='tanh')\n"
        "  (4): Flatten(start_dim=1, end_dim=-1)\n"
        "  (5): Identity()\n"
        ")")
    assert repr(Net()) == ("Net(\n  (fc1): Linear(in_features=2, out_features=3, bias=True)\n  (act): ReLU()\n"
                           "  (fc2): Linear(in_features=3, out_features=1, bias=True)\n)")
    assert repr(nn.Linear(1, 1, bias=False)) == "Linear(in_features=1, out_features=1, bias=False)"
    assert repr(nn.LeakyReLU(0.2)) == "LeakyReLU(negative_slope=0.2)"
    assert repr(nn.Softmax(dim=1)) == "Softmax(dim=1)"

    class Multi(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Tanh()

        def extra_repr(self):
            return "k=1"

    assert repr(Multi()) == "Multi(\n  k=1\n  (inner): Tanh()\n)"


# -- containers ---------------------------------------------------------------------------------
def test_sequential():
    a, b, c = nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1)
    seq = nn.Sequential(a, b, c)
    assert len(seq) == 3 and seq[0] is a and seq[-1] is c and seq[-3] is a and list(seq) == [a, b, c]
    with pytest.raises(IndexError):
        seq[3]
    with pytest.raises(IndexError):
        seq[-4]
    sub = seq[1:]
    assert isinstance(sub, nn.Sequential) and list(sub) == [b, c] and list(sub._modules) == ["1", "2"]
    x = minidl.randn(4, 2)
    np.testing.assert_array_equal(seq(x).detach().numpy(), c(b(a(x))).detach().numpy())
    seq.append(nn.Sigmoid())
    assert len(seq) == 4 and list(seq.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    named = nn.Sequential(OrderedDict([("enc", a), ("act", b)]))
    assert list(named.state_dict()) == ["enc.weight", "enc.bias"] and named.enc is a
    seq[1] = nn.Tanh()
    assert isinstance(seq[1], nn.Tanh)
    del seq[0]
    assert len(seq) == 3 and list(seq._modules) == ["0", "1", "2"]
    assert len(nn.Sequential(a) + nn.Sequential(b, c)) == 3


def test_module_list_and_dict():
    layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    assert len(layers) == 3 and layers[-1] is layers[2]
    layers.append(nn.ReLU())
    layers.extend([nn.Tanh()])
    assert len(layers) == 5 and isinstance(layers[4], nn.Tanh)
    assert len(list(layers.parameters())) == 6 and "2.bias" in layers.state_dict()
    assert isinstance(layers[1:3], nn.ModuleList) and len(layers[1:3]) == 2
    layers.insert(0, nn.Identity())
    assert isinstance(layers[0], nn.Identity) and len(layers) == 6

    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(1, 1)])
            self.heads = nn.ModuleDict({"a": nn.Linear(1, 2), "b": nn.Linear(1, 3)})

    h = Holder()
    assert list(h.state_dict()) == ["blocks.0.weight", "blocks.0.bias", "heads.a.weight", "heads.a.bias",
                                    "heads.b.weight", "heads.b.bias"]
    assert "a" in h.heads and list(h.heads.keys()) == ["a", "b"] and len(h.heads) == 2
    h.heads["c"] = nn.Tanh()
    assert list(h.heads) == ["a", "b", "c"]
    assert isinstance(h.heads.pop("c"), nn.Tanh) and "c" not in h.heads


def test_flatten_unflatten_identity():
    x = minidl.randn(2, 3, 4, 5)
    assert nn.Flatten()(x).shape == (2, 60)
    assert nn.Flatten(0, 2)(x).shape == (24, 5)
    assert nn.Unflatten(1, (3, 1))(minidl.randn(2, 3)).shape == (2, 3, 1)
    assert nn.Identity(54, unused="x")(x) is x


# -- init ---------------------------------------------------------------------------------------
def test_init_functions():
    minidl.manual_seed(0)
    w = nn.Parameter(minidl.empty(200, 300, dtype=minidl.float64))
    assert init.constant_(w, 0.3) is w and (w.detach().numpy() == 0.3).all() and w.grad_fn is None
    init.zeros_(w)
    assert (w.detach().numpy() == 0).all()
    init.ones_(w)
    assert (w.detach().numpy() == 1).all()
    init.uniform_(w, -2.0, 3.0)
    a = w.detach().numpy()
    assert a.min() >= -2 and a.max() <= 3 and abs(a.mean() - 0.5) < 0.05
    init.normal_(w, 1.0, 2.0)
    a = w.detach().numpy()
    assert abs(a.mean() - 1) < 0.05 and abs(a.std() - 2) < 0.05
    init.xavier_uniform_(w, gain=2.0)
    bound = 2.0 * math.sqrt(6.0 / 500)
    a = w.detach().numpy()
    assert a.max() <= bound and a.max() > 0.95 * bound
    init.xavier_normal_(w)
    assert abs(w.detach().numpy().std() - math.sqrt(2.0 / 500)) < 0.003
    init.kaiming_uniform_(w, mode="fan_in", nonlinearity="relu")
    assert abs(w.detach().numpy().std() - math.sqrt(2.0 / 300)) < 0.003
    init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    assert abs(w.detach().numpy().std() - math.sqrt(2.0 / 200)) < 0.003
    init.kaiming_normal_(w, a=0.1)
    assert abs(w.detach().numpy().std() - math.sqrt(2.0 / 1.01 / 300)) < 0.003
    init.trunc_normal_(w, mean=0.5, std=1.0, a=-1.0, b=1.0)
    a = w.detach().numpy()
    assert a.min() >= -1 and a.max() <= 1 and a.min() < -0.99 and a.max() > 0.99
    # the mean of N(0.5, 1) truncated to [-1, 1]
    from math import erf, exp, pi, sqrt
    alpha, beta = -1.5, 0.5
    phi = lambda z: exp(-z * z / 2) / sqrt(2 * pi)
    Phi = lambda z: (1 + erf(z / sqrt(2))) / 2
    assert abs(a.mean() - (0.5 + (phi(alpha) - phi(beta)) / (Phi(beta) - Phi(alpha)))) < 0.01
    conv_like = minidl.empty(8, 4, 3, 3)
    assert init._calculate_fan_in_and_fan_out(conv_like) == (36, 72)
    with pytest.raises(ValueError):
        init.xavier_uniform_(minidl.empty(5))
    assert init.calculate_gain("tanh") == 5.0 / 3 and init.calculate_gain("relu") == math.sqrt(2)
    assert init.calculate_gain("leaky_relu", 0.2) == math.sqrt(2.0 / 1.04)
    with pytest.raises(ValueError):
        init.calculate_gain("swish")
    g = minidl.Generator().manual_seed(3)
    x1 = init.normal_(minidl.empty(5), generator=g).tolist()
    g.manual_seed(3)
    assert init.normal_(minidl.empty(5), generator=g).tolist() == x1


def test_trunc_normal_is_torchs_inverse_cdf():
    """trunc_normal_ maps its uniform draws through erfinv as torch does, within rounding, out to the tails of
    [-6, 6] (through minidl's erfinv op: a Newton iteration of some 60 tensor ops made a ConvNeXt-T take seconds
    to build)."""
    torch = pytest.importorskip("torch")
    mean, std, a, b = 0.25, 1.5, -6.0, 6.0
    lo, hi = ((1 + math.erf((x - mean) / std / math.sqrt(2))) / 2 for x in (a, b))
    g = minidl.Generator().manual_seed(7)
    u = minidl.empty(20000, dtype=minidl.float64).uniform_(2 * lo - 1, 2 * hi - 1, generator=g).numpy()
    w = init.trunc_normal_(minidl.empty(20000, dtype=minidl.float64), mean, std, a, b,
                           generator=minidl.Generator().manual_seed(7))
    want = (torch.from_numpy(u).clamp(-1 + 1e-15, 1 - 1e-15).erfinv() * (std * math.sqrt(2)) + mean).clamp(a, b)
    np.testing.assert_allclose(w.numpy(), want.numpy(), rtol=1e-13, atol=1e-13)


# -- utils --------------------------------------------------------------------------------------
def test_clip_grad_norm_and_value():
    a = nn.Parameter(minidl.zeros(2, dtype=minidl.float64))
    b = nn.Parameter(minidl.zeros(1, dtype=minidl.float64))
    c = nn.Parameter(minidl.zeros(1, dtype=minidl.float64))   # no grad: skipped
    a.grad = minidl.tensor([3.0, 0.0], dtype=minidl.float64)
    b.grad = minidl.tensor([4.0], dtype=minidl.float64)
    total = nn.utils.clip_grad_norm_([a, b, c], max_norm=1.0)
    assert total.item() == pytest.approx(5.0)
    np.testing.assert_allclose(a.grad.numpy(), [0.6, 0.0], rtol=1e-5)
    np.testing.assert_allclose(b.grad.numpy(), [0.8], rtol=1e-5)
    total = nn.utils.clip_grad_norm_([a, b], max_norm=10.0)   # no clipping below max
    np.testing.assert_allclose(a.grad.numpy(), [0.6, 0.0], rtol=1e-5)
    a.grad = minidl.tensor([3.0, -7.0], dtype=minidl.float64)
    assert nn.utils.clip_grad_norm_(a, 100.0, norm_type=1).item() == pytest.approx(10.0)
    assert nn.utils.clip_grad_norm_(iter([a]), 100.0, norm_type=math.inf).item() == pytest.approx(7.0)
    nn.utils.clip_grad_value_([a, b], 0.5)
    assert a.grad.tolist() == [0.5, -0.5] and b.grad.tolist() == [0.5]
    a.grad = minidl.tensor([math.inf, 0.0], dtype=minidl.float64)
    with pytest.raises(RuntimeError):
        nn.utils.clip_grad_norm_([a], 1.0, error_if_nonfinite=True)
    assert nn.utils.clip_grad_norm_([c], 1.0).item() == 0.0
    vec = nn.utils.parameters_to_vector([a, b])
    assert tuple(vec.shape) == (3,)
    nn.utils.vector_to_parameters(minidl.arange(3.0, dtype=minidl.float64), [a, b])
    assert a.tolist() == [0.0, 1.0] and b.tolist() == [2.0]


# -- training -----------------------------------------------------------------------------------
def test_mlp_trains_with_manual_sgd():
    minidl.manual_seed(0)
    n = 128
    x = minidl.randn(n, 2)
    labels = ((x[:, 0] * x[:, 1]) > 0).long()       # XOR-like quadrants
    model = nn.Sequential(nn.Linear(2, 32), nn.Tanh(), nn.Linear(32, 2))
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    for _ in range(150):
        loss = loss_fn(model(x), labels)
        model.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        with minidl.no_grad():
            for p in model.parameters():
                p -= 0.5 * p.grad
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    model.eval()
    with minidl.no_grad():
        acc = (model(x).argmax(1) == labels).float().mean().item()
    assert acc > 0.85
