"""F.cross_entropy and F.nll_loss against class indices, one fused kernel each way (the ``cross_entropy``
primitives): against PyTorch in float64 and float32 (every reduction, ignore_index, class weights, label
smoothing, class dim 1 of N-d input; forward and gradient), against the unfused composition, torch's errors,
and second order (composed)."""
from __future__ import annotations

import numpy as np
import pytest

import minidl
import minidl.nn.functional as F
from minidl import nn

from test_sdpa_fused import count_calls

torch = pytest.importorskip("torch")
TF = torch.nn.functional

PRIMITIVES = ("cross_entropy", "cross_entropy_backward")
REDUCTIONS = ("mean", "sum", "none")
CASES = ("plain", "ignored", "weights", "smoothing", "weights smoothing ignored", "own ignore_index", "N-d",
         "N-d weights smoothing", "1-D", "all ignored")


def inputs(case, seed=0):
    """(logits, targets, keyword arguments as numpy arrays and numbers) of a named case."""
    rng = np.random.default_rng(seed)
    shape = {"N-d": (3, 4, 2, 3), "N-d weights smoothing": (2, 5, 3), "1-D": (6,)}.get(case, (7, 5))
    classes = shape[0] if len(shape) == 1 else shape[1]
    target_shape = () if len(shape) == 1 else (shape[0],) + shape[2:]
    x = rng.standard_normal(shape) * 2
    target = rng.integers(0, classes, target_shape)
    kw = {}
    if "ignored" in case or case.startswith("N-d"):
        target.reshape(-1)[::3] = -100
    if case == "all ignored":
        target[...] = -100
    if case == "own ignore_index":
        kw["ignore_index"] = 2
    if "weights" in case:
        kw["weight"] = rng.uniform(0.2, 2.0, classes)
    if "smoothing" in case:
        kw["label_smoothing"] = 0.25
    return x, target, kw


def run(lib, fn, x, target, kw, reduction, dtype=None, device="cpu", upstream=None):
    """(loss, gradient of sum(loss * upstream) by x) through ``lib`` (minidl or torch)."""
    dtype = dtype or lib.float64
    leaf = lib.tensor(x, dtype=dtype, device=device, requires_grad=True)
    kw = {k: lib.tensor(v, dtype=dtype, device=device) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    if fn == "nll_loss":
        kw.pop("label_smoothing", None)
    functional = F if lib is minidl else TF
    loss = getattr(functional, fn)(leaf, lib.tensor(target, device=device), reduction=reduction, **kw)
    u = np.ones(tuple(loss.shape)) if upstream is None else upstream
    (loss * lib.tensor(u, dtype=dtype, device=device)).sum().backward()
    return loss, leaf.grad


def host(t):
    return t.detach().cpu().numpy()


def assert_matches_torch(fn, case, reduction, tol, dtype="float64", device="cpu"):
    x, target, kw = inputs(case)
    if fn == "nll_loss":
        x = x - np.log(np.exp(x).sum(0 if x.ndim == 1 else 1, keepdims=True))
    upstream = np.random.default_rng(1).standard_normal(target.shape if reduction == "none" else ())
    theirs, their_grad = run(torch, fn, x, target, kw, reduction, getattr(torch, dtype), upstream=upstream)
    ours, our_grad = run(minidl, fn, x, target, kw, reduction, getattr(minidl, dtype), device, upstream)
    assert ours.dtype is getattr(minidl, dtype) and tuple(ours.shape) == tuple(theirs.shape)
    np.testing.assert_allclose(host(ours), theirs.detach().numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(host(our_grad), their_grad.numpy(), rtol=tol, atol=tol)


@pytest.fixture
def calls(monkeypatch):
    return count_calls(monkeypatch, "cpu", PRIMITIVES)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("fn", ["cross_entropy", "nll_loss"])
def test_matches_torch_in_float64(fn, case, reduction, calls):
    assert_matches_torch(fn, case, reduction, 1e-12)
    assert calls == {"cross_entropy": 1, "cross_entropy_backward": 1}


def _composed(x, target, weight=None, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    """The loss written with log_softmax, gather and where (as F.cross_entropy was before the fused kernels)."""
    classes = x.shape[1]
    logp = x.log_softmax(1)
    valid = target != ignore_index
    safe = minidl.where(valid, target, 0)
    w = minidl.ones(classes, dtype=x.dtype) if weight is None else weight
    wt = w[safe] * valid.to(x.dtype)
    picked = -logp.gather(1, safe.unsqueeze(1)).squeeze(1)
    smooth = -(logp * w).sum(1)
    loss = wt * (1 - label_smoothing) * picked + valid.to(x.dtype) * smooth * (label_smoothing / classes)
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.sum() / wt.sum()


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("case", ["plain", "weights smoothing ignored", "own ignore_index"])
def test_matches_the_unfused_composition(case, reduction):
    x, target, kw = inputs(case, seed=3)
    kw = {k: minidl.tensor(v) if isinstance(v, np.ndarray) else v for k, v in kw.items()}
    fused, composed = (minidl.tensor(x, requires_grad=True) for _ in range(2))
    a = F.cross_entropy(fused, minidl.tensor(target), reduction=reduction, **kw)
    b = _composed(composed, minidl.tensor(target), reduction=reduction, **kw)
    np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-13)
    a.sum().backward()
    b.sum().backward()
    np.testing.assert_allclose(fused.grad.numpy(), composed.grad.numpy(), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("case", ["weights smoothing ignored", "N-d"])
def test_matches_torch_in_float32(case, reduction):
    assert_matches_torch("cross_entropy", case, reduction, 2e-6, "float32")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_vocabulary_of_huge_and_tiny_logits_matches_torch(dtype):
    """Rows of 1000 classes (the vectorised exp of float32) with logits far beyond exp's range."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((9, 1000)) * 30
    x[0, :4] = [1e4, -1e4, 50.0, 88.0]
    x[1] = -1e4
    target = rng.integers(0, 1000, 9)
    kw = {"weight": rng.uniform(0.5, 1.5, 1000), "label_smoothing": 0.1}
    for reduction in REDUCTIONS:
        ours, our_grad = run(minidl, "cross_entropy", x, target, kw, reduction, getattr(minidl, dtype))
        theirs, their_grad = run(torch, "cross_entropy", x, target, kw, reduction, getattr(torch, dtype))
        tol = 1e-5 if dtype == "float32" else 1e-12
        np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=tol)
        np.testing.assert_allclose(our_grad.numpy(), their_grad.numpy(), rtol=tol, atol=tol * 1e-3)


def test_half_precision_is_computed_in_float32_and_returned_in_its_dtype():
    x, target, kw = inputs("weights smoothing ignored")
    for dtype in ("bfloat16", "float16"):
        ours, our_grad = run(minidl, "cross_entropy", x, target, kw, "mean", getattr(minidl, dtype))
        theirs, their_grad = run(torch, "cross_entropy", x, target, kw, "mean", getattr(torch, dtype))
        assert ours.dtype is getattr(minidl, dtype) and our_grad.dtype is getattr(minidl, dtype)
        np.testing.assert_allclose(ours.float().detach().numpy(), theirs.float().detach().numpy(), rtol=1e-2)
        np.testing.assert_allclose(our_grad.float().numpy(), their_grad.float().numpy(), rtol=2e-2, atol=1e-3)


@pytest.mark.parametrize("case", ["weights smoothing ignored", "N-d weights smoothing", "1-D", "all ignored"])
@pytest.mark.parametrize("fn", ["cross_entropy", "nll_loss"])
def test_second_order_matches_torch(fn, case):
    x, target, kw = inputs(case, seed=7)
    v = np.random.default_rng(8).standard_normal(x.shape)
    results = []
    for lib, functional in ((minidl, F), (torch, TF)):
        leaf = lib.tensor(x, requires_grad=True)
        args = {k: lib.tensor(a) if isinstance(a, np.ndarray) else a for k, a in kw.items()}
        if fn == "nll_loss":
            args.pop("label_smoothing", None)
        loss = getattr(functional, fn)(leaf.log_softmax(0 if x.ndim == 1 else 1) if fn == "nll_loss" else leaf,
                                       lib.tensor(target), **args)
        (g,) = (minidl.autograd.grad if lib is minidl else torch.autograd.grad)(loss, leaf, create_graph=True)
        (g * lib.tensor(v)).sum().backward()
        results.append((g.detach().numpy(), leaf.grad.numpy()))
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


def _messages(call):
    """(exception type, message) that ``call(lib, functional)`` raises through minidl and through torch."""
    raised = []
    for lib, functional in ((minidl, F), (torch, TF)):
        with pytest.raises(Exception) as info:
            call(lib, functional)
        raised.append((info.type.__name__, str(info.value)))
    return raised


@pytest.mark.parametrize("fn", ["cross_entropy", "nll_loss"])
@pytest.mark.parametrize("bad", [5, 7, -3])
def test_a_target_out_of_range_names_the_op_the_value_and_the_class_count(fn, bad):
    x, target = np.zeros((3, 5)), np.array([0, bad, 1])
    ours, theirs = _messages(lambda lib, functional: getattr(functional, fn)(lib.tensor(x), lib.tensor(target)))
    assert ours[0] == theirs[0] == "IndexError"
    assert fn in ours[1] and f"Target {bad} is out of bounds" in ours[1] and "5 classes" in ours[1]


@pytest.mark.parametrize("shapes", [((2, 5, 3), (2, 4)), ((2, 5, 3), (2,)), ((2, 5), (2, 3)), ((5,), (2,)),
                                    ((2, 5), (3,))])
@pytest.mark.parametrize("fn", ["cross_entropy", "nll_loss"])
def test_shape_mismatches_raise_as_in_torch(fn, shapes):
    x_shape, t_shape = shapes
    ours, theirs = _messages(lambda lib, functional: getattr(functional, fn)(
        lib.zeros(x_shape), lib.zeros(t_shape, dtype=lib.int64)))
    assert ours == theirs


@pytest.mark.parametrize("fn", ["cross_entropy", "nll_loss"])
def test_weight_checks_raise_as_in_torch(fn):
    x, target = np.zeros((2, 5)), np.array([0, 1])
    for weight in (lambda lib: lib.ones(3), lambda lib: lib.ones(5, requires_grad=True)):
        ours, theirs = _messages(lambda lib, functional: getattr(functional, fn)(
            lib.tensor(x, requires_grad=True), lib.tensor(target), weight=weight(lib)))
        assert ours[0] == theirs[0] == "RuntimeError"
        assert ours[1].split("'")[0] == theirs[1].split("'")[0]
    ours, theirs = _messages(lambda lib, functional: getattr(functional, fn)(lib.tensor(x), lib.tensor(target),
                                                                                  reduction="avg"))
    assert ours == theirs


def test_loss_modules_take_the_fused_kernels(calls):
    x, target, kw = inputs("weights smoothing ignored")
    for module, theirs in ((nn.CrossEntropyLoss, torch.nn.CrossEntropyLoss), (nn.NLLLoss, torch.nn.NLLLoss)):
        args = {"weight": kw["weight"], "ignore_index": 2}
        if module is nn.CrossEntropyLoss:
            args["label_smoothing"] = 0.1
        leaf = minidl.tensor(x, requires_grad=True)
        loss = module(**{k: minidl.tensor(v) if isinstance(v, np.ndarray) else v for k, v in args.items()})(
            leaf, minidl.tensor(np.where(target < 0, 2, target)))
        ref = theirs(**{k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in args.items()})(
            torch.tensor(x), torch.tensor(np.where(target < 0, 2, target)))
        loss.backward()
        np.testing.assert_allclose(loss.item(), ref.item(), rtol=1e-12)
    assert calls == {"cross_entropy": 2, "cross_entropy_backward": 2}


def test_an_empty_batch_gives_torchs_results():
    for reduction in REDUCTIONS:
        ours = F.cross_entropy(minidl.zeros((0, 4)), minidl.zeros(0, dtype=minidl.int64), reduction=reduction)
        theirs = TF.cross_entropy(torch.zeros((0, 4)), torch.zeros(0, dtype=torch.int64), reduction=reduction)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_the_threaded_kernels_give_the_same_results(monkeypatch):
    """Two threads over blocks of rows (forced on a small shape), forward and backward: torch's values, and a
    bad target still raised."""
    from minidl.kernels.cpu import strided
    monkeypatch.setattr(strided, "PARALLEL_MIN", 0)
    rng = np.random.default_rng(9)
    x, target = rng.standard_normal((40, 1000)), rng.integers(0, 1000, 40)
    target[::4] = -100
    kw = {"weight": rng.uniform(0.5, 1.5, 1000), "label_smoothing": 0.2}
    before = minidl.get_num_threads()
    minidl.set_num_threads(2)
    try:
        ours, our_grad = run(minidl, "cross_entropy", x, target, kw, "mean")
        with pytest.raises(IndexError, match="Target 1000 is out of bounds"):
            F.cross_entropy(minidl.tensor(x), minidl.tensor(np.where(np.arange(40) == 37, 1000, target)))
    finally:
        minidl.set_num_threads(before)
    theirs, their_grad = run(torch, "cross_entropy", x, target, kw, "mean")
    np.testing.assert_allclose(ours.item(), theirs.item(), rtol=1e-12)
    np.testing.assert_allclose(our_grad.numpy(), their_grad.numpy(), rtol=1e-12, atol=1e-15)
