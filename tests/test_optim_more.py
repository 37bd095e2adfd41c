"""Adadelta, Adamax, NAdam, RAdam and LBFGS against their published update rules written out in numpy
(float64), closed forms (the cubic's minimum, the strong Wolfe conditions, Rosenbrock's minimum at (1, 1))
and, where it is installed, PyTorch's iterates. The generic optimizer tests (trajectories and state vs
torch, state_dict round trips, convergence) list these optimizers too."""
import math

import numpy as np
import pytest
from test_optim_optimizers import grid, run_minidl, run_ref

import minidl
from minidl import optim
from minidl.optim.lbfgs import _cubic_minimum, _strong_wolfe


# ---------------------------------------------------------------------- the update rules in numpy
def ref_adadelta(g, p, st, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, maximize=False):
    """Zeiler 2012, algorithm 1: dx = -RMS[dx]_{t-1} / RMS[g]_t * g, RMS[v] = sqrt(E[v^2] + eps); the
    step is scaled by lr as in PyTorch."""
    g = -g if maximize else g
    g = g + weight_decay * p
    st["Eg2"] = rho * st.get("Eg2", 0.0) + (1 - rho) * g ** 2
    dx = -np.sqrt(st.get("Edx2", 0.0) + eps) / np.sqrt(st["Eg2"] + eps) * g
    st["Edx2"] = rho * st.get("Edx2", 0.0) + (1 - rho) * dx ** 2
    return p + lr * dx


def ref_adamax(g, p, st, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, maximize=False):
    """Kingma & Ba 2015, algorithm 2: u_t = max(beta2 u_{t-1}, |g_t|), p -= lr / (1 - beta1^t) m_t / u_t;
    PyTorch adds eps to |g_t| inside the max."""
    b1, b2 = betas
    g = -g if maximize else g
    g = g + weight_decay * p
    st["t"] = t = st.get("t", 0) + 1
    st["m"] = b1 * st.get("m", 0.0) + (1 - b1) * g
    st["u"] = np.maximum(b2 * st.get("u", 0.0), np.abs(g) + eps)
    return p - lr / (1 - b1 ** t) * st["m"] / st["u"]


def decay_and_moments(g, p, st, lr, betas, weight_decay, decoupled_weight_decay, maximize):
    """The start of every Adam-like rule: maximize, L2 or decoupled (AdamW) weight decay, the step count
    and the running averages m_t and v_t of g and g^2. Returns (g, p, t)."""
    b1, b2 = betas
    g = -g if maximize else g
    if decoupled_weight_decay:
        p = p * (1 - lr * weight_decay)
    else:
        g = g + weight_decay * p
    st["t"] = st.get("t", 0) + 1
    st["m"] = b1 * st.get("m", 0.0) + (1 - b1) * g
    st["v"] = b2 * st.get("v", 0.0) + (1 - b2) * g * g
    return g, p, st["t"]


def ref_nadam(g, p, st, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, momentum_decay=4e-3,
              decoupled_weight_decay=False, maximize=False):
    """Dozat 2016 with PyTorch's schedule mu_t = beta1 (1 - 0.96^(t psi) / 2):
    p -= lr (mu_{t+1} m_t / (1 - prod_{i<=t+1} mu_i) + (1 - mu_t) g_t / (1 - prod_{i<=t} mu_i)) / (sqrt(v_hat) + eps).
    PyTorch keeps the product of the mu in a float32 scalar, so this does too."""
    g, p, t = decay_and_moments(g, p, st, lr, betas, weight_decay, decoupled_weight_decay, maximize)
    b1, b2 = betas
    mu_t, mu_next = (b1 * (1 - 0.5 * 0.96 ** (k * momentum_decay)) for k in (t, t + 1))
    st["prod"] = prod = np.float32(st.get("prod", np.float32(1.0)) * np.float32(mu_t))
    m_hat = mu_next * st["m"] / (1 - float(prod) * mu_next) + (1 - mu_t) * g / (1 - float(prod))
    return p - lr * m_hat / (np.sqrt(st["v"] / (1 - b2 ** t)) + eps)


def ref_radam(g, p, st, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, decoupled_weight_decay=False,
              maximize=False):
    """Liu et al. 2019, algorithm 2: the rectified adaptive step once the approximated SMA length rho_t
    exceeds 5 (PyTorch's threshold), bias-corrected momentum SGD before."""
    g, p, t = decay_and_moments(g, p, st, lr, betas, weight_decay, decoupled_weight_decay, maximize)
    b1, b2 = betas
    m_hat = st["m"] / (1 - b1 ** t)
    rho_inf = 2 / (1 - b2) - 1
    rho_t = rho_inf - 2 * t * b2 ** t / (1 - b2 ** t)
    if rho_t <= 5:
        return p - lr * m_hat
    l_t = np.sqrt(1 - b2 ** t) / (np.sqrt(st["v"]) + eps)
    r_t = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
    return p - lr * m_hat * r_t * l_t


CASES = (
    [(optim.Adadelta, ref_adadelta, kw) for kw in grid(weight_decay=[0, 0.1], maximize=[False, True])]
    + [(optim.Adadelta, ref_adadelta, dict(lr=0.5, rho=0.5, eps=1e-3))]
    + [(optim.Adamax, ref_adamax, dict(lr=0.05, **kw)) for kw in grid(weight_decay=[0, 0.1], maximize=[False, True])]
    + [(optim.Adamax, ref_adamax, dict(betas=(0.5, 0.8), eps=1e-3))]
    + [(optim.NAdam, ref_nadam, dict(lr=0.05, **kw)) for kw in
       grid(weight_decay=[0, 0.1], decoupled_weight_decay=[False, True], maximize=[False, True])]
    + [(optim.NAdam, ref_nadam, dict(momentum_decay=0.3, betas=(0.8, 0.9)))]
    # rho_t passes 5 at step 6 with beta2 = 0.999 and with 0.9: both updates are checked
    + [(optim.RAdam, ref_radam, dict(lr=0.05, **kw)) for kw in
       grid(weight_decay=[0, 0.1], decoupled_weight_decay=[False, True], maximize=[False, True])]
    + [(optim.RAdam, ref_radam, dict(lr=0.05, betas=(0.7, 0.9), eps=1e-4))]
)


@pytest.mark.parametrize("cls,ref,kwargs", CASES, ids=[f"{c.__name__}-{k}" for c, _, k in CASES])
def test_trajectory_matches_published_rule(cls, ref, kwargs):
    np.testing.assert_allclose(run_minidl(cls, kwargs), run_ref(ref, kwargs), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("beta2", [0.999, 0.9])
def test_radam_cases_take_both_branches(beta2):
    """The CASES above cover the un-rectified (steps 1-5) and the rectified update (steps 6-20)."""
    rho_inf = 2 / (1 - beta2) - 1
    rho = [rho_inf - 2 * t * beta2 ** t / (1 - beta2 ** t) for t in range(1, 21)]
    assert max(rho[:5]) <= 5 < min(rho[5:])


@pytest.mark.parametrize("make,match", [
    (lambda w: optim.Adadelta([w], rho=1.5), "Invalid rho value"),
    (lambda w: optim.Adadelta([w], lr=-1), "Invalid learning rate"),
    (lambda w: optim.Adamax([w], eps=-1), "Invalid epsilon value"),
    (lambda w: optim.NAdam([w], momentum_decay=-1), "Invalid momentum_decay value"),
    (lambda w: optim.NAdam([w], betas=(0.9, 1.0)), "Invalid beta parameter at index 1"),
    (lambda w: optim.RAdam([w], weight_decay=-0.1), "Invalid weight_decay value"),
    (lambda w: optim.LBFGS([{"params": [w]}, {"params": [minidl.zeros(1, requires_grad=True)]}]),
     "parameter groups"),
])
def test_invalid_arguments(make, match):
    with pytest.raises(ValueError, match=match):
        make(minidl.zeros(2, requires_grad=True))


# ---------------------------------------------------------------------- LBFGS
ROSENBROCK_START = (-1.5, 2.0)


def rosenbrock_np(x):
    f = (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2
    g = np.array([-2 * (1 - x[0]) - 400 * x[0] * (x[1] - x[0] ** 2), 200 * (x[1] - x[0] ** 2)])
    return f, g


def lbfgs_on_rosenbrock(lib, steps, **kwargs):
    """Iterates after each step (and the optimizer) of lib's LBFGS from ROSENBROCK_START."""
    x = lib.tensor(ROSENBROCK_START, dtype=lib.float64, requires_grad=True)
    opt = lib.optim.LBFGS([x], **kwargs)

    def closure():
        opt.zero_grad()
        loss = (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2
        loss.backward()
        return loss

    iterates = []
    for _ in range(steps):
        opt.step(closure)
        iterates.append(x.detach().numpy().copy())
    return np.array(iterates), opt


@pytest.mark.parametrize("line_search_fn,steps", [("strong_wolfe", 5), (None, 5)])
def test_lbfgs_minimises_rosenbrock(line_search_fn, steps):
    iterates, opt = lbfgs_on_rosenbrock(minidl, steps, line_search_fn=line_search_fn)
    np.testing.assert_allclose(iterates[-1], [1.0, 1.0], atol=1e-4)
    assert rosenbrock_np(iterates[-1])[0] < 1e-9 < rosenbrock_np(ROSENBROCK_START)[0]
    state = opt.state[opt.param_groups[0]["params"][0]]
    assert state["n_iter"] > 20 and state["func_evals"] >= state["n_iter"]


def test_lbfgs_line_search_needs_fewer_evaluations():
    """On Rosenbrock, Wolfe steps reach the minimum with fewer function evaluations than fixed ones."""
    evals = {}
    for ls in ("strong_wolfe", None):
        _, opt = lbfgs_on_rosenbrock(minidl, 1, line_search_fn=ls, max_iter=200, max_eval=400)
        evals[ls] = opt.state[opt.param_groups[0]["params"][0]]["func_evals"]
    assert evals["strong_wolfe"] < evals[None]


@pytest.mark.parametrize("kwargs,steps", [(dict(line_search_fn="strong_wolfe"), 5),
                                          (dict(line_search_fn="strong_wolfe", history_size=3, max_iter=7), 2),
                                          (dict(), 1), (dict(lr=0.5, history_size=4), 1)])
def test_lbfgs_rosenbrock_matches_torch(kwargs, steps):
    """Rosenbrock's curved valley amplifies last-bit differences (PyTorch's kernels fuse multiply-adds)
    by about 10x every few iterations, so the comparison stops while they are below 1e-10: after 5 steps
    with the default history, after 20 iterations otherwise."""
    torch = pytest.importorskip("torch")
    got, mopt = lbfgs_on_rosenbrock(minidl, steps, **kwargs)
    want, topt = lbfgs_on_rosenbrock(torch, steps, **kwargs)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    mstate, tstate = (next(iter(o.state.values())) for o in (mopt, topt))
    assert (mstate["func_evals"], mstate["n_iter"]) == (tstate["func_evals"], tstate["n_iter"])
    assert set(mstate) == set(tstate) - {"al"}  # torch keeps a scratch list of the two-loop's alphas
    assert mopt.state_dict()["param_groups"] == topt.state_dict()["param_groups"]


# a smooth, strictly convex problem on which fixed-step L-BFGS behaves: L2-regularised logistic regression
LR_RNG = np.random.default_rng(5)
LR_X = LR_RNG.standard_normal((30, 4))
LR_Y = np.sign(LR_X @ np.array([1.0, -2.0, 0.5, 0.0]) + 0.5 * LR_RNG.standard_normal(30))
LR_W0 = np.array([0.5, 0.5, -0.5, 1.0])


def logistic_np(w):
    z = -LR_Y * (LR_X @ w)
    f = np.mean(np.log1p(np.exp(z))) + 0.05 * w @ w
    g = LR_X.T @ (-LR_Y / (1 + np.exp(-z))) / len(LR_Y) + 0.1 * w
    return f, g


def lbfgs_on_logistic(lib, **kwargs):
    """Every point at which the closure was called, and the final one, for one step of lib's LBFGS."""
    w = lib.tensor(LR_W0, dtype=lib.float64, requires_grad=True)
    x, y = lib.tensor(LR_X), lib.tensor(LR_Y)
    opt = lib.optim.LBFGS([w], **kwargs)
    points = []

    def closure():
        points.append(w.detach().numpy().copy())
        opt.zero_grad()
        loss = (1 + (-y * (x @ w)).exp()).log().mean() + 0.05 * (w * w).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return np.array(points + [w.detach().numpy().copy()])


def np_lbfgs_fixed_step(x, f_and_grad, iters, lr, history_size):
    """L-BFGS with an explicit inverse Hessian: Nocedal & Wright eq. 7.19 (H <- V' H V + rho s s',
    V = I - rho y s') applied over the last ``history_size`` pairs from H0 = (s'y / y'y) I; fixed steps,
    the first one min(1, 1 / |g|_1) lr. Returns the iterates x_0 ... x_iters."""
    n = len(x)
    points, pairs, gamma = [x], [], 1.0
    _, g = f_and_grad(x)
    g_prev = None
    for k in range(iters):
        if g_prev is not None:
            s, y = points[-1] - points[-2], g - g_prev
            if y @ s > 1e-10:
                pairs = (pairs + [(s, y)])[-history_size:]
                gamma = (y @ s) / (y @ y)
        h = gamma * np.eye(n)
        for s, y in pairs:
            rho = 1 / (y @ s)
            v = np.eye(n) - rho * np.outer(y, s)
            h = v.T @ h @ v + rho * np.outer(s, s)
        step = min(1.0, 1.0 / np.abs(g).sum()) * lr if k == 0 else lr
        g_prev = g
        points.append(points[-1] - step * (h @ g))
        _, g = f_and_grad(points[-1])
    return np.array(points)


@pytest.mark.parametrize("history_size", [100, 3])
def test_lbfgs_fixed_step_matches_dense_bfgs(history_size):
    """With the stopping tests switched off, one step of 12 iterations visits the points that the dense
    inverse-Hessian formula gives (the closure is not called after the last move)."""
    got = lbfgs_on_logistic(minidl, lr=0.8, max_iter=12, history_size=history_size, tolerance_grad=0,
                            tolerance_change=0)
    want = np_lbfgs_fixed_step(LR_W0, logistic_np, 12, 0.8, history_size)
    assert len(got) == 13
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kwargs", [dict(max_iter=12, tolerance_grad=0, tolerance_change=0),
                                    dict(line_search_fn="strong_wolfe", history_size=2),
                                    dict(max_iter=30, max_eval=10, line_search_fn="strong_wolfe")])
def test_lbfgs_logistic_matches_torch(kwargs):
    torch = pytest.importorskip("torch")
    got, want = lbfgs_on_logistic(minidl, **kwargs), lbfgs_on_logistic(torch, **kwargs)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_lbfgs_defaults_and_max_eval():
    w = minidl.zeros(2, requires_grad=True)
    assert optim.LBFGS([w]).defaults == dict(lr=1, max_iter=20, max_eval=25, tolerance_grad=1e-7,
                                             tolerance_change=1e-9, history_size=100, line_search_fn=None)
    assert optim.LBFGS([w], max_iter=10).param_groups[0]["max_eval"] == 12
    # max_eval bounds the closure calls of one step
    calls = len(lbfgs_on_logistic(minidl, max_iter=50, max_eval=7, line_search_fn="strong_wolfe")) - 1
    assert calls <= 7


def test_lbfgs_stops_at_a_stationary_point_and_rejects_unknown_line_search():
    w = minidl.zeros(2, dtype=minidl.float64, requires_grad=True)
    opt = optim.LBFGS([w])
    calls = []

    def closure():
        calls.append(1)
        opt.zero_grad()
        loss = (w * w).sum()
        loss.backward()
        return loss

    assert opt.step(closure).item() == 0.0 and len(calls) == 1  # gradient zero: nothing to do
    np.testing.assert_array_equal(w.detach().numpy(), [0.0, 0.0])
    with pytest.raises(RuntimeError, match="strong_wolfe"):
        optim.LBFGS([w], line_search_fn="backtracking").step(closure)


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_lbfgs_state_dict_round_trip(line_search_fn):
    """Two steps, a save, a fresh optimizer loading it and two more steps retrace four straight steps."""
    full, _ = lbfgs_on_rosenbrock(minidl, 4, line_search_fn=line_search_fn, max_iter=5)
    x = minidl.tensor(ROSENBROCK_START, dtype=minidl.float64, requires_grad=True)

    def closure_for(opt):
        def closure():
            opt.zero_grad()
            loss = (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2
            loss.backward()
            return loss
        return closure

    first = optim.LBFGS([x], line_search_fn=line_search_fn, max_iter=5)
    got = []
    for _ in range(2):
        first.step(closure_for(first))
        got.append(x.detach().numpy().copy())
    sd = first.state_dict()
    n_iter = first.state[x]["n_iter"]
    assert {"d", "t", "old_dirs", "old_stps", "ro", "H_diag", "prev_flat_grad", "prev_loss", "func_evals",
            "n_iter"} == set(sd["state"][0])
    second = optim.LBFGS([x], line_search_fn="strong_wolfe", max_iter=99)
    second.load_state_dict(sd)
    assert second.param_groups[0]["max_iter"] == 5 and second.param_groups[0]["line_search_fn"] == line_search_fn
    for _ in range(2):
        second.step(closure_for(second))
        got.append(x.detach().numpy().copy())
    np.testing.assert_allclose(np.array(got), full, rtol=1e-13, atol=1e-15)
    # the loaded history is a copy: the second optimizer's steps left the first one's alone
    assert first.state[x]["n_iter"] == n_iter < second.state[x]["n_iter"]
    assert first.state[x]["prev_flat_grad"] is not second.state[x]["prev_flat_grad"]


# ---------------------------------------------------------------------- the line search's pieces
@pytest.mark.parametrize("coeffs,x1,x2", [((1.0, -1.0, -2.0, 0.5), -0.5, 2.5), ((-0.2, 1.0, 0.3, 0.0), 3.0, -1.0),
                                          ((0.0, 2.0, -1.0, 1.0), -3.0, 4.0)])
def test_cubic_minimum_of_a_cubic_is_its_local_minimum(coeffs, x1, x2):
    """Interpolating a true cubic (or quadratic) recovers the root of p' where p'' > 0."""
    p = np.poly1d(coeffs)
    roots = [r.real for r in p.deriv().roots if abs(r.imag) < 1e-12 and p.deriv(2)(r.real) > 0]
    assert len(roots) == 1 and min(x1, x2) < roots[0] < max(x1, x2)
    got = _cubic_minimum(x1, p(x1), p.deriv()(x1), x2, p(x2), p.deriv()(x2))
    assert got == pytest.approx(roots[0], rel=1e-12)
    # clipped to the bounds it is given
    lo, hi = roots[0] + 0.1, roots[0] + 1.0
    assert _cubic_minimum(x1, p(x1), p.deriv()(x1), x2, p(x2), p.deriv()(x2), bounds=(lo, hi)) == lo


def test_cubic_minimum_without_a_minimum_is_the_midpoint():
    # p(x) = 2/3 x^3 - x^2 + x: p(0) = 0, p'(0) = 1, p(1) = 2/3, p'(1) = 1, and p' = 2x^2 - 2x + 1 > 0
    assert _cubic_minimum(0.0, 0.0, 1.0, 1.0, 2 / 3, 1.0, bounds=(2.0, 5.0)) == 3.5
    assert _cubic_minimum(0.0, 0.0, 1.0, 1.0, 2 / 3, 1.0) == 0.5


def soft_hinge(x, slope=-6.9, jump=78.7, at=4.1, sharpness=5.0):
    """Slope ``slope`` left of ``at``, ``slope + jump`` right of it: a cubic fits it badly, so zoom trials
    hug an end of the interval and the line search's safeguards act."""
    z = sharpness * (x[0] - at)
    return slope * x[0] + jump * np.logaddexp(0, z) / sharpness, np.array([slope + jump * 0.5 * (1 + np.tanh(z / 2))])


def line_search_problems():
    rng = np.random.default_rng(3)
    for x0 in rng.uniform(-2, 2, (12, 2)):
        _, g0 = rosenbrock_np(x0)
        d = -g0 + rng.normal(0, 0.5 * np.abs(g0).max(), 2)
        if g0 @ d < 0:
            yield rosenbrock_np, x0, d
    for kwargs in (dict(), dict(slope=-2.2, jump=83.1, at=3.8), dict(slope=-0.17, jump=64.6, at=1.4)):
        yield lambda x, kw=kwargs: soft_hinge(x, **kw), np.zeros(1), np.ones(1)


def test_strong_wolfe_matches_torch():
    """The same step, loss and number of evaluations as PyTorch's line search, from first trials that need
    extrapolating, zooming and the safeguards against trials hugging an end of the interval."""
    torch = pytest.importorskip("torch")
    from torch.optim.lbfgs import _strong_wolfe as torch_strong_wolfe
    for fn, x0, d in line_search_problems():
        f0, g0 = fn(x0)
        for t0 in (1e-6, 1e-3, 0.1, 1.0, 13.4, 50.0):
            out = {}
            for lib in (minidl, torch):
                def evaluate(t):
                    f, g = fn(x0 + float(t) * d)
                    return f, lib.tensor(g)
                args = (t0, lib.tensor(d), f0, lib.tensor(g0), g0 @ d)
                if lib is minidl:
                    f, _, t, evals = _strong_wolfe(evaluate, *args)
                else:  # torch's calls obj_func(x, t, d) and takes x after it
                    f, _, t, evals = torch_strong_wolfe(lambda x, t, d: evaluate(t), None, *args)
                out[lib.__name__] = (float(f), float(t), evals)
            assert out["minidl"] == pytest.approx(out["torch"], rel=1e-12), (x0, t0)


@pytest.mark.parametrize("t0", [1e-6, 1e-3, 1.0, 13.4, 50.0])
def test_strong_wolfe_step_satisfies_the_conditions(t0):
    """The step returned satisfies f(x + t d) <= f + c1 t g'd and |g(x + t d)'d| <= c2 |g'd|, from a first
    trial far too short (extrapolation) or far too long (zoom); it is one of the points evaluated."""
    for fn, x0, d in line_search_problems():
        f0, g0 = fn(x0)
        evaluated = []

        def evaluate(t):
            evaluated.append(t)
            f, g = fn(x0 + t * d)
            return f, minidl.tensor(g)

        gtd = g0 @ d
        f, g, t, evals = _strong_wolfe(evaluate, t0, minidl.tensor(d), f0, minidl.tensor(g0), gtd)
        assert evals == len(evaluated) and t in evaluated
        f_t, g_t = fn(x0 + t * d)
        assert f == f_t and np.array_equal(g.numpy(), g_t)
        assert f_t <= f0 + 1e-4 * t * gtd
        assert abs(g_t @ d) <= 0.9 * abs(gtd)
