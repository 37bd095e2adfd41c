"""Optimizers vs an independent numpy re-implementation of PyTorch's update formulas, on a small
least-squares problem in float64; the Optimizer base (groups, state, state_dict, zero_grad, closure)."""
import itertools
import math

import numpy as np
import pytest

import minidl
from minidl import optim

RNG = np.random.default_rng(1234)
A = RNG.standard_normal((8, 3))
B = RNG.standard_normal(8)
W0 = RNG.standard_normal(3)
C0 = np.array(0.3)
STEPS = 20


def np_loss_grads(w, c):
    r = A @ w + c - B
    return (r ** 2).sum(), 2 * A.T @ r, 2 * r.sum()


def make_params():
    w = minidl.tensor(W0, dtype=minidl.float64, requires_grad=True)
    c = minidl.tensor(C0, dtype=minidl.float64, requires_grad=True)
    return w, c


def loss_fn(w, c):
    a, b = minidl.tensor(A), minidl.tensor(B)
    return ((a @ w + c - b) ** 2).sum()


def run_minidl(cls, kwargs, steps=STEPS):
    w, c = make_params()
    opt = cls([w, c], **kwargs)
    traj = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(w, c)
        loss.backward()
        opt.step()
        traj.append(np.concatenate([w.detach().numpy(), [c.item()]]))
    return np.array(traj)


# ---------------------------------------------------------------------- numpy references
def ref_sgd(g, p, st, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, maximize=False):
    g = -g if maximize else g
    if weight_decay:
        g = g + weight_decay * p
    if momentum:
        if "buf" not in st:
            st["buf"] = g.copy()
        else:
            st["buf"] = momentum * st["buf"] + (1 - dampening) * g
        g = g + momentum * st["buf"] if nesterov else st["buf"]
    return p - lr * g


def ref_adam(g, p, st, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, maximize=False,
             decoupled=False):
    b1, b2 = betas
    g = -g if maximize else g
    st.setdefault("m", np.zeros_like(p)); st.setdefault("v", np.zeros_like(p)); st.setdefault("vmax", np.zeros_like(p))
    st["t"] = st.get("t", 0) + 1
    t = st["t"]
    if weight_decay:
        if decoupled:
            p = p * (1 - lr * weight_decay)
        else:
            g = g + weight_decay * p
    st["m"] = b1 * st["m"] + (1 - b1) * g
    st["v"] = b2 * st["v"] + (1 - b2) * g * g
    v = st["v"]
    if amsgrad:
        st["vmax"] = np.maximum(st["vmax"], st["v"])
        v = st["vmax"]
    denom = np.sqrt(v) / math.sqrt(1 - b2 ** t) + eps
    return p - lr / (1 - b1 ** t) * st["m"] / denom


def ref_adamw(g, p, st, weight_decay=1e-2, **kw):
    return ref_adam(g, p, st, weight_decay=weight_decay, decoupled=True, **kw)


def ref_rmsprop(g, p, st, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
                maximize=False):
    g = -g if maximize else g
    if weight_decay:
        g = g + weight_decay * p
    st["sq"] = alpha * st.get("sq", 0.0) + (1 - alpha) * g * g
    if centered:
        st["ga"] = alpha * st.get("ga", 0.0) + (1 - alpha) * g
        avg = np.sqrt(st["sq"] - st["ga"] ** 2) + eps
    else:
        avg = np.sqrt(st["sq"]) + eps
    if momentum > 0:
        st["buf"] = momentum * st.get("buf", 0.0) + g / avg
        return p - lr * st["buf"]
    return p - lr * g / avg


def ref_adagrad(g, p, st, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
                maximize=False):
    g = -g if maximize else g
    st["t"] = st.get("t", 0) + 1
    if weight_decay:
        g = g + weight_decay * p
    clr = lr / (1 + (st["t"] - 1) * lr_decay)
    st["sum"] = st.get("sum", initial_accumulator_value) + g * g
    return p - clr * g / (np.sqrt(st["sum"]) + eps)


def run_ref(ref, kwargs, steps=STEPS):
    w, c = W0.copy(), C0.copy()
    sw, sc = {}, {}
    traj = []
    for _ in range(steps):
        _, gw, gc = np_loss_grads(w, c)
        w, c = ref(gw, w, sw, **kwargs), ref(gc, c, sc, **kwargs)
        traj.append(np.concatenate([w, [c]]))
    return np.array(traj)


def grid(**axes):
    keys = list(axes)
    return [dict(zip(keys, vals)) for vals in itertools.product(*axes.values())]


CASES = (
    [(optim.SGD, ref_sgd, dict(lr=0.01, **kw)) for kw in
     grid(momentum=[0, 0.9], weight_decay=[0, 0.1], maximize=[False, True])]
    + [(optim.SGD, ref_sgd, dict(lr=0.01, momentum=0.9, nesterov=True, weight_decay=0.1)),
       (optim.SGD, ref_sgd, dict(lr=0.01, momentum=0.5, dampening=0.3)),
       (optim.SGD, ref_sgd, {})]
    + [(optim.Adam, ref_adam, dict(lr=0.05, **kw)) for kw in
       grid(weight_decay=[0, 0.1], amsgrad=[False, True], maximize=[False, True])]
    + [(optim.Adam, ref_adam, dict(betas=(0.8, 0.9), eps=1e-6))]
    + [(optim.AdamW, ref_adamw, dict(lr=0.05, **kw)) for kw in grid(weight_decay=[1e-2, 0.3], amsgrad=[False, True])]
    + [(optim.RMSprop, ref_rmsprop, dict(**kw)) for kw in
       grid(weight_decay=[0, 0.1], momentum=[0, 0.9], centered=[False, True])]
    + [(optim.RMSprop, ref_rmsprop, dict(alpha=0.9, maximize=True))]
    + [(optim.Adagrad, ref_adagrad, dict(lr=0.1, **kw)) for kw in
       grid(lr_decay=[0, 0.05], weight_decay=[0, 0.1], initial_accumulator_value=[0, 0.5])]
    + [(optim.Adagrad, ref_adagrad, dict(maximize=True, eps=1e-6))]
)


@pytest.mark.parametrize("cls,ref,kwargs", CASES, ids=[f"{c.__name__}-{k}" for c, _, k in CASES])
def test_trajectory_matches_numpy_reference(cls, ref, kwargs):
    got = run_minidl(cls, kwargs)
    want = run_ref(ref, kwargs)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("cls,ref,kwargs", [
    (optim.SGD, ref_sgd, dict(lr=0.01, momentum=0.9, nesterov=True, weight_decay=0.1)),
    (optim.Adam, ref_adam, dict(lr=0.05, weight_decay=0.1, amsgrad=True)),
    (optim.AdamW, ref_adamw, dict(lr=0.05, weight_decay=0.3))], ids=["SGD", "Adam", "AdamW"])
def test_fused_update_of_a_non_contiguous_parameter(cls, ref, kwargs):
    """The fused kernels want packed buffers: a strided parameter goes through a packed copy."""
    wide = minidl.zeros(3, 2, dtype=minidl.float64)
    wide[:, 0] = minidl.tensor(W0)
    w = wide[:, 0].detach().requires_grad_()     # stride 2
    c = minidl.tensor(C0, dtype=minidl.float64, requires_grad=True)
    opt = cls([w, c], **kwargs)
    for _ in range(STEPS):
        opt.zero_grad()
        loss_fn(w, c).backward()
        opt.step()
    assert w.stride() == (2,)
    np.testing.assert_allclose(w.detach().numpy(), run_ref(ref, kwargs)[-1, :3], rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(wide[:, 1].numpy(), 0.0)


@pytest.mark.parametrize("foreach,kernel", [(False, "sgd_step"), (True, "sgd_steps")])
def test_fused_step_rejects_mismatched_state(foreach, kernel):
    w = minidl.zeros(3, requires_grad=True)
    opt = optim.SGD([w], lr=0.1, momentum=0.9, foreach=foreach)
    w.grad = minidl.ones(3)
    opt.step()
    opt.state[w]["momentum_buffer"] = minidl.zeros(4)
    with pytest.raises(RuntimeError, match=kernel + r": parameter \[3\].*\[4\]"):
        opt.step()


@pytest.mark.parametrize("cls,kwargs", [(optim.SGD, dict(lr=0.01, momentum=0.9)), (optim.Adam, dict(lr=0.1)),
                                        (optim.AdamW, dict(lr=0.1)), (optim.RMSprop, dict(lr=0.01)),
                                        (optim.Adagrad, dict(lr=0.5)), (optim.Adadelta, dict(lr=20.0)),
                                        (optim.Adamax, dict(lr=0.1)), (optim.NAdam, dict(lr=0.1)),
                                        (optim.RAdam, dict(lr=0.1))])
def test_convergence_loss_falls(cls, kwargs):
    w, c = make_params()
    opt = cls([w, c], **kwargs)
    losses = []
    for _ in range(60):
        def closure():
            opt.zero_grad()
            loss = loss_fn(w, c)
            loss.backward()
            return loss
        losses.append(opt.step(closure).item())
    best = np.linalg.lstsq(np.c_[A, np.ones(8)], B, rcond=None)[1][0]
    assert losses[-1] < 0.5 * losses[0]
    assert losses[-1] < best + 0.5 * (losses[0] - best)


STATEFUL = [(optim.SGD, dict(lr=0.01, momentum=0.9, nesterov=True)), (optim.Adam, dict(lr=0.05, amsgrad=True)),
            (optim.AdamW, dict(lr=0.05)), (optim.RMSprop, dict(momentum=0.5, centered=True)),
            (optim.Adagrad, dict(lr=0.1, lr_decay=0.01)), (optim.Adadelta, dict(lr=0.5, weight_decay=0.1)),
            (optim.Adamax, dict(lr=0.05)), (optim.NAdam, dict(lr=0.05, decoupled_weight_decay=True, weight_decay=0.1)),
            (optim.RAdam, dict(lr=0.05))]


@pytest.mark.parametrize("cls,kwargs", STATEFUL, ids=[c.__name__ for c, _ in STATEFUL])
def test_state_dict_round_trip(cls, kwargs):
    full = run_minidl(cls, kwargs, steps=12)
    w, c = make_params()
    opt = cls([w, c], **kwargs)
    traj = []

    def one(o):
        o.zero_grad()
        loss_fn(w, c).backward()
        o.step()
        traj.append(np.concatenate([w.detach().numpy(), [c.item()]]))

    for _ in range(6):
        one(opt)
    sd = opt.state_dict()
    assert sorted(sd) == ["param_groups", "state"]
    assert sd["param_groups"][0]["params"] == [0, 1]
    assert set(sd["state"]) <= {0, 1}
    # a fresh optimizer (other hyperparameters) continues exactly where the first one stopped
    opt2 = cls([w, c], lr=123.0)
    opt2.load_state_dict(sd)
    assert opt2.param_groups[0]["lr"] == kwargs["lr"] if "lr" in kwargs else True
    for _ in range(6):
        one(opt2)
    np.testing.assert_allclose(np.array(traj), full, rtol=1e-12, atol=1e-14)
    # loading copied the state: stepping opt2 did not touch opt's tensors
    for key, val in opt.state[w].items():
        if isinstance(val, minidl.Tensor) and key != "step":
            assert not np.array_equal(val.numpy(), opt2.state[w][key].numpy())


def test_state_dict_indices_span_groups_and_state_keys():
    w, c = make_params()
    d = minidl.zeros(2, dtype=minidl.float64, requires_grad=True)
    opt = optim.Adam([{"params": [w, c]}, {"params": d, "lr": 0.5}], lr=0.1, amsgrad=True)
    loss = loss_fn(w, c) + (d * d).sum()
    loss.backward()
    opt.step()
    sd = opt.state_dict()
    assert [g["params"] for g in sd["param_groups"]] == [[0, 1], [2]]
    assert sd["param_groups"][1]["lr"] == 0.5 and sd["param_groups"][0]["lr"] == 0.1
    assert set(sd["state"][0]) == {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}
    assert sd["state"][2]["step"].item() == 1.0
    with pytest.raises(ValueError):
        optim.Adam([w], lr=0.1).load_state_dict(sd)


def test_param_groups_defaults_and_errors():
    w, c = make_params()
    opt = optim.SGD([{"params": [w]}, {"params": [c], "lr": 0.5, "momentum": 0.9}], lr=0.1)
    assert opt.param_groups[0]["lr"] == 0.1 and opt.param_groups[0]["momentum"] == 0
    assert opt.param_groups[1]["lr"] == 0.5 and opt.param_groups[1]["momentum"] == 0.9
    assert opt.defaults["lr"] == 0.1
    assert optim.SGD([w]).defaults["lr"] == 1e-3
    with pytest.raises(ValueError):
        optim.SGD([w, w])
    with pytest.raises(ValueError):
        opt.add_param_group({"params": [w]})
    d = minidl.zeros(2, requires_grad=True)
    opt.add_param_group({"params": d, "lr": 0.2})
    assert len(opt.param_groups[2]["params"]) == 1 and opt.param_groups[2]["params"][0] is d
    assert opt.param_groups[2]["dampening"] == 0
    with pytest.raises(ValueError):
        optim.SGD([])
    with pytest.raises(TypeError):
        optim.SGD(w)
    with pytest.raises(ValueError):
        optim.SGD([w], lr=0.1, nesterov=True)
    with pytest.raises(ValueError):
        optim.Adam([w], betas=(1.0, 0.9))
    r = repr(opt)
    assert r.startswith("SGD (") and "Parameter Group 1" in r and "momentum: 0.9" in r


def test_zero_grad_and_closure_and_no_grad_param():
    w, c = make_params()
    opt = optim.SGD([w, c], lr=0.1)
    loss_fn(w, c).backward()
    opt.zero_grad(set_to_none=False)
    assert w.grad is not None and np.all(w.grad.numpy() == 0)
    opt.zero_grad()
    assert w.grad is None and c.grad is None
    # a parameter without grad is skipped
    w.grad = None
    before = w.detach().numpy().copy()
    opt.step()
    np.testing.assert_array_equal(w.detach().numpy(), before)
    assert opt.step() is None
    assert opt.step(lambda: 42) == 42


def test_in_place_update_keeps_identity_and_leaf():
    w, c = make_params()
    opt = optim.Adam([w, c], lr=0.1)
    loss_fn(w, c).backward()
    opt.step()
    assert w.is_leaf and w.requires_grad and w.grad_fn is None
    assert opt.param_groups[0]["params"][0] is w


def test_mlp_training_with_scheduler_loss_falls():
    minidl.manual_seed(0)
    x = minidl.randn(64, 2)
    y = (x[:, 0] * x[:, 1]).unsqueeze(1)
    w1 = (minidl.randn(2, 16) * 0.5).requires_grad_()
    b1 = minidl.zeros(16, requires_grad=True)
    w2 = (minidl.randn(16, 1) * 0.5).requires_grad_()
    opt = optim.AdamW([{"params": [w1, w2]}, {"params": [b1], "weight_decay": 0.0}], lr=0.05)
    sched = optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=80)
    losses = []
    for _ in range(80):
        opt.zero_grad()
        loss = (((x @ w1 + b1).relu() @ w2 - y) ** 2).mean()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])


def test_load_state_dict_casts_to_param_dtype_and_rejects_non_leaf():
    w64 = minidl.tensor(W0, dtype=minidl.float64, requires_grad=True)
    opt = optim.Adam([w64], lr=0.1)
    (w64 * w64).sum().backward()
    opt.step()
    w32 = minidl.tensor(W0, dtype=minidl.float32, requires_grad=True)
    opt32 = optim.Adam([w32], lr=0.1)
    opt32.load_state_dict(opt.state_dict())
    assert opt32.state[w32]["exp_avg"].dtype == minidl.float32
    assert opt32.state[w32]["step"].item() == 1.0
    (w32 * w32).sum().backward()
    opt32.step()
    assert opt32.state[w32]["step"].item() == 2.0 and opt.state[w64]["step"].item() == 1.0
    with pytest.raises(ValueError):
        optim.SGD([w64 * 2], lr=0.1)
