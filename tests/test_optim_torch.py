"""minidl.optim vs torch.optim on identical float64 data (skipped without torch)."""
import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import minidl  # noqa: E402
from minidl import optim  # noqa: E402
from minidl.optim import lr_scheduler as mls  # noqa: E402

RNG = np.random.default_rng(7)
A = RNG.standard_normal((10, 4))
B = RNG.standard_normal((10, 2))
W0 = RNG.standard_normal((4, 2))
C0 = RNG.standard_normal(2)


def grid(**axes):
    keys = list(axes)
    return [dict(zip(keys, vals)) for vals in itertools.product(*axes.values())]


def trajectory(lib, name, kwargs, steps=20, groups=False):
    w = lib.tensor(W0.copy(), dtype=lib.float64, requires_grad=True)
    c = lib.tensor(C0.copy(), dtype=lib.float64, requires_grad=True)
    a, b = lib.tensor(A), lib.tensor(B)
    cls = getattr(lib.optim, name)
    params = [{"params": [w]}, {"params": [c], "lr": 0.003}] if groups else [w, c]
    opt = cls(params, **kwargs)
    out = []
    for _ in range(steps):
        def closure():
            opt.zero_grad()
            loss = ((a @ w + c - b) ** 2).mean()
            loss.backward()
            return loss
        loss = opt.step(closure)
        out.append(np.concatenate([w.detach().numpy().ravel(), c.detach().numpy(), [loss.item()]]))
    return np.array(out), opt


CASES = (
    [("SGD", dict(lr=0.05, **kw)) for kw in grid(momentum=[0, 0.9], weight_decay=[0, 0.1], maximize=[False, True])]
    + [("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, **kw)) for kw in grid(weight_decay=[0, 0.1],
                                                                                maximize=[False, True])]
    + [("SGD", dict(lr=0.05, momentum=0.7, dampening=0.4)), ("SGD", {})]
    + [(name, dict(lr=0.05, **kw)) for name in ("Adam", "AdamW") for kw in
       grid(weight_decay=[0, 0.1], amsgrad=[False, True], maximize=[False, True])]
    + [("Adam", dict(betas=(0.5, 0.8), eps=1e-3)), ("AdamW", {})]
    + [("RMSprop", dict(lr=0.01, **kw)) for kw in
       grid(weight_decay=[0, 0.1], momentum=[0, 0.8], centered=[False, True], maximize=[False, True])]
    + [("RMSprop", dict(alpha=0.5, eps=1e-4))]
    + [("Adagrad", dict(lr=0.1, **kw)) for kw in
       grid(lr_decay=[0, 0.1], weight_decay=[0, 0.1], initial_accumulator_value=[0, 0.3], maximize=[False, True])]
    + [("Adagrad", dict(eps=1e-3))]
    + [("Adadelta", kw) for kw in grid(weight_decay=[0, 0.1], maximize=[False, True])]
    + [("Adadelta", dict(lr=0.3, rho=0.5, eps=1e-3))]
    + [("Adamax", dict(lr=0.05, **kw)) for kw in grid(weight_decay=[0, 0.1], maximize=[False, True])]
    + [("Adamax", dict(betas=(0.5, 0.8), eps=1e-3))]
    + [(name, dict(lr=0.05, **kw)) for name in ("NAdam", "RAdam") for kw in
       grid(weight_decay=[0, 0.1], decoupled_weight_decay=[False, True], maximize=[False, True])]
    + [("NAdam", dict(momentum_decay=0.3, betas=(0.8, 0.9))), ("RAdam", dict(betas=(0.7, 0.9), eps=1e-4))]
)


@pytest.mark.parametrize("name,kwargs", CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_matches_torch(name, kwargs):
    got, mopt = trajectory(minidl, name, kwargs)
    want, topt = trajectory(torch, name, kwargs)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    # same state keys, same values, same defaults
    msd, tsd = mopt.state_dict(), topt.state_dict()
    assert set(msd["state"]) == set(tsd["state"])
    for i in tsd["state"]:
        assert set(msd["state"][i]) == set(tsd["state"][i])
        for k, v in tsd["state"][i].items():
            np.testing.assert_allclose(np.asarray(msd["state"][i][k].numpy()), v.numpy(), rtol=1e-10, atol=1e-12)
    tg = {k: v for k, v in tsd["param_groups"][0].items()}
    mg = msd["param_groups"][0]
    assert set(mg) == set(tg), (set(mg) ^ set(tg))
    for k in tg:
        assert mg[k] == tg[k], k


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam",
                                  "RAdam"])
def test_param_groups_match_torch(name):
    kwargs = {"momentum": 0.9} if name in ("SGD", "RMSprop") else {}
    got, _ = trajectory(minidl, name, kwargs, steps=10, groups=True)
    want, _ = trajectory(torch, name, kwargs, steps=10, groups=True)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", ["SGD", "Adam", "RMSprop", "Adagrad", "Adadelta", "Adamax", "NAdam", "RAdam",
                                  "LBFGS"])
def test_defaults_match_torch(name):
    import inspect
    msig = inspect.signature(getattr(optim, name))
    tsig = inspect.signature(getattr(torch.optim, name))
    for pname, p in tsig.parameters.items():
        assert pname in msig.parameters, pname
        assert msig.parameters[pname].default == p.default, pname


# ---------------------------------------------------------------------- schedulers vs torch
def lrs(lib, make_sched, steps=30, metrics=None, opt_name="SGD", opt_kwargs=None):
    w = lib.zeros(2, dtype=lib.float64, requires_grad=True)
    c = lib.zeros(1, dtype=lib.float64, requires_grad=True)
    opt = getattr(lib.optim, opt_name)([{"params": [w]}, {"params": [c], "lr": 0.3}], lr=0.1,
                                       **({"momentum": 0.9} if opt_kwargs is None else opt_kwargs))
    sched = make_sched(lib.optim.lr_scheduler, opt)
    out = []
    for i in range(steps):
        opt.step()
        if metrics is not None:
            sched.step(metrics[i])
        else:
            sched.step()
        row = [g["lr"] for g in opt.param_groups] + list(sched.get_last_lr() if metrics is None else [])
        if "momentum" in opt.defaults:
            row += [g["momentum"] for g in opt.param_groups]
        if "betas" in opt.defaults:
            row += [g["betas"][0] for g in opt.param_groups]
        out.append(row)
    return np.array(out, dtype=float)


SCHEDS = {
    "StepLR": lambda s, o: s.StepLR(o, step_size=4, gamma=0.5),
    "MultiStepLR": lambda s, o: s.MultiStepLR(o, milestones=[3, 7, 7, 20], gamma=0.3),
    "ExponentialLR": lambda s, o: s.ExponentialLR(o, gamma=0.9),
    "CosineAnnealingLR": lambda s, o: s.CosineAnnealingLR(o, T_max=10, eta_min=0.001),
    "LambdaLR": lambda s, o: s.LambdaLR(o, lr_lambda=lambda e: 0.95 ** e),
    "LambdaLR-list": lambda s, o: s.LambdaLR(o, lr_lambda=[lambda e: 1 / (e + 1), lambda e: 0.9 ** e]),
    "LinearLR": lambda s, o: s.LinearLR(o, start_factor=0.25, end_factor=0.9, total_iters=8),
    "LinearLR-default": lambda s, o: s.LinearLR(o),
    "OneCycleLR": lambda s, o: s.OneCycleLR(o, max_lr=1.0, total_steps=31),
    "OneCycleLR-linear-3phase": lambda s, o: s.OneCycleLR(o, max_lr=[0.5, 2.0], epochs=4, steps_per_epoch=8,
                                                          anneal_strategy="linear", three_phase=True,
                                                          pct_start=0.25, div_factor=10.0, final_div_factor=100.0),
    "OneCycleLR-nomomentum": lambda s, o: s.OneCycleLR(o, max_lr=0.5, total_steps=40, cycle_momentum=False),
    "SequentialLR": lambda s, o: s.SequentialLR(o, [s.LinearLR(o, start_factor=0.1, total_iters=5),
                                                    s.ExponentialLR(o, gamma=0.9),
                                                    s.CosineAnnealingLR(o, T_max=7)], milestones=[5, 18]),
}


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("key", list(SCHEDS))
def test_scheduler_matches_torch(key):
    np.testing.assert_allclose(lrs(minidl, SCHEDS[key]), lrs(torch, SCHEDS[key]), rtol=1e-12, atol=1e-15)


@pytest.mark.filterwarnings("ignore")
def test_onecycle_adam_betas_matches_torch():
    make = SCHEDS["OneCycleLR"]
    np.testing.assert_allclose(lrs(minidl, make, opt_name="Adam", opt_kwargs={}),
                               lrs(torch, make, opt_name="Adam", opt_kwargs={}), rtol=1e-12)


PLATEAU = [dict(), dict(mode="max", factor=0.5, patience=2, threshold=0.1, threshold_mode="abs", cooldown=2),
           dict(patience=1, cooldown=1, min_lr=[0.02, 0.01]), dict(patience=0, min_lr=0.05, eps=1e-3),
           dict(mode="max", threshold_mode="rel", patience=3, factor=0.2)]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("kwargs", PLATEAU)
def test_plateau_matches_torch(kwargs):
    metrics = list(np.r_[np.linspace(5, 1, 8), np.full(10, 1.0), np.linspace(1, 0.5, 4), np.full(8, 0.5)])
    metrics = [m + 0.001 * (i % 3) for i, m in enumerate(metrics)]
    make = lambda s, o: s.ReduceLROnPlateau(o, **kwargs)  # noqa: E731
    np.testing.assert_allclose(lrs(minidl, make, metrics=metrics), lrs(torch, make, metrics=metrics), rtol=1e-12)


def test_optimizer_state_dict_loads_into_torch_and_back():
    got, mopt = trajectory(minidl, "Adam", dict(lr=0.05, amsgrad=True), steps=5)
    _, topt = trajectory(torch, "Adam", dict(lr=0.05, amsgrad=True), steps=5)
    # minidl's state dict has torch's structure
    msd, tsd = mopt.state_dict(), topt.state_dict()
    assert msd["param_groups"] == tsd["param_groups"]
    assert {i: set(s) for i, s in msd["state"].items()} == {i: set(s) for i, s in tsd["state"].items()}


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("key", ["ExponentialLR", "CosineAnnealingLR", "LinearLR", "StepLR"])
def test_scheduler_resume_with_last_epoch_matches_torch(key):
    def make(s, o):
        for g in o.param_groups:
            g["initial_lr"] = g["lr"] * 2
        return {
            "ExponentialLR": lambda: s.ExponentialLR(o, gamma=0.9, last_epoch=4),
            "CosineAnnealingLR": lambda: s.CosineAnnealingLR(o, T_max=10, eta_min=0.001, last_epoch=4),
            "LinearLR": lambda: s.LinearLR(o, start_factor=0.25, total_iters=8, last_epoch=4),
            "StepLR": lambda: s.StepLR(o, step_size=3, last_epoch=4),
        }[key]()
    np.testing.assert_allclose(lrs(minidl, make, steps=15), lrs(torch, make, steps=15), rtol=1e-12)


@pytest.mark.parametrize("name,kwargs", [("SGD", dict(lr=0.05, momentum=0.9, nesterov=True)),
                                         ("Adam", dict(lr=0.05, amsgrad=True)), ("AdamW", dict(lr=0.05)),
                                         ("RMSprop", dict(momentum=0.5, centered=True)), ("Adagrad", dict(lr=0.1)),
                                         ("Adadelta", dict(weight_decay=0.1)), ("Adamax", dict(lr=0.05)),
                                         ("NAdam", dict(lr=0.05)), ("RAdam", dict(lr=0.05))])
def test_float32_matches_torch_and_keeps_dtype(name, kwargs):
    out = {}
    for lib in (minidl, torch):
        w = lib.tensor(W0.astype(np.float32), requires_grad=True)
        a, b = lib.tensor(A.astype(np.float32)), lib.tensor(B.astype(np.float32))
        opt = getattr(lib.optim, name)([w], **kwargs)
        for _ in range(10):
            opt.zero_grad()
            ((a @ w - b) ** 2).mean().backward()
            opt.step()
        assert w.dtype == lib.float32
        for k, v in opt.state[w].items():
            assert v.dtype == lib.float32, k
        out[lib.__name__] = w.detach().numpy()
    np.testing.assert_allclose(out["minidl"], out["torch"], rtol=1e-5, atol=1e-6)


def test_named_params_repr_and_state_dict_match_torch():
    out = {}
    for lib in (minidl, torch):
        w = lib.zeros(2, requires_grad=True)
        c = lib.zeros(1, requires_grad=True)
        opt = lib.optim.SGD([("w", w), ("c", c)], lr=0.1, momentum=0.9)
        out[lib.__name__] = (repr(opt), opt.state_dict()["param_groups"])
        with pytest.raises(ValueError):
            lib.optim.SGD([("w", w), c])
    assert out["minidl"] == out["torch"]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("key", [k for k in SCHEDS if not k.startswith("LambdaLR")])
def test_scheduler_state_dict_matches_torch(key):
    sds = {}
    for lib in (minidl, torch):
        w = lib.zeros(2, dtype=lib.float64, requires_grad=True)
        c = lib.zeros(1, dtype=lib.float64, requires_grad=True)
        opt = lib.optim.SGD([{"params": [w]}, {"params": [c], "lr": 0.3}], lr=0.1, momentum=0.9)
        sched = SCHEDS[key](lib.optim.lr_scheduler, opt)
        for _ in range(7):
            opt.step()
            sched.step()
        sds[lib.__name__] = sched.state_dict()
    m, t = sds["minidl"], sds["torch"]
    if "_schedulers" in t:
        assert [set(s) for s in m.pop("_schedulers")] == [set(s) for s in t.pop("_schedulers")]
    assert set(m) == set(t)
    for k in t:
        if k not in ("_anneal_func",):
            assert m[k] == t[k] or (isinstance(t[k], float) and m[k] == pytest.approx(t[k], rel=1e-12)) \
                or np.allclose(m[k], t[k], rtol=1e-12), k


def test_get_lr_outside_step_warns_like_torch():
    w = minidl.zeros(2, requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    sched = mls.StepLR(opt, 2)
    with pytest.warns(UserWarning, match="get_last_lr"):
        sched.get_lr()
