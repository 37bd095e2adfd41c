"""The CUDA cross-entropy kernels (csrc/cross_entropy.cu, behind F.cross_entropy and F.nll_loss on 'cuda')
against PyTorch, forward and gradient, on the simulator where there is no GPU (cuda_support.py); the cases
are test_cross_entropy.py's. A target out of range surfaces as IndexError at the next synchronisation."""
from __future__ import annotations

import numpy as np
import pytest

import minidl
import minidl.nn.functional as F

from cuda_support import cuda_device
from test_cross_entropy import CASES, PRIMITIVES, REDUCTIONS, assert_matches_torch, inputs, run
from test_sdpa_fused import count_calls

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module", autouse=True)
def cuda():
    return cuda_device()


@pytest.fixture
def calls(monkeypatch):
    return count_calls(monkeypatch, "cuda", PRIMITIVES)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("fn", ["cross_entropy", "nll_loss"])
def test_cuda_matches_torch_in_float64(fn, case, reduction, calls):
    assert_matches_torch(fn, case, reduction, 1e-12, device="cuda")
    assert calls == {"cross_entropy": 1, "cross_entropy_backward": 1}


@pytest.mark.parametrize("case", ["weights smoothing ignored", "N-d"])
def test_cuda_matches_torch_in_float32(case):
    assert_matches_torch("cross_entropy", case, "mean", 2e-6, "float32", device="cuda")


def test_cuda_rows_longer_than_a_warp_with_huge_logits():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((5, 300)) * 30
    x[0, :3] = [1e4, -1e4, 88.0]
    x[1] = -1e4
    target = rng.integers(0, 300, 5)
    kw = {"weight": rng.uniform(0.5, 1.5, 300), "label_smoothing": 0.1}
    for dtype, tol in (("float64", 1e-12), ("float32", 1e-5)):
        ours, our_grad = run(minidl, "cross_entropy", x, target, kw, "sum", getattr(minidl, dtype), "cuda")
        theirs, their_grad = run(torch, "cross_entropy", x, target, kw, "sum", getattr(torch, dtype))
        np.testing.assert_allclose(ours.cpu().detach().numpy(), theirs.detach().numpy(), rtol=tol)
        np.testing.assert_allclose(our_grad.cpu().numpy(), their_grad.numpy(), rtol=tol, atol=tol * 1e-3)


def test_cuda_second_order_matches_the_cpu():
    x, target, kw = inputs("weights smoothing ignored", seed=7)
    v = np.random.default_rng(8).standard_normal(x.shape)
    grads = []
    for device in ("cpu", "cuda"):
        leaf = minidl.tensor(x, device=device, requires_grad=True)
        args = {k: minidl.tensor(a, device=device) if isinstance(a, np.ndarray) else a for k, a in kw.items()}
        (g,) = minidl.autograd.grad(F.cross_entropy(leaf, minidl.tensor(target, device=device), **args), leaf,
                                    create_graph=True)
        (g * minidl.tensor(v, device=device)).sum().backward()
        grads.append(leaf.grad.cpu().numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("fn", ["cross_entropy", "nll_loss"])
def test_cuda_target_out_of_range_is_an_index_error_at_the_next_synchronisation(fn):
    loss = getattr(F, fn)(minidl.zeros((3, 5), device="cuda"), minidl.tensor([0, 7, 1], device="cuda"))
    with pytest.raises(IndexError, match="index 7 is out of bounds for dimension with size 5"):
        loss.item()
    assert F.cross_entropy(minidl.zeros((2, 5), device="cuda"), minidl.tensor([0, 1], device="cuda")).item() > 0
