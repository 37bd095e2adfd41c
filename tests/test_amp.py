"""Automatic mixed precision against PyTorch 2.13: autocast's cast policies op by op (torch's CPU
autocast is the oracle; for device 'cuda', on the simulator, the expected dtypes are torch's CUDA
lists from its autocast_mode.h), whole training steps under autocast with and without GradScaler,
and GradScaler step by step against torch's GradScaler('cpu')."""
import re
import warnings

import numpy as np
import pytest

import minidl
from minidl import nn

torch = pytest.importorskip("torch")

bf16 = minidl.bfloat16
LOW = {"float16": (minidl.float16, torch.float16), "bfloat16": (bf16, torch.bfloat16)}
TOL = {"float16": 1e-2, "bfloat16": 8e-2, "float32": 1e-4, "float64": 1e-10}


def name_of(dtype) -> str:
    return str(dtype).split(".")[-1]


def close(actual, expected, dtype_name, scale=1.0):
    """minidl tensor ``actual`` equals torch tensor ``expected`` within ``dtype_name``'s precision."""
    tol = TOL[dtype_name] * scale
    np.testing.assert_allclose(actual.detach().float().cpu().numpy(), expected.detach().float().numpy(), rtol=tol,
                               atol=tol)


# ----------------------------------------------------------------------------- op by op
def f(*shape):
    return ("float32", shape)


def h(*shape):
    return ("float16", shape)


def _idx(lib, like):
    return lib.tensor([0, 2, 1], device=like.device)


# (name, fn(lib, F, *inputs), inputs, dtype on 'cuda'): inputs are seeded normal values that require
# grad; float16 ones stand for the output of an earlier op that ran in float16
CASES = [
    # lower precision on both devices
    ("matmul", lambda t, F, a, b: t.matmul(a, b), [f(3, 4), f(4, 5)], "float16"),
    ("matmul-operator-mixed", lambda t, F, a, b: a @ b, [h(3, 4), f(4, 5)], "float16"),
    ("matmul-vectors", lambda t, F, a, b: t.matmul(a, b), [f(4), f(4)], "float16"),
    ("mm", lambda t, F, a, b: t.mm(a, b), [f(3, 4), f(4, 5)], "float16"),
    ("bmm", lambda t, F, a, b: t.bmm(a, b), [f(2, 3, 4), f(2, 4, 5)], "float16"),
    ("baddbmm", lambda t, F, x, a, b: t.baddbmm(x, a, b), [f(2, 3, 5), f(2, 3, 4), f(2, 4, 5)], "float16"),
    ("addmm", lambda t, F, x, a, b: t.addmm(x, a, b, beta=0.5), [f(3, 5), f(3, 4), f(4, 5)], "float16"),
    ("linear", lambda t, F, x, w, b: F.linear(x, w, b), [f(3, 4), f(5, 4), f(5)], "float16"),
    ("conv1d", lambda t, F, x, w, b: F.conv1d(x, w, b, padding=1), [f(2, 3, 8), f(4, 3, 3), f(4)], "float16"),
    ("conv2d", lambda t, F, x, w, b: F.conv2d(x, w, b, stride=2), [f(2, 3, 7, 7), f(4, 3, 3, 3), f(4)], "float16"),
    ("conv_transpose2d", lambda t, F, x, w, b: F.conv_transpose2d(x, w, b), [f(2, 3, 4, 4), f(3, 2, 3, 3), f(2)],
     "float16"),
    ("sdpa", lambda t, F, q, k, v: F.scaled_dot_product_attention(q, k, v), [f(2, 3, 4), f(2, 5, 4), f(2, 5, 4)],
     "float16"),
    ("einsum", lambda t, F, a, b: t.einsum("ij,jk->ik", a, b), [f(3, 4), f(4, 5)], "float16"),
    # composed of matmuls in minidl, not listed in torch: unchanged
    ("dot", lambda t, F, a, b: t.dot(a, b), [f(4), f(4)], "float32"),
    ("adaptive_avg_pool2d", lambda t, F, x: F.adaptive_avg_pool2d(x, 2), [f(1, 2, 5, 5)], "float32"),
    # float32 on both devices
    ("mse_loss", lambda t, F, a, b: F.mse_loss(a, b), [h(3, 4), h(3, 4)], "float32"),
    ("l1_loss", lambda t, F, a, b: F.l1_loss(a, b), [h(3, 4), h(3, 4)], "float32"),
    ("smooth_l1_loss", lambda t, F, a, b: F.smooth_l1_loss(a, b, beta=0.5), [h(3, 4), h(3, 4)], "float32"),
    ("huber_loss", lambda t, F, a, b: F.huber_loss(a, b, delta=0.5), [h(3, 4), h(3, 4)], "float32"),
    ("nll_loss", lambda t, F, x: F.nll_loss(x, _idx(t, x)), [h(3, 4)], "float32"),
    ("cross_entropy", lambda t, F, x: F.cross_entropy(x, _idx(t, x)), [h(3, 4)], "float32"),
    ("bce_with_logits", lambda t, F, x, y: F.binary_cross_entropy_with_logits(x, y.sigmoid()), [h(3, 4), f(3, 4)],
     "float32"),
    ("kl_div", lambda t, F, x, y: F.kl_div(x.log_softmax(1), y.softmax(1), reduction="batchmean"),
     [h(3, 4), f(3, 4)], "float32"),
    ("prod", lambda t, F, x: (x * 0.5 + 1).prod(), [h(3, 4)], "float32"),
    ("cdist", lambda t, F, a, b: t.cdist(a, b), [h(3, 4), h(5, 4)], "float32"),
    # float32 on the CPU only
    ("trace", lambda t, F, x: t.trace(x), [h(3, 3)], "float16"),
    ("pad-reflect", lambda t, F, x: F.pad(x, (2, 1), mode="reflect"), [h(2, 5)], "float16"),
    ("pad-replicate", lambda t, F, x: F.pad(x, (1, 1, 2, 0), mode="replicate"), [h(1, 2, 3, 3)], "float16"),
    ("pad-circular", lambda t, F, x: F.pad(x, (1, 1), mode="circular"), [h(1, 2, 3)], "float16"),
    # float32 on 'cuda' only
    ("interpolate", lambda t, F, x: F.interpolate(x, size=(5, 6), mode="bilinear"), [f(1, 2, 3, 4)], "float32"),
    ("interpolate-half", lambda t, F, x: F.interpolate(x, scale_factor=1.5, mode="bicubic"), [h(1, 2, 3, 4)],
     "float32"),
    ("cosine_similarity", lambda t, F, a, b: F.cosine_similarity(a, b), [h(3, 4), h(3, 4)], "float32"),
    # float32 on the CPU, promoted on 'cuda'
    ("grid_sample", lambda t, F, x, g: F.grid_sample(x, g.tanh(), align_corners=False), [h(1, 2, 3, 4), h(1, 2, 2, 2)],
     "float16"),
    # promoted on 'cuda', unchanged on the CPU (minidl's einsum, whose matmul would cast, runs uncast)
    ("bilinear", lambda t, F, a, b, w: F.bilinear(a, b, w), [f(2, 3), f(2, 4), f(5, 3, 4)], "float32"),
    ("bilinear-half", lambda t, F, a, b, w: F.bilinear(a, b, w), [h(2, 3), h(2, 4), h(5, 3, 4)], "float16"),
    ("softmax", lambda t, F, x: F.softmax(x, 1), [h(3, 4)], "float32"),
    ("log_softmax", lambda t, F, x: x.log_softmax(1), [h(3, 4)], "float32"),
    ("sum", lambda t, F, x: x.sum(1), [h(3, 4)], "float32"),
    ("cumsum", lambda t, F, x: x.cumsum(1), [h(3, 4)], "float32"),
    ("exp", lambda t, F, x: x.exp(), [h(3, 4)], "float32"),
    ("log", lambda t, F, x: (x * x + 1).log(), [h(3, 4)], "float32"),
    ("pow", lambda t, F, x: x ** 2, [h(3, 4)], "float32"),
    ("layer_norm", lambda t, F, x: F.layer_norm(x, (4,)), [h(3, 4)], "float32"),
    ("group_norm", lambda t, F, x: F.group_norm(x, 2), [h(2, 4, 3)], "float32"),
    ("logsumexp", lambda t, F, x: x.logsumexp(1), [h(3, 4)], "float32"),
    ("norm", lambda t, F, x: x.norm(), [h(3, 4)], "float32"),
    ("softmax-dtype-given", lambda t, F, x: F.softmax(x, 1, dtype=t.float16), [h(3, 4)], "float16"),
    # on no list: unchanged (mixed-dtype norms keep the input's dtype, as torch's)
    ("relu", lambda t, F, x: x.relu(), [h(3, 4)], "float16"),
    ("mean", lambda t, F, x: x.mean(), [h(3, 4)], "float16"),
    ("elu", lambda t, F, x: F.elu(x), [h(3, 4)], "float16"),
    ("logsigmoid", lambda t, F, x: F.logsigmoid(x), [h(3, 4)], "float16"),
    ("logaddexp", lambda t, F, a, b: t.logaddexp(a, b), [h(3, 4), h(3, 4)], "float16"),
    ("var", lambda t, F, x: x.var(1), [h(3, 4)], "float16"),
    ("std", lambda t, F, x: x.std(), [h(3, 4)], "float16"),
    ("avg_pool2d", lambda t, F, x: F.avg_pool2d(x, 2), [h(1, 2, 4, 4)], "float16"),
    ("batch_norm-no-params", lambda t, F, x: F.batch_norm(x, None, None, training=True), [h(4, 3, 2)], "float16"),
    ("layer_norm-params", lambda t, F, x, w, b: F.layer_norm(x, (4,), w, b), [h(3, 4), f(4), f(4)], "float32"),
    ("batch_norm", lambda t, F, x, w, b: F.batch_norm(x, None, None, w, b, training=True),
     [h(4, 3, 2), f(3), f(3)], "float16"),
    ("batch_norm-eval", lambda t, F, x: F.batch_norm(x, t.full((3,), 0.1, device=x.device),
                                                     t.full((3,), 2.0, device=x.device)), [h(4, 3, 2)], "float16"),
    ("group_norm-params", lambda t, F, x, w, b: F.group_norm(x, 2, w, b), [h(2, 4, 3), f(4), f(4)], "float32"),
    # promote: the widest floating input
    ("cat", lambda t, F, a, b: t.cat([a, b]), [h(2, 3), f(2, 3)], "float32"),
    ("stack", lambda t, F, a, b: t.stack([a, b], 1), [h(2, 3), f(2, 3)], "float32"),
    ("addcmul", lambda t, F, x, a, b: t.addcmul(x, a, b, value=0.5), [f(3), h(3), h(3)], "float32"),
    ("index_copy", lambda t, F, x, s: x.index_copy(0, _idx(t, x), s), [f(3, 2), h(3, 2)], None),
]


def _inputs(specs, device="cpu", seed=0):
    """The same seeded leaves for minidl (on ``device``) and torch (on the CPU)."""
    rng = np.random.RandomState(seed)
    values = [rng.randn(*shape).astype(np.float32) * 0.5 for _, shape in specs]
    ours = [minidl.tensor(v, dtype=getattr(minidl, d), device=device, requires_grad=True)
            for v, (d, _) in zip(values, specs)]
    theirs = [torch.tensor(v, dtype=getattr(torch, d), requires_grad=True) for v, (d, _) in zip(values, specs)]
    return ours, theirs


def _run_case(fn, specs, low, device="cpu"):
    """(minidl's output and input grads, torch's) for ``fn`` under autocast to ``low``; the
    gradients of sum(output * fixed weights) taken outside the region. None where torch refuses the
    inputs (float16 beside bfloat16 autocast), after checking that minidl refuses them alike."""
    ours, theirs = _inputs(specs, device)
    try:
        with torch.autocast("cpu", dtype=LOW[low][1]):
            ref = fn(torch, torch.nn.functional, *theirs)
    except RuntimeError as refusal:
        with pytest.raises(RuntimeError, match=re.escape(str(refusal))):
            with minidl.autocast(device, dtype=LOW[low][0]):
                fn(minidl, minidl.nn.functional, *ours)
        return None
    with minidl.autocast(device, dtype=LOW[low][0]):
        out = fn(minidl, minidl.nn.functional, *ours)
    weights = np.array(np.random.RandomState(1).rand(*ref.shape), dtype=np.float32)
    (out.float() * minidl.tensor(weights, device=device)).sum().backward()
    (ref.float() * torch.tensor(weights)).sum().backward()
    return (out, ours), (ref, theirs)


@pytest.mark.parametrize("low", list(LOW))
@pytest.mark.parametrize("name, fn, specs, cuda_dtype", [c for c in CASES if c[0] != "softmax-dtype-given"],
                         ids=[c[0] for c in CASES if c[0] != "softmax-dtype-given"])
def test_cpu_op_runs_in_torchs_dtype_with_its_values_and_grads(name, fn, specs, cuda_dtype, low):
    result = _run_case(fn, specs, low)
    if result is None:
        return
    (out, ours), (ref, theirs) = result
    assert name_of(out.dtype) == name_of(ref.dtype)
    close(out, ref, name_of(ref.dtype) if name_of(ref.dtype) in ("float32", "float64") else low, scale=2)
    for mine, its in zip(ours, theirs):
        assert mine.grad.dtype is mine.dtype   # float32 leaves get float32 gradients, as torch's
        close(mine.grad, its.grad, low, scale=2)


def test_lower_precision_list_checked_on_torch_too():
    """The CUDA expectations of CASES hold on the CPU wherever torch's two lists agree."""
    with torch.autocast("cpu", dtype=torch.float16):
        assert torch.mm(torch.ones(2, 2), torch.ones(2, 2)).dtype is torch.float16
        assert torch.dot(torch.ones(2), torch.ones(2)).dtype is torch.float32   # dot: not on the CPU list
        assert torch.softmax(torch.ones(2).half(), 0).dtype is torch.float16    # softmax: float32 on CUDA only


def test_float64_and_integer_inputs_are_left_alone():
    x = minidl.randn(3, 3)
    with minidl.autocast("cpu", dtype=minidl.float16):
        assert minidl.mm(x.double(), x.double()).dtype is minidl.float64
        assert minidl.mm(x.long(), x.long()).dtype is minidl.int64
        assert minidl.nn.functional.mse_loss(x.double(), x.double()).dtype is minidl.float64
        assert minidl.cat([x.half(), x.double()]).dtype is minidl.float64
        with pytest.raises(RuntimeError, match="same dtype"):   # torch: "expected m1 and m2 to have the same dtype"
            minidl.mm(x.double(), x)


def test_gradients_reach_float32_weights_in_float32_through_one_cached_cast():
    w = minidl.randn(4, 4, requires_grad=True)
    x = minidl.randn(2, 4)
    with minidl.autocast("cpu", dtype=minidl.float16):
        a, b = minidl.mm(x, w), minidl.mm(x, w)
        assert a.grad_fn.next_functions[1][0] is b.grad_fn.next_functions[1][0]   # w cast once
        with minidl.no_grad():
            minidl.mm(x, w)                        # a cast without a graph is not cached for later use
        c = minidl.mm(x, w)
        assert c.requires_grad
        (a.float().sum() + b.float().sum() + c.float().sum()).backward()
    assert w.grad.dtype is minidl.float32
    expected = 3 * x.half().float().sum(0, keepdim=True).T.expand(4, 4)
    np.testing.assert_allclose(w.grad.numpy(), expected.numpy(), rtol=1e-3)
    with minidl.autocast("cpu", dtype=minidl.float16, cache_enabled=False):
        a, b = minidl.mm(x, w), minidl.mm(x, w)
        assert a.grad_fn.next_functions[1][0] is not b.grad_fn.next_functions[1][0]
        assert not minidl.is_autocast_cache_enabled()
    with minidl.autocast("cpu", dtype=minidl.float16):
        assert minidl.mm(x, w).grad_fn.next_functions[1][0] is not a.grad_fn.next_functions[1][0]


def test_cached_weight_cast_lasts_the_region_as_torchs():
    """In-place updates of a weight inside a region don't reach its cached cast (in both)."""
    results = []
    for lib in (minidl, torch):
        w, x = lib.ones(2, 2, requires_grad=True), lib.ones(2, 2)
        with lib.autocast("cpu", dtype=lib.float16):
            first = lib.mm(w, x)[0, 0].item()
            with lib.no_grad():
                w.add_(1)
            results.append((first, lib.mm(w, x)[0, 0].item()))
        with lib.autocast("cpu", dtype=lib.float16):
            results.append(lib.mm(w, x)[0, 0].item())
    assert results[:2] == results[2:] == [(2.0, 2.0), 4.0]


def test_backward_inside_the_region_casts_too_and_grads_keep_their_dtype():
    """As torch: backward ops inside a region follow autocast; the grad of a float32 input stays float32."""
    rng = np.random.RandomState(0)
    xv, wv = rng.randn(16, 16).astype(np.float32), rng.randn(16, 16).astype(np.float32)
    grads = []
    for lib in (minidl, torch):
        x = lib.tensor(xv, requires_grad=True)
        y = (x @ lib.tensor(wv)).sum()
        with lib.autocast("cpu", dtype=lib.float16):
            y.backward()
        assert name_of(x.grad.dtype) == "float32"
        grads.append(x.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-2, atol=1e-2)
    exact = np.ones((16, 16), np.float32) @ wv.T
    assert np.abs(grads[0] - exact).max() > 0   # rounded to float16 on the way


# ----------------------------------------------------------------------------- the region
def test_state_nesting_and_defaults_as_torchs():
    seen = []
    for lib in (minidl, torch):
        x = lib.ones(2, 2)
        log = [lib.is_autocast_enabled("cpu"), name_of(lib.get_autocast_dtype("cuda"))]
        with lib.autocast("cpu", dtype=lib.float16):
            log += [lib.is_autocast_enabled("cpu"), lib.is_autocast_enabled("cuda"), lib.is_autocast_enabled(),
                    name_of(lib.get_autocast_dtype("cpu")), name_of(lib.mm(x, x).dtype)]
            with lib.autocast("cpu", enabled=False):
                log += [lib.is_autocast_enabled("cpu"), name_of(lib.get_autocast_dtype("cpu")),
                        name_of(lib.mm(x, x).dtype)]
                with lib.autocast("cpu", dtype=lib.float16):
                    log.append(name_of(lib.mm(x, x).dtype))
            log.append(name_of(lib.mm(x, x).dtype))
        log += [lib.is_autocast_enabled("cpu"), name_of(lib.mm(x, x).dtype), lib.is_autocast_cache_enabled()]
        seen.append(log)
    assert seen[0] == seen[1]


def test_cpu_default_dtype_is_bfloat16():
    assert minidl.get_autocast_dtype("cpu") is bf16 and minidl.autocast("cpu").fast_dtype is bf16


def test_decorator_form():
    @minidl.autocast("cpu", dtype=minidl.float16)
    def product(a, b):
        assert minidl.is_autocast_enabled("cpu")
        return a @ b

    assert product(minidl.ones(2, 3), minidl.ones(3, 2)).dtype is minidl.float16
    assert not minidl.is_autocast_enabled("cpu")
    with pytest.raises(TypeError, match=r"autocast\(\)\(func\) requires a callable, but got int"):
        minidl.autocast("cpu")(3)


def test_state_is_per_thread():
    import threading
    seen = []
    with minidl.autocast("cpu", dtype=minidl.float16):
        thread = threading.Thread(target=lambda: seen.append(minidl.is_autocast_enabled("cpu")))
        thread.start()
        thread.join()
    assert seen == [False]


def test_bad_arguments_raise_or_warn_as_torch(monkeypatch):
    for lib in (minidl, torch):
        with pytest.raises(ValueError, match="Expected `device_type` of type `str`, got: `<class '"):
            lib.autocast(lib.float16)
        with pytest.raises(RuntimeError, match="device type at start of device string: foo"):
            lib.autocast("foo")
        for dtype in (lib.float32, lib.float64):
            with pytest.warns(UserWarning, match="In CPU autocast, but the target dtype is not supported. "
                                                 "Disabling autocast.\nCPU Autocast only supports dtypes of "):
                region = lib.autocast("cpu", dtype=dtype)
            assert region._enabled is False
    monkeypatch.setattr(minidl.cuda, "is_available", lambda: False)
    with pytest.warns(UserWarning, match="CUDA is not available"):
        region = minidl.autocast("cuda")
    with region:
        assert not minidl.is_autocast_enabled("cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert minidl.autocast("cuda", enabled=False).fast_dtype is minidl.float16


def test_custom_fwd_and_custom_bwd():
    seen = {}

    class Square(minidl.autograd.Function):
        @staticmethod
        @minidl.amp.custom_fwd(device_type="cpu", cast_inputs=minidl.float32)
        def forward(ctx, x):
            seen["forward"] = (x.dtype, minidl.is_autocast_enabled("cpu"))
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @minidl.amp.custom_bwd(device_type="cpu")
        def backward(ctx, g):
            seen["backward"] = minidl.is_autocast_enabled("cpu")
            (x,) = ctx.saved_tensors
            return 2 * x * g

    x = minidl.tensor([1.5, -2.0], dtype=minidl.float16, requires_grad=True)
    with minidl.autocast("cpu", dtype=minidl.float16):
        y = Square.apply(x)
    y.sum().backward()
    assert seen == {"forward": (minidl.float32, False), "backward": False}
    assert y.dtype is minidl.float32 and x.grad.dtype is minidl.float16 and x.grad.tolist() == [3.0, -4.0]


# ----------------------------------------------------------------------------- training steps
def _models(conv: bool):
    torch.manual_seed(0)

    def build(lib):
        n = lib.nn
        if conv:
            return n.Sequential(n.Conv2d(3, 6, 3, padding=1), n.ReLU(), n.Flatten(), n.Linear(6 * 5 * 5, 16),
                                n.LayerNorm(16), n.ReLU(), n.Linear(16, 4))
        return n.Sequential(n.Linear(10, 32), n.ReLU(), n.Linear(32, 32), n.ReLU(), n.Linear(32, 4))

    theirs, ours = build(torch), build(minidl)
    with minidl.no_grad():
        for mine, its in zip(ours.parameters(), theirs.parameters()):
            mine.copy_(minidl.tensor(its.detach().numpy()))
    return ours, theirs


def _batches(conv: bool, steps: int):
    rng = np.random.RandomState(1)
    shape = (8, 3, 5, 5) if conv else (8, 10)
    return [(rng.randn(*shape).astype(np.float32), rng.randint(0, 4, 8)) for _ in range(steps)]


def _optimizers(ours, theirs, adam: bool):
    if adam:
        return minidl.optim.Adam(ours.parameters(), lr=1e-2), torch.optim.Adam(theirs.parameters(), lr=1e-2)
    return minidl.optim.SGD(ours.parameters(), lr=0.1, momentum=0.9), \
        torch.optim.SGD(theirs.parameters(), lr=0.1, momentum=0.9)


def _loss(lib, model, x, y, low):
    with lib.autocast("cpu", dtype=low):
        out = model(lib.tensor(x))
        loss = lib.nn.functional.cross_entropy(out, lib.tensor(y))
    assert name_of(out.dtype) == name_of(low) and name_of(loss.dtype) == "float32"
    return loss


def _check_params(ours, theirs, low):
    for mine, its in zip(ours.parameters(), theirs.parameters()):
        assert mine.dtype is minidl.float32 and mine.grad.dtype is minidl.float32
        close(mine, its, low)


@pytest.mark.parametrize("low", ["float16", "bfloat16"])
@pytest.mark.parametrize("conv, adam", [(False, False), (True, True)], ids=["mlp-sgd", "cnn-adam"])
def test_training_steps_under_autocast_match_torch(conv, adam, low):
    ours, theirs = _models(conv)
    opt, topt = _optimizers(ours, theirs, adam)
    for x, y in _batches(conv, 3):
        opt.zero_grad()
        topt.zero_grad()
        loss, ref = _loss(minidl, ours, x, y, LOW[low][0]), _loss(torch, theirs, x, y, LOW[low][1])
        close(loss, ref, low)
        loss.backward()
        ref.backward()
        opt.step()
        topt.step()
        _check_params(ours, theirs, low)


@pytest.mark.parametrize("low", ["float16", "bfloat16"])
def test_training_with_grad_scaler_matches_torch_step_by_step(low):
    """scale -> backward -> unscale_ -> clip_grad_norm_ -> step -> update, with torch's
    GradScaler('cpu') beside; step 2 gets an inf gradient: skipped, and the scale backs off."""
    ours, theirs = _models(False)
    opt, topt = _optimizers(ours, theirs, adam=True)
    scaler = minidl.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=2)
    tscaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10, growth_interval=2)
    for step, (x, y) in enumerate(_batches(False, 6)):
        opt.zero_grad()
        topt.zero_grad()
        loss, ref = _loss(minidl, ours, x, y, LOW[low][0]), _loss(torch, theirs, x, y, LOW[low][1])
        scaled, tscaled = scaler.scale(loss), tscaler.scale(ref)
        assert scaled.dtype is minidl.float32
        close(scaled, tscaled, low)
        scaled.backward()
        tscaled.backward()
        if step == 2:
            first, tfirst = next(ours.parameters()), next(theirs.parameters())
            first.grad[0, 0] = float("inf")
            tfirst.grad[0, 0] = float("inf")
        before = [p.detach().clone() for p in ours.parameters()]
        scaler.unscale_(opt)
        tscaler.unscale_(topt)
        norm = nn.utils.clip_grad_norm_(ours.parameters(), 1.0)
        tnorm = torch.nn.utils.clip_grad_norm_(theirs.parameters(), 1.0)
        assert np.isinf(norm.item()) == np.isinf(tnorm.item()) == (step == 2)
        scaler.step(opt)
        tscaler.step(topt)
        scaler.update()
        tscaler.update()
        assert scaler.state_dict() == tscaler.state_dict()
        if step == 2:
            assert all(minidl.equal(p, b) for p, b in zip(ours.parameters(), before))   # skipped
        _check_params(ours, theirs, low)
    assert scaler.get_scale() == tscaler.get_scale() == 2.0 ** 11   # grew twice, backed off once


# ----------------------------------------------------------------------------- GradScaler alone
def _one_param(lib, grad):
    p = lib.nn.Parameter(lib.ones(3))
    return p, lib.optim.SGD([p], lr=0.5), grad


def test_grad_scaler_errors_and_defaults_as_torchs():
    for lib in (minidl, torch):
        scaler = lib.amp.GradScaler("cpu")
        assert scaler.is_enabled() and scaler.get_scale() == 2.0 ** 16
        assert (scaler.get_growth_factor(), scaler.get_backoff_factor(), scaler.get_growth_interval()) == \
            (2.0, 0.5, 2000)
        assert scaler.state_dict() == {"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                                       "growth_interval": 2000, "_growth_tracker": 0}
        p, opt, _ = _one_param(lib, None)
        for call in (scaler.unscale_, scaler.step):
            with pytest.raises(AssertionError, match=f"Attempted {call.__name__} but _scale is None.  This may "
                                                     "indicate your script did not use scaler.scale"):
                call(opt)
        with pytest.raises(AssertionError, match="The growth factor must be > 1.0."):
            lib.amp.GradScaler("cpu", growth_factor=1.0)
        with pytest.raises(AssertionError, match="The backoff factor must be < 1.0."):
            lib.amp.GradScaler("cpu", backoff_factor=1.0)
        with pytest.raises(ValueError, match="outputs must be a Tensor or an iterable of Tensors"):
            scaler.scale(1.0)
        out = scaler.scale([lib.ones(1), (lib.ones(2, dtype=lib.float16), [lib.ones(())])])
        assert isinstance(out, list) and isinstance(out[1], tuple) and out[0].tolist() == [65536.0]
        assert name_of(out[1][0].dtype) == "float16" and out[1][0].isinf().all()   # 65536 overflows float16
        with pytest.raises(AssertionError, match="No inf checks were recorded for this optimizer."):
            scaler.step(opt)   # no gradients
        with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called on this optimizer"):
            scaler.unscale_(opt)
        scaler.update(new_scale=8.0)
        p.grad = lib.ones(3)
        scaler.unscale_(opt)
        assert p.grad.tolist() == [0.125] * 3
        scaler.step(opt)
        with pytest.raises(RuntimeError, match="unscale_\\(\\) is being called after step\\(\\)."):
            scaler.unscale_(opt)
        with pytest.raises(RuntimeError, match="step\\(\\) has already been called since the last update\\(\\)."):
            scaler.step(opt)
        scaler.update()
        with pytest.raises(RuntimeError, match="Closure use is not currently supported if GradScaler is enabled."):
            scaler.step(opt, closure=lambda: 0)
        with pytest.raises(AssertionError, match="new_scale should be a float or a 1-element"):
            scaler.update(new_scale=lib.tensor([1.0, 2.0]))
        scaler.update(new_scale=lib.tensor(4.0))
        assert scaler.get_scale() == 4.0
        h = lib.nn.Parameter(lib.ones(2, dtype=lib.float16))
        h.grad = lib.ones(2, dtype=lib.float16)
        with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients."):
            scaler.unscale_(lib.optim.SGD([h], lr=1.0))
        with pytest.raises(RuntimeError, match="The source state dict is empty"):
            scaler.load_state_dict({})


def test_grad_scaler_growth_backoff_and_state_dict_round_trip_with_torch():
    scalers = (minidl.amp.GradScaler("cpu", init_scale=4.0, growth_interval=3),
               torch.amp.GradScaler("cpu", init_scale=4.0, growth_interval=3))
    history = []
    for scaler, lib in zip(scalers, (minidl, torch)):
        p = lib.nn.Parameter(lib.ones(2))
        opt = lib.optim.SGD([p], lr=0.1)
        log = []
        for step in range(9):
            opt.zero_grad()
            scaler.scale((p * p).sum()).backward()
            if step in (4, 5):
                p.grad[1] = float("nan") if step == 4 else float("inf")
            scaler.step(opt)   # unscales first
            scaler.update()
            log.append((scaler.get_scale(), scaler._get_growth_tracker(), p.tolist()))
        history.append(log)
    assert history[0] == history[1]
    ours, theirs = scalers
    fresh, tfresh = minidl.amp.GradScaler("cpu"), torch.amp.GradScaler("cpu")
    fresh.load_state_dict(theirs.state_dict())
    tfresh.load_state_dict(ours.state_dict())
    assert fresh.state_dict() == tfresh.state_dict() == theirs.state_dict()


def test_disabled_grad_scaler_passes_everything_through(monkeypatch):
    monkeypatch.setattr(minidl.cuda, "is_available", lambda: False)
    with pytest.warns(UserWarning, match="GradScaler is enabled, but CUDA is not available.  Disabling."):
        scaler = minidl.amp.GradScaler()
    with pytest.warns(FutureWarning, match="minidl.cuda.amp.GradScaler\\(args...\\)` is deprecated"):
        minidl.cuda.amp.GradScaler(enabled=False)
    for scaler in (scaler, minidl.amp.GradScaler("cpu", enabled=False)):
        p, opt, _ = _one_param(minidl, None)
        loss = (p * p).sum()
        assert scaler.scale(loss) is loss and not scaler.is_enabled() and scaler.get_scale() == 1.0
        loss.backward()
        scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
        assert p.tolist() == [0.0] * 3   # an ordinary step: 1 - 0.5 * 2
        assert scaler.state_dict() == {}
        scaler.load_state_dict({"scale": 8.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000,
                                "_growth_tracker": 0})
        assert scaler.get_scale() == 1.0


# ----------------------------------------------------------------------------- device 'cuda' (simulator)
@pytest.fixture
def cuda():
    from cuda_support import cuda_device
    return cuda_device()


@pytest.mark.parametrize("name, fn, specs, cuda_dtype", [c for c in CASES if c[3] is not None],
                         ids=[c[0] for c in CASES if c[3] is not None])
def test_cuda_op_runs_in_the_dtype_of_torchs_cuda_lists(cuda, name, fn, specs, cuda_dtype):
    (out, ours), (ref, theirs) = _run_case(fn, specs, "float16", device="cuda")
    assert out.device.type == "cuda" and name_of(out.dtype) == cuda_dtype
    close(out, ref, "float16", scale=2)
    for mine, its in zip(ours, theirs):
        assert mine.grad.dtype is mine.dtype
        close(mine.grad, its.grad, "float16", scale=2)


def test_cuda_autocast_leaves_cpu_tensors_alone_and_bans_binary_cross_entropy(cuda):
    x = minidl.rand(2, 3, device="cuda").sigmoid()
    with minidl.autocast("cuda"):
        assert minidl.is_autocast_enabled("cuda") and not minidl.is_autocast_enabled("cpu")
        assert (minidl.ones(2, 2) @ minidl.ones(2, 2)).dtype is minidl.float32
        assert minidl.nn.functional.binary_cross_entropy(x.cpu(), x.cpu()).dtype is minidl.float32
        with pytest.raises(RuntimeError, match="binary_cross_entropy and minidl.nn.BCELoss are unsafe to autocast"):
            minidl.nn.functional.binary_cross_entropy(x, x)
    with pytest.warns(FutureWarning, match="Please use `minidl.amp.autocast\\('cuda', args...\\)` instead."):
        region = minidl.cuda.amp.autocast()
    with region:
        assert minidl.is_autocast_enabled("cuda") and minidl.get_autocast_dtype("cuda") is minidl.float16


def test_cuda_training_step_with_grad_scaler_matches_torch_on_the_cpu(cuda):
    """The 'cuda' autocast policies (float16 matmuls, float32 softmax and loss) and a GradScaler('cuda')."""
    ours, theirs = _models(False)
    ours.to("cuda")
    opt, topt = _optimizers(ours, theirs, adam=False)
    scaler, tscaler = minidl.amp.GradScaler("cuda", init_scale=256.0), torch.amp.GradScaler("cpu", init_scale=256.0)
    for x, y in _batches(False, 2):
        opt.zero_grad()
        topt.zero_grad()
        with minidl.autocast("cuda"):
            out = ours(minidl.tensor(x, device="cuda"))
            loss = minidl.nn.functional.cross_entropy(out, minidl.tensor(y, device="cuda"))
        assert out.dtype is minidl.float16 and loss.dtype is minidl.float32
        ref = _loss(torch, theirs, x, y, torch.float16)
        close(loss.cpu(), ref, "float16")
        scaler.scale(loss).backward()
        tscaler.scale(ref).backward()
        scaler.step(opt)
        tscaler.step(topt)
        scaler.update()
        tscaler.update()
        assert scaler._scale.device.type == "cuda" and scaler.state_dict() == tscaler.state_dict()
        for mine, its in zip(ours.parameters(), theirs.parameters()):
            assert mine.device.type == "cuda" and mine.grad.dtype is minidl.float32
            close(mine.cpu(), its, "float16")
