"""Multi-tensor (foreach/fused) optimizer steps and clip_grad_norm_: the same results as the
per-parameter path (bit for bit: the same element formulas in the same order), torch's optimizers on
the same float64 data, one kernel launch per device and dtype, and the refusals."""
import itertools
import math

import numpy as np
import pytest

import minidl
from minidl import kernels, nn, optim

torch = pytest.importorskip("torch")

SHAPES = [(4, 3), (7,), (1,), (3, 1, 2), (0,), (5, 5)]   # mixed sizes, an empty one
STEPS = 4


def make_params(lib, dtypes=("float64",) * len(SHAPES)):
    rng = np.random.default_rng(3)
    return [lib.tensor(rng.standard_normal(s), dtype=getattr(lib, d), requires_grad=True)
            for s, d in zip(SHAPES, dtypes)]


def grads(step, params):
    rng = np.random.default_rng(100 + step)
    return [rng.standard_normal(tuple(p.shape)) for p in params]


def groups_of(params):
    """Two groups with their own weight decay (2-D parameters decay, as in a GPT's setup); the last
    parameter never gets a gradient."""
    decayed = [p for p in params[:-1] if p.dim() >= 2]
    plain = [p for p in params[:-1] if p.dim() < 2]
    return [{"params": decayed}, {"params": plain + [params[-1]], "weight_decay": 0.0}]


def run(lib, name, kwargs, dtypes=("float64",) * len(SHAPES)):
    params = make_params(lib, dtypes)
    opt = getattr(lib.optim, name)(groups_of(params), **kwargs)
    for step in range(STEPS):
        for p, g in zip(params[:-1], grads(step, params)):
            p.grad = lib.tensor(g, dtype=p.dtype)
        opt.step()
    return params, opt


def numpy_state(opt, params):
    out = []
    for p in params:
        for key, value in sorted(opt.state[p].items()):
            out.append((key, np.asarray(value.detach().numpy() if hasattr(value, "numpy") else value)))
    return out


CASES = [("SGD", dict(lr=0.1, momentum=m, dampening=d, nesterov=n, weight_decay=0.01, maximize=mx))
         for m, d, n, mx in itertools.product([0.0, 0.9], [0.0, 0.3], [False, True], [False, True])
         if not (n and (m == 0 or d != 0))]
CASES += [(name, dict(lr=0.05, betas=(0.9, 0.95), weight_decay=0.1, amsgrad=a, maximize=mx))
          for name, a, mx in itertools.product(["Adam", "AdamW"], [False, True], [False, True])]
CASES += [("Adagrad", dict(lr=0.1, lr_decay=ld, weight_decay=wd, initial_accumulator_value=0.1, maximize=mx))
          for ld, wd, mx in itertools.product([0.0, 0.05], [0.0, 0.01], [False, True])]


def case_id(case):
    return case[0] + "-" + "-".join(f"{k}={v}" for k, v in case[1].items() if k != "lr")


@pytest.mark.parametrize("flag", ["foreach", "fused", "default"])
@pytest.mark.parametrize("name,kwargs", CASES, ids=[case_id(c) for c in CASES])
def test_multi_tensor_equals_per_parameter_path_exactly(name, kwargs, flag):
    extra = {} if flag == "default" else {flag: True}
    ours, opt = run(minidl, name, dict(kwargs, **extra))
    loop, loop_opt = run(minidl, name, dict(kwargs, foreach=False))
    for a, b in zip(ours, loop):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    for (ka, va), (kb, vb) in zip(numpy_state(opt, ours), numpy_state(loop_opt, loop), strict=True):
        assert ka == kb
        np.testing.assert_array_equal(va, vb, err_msg=ka)
    assert len(opt.state[ours[-1]]) == len(loop_opt.state[loop[-1]])   # (no gradient: no state made)


@pytest.mark.parametrize("name,kwargs", CASES, ids=[case_id(c) for c in CASES])
def test_multi_tensor_matches_torch(name, kwargs):
    ours, opt = run(minidl, name, dict(kwargs, foreach=True))
    theirs, topt = run(torch, name, dict(kwargs, foreach=False))
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-14)
    for p, tp in zip(ours, theirs):
        assert float(opt.state[p].get("step", 0)) == float(topt.state[tp].get("step", 0))


def count_launches(monkeypatch):
    """Calls per kernel name of the optimizer kernels on the CPU."""
    calls = {}
    for name in ("sgd_step", "adam_step", "sgd_steps", "adam_steps", "adagrad_steps", "norms", "scale"):
        real = kernels.get(name, "cpu")

        def counted(*args, _real=real, _name=name):
            calls[_name] = calls.get(_name, 0) + 1
            return _real(*args)
        monkeypatch.setitem(kernels._registry, ("cpu", name), counted)
    return calls


@pytest.mark.parametrize("name,single,multi", [("SGD", "sgd_step", "sgd_steps"), ("AdamW", "adam_step", "adam_steps"),
                                               ("Adagrad", None, "adagrad_steps")])
def test_one_launch_per_group_device_and_dtype(monkeypatch, name, single, multi):
    dtypes = ("float64", "float32", "float64", "float32", "float64", "float64")
    params = make_params(minidl, dtypes)
    opt = getattr(optim, name)([{"params": params[:4]}, {"params": params[4:], "lr": 0.01}], lr=0.1,
                               **({"momentum": 0.9} if name == "SGD" else {}))
    for p, g in zip(params[:-1], grads(0, params)):
        p.grad = minidl.tensor(g, dtype=p.dtype)
    calls = count_launches(monkeypatch)
    opt.step()
    assert calls.get(multi) == 3 and (single is None or single not in calls)   # 2 dtypes + 1 of the 2nd group


@pytest.mark.parametrize("name,kwargs", [("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
                                         ("AdamW", dict(lr=0.1, amsgrad=True)), ("Adagrad", dict(lr=0.1))])
def test_parallel_multi_tensor_kernels_equal_the_loop(monkeypatch, request, name, kwargs):
    """Above PARALLEL_MIN elements (lowered here) the multi-tensor kernels cut every tensor into chunks
    shared by the threads: each element still gets the same update."""
    from minidl.kernels.cpu import strided
    monkeypatch.setattr(strided, "PARALLEL_MIN", 1 << 10)
    request.addfinalizer(lambda old=minidl.get_num_threads(): minidl.set_num_threads(old))
    minidl.set_num_threads(2)

    def train(foreach):
        rng = np.random.default_rng(8)
        params = [minidl.tensor(rng.standard_normal(n)).requires_grad_() for n in (9000, 5, 4096, 4097)]
        opt = getattr(optim, name)(params, foreach=foreach, **kwargs)
        for step in range(2):
            for p, g in zip(params, grads(step, params)):
                p.grad = minidl.tensor(g)
            opt.step()
        return [p.detach().numpy() for p in params]
    for a, b in zip(train(True), train(False)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "Adagrad"])
def test_mixed_dtypes_half_and_unpacked_params_equal_the_loop(name):
    # (Adagrad's loop is a chain of ops, each rounding to float16; its multi-tensor step, like the fused
    # SGD/Adam kernels of both paths, computes float16 in float32 and rounds once: compared in float32 here)
    half = minidl.float32 if name == "Adagrad" else minidl.float16

    def train(foreach):
        rng = np.random.default_rng(5)
        params = [minidl.tensor(rng.standard_normal((3, 4)), dtype=half).requires_grad_(),
                  minidl.tensor(rng.standard_normal((4, 3))).t().detach().requires_grad_(),   # unpacked
                  minidl.tensor(rng.standard_normal(6), dtype=minidl.float64).requires_grad_()]
        opt = getattr(optim, name)(params, lr=0.1, foreach=foreach, **({"momentum": 0.5} if name == "SGD" else {}))
        for step in range(3):
            for p, g in zip(params, grads(step, params)):
                p.grad = minidl.tensor(g, dtype=p.dtype)
            opt.step()
        return [p.detach().float().numpy() for p in params]
    for a, b in zip(train(True), train(False)):
        np.testing.assert_array_equal(a, b)


def test_sparse_gradients_take_their_own_path_beside_the_multi_tensor_step():
    def train(foreach):
        emb = nn.Embedding(6, 3, sparse=True)
        with minidl.no_grad():
            emb.weight.copy_(minidl.arange(18, dtype=minidl.float32).reshape(6, 3) / 10)
        dense = minidl.ones(3, requires_grad=True)
        opt = optim.SGD([emb.weight, dense], lr=0.1, momentum=0.9, foreach=foreach)
        for _ in range(2):
            opt.zero_grad()
            (emb(minidl.tensor([1, 4])).sum() * dense).sum().backward()
            opt.step()
        return emb.weight.detach().numpy(), dense.detach().numpy()
    for a, b in zip(train(True), train(False)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "Adagrad"])
def test_fused_refusals_are_torchs(name):
    p = [minidl.zeros(2, requires_grad=True)]
    tp = [torch.zeros(2, requires_grad=True)]
    for kwargs in (dict(fused=True, differentiable=True), dict(fused=True, foreach=True)):
        with pytest.raises(RuntimeError) as theirs:
            getattr(torch.optim, name)(tp, lr=0.1, **kwargs)
        with pytest.raises(RuntimeError, match=f"^{theirs.value}$".replace("`", ".")):
            getattr(optim, name)(p, lr=0.1, **kwargs)


def test_differentiable_keeps_the_per_parameter_path(monkeypatch):
    w = minidl.ones(3, requires_grad=True)
    opt = optim.Adam([w], lr=0.1, differentiable=True)
    w.grad = minidl.ones(3)
    calls = count_launches(monkeypatch)
    opt.step()
    assert calls == {"adam_step": 1}


def test_multi_tensor_ops_refuse_mixed_lists():
    a, b = minidl.zeros(3), minidl.zeros(3, dtype=minidl.float64)
    with pytest.raises(RuntimeError, match="sgd_steps: every parameter must be minidl.float32 on cpu .* position 1"):
        minidl._fused_sgd_steps_([a, b], [a, b], None, lr=0.1, weight_decay=0, momentum=0, dampening=0,
                                 nesterov=False, maximize=False, firsts=[False, False])
    with pytest.raises(RuntimeError, match="adagrad_steps: 1 parameters but a list of 2"):
        minidl._fused_adagrad_steps_([a], [a, a], [a], [minidl.tensor(0.0)], lr=0.1, lr_decay=0,
                                     weight_decay=0, eps=1e-10, maximize=False)
    with pytest.raises(RuntimeError, match="step counters must be one-element tensors, got shape \\[2\\]"):
        minidl._fused_adagrad_steps_([a], [a], [a], [minidl.zeros(2)], lr=0.1, lr_decay=0, weight_decay=0,
                                     eps=1e-10, maximize=False)
    with pytest.raises(ValueError, match="_foreach_norm: expects at least one tensor"):
        minidl._foreach_norm([])
    with pytest.raises(ValueError, match="_foreach_norm: ord must be positive or inf, got 0.0"):
        minidl._foreach_norm([a], 0)
    with pytest.raises(RuntimeError, match="_foreach_norm: has no gradient"):
        minidl._foreach_norm([minidl.zeros(2, requires_grad=True)])


# ----------------------------------------------------------------------------- clip_grad_norm_
def clip_case(lib, norm_type, foreach, dtypes, max_norm=0.5, fill=None):
    params = make_params(lib, dtypes)
    for p, g in zip(params[:-1], grads(0, params)):
        p.grad = lib.tensor(g, dtype=p.dtype)
    if fill is not None:
        params[0].grad.view(-1)[1] = fill
    given = [p for p in params if p.numel()] if lib is torch else params   # (torch refuses an empty one's inf norm)
    total = lib.nn.utils.clip_grad_norm_(given, max_norm, norm_type=norm_type, foreach=foreach)
    return float(total), [p.grad.double().numpy() for p in params[:-1]]


@pytest.mark.parametrize("dtypes", [("float64",) * 6, ("float64", "float32") * 3], ids=["float64", "mixed"])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
def test_clip_grad_norm_foreach_matches_the_loop_and_torch(norm_type, dtypes):
    total, clipped = clip_case(minidl, norm_type, True, dtypes)
    loop_total, loop_clipped = clip_case(minidl, norm_type, False, dtypes)
    torch_total, torch_clipped = clip_case(torch, norm_type, False, dtypes)
    # (per-tensor sums in float64, then rounded: the loop's norm op sums in another order)
    tol = 1e-6 if "float32" in dtypes else 1e-13
    assert total == pytest.approx(loop_total, rel=tol) and total == pytest.approx(torch_total, rel=tol)
    for a, b, c in zip(clipped, loop_clipped, torch_clipped):
        np.testing.assert_allclose(a, b, rtol=tol, atol=1e-15)
        np.testing.assert_allclose(a, c, rtol=tol, atol=1e-15)


def test_clip_grad_norm_foreach_launches_once_per_device_and_dtype(monkeypatch):
    calls = count_launches(monkeypatch)
    clip_case(minidl, 2.0, None, ("float64", "float32") * 3)
    assert calls == {"norms": 2, "scale": 2}


@pytest.mark.parametrize("norm_type", [2.0, math.inf])
def test_clip_grad_norm_foreach_nonfinite(norm_type):
    for foreach in (True, False):
        with pytest.raises(RuntimeError, match="non-finite"):
            params = make_params(minidl)
            for p, g in zip(params[:-1], grads(0, params)):
                p.grad = minidl.tensor(g)
            params[0].grad.view(-1)[2] = math.inf
            nn.utils.clip_grad_norm_(params, 1.0, norm_type=norm_type, error_if_nonfinite=True, foreach=foreach)
    total, _ = clip_case(minidl, norm_type, True, ("float64",) * 6, fill=math.inf)
    assert total == math.inf


def test_clip_grad_norm_foreach_refusals():
    w = minidl.zeros(3, requires_grad=True)
    w.grad = minidl.ones(3)
    with pytest.raises(RuntimeError, match=r"clip_grad_norm_: foreach=True cannot handle norm_type=0.0"):
        nn.utils.clip_grad_norm_([w], 1.0, norm_type=0, foreach=True)
    emb = nn.Embedding(4, 2, sparse=True)
    emb(minidl.tensor([1])).sum().backward()
    with pytest.raises(RuntimeError, match="clip_grad_norm_: foreach=True cannot handle sparse gradients"):
        nn.utils.clip_grad_norm_(emb.parameters(), 1.0, foreach=True)
    tw = torch.zeros(3, requires_grad=True)
    tw.grad = torch.ones(3)
    assert float(nn.utils.clip_grad_norm_([w], 1.0, norm_type=0)) == float(   # (foreach=None: the loop)
        torch.nn.utils.clip_grad_norm_([tw], 1.0, norm_type=0))
