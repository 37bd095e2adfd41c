"""minidl.nn against PyTorch: forward values and every gradient, weights copied by state_dict name (float64)."""
from __future__ import annotations

import numpy as np
import pytest

import minidl
import minidl.nn as nn
import minidl.nn.functional as F

torch = pytest.importorskip("torch")
tnn, TF = torch.nn, torch.nn.functional

RTOL = ATOL = 1e-6


def pair(a, requires_grad=True, dtype=np.float64):
    a = np.asarray(a, dtype=dtype)
    grad = requires_grad and a.dtype.kind == "f"
    return (minidl.tensor(a, requires_grad=grad), torch.tensor(a, requires_grad=grad))


def close(m, t):
    np.testing.assert_allclose(np.asarray(m.detach().numpy(), dtype=np.float64),
                               t.detach().numpy().astype(np.float64), rtol=RTOL, atol=ATOL)


def copy_weights(mine, theirs):
    tsd = theirs.state_dict()
    msd = mine.state_dict()
    assert list(msd) == list(tsd)
    mine.load_state_dict({k: minidl.tensor(v.detach().numpy()) for k, v in tsd.items()})


def build(ns):
    return ns.Sequential(
        ns.Linear(5, 8), ns.GELU(), ns.LayerNorm(8), ns.Linear(8, 8), ns.SiLU(), ns.Dropout(0.3),
        ns.Linear(8, 6, bias=False), ns.Tanh(), ns.Sequential(ns.Linear(6, 6), ns.LeakyReLU(0.1)), ns.ELU(0.7),
        ns.Softplus(2.0, 3.0), ns.Linear(6, 4), ns.Sigmoid(), ns.Linear(4, 3), ns.ReLU(), ns.Identity(),
        ns.GELU(approximate="tanh"), ns.Linear(3, 3))


def test_model_forward_and_grads_match_torch():
    torch.manual_seed(0)
    theirs = build(tnn).double().eval()
    mine = build(nn).double().eval()
    copy_weights(mine, theirs)
    x_m, x_t = pair(np.random.default_rng(0).standard_normal((7, 5)))
    target = np.array([0, 2, 1, 1, 0, 2, 2])
    out_m, out_t = mine(x_m), theirs(x_t)
    close(out_m, out_t)
    F.cross_entropy(out_m, minidl.tensor(target), label_smoothing=0.1).backward()
    TF.cross_entropy(out_t, torch.tensor(target), label_smoothing=0.1).backward()
    close(x_m.grad, x_t.grad)
    tparams = dict(theirs.named_parameters())
    for name, p in mine.named_parameters():
        close(p.grad, tparams[name].grad)
    assert repr(mine).replace("minidl", "torch") == repr(theirs)


def test_embedding_layernorm_model_matches_torch():
    class Model:
        def __init__(self, ns):
            class M(ns.Module):
                def __init__(self):
                    super().__init__()
                    self.emb = ns.Embedding(10, 6, padding_idx=0)
                    self.norm = ns.LayerNorm((3, 6))
                    self.heads = ns.ModuleList([ns.Linear(6, 2), ns.Linear(6, 2)])
                    self.out = ns.ModuleDict({"proj": ns.Linear(2, 5)})

                def forward(self, idx):
                    h = self.norm(self.emb(idx))
                    h = self.heads[0](h) + self.heads[1](h)
                    return self.out["proj"](h)
            self.m = M()

    theirs, mine = Model(tnn).m.double(), Model(nn).m.double()
    copy_weights(mine, theirs)
    idx = np.array([[0, 3, 9], [4, 0, 0]])
    out_m, out_t = mine(minidl.tensor(idx)), theirs(torch.tensor(idx))
    close(out_m, out_t)
    target = np.array([[1, 4, -100], [0, 2, 3]])
    F.cross_entropy(out_m.transpose(1, 2), minidl.tensor(target)).backward()
    TF.cross_entropy(out_t.transpose(1, 2), torch.tensor(target)).backward()
    tparams = dict(theirs.named_parameters())
    for name, p in mine.named_parameters():
        close(p.grad, tparams[name].grad)


ACTS = [
    ("relu", {}), ("gelu", {}), ("gelu", {"approximate": "tanh"}), ("silu", {}), ("leaky_relu", {"negative_slope": 0.2}),
    ("elu", {"alpha": 0.5}), ("softplus", {"beta": 2.0, "threshold": 1.0}), ("sigmoid", {}), ("tanh", {}),
    ("logsigmoid", {}), ("softmax", {"dim": 1}), ("log_softmax", {"dim": 0}),
]


@pytest.mark.parametrize("name, kw", ACTS)
def test_functional_activations(name, kw):
    a = np.random.default_rng(1).standard_normal((4, 5)) * 3
    a[0, :3] = [1e4, -1e4, 0.25]
    x_m, x_t = pair(a)
    y_m, y_t = getattr(F, name)(x_m, **kw), getattr(TF, name)(x_t, **kw)
    close(y_m, y_t)
    u = np.random.default_rng(2).standard_normal(a.shape)
    (y_m * minidl.tensor(u)).sum().backward()
    (y_t * torch.tensor(u)).sum().backward()
    close(x_m.grad, x_t.grad)


def _loss_cases():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 3, 2))
    idx = np.array([[0, 2], [1, -100], [2, 2], [0, 1]])
    w = np.array([0.3, 1.0, 2.0])
    probs = np.exp(x) / np.exp(x).sum(1, keepdims=True)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((3, 4)) * 2
    p = rng.uniform(0.05, 0.95, (3, 4))
    t01 = rng.random((3, 4))
    pw = np.array([0.5, 1.0, 2.0, 3.0])
    logq = np.log(np.exp(a) / np.exp(a).sum(1, keepdims=True))
    for red in ("mean", "sum", "none"):
        yield "cross_entropy", [x], [idx], {"reduction": red}
        yield "cross_entropy", [x], [idx], {"reduction": red, "weight": w, "label_smoothing": 0.15}
        yield "cross_entropy", [x], [np.where(idx < 0, 1, idx)], {"reduction": red, "ignore_index": 2}
        yield "cross_entropy", [x[0, :, 0]], [np.array(1)], {"reduction": red, "label_smoothing": 0.3}
        yield "cross_entropy", [x, probs], [], {"reduction": red, "weight": w, "label_smoothing": 0.2}
        yield "nll_loss", [x], [idx], {"reduction": red, "weight": w}
        yield "mse_loss", [a, b], [], {"reduction": red}
        yield "l1_loss", [a, b], [], {"reduction": red}
        yield "smooth_l1_loss", [a, b], [], {"reduction": red, "beta": 0.7}
        yield "huber_loss", [a, b], [], {"reduction": red, "delta": 0.7}
        yield "binary_cross_entropy", [p, t01], [], {"reduction": red, "weight": t01}
        yield "binary_cross_entropy_with_logits", [a * 3, t01], [], {"reduction": red, "pos_weight": pw,
                                                                      "weight": t01}
        yield "kl_div", [logq, t01 / t01.sum(1, keepdims=True)], [], {"reduction": red}
        yield "kl_div", [logq, logq[::-1].copy()], [], {"reduction": red, "log_target": True}
    yield "kl_div", [logq, t01], [], {"reduction": "batchmean"}


CASES = list(_loss_cases())


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.filterwarnings("ignore:reduction")
def test_losses_match_torch(case):
    name, diff, const, kw = CASES[case]
    pairs = [pair(a) for a in diff]
    consts = [pair(c, requires_grad=False, dtype=c.dtype) for c in const]
    kw_m = {k: minidl.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    kw_t = {k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    out_m = getattr(F, name)(*[p[0] for p in pairs], *[c[0] for c in consts], **kw_m)
    out_t = getattr(TF, name)(*[p[1] for p in pairs], *[c[1] for c in consts], **kw_t)
    close(out_m, out_t)
    u = np.random.default_rng(4).standard_normal(tuple(out_t.shape))
    (out_m * minidl.tensor(u)).sum().backward()
    (out_t * torch.tensor(u)).sum().backward()
    for m, t in pairs:
        close(m.grad, t.grad)


@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
def test_class_targets_must_be_int64_or_uint8_as_in_torch(loss):
    x = np.random.default_rng(3).standard_normal((3, 5))
    classes = np.array([1, 4, 0])
    for dtype in ("int64", "uint8"):
        close(getattr(F, loss)(minidl.tensor(x), minidl.tensor(classes).to(getattr(minidl, dtype))),
              getattr(TF, loss)(torch.tensor(x), torch.tensor(classes).to(getattr(torch, dtype))))
    for dtype in ("int32", "int16", "bool") + (("float32",) if loss == "nll_loss" else ()):
        for lib, functional in ((minidl, F), (torch, TF)):
            with pytest.raises(RuntimeError, match="expected target dtype to be .*Long or Byte"):
                getattr(functional, loss)(lib.tensor(x), lib.tensor(classes).to(getattr(lib, dtype)))
    images = np.random.default_rng(4).standard_normal((2, 5, 3))   # (N, C, d): uint8 is refused there
    for lib, functional in ((minidl, F), (torch, TF)):
        with pytest.raises(RuntimeError, match="Long"):
            getattr(functional, loss)(lib.tensor(images), lib.zeros((2, 3), dtype=lib.uint8))


def test_loss_modules_match_torch():
    rng = np.random.default_rng(5)
    x, idx = rng.standard_normal((6, 4)), rng.integers(0, 4, 6)
    w = rng.random(4)
    for name, kw in [("CrossEntropyLoss", {"weight": w, "label_smoothing": 0.1}), ("NLLLoss", {"ignore_index": 1}),
                     ("CrossEntropyLoss", {"reduction": "sum"})]:
        m = getattr(nn, name)(**{k: minidl.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()})
        t = getattr(tnn, name)(**{k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()})
        close(m(minidl.tensor(x), minidl.tensor(idx)), t(torch.tensor(x), torch.tensor(idx)))
        assert list(m.state_dict()) == list(t.state_dict())


def test_state_dict_keys_match_torch_and_load_from_torch_weights():
    torch.manual_seed(0)
    theirs = tnn.Sequential(tnn.Linear(3, 4), tnn.LayerNorm(4), tnn.Embedding(3, 2))
    mine = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Embedding(3, 2))
    assert list(mine.state_dict()) == list(theirs.state_dict())
    sd = {k: minidl.tensor(v.numpy()) for k, v in theirs.state_dict().items()}
    del sd["1.bias"]
    sd["9.weight"] = minidl.ones(1)
    tsd = dict(theirs.state_dict())
    del tsd["1.bias"]
    tsd["9.weight"] = torch.ones(1)
    r_m, r_t = mine.load_state_dict(sd, strict=False), theirs.load_state_dict(tsd, strict=False)
    assert r_m.missing_keys == r_t.missing_keys and r_m.unexpected_keys == r_t.unexpected_keys
    with pytest.raises(RuntimeError) as em:
        mine.load_state_dict(sd)
    with pytest.raises(RuntimeError) as et:
        theirs.load_state_dict(tsd)
    assert str(em.value) == str(et.value)


def test_init_bounds_match_torch():
    for shape in [(7, 5), (3, 4, 2, 2)]:
        t = torch.empty(shape)
        m = minidl.empty(*shape)
        from torch.nn import init as tinit

        from minidl.nn import init as minit
        assert minit._calculate_fan_in_and_fan_out(m) == tinit._calculate_fan_in_and_fan_out(t)
        for nl, a in [("relu", 0), ("leaky_relu", 0.2), ("tanh", None), ("linear", None)]:
            assert minit.calculate_gain(nl, a) == tinit.calculate_gain(nl, a)


SCRIPT = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.GELU(), nn.LayerNorm(16), nn.Dropout(0.0))
        self.head = nn.Linear(16, 3)
        self.register_buffer("scale", torch.ones(3))

    def forward(self, x):
        return self.head(F.silu(self.net(x))) * self.scale


model = MLP().double()
model.load_state_dict({k: torch.tensor(v) for k, v in WEIGHTS.items()}, strict=False)
x = torch.tensor(X)
y = torch.tensor(Y)
losses = []
for step in range(8):
    model.train()
    logits = model(x)
    loss = F.cross_entropy(logits, y, label_smoothing=0.05) + 0.01 * sum((p ** 2).sum() for p in model.parameters())
    model.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
    losses.append(loss.item())
model.eval()
with torch.no_grad():
    accuracy = (model(x).argmax(dim=1) == y).float().mean().item()
'''


def test_pytorch_script_runs_with_minidl_imports():
    torch.manual_seed(0)
    rng = np.random.default_rng(7)
    env = {"X": rng.standard_normal((32, 4)), "Y": rng.integers(0, 3, 32), "WEIGHTS": {}}
    ref = dict(env)
    exec(compile(SCRIPT, "<torch script>", "exec"), ref)
    env["WEIGHTS"] = {k: v.detach().numpy().copy() for k, v in ref["model"].state_dict().items()}
    # rerun torch from those weights too, so both start from the same point
    ref = dict(env)
    exec(compile(SCRIPT, "<torch script>", "exec"), ref)
    mine = dict(env)
    exec(compile(SCRIPT.replace("torch", "minidl"), "<minidl script>", "exec"), mine)
    np.testing.assert_allclose(mine["losses"], ref["losses"], rtol=1e-6)
    assert mine["losses"][-1] < mine["losses"][0]
    assert mine["accuracy"] == ref["accuracy"]


@pytest.mark.parametrize("pad", [(-1, 2, 0, 0), (2, -1, -1, 1), (3, -2, 1, -2)])
def test_circular_pad_with_negative_pads_matches_torch(pad):
    """torch crops by the negative pads first and wraps the positive ones around what is left."""
    m, t = pair(np.random.default_rng(3).standard_normal((1, 2, 4, 5)))
    got, ref = F.pad(m, pad, mode="circular"), TF.pad(t, pad, mode="circular")
    close(got, ref)
    weights = np.random.default_rng(4).standard_normal(tuple(ref.shape))
    (got * minidl.tensor(weights)).sum().backward()
    (ref * torch.tensor(weights)).sum().backward()
    close(m.grad, t.grad)


def _discriminator(ns):
    """DCGAN's discriminator, small: Conv -> BatchNorm -> LeakyReLU(inplace=True)."""
    return ns.Sequential(
        ns.Conv2d(3, 8, 4, 2, 1, bias=False), ns.LeakyReLU(0.2, inplace=True),
        ns.Conv2d(8, 16, 4, 2, 1, bias=False), ns.BatchNorm2d(16), ns.LeakyReLU(0.2, inplace=True),
        ns.Conv2d(16, 1, 4, 1, 0, bias=False), ns.Sigmoid())


def test_dcgan_discriminator_steps_with_inplace_leaky_relu_match_torch():
    """errD_real.backward() used to fail: the in-place activation overwrote a tensor saved by a product
    whose gradient never reads it."""
    torch.manual_seed(0)
    theirs, mine = _discriminator(tnn), _discriminator(nn)
    copy_weights(mine, theirs)
    opt_t = torch.optim.Adam(theirs.parameters(), lr=2e-3, betas=(0.5, 0.999))
    opt_m = minidl.optim.Adam(mine.parameters(), lr=2e-3, betas=(0.5, 0.999))
    rng = np.random.default_rng(5)
    for _ in range(2):
        real, fake = rng.standard_normal((4, 3, 16, 16)), rng.standard_normal((4, 3, 16, 16))
        losses = []
        for model, lib, loss_fn, opt in ((theirs, torch, tnn.BCELoss(), opt_t), (mine, minidl, nn.BCELoss(), opt_m)):
            opt.zero_grad()
            err_real = loss_fn(model(lib.tensor(real, dtype=lib.float32)).view(-1), lib.ones(4))
            err_real.backward()
            err_fake = loss_fn(model(lib.tensor(fake, dtype=lib.float32)).view(-1), lib.zeros(4))
            err_fake.backward()
            grads = [p.grad.numpy().copy() for p in model.parameters()]
            opt.step()
            losses.append(([err_real.item(), err_fake.item()], grads))
        (ref_loss, ref_grads), (got_loss, got_grads) = losses
        np.testing.assert_allclose(got_loss, ref_loss, rtol=1e-5, atol=1e-6)
        for got, ref in zip(got_grads, ref_grads):
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_module_to_channels_last_restrides_4d_parameters_only_like_torch():
    theirs = tnn.Sequential(tnn.Conv2d(3, 4, 3), tnn.BatchNorm2d(4)).to(memory_format=torch.channels_last)
    mine = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).to(memory_format=minidl.channels_last)
    assert [tuple(p.stride()) for p in mine.parameters()] == [tuple(p.stride()) for p in theirs.parameters()]


@pytest.mark.parametrize("act", [("ReLU", {}), ("LeakyReLU", {"negative_slope": 0.2}), ("ELU", {}), ("SiLU", {})])
def test_inplace_activation_after_batch_norm_matches_torch(act):
    name, kw = act
    torch.manual_seed(1)
    theirs = tnn.Sequential(tnn.Conv2d(3, 4, 3), tnn.BatchNorm2d(4), getattr(tnn, name)(inplace=True, **kw))
    mine = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), getattr(nn, name)(inplace=True, **kw))
    copy_weights(mine, theirs)
    x = np.random.default_rng(6).standard_normal((2, 3, 6, 6))
    weights = np.random.default_rng(7).standard_normal((2, 4, 4, 4))
    (theirs(torch.tensor(x, dtype=torch.float32)) * torch.tensor(weights)).sum().backward()
    (mine(minidl.tensor(x, dtype=minidl.float32)) * minidl.tensor(weights)).sum().backward()
    for p, q in zip(mine.parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-5)
