"""Learning-rate schedules vs their closed forms; state_dict round trips."""
import math

import numpy as np
import pytest

import minidl
from minidl import optim
from minidl.optim import lr_scheduler as S

N = 30


def make_opt(lr=0.1, cls=optim.SGD, **kw):
    w = minidl.zeros(2, requires_grad=True)
    c = minidl.zeros(1, requires_grad=True)
    return cls([{"params": [w]}, {"params": [c], "lr": 2 * lr}], lr=lr, **kw)


def run(sched, opt, n=N):
    """lrs of group 0 and 1 at epochs 0..n-1 (the value in effect for the optimizer step of that epoch)."""
    out = []
    for _ in range(n):
        out.append([g["lr"] for g in opt.param_groups])
        assert sched.get_last_lr() == out[-1]
        opt.step()
        sched.step()
    return np.array(out)


def check(got, base, f):
    want = np.array([[b * f(e) for b in base] for e in range(len(got))])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_step_lr():
    opt = make_opt()
    check(run(S.StepLR(opt, step_size=4, gamma=0.5), opt), [0.1, 0.2], lambda e: 0.5 ** (e // 4))


def test_multistep_lr_with_repeated_milestone():
    opt = make_opt()
    ms = [3, 7, 7, 20]
    check(run(S.MultiStepLR(opt, milestones=ms, gamma=0.3), opt), [0.1, 0.2],
          lambda e: 0.3 ** sum(m <= e for m in ms))


def test_exponential_lr():
    opt = make_opt()
    check(run(S.ExponentialLR(opt, gamma=0.9), opt), [0.1, 0.2], lambda e: 0.9 ** e)


@pytest.mark.parametrize("eta_min", [0.0, 0.01])
def test_cosine_annealing_lr(eta_min):
    opt = make_opt()
    T = 10
    got = run(S.CosineAnnealingLR(opt, T_max=T, eta_min=eta_min), opt)
    want = np.array([[eta_min + (b - eta_min) * (1 + math.cos(math.pi * e / T)) / 2 for b in (0.1, 0.2)]
                     for e in range(N)])  # the recursive form is periodic: it climbs back after T_max
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_lambda_lr_and_list():
    opt = make_opt()
    got = run(S.LambdaLR(opt, [lambda e: 1 / (e + 1), lambda e: 0.95 ** e]), opt)
    np.testing.assert_allclose(got[:, 0], [0.1 / (e + 1) for e in range(N)], rtol=1e-12)
    np.testing.assert_allclose(got[:, 1], [0.2 * 0.95 ** e for e in range(N)], rtol=1e-12)
    with pytest.raises(ValueError):
        S.LambdaLR(make_opt(), [lambda e: 1.0])


def test_linear_lr():
    opt = make_opt()
    s, e_, T = 0.25, 0.9, 8
    check(run(S.LinearLR(opt, start_factor=s, end_factor=e_, total_iters=T), opt), [0.1, 0.2],
          lambda e: s + (e_ - s) * min(e, T) / T)
    with pytest.raises(ValueError):
        S.LinearLR(make_opt(), start_factor=0)


def onecycle_ref(t, total, max_lr, pct, div, final_div, anneal, three_phase):
    init, mn = max_lr / div, max_lr / div / final_div
    f = ((lambda a, b, p: b + (a - b) / 2 * (math.cos(math.pi * p) + 1)) if anneal == "cos"
         else (lambda a, b, p: (b - a) * p + a))
    e1 = pct * total - 1
    if three_phase:
        e2 = 2 * pct * total - 2
        if t <= e1:
            return f(init, max_lr, t / e1)
        if t <= e2:
            return f(max_lr, init, (t - e1) / (e2 - e1))
        return f(init, mn, (t - e2) / (total - 1 - e2))
    if t <= e1:
        return f(init, max_lr, t / e1)
    return f(max_lr, mn, (t - e1) / (total - 1 - e1))


@pytest.mark.parametrize("anneal,three_phase", [("cos", False), ("linear", False), ("cos", True), ("linear", True)])
def test_one_cycle_lr(anneal, three_phase):
    opt = make_opt(momentum=0.9)
    total = 40
    sched = S.OneCycleLR(opt, max_lr=[1.0, 0.5], total_steps=total, anneal_strategy=anneal,
                         three_phase=three_phase, div_factor=10.0, final_div_factor=100.0)
    got = run(sched, opt, n=total)
    for i, m in enumerate([1.0, 0.5]):
        want = [onecycle_ref(t, total, m, 0.3, 10.0, 100.0, anneal, three_phase) for t in range(total)]
        np.testing.assert_allclose(got[:, i], want, rtol=1e-10, atol=1e-14)
    assert got[-1, 0] == pytest.approx(1.0 / 10 / 100)
    # momentum cycles opposite to lr: 0.95 at the start, 0.85 at peak lr
    assert opt.param_groups[0]["max_momentum"] == 0.95 and opt.param_groups[0]["base_momentum"] == 0.85
    with pytest.raises(ValueError):
        sched.step()
        sched.step()  # past total_steps


def test_one_cycle_lr_epochs_and_betas_and_errors():
    opt = make_opt(cls=optim.Adam)
    sched = S.OneCycleLR(opt, max_lr=0.01, epochs=3, steps_per_epoch=10)
    assert sched.total_steps == 30
    assert opt.param_groups[0]["betas"] == (0.95, 0.999)
    opt.step()
    sched.step()
    assert 0.85 < opt.param_groups[0]["betas"][0] < 0.95
    with pytest.raises(ValueError):
        S.OneCycleLR(make_opt(), max_lr=0.1)


def test_one_cycle_errors():
    with pytest.raises(ValueError):
        S.OneCycleLR(make_opt(), max_lr=0.1, total_steps=10, anneal_strategy="exp")
    with pytest.raises(ValueError):
        S.OneCycleLR(make_opt(), max_lr=0.1, total_steps=10, pct_start=1.5)
    with pytest.raises(ValueError):
        S.OneCycleLR(make_opt(cls=optim.Adagrad), max_lr=0.1, total_steps=10)  # no momentum / betas


def test_sequential_lr():
    opt = make_opt()
    sched = S.SequentialLR(opt, [S.LinearLR(opt, start_factor=0.1, total_iters=5), S.ExponentialLR(opt, gamma=0.9)],
                           milestones=[5])
    got = run(sched, opt)
    check(got, [0.1, 0.2], lambda e: (0.1 + 0.9 * e / 5) if e < 5 else 0.9 ** (e - 5))
    with pytest.raises(ValueError):
        S.SequentialLR(opt, [S.StepLR(opt, 2)], milestones=[3])


def test_reduce_lr_on_plateau():
    opt = make_opt()
    sched = S.ReduceLROnPlateau(opt, patience=2, factor=0.5, cooldown=1, min_lr=0.03)
    lrs = []
    for m in [5, 4, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3]:
        opt.step()
        sched.step(m)
        lrs.append(opt.param_groups[0]["lr"])
    # best=3 at index 2; bad at 3, 4, 5 -> reduce at 5 (3 > patience); 6 is cooldown; bad 7, 8, 9 -> reduce
    assert lrs[:5] == [0.1] * 5
    assert lrs[5:9] == [0.05] * 4
    assert lrs[9] == pytest.approx(0.03)  # 0.025 clipped at min_lr
    assert lrs[-1] == pytest.approx(0.03)
    assert opt.param_groups[1]["lr"] == pytest.approx(0.03)  # 0.2 -> 0.1 -> 0.05 -> max(0.025, 0.03)
    assert sched.get_last_lr() == [g["lr"] for g in opt.param_groups]
    with pytest.raises(ValueError):
        S.ReduceLROnPlateau(opt, factor=1.0)
    with pytest.raises(ValueError):
        S.ReduceLROnPlateau(opt, mode="middle")


def test_reduce_lr_on_plateau_max_abs():
    opt = make_opt()
    sched = S.ReduceLROnPlateau(opt, mode="max", threshold=0.5, threshold_mode="abs", patience=0)
    sched.step(1.0)
    sched.step(1.4)  # not better by 0.5 -> reduce at once (patience 0)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.01)
    sched.step(2.0)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.01)
    assert sched.best == 2.0


def test_step_with_epoch_uses_closed_form():
    opt = make_opt()
    sched = S.StepLR(opt, step_size=3, gamma=0.5)
    with pytest.warns(UserWarning):
        sched.step(7)
    assert sched.last_epoch == 7
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 * 0.25)


SD_CASES = {
    "StepLR": lambda o: S.StepLR(o, 3, 0.5),
    "CosineAnnealingLR": lambda o: S.CosineAnnealingLR(o, 12, 0.001),
    "OneCycleLR": lambda o: S.OneCycleLR(o, 1.0, total_steps=N + 1),
    "LinearLR": lambda o: S.LinearLR(o, total_iters=10),
    "MultiStepLR": lambda o: S.MultiStepLR(o, [4, 9]),
    "SequentialLR": lambda o: S.SequentialLR(o, [S.ExponentialLR(o, 0.9), S.StepLR(o, 2)], [6]),
}


@pytest.mark.parametrize("key", list(SD_CASES))
def test_scheduler_state_dict_round_trip(key):
    opt = make_opt(momentum=0.9)
    full = run(SD_CASES[key](opt), opt)
    opt = make_opt(momentum=0.9)
    sched = SD_CASES[key](opt)
    first = run(sched, opt, n=N // 2)
    sd, osd = sched.state_dict(), opt.state_dict()
    assert "optimizer" not in sd
    opt2 = make_opt(momentum=0.9)  # PyTorch's resume order: build both, then load both
    sched2 = SD_CASES[key](opt2)
    opt2.load_state_dict(osd)
    sched2.load_state_dict(sd)
    second = run(sched2, opt2, n=N - N // 2)
    np.testing.assert_allclose(np.r_[first, second], full, rtol=1e-12)


def test_lambda_lr_state_dict_skips_functions():
    opt = make_opt()
    sched = S.LambdaLR(opt, lambda e: 0.5 ** e)
    opt.step()
    sched.step()
    sd = sched.state_dict()
    assert sd["lr_lambdas"] == [None, None] and sd["last_epoch"] == 1
    sched2 = S.LambdaLR(make_opt(), lambda e: 0.5 ** e)
    sched2.load_state_dict(sd)
    assert sched2.last_epoch == 1


def test_initial_lr_and_base_lrs_and_resume_check():
    opt = make_opt()
    sched = S.ExponentialLR(opt, gamma=0.5)
    assert sched.base_lrs == [0.1, 0.2] and sched.last_epoch == 0
    assert opt.param_groups[0]["initial_lr"] == 0.1
    with pytest.raises(KeyError):
        S.ExponentialLR(make_opt(), gamma=0.5, last_epoch=3)
    with pytest.raises(TypeError):
        S.StepLR(object(), 3)


def test_warns_when_scheduler_steps_before_optimizer():
    import warnings
    opt = make_opt()
    sched = S.StepLR(opt, 3)
    with pytest.warns(UserWarning, match="before `optimizer.step"):
        sched.step()
    opt = make_opt()
    sched = S.StepLR(opt, 3)
    opt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sched.step()
