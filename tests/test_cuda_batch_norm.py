"""The CUDA batch norm kernels (csrc/batch_norm.cu, behind F.batch_norm on 'cuda') against PyTorch in float64 (and
float32), forward, every gradient and the running statistics, on the simulator where there is no GPU
(cuda_support.py): the layouts of test_batch_norm.py, planes and channels-last rows, training and eval."""
from __future__ import annotations

import numpy as np
import pytest

import minidl

from cuda_support import cuda_device
from test_batch_norm import SHAPES, _arrays, assert_match, count_calls, run_both

torch = pytest.importorskip("torch")


@pytest.fixture(scope="module", autouse=True)
def cuda():
    return cuda_device()


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_matches_torch_float64(shape, training, monkeypatch):
    calls = count_calls(monkeypatch, "cuda")
    assert_match(*run_both(_arrays(shape), training, device="cuda"), 1e-12)
    assert calls == {"batch_norm": 1, "batch_norm_backward": 1}


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_channels_last_and_no_affine_match_torch(training):
    a = _arrays((2, 3, 4, 5), 1)
    assert_match(*run_both(a, training, affine=False, device="cuda",
                           arrange=lambda t: t.contiguous(memory_format=getattr(
                               minidl if isinstance(t, minidl.Tensor) else torch, "channels_last"))), 1e-12)


@pytest.mark.parametrize("shape", [(300, 4), (5, 2, 70)], ids=str)
def test_float32_over_more_elements_than_a_block(shape):
    a = _arrays(shape, 2)
    a["x"] = a["x"] + 100.0
    mine, theirs = run_both(a, True, device="cuda", dtype=minidl.float32)
    for m, t in zip(mine, theirs):
        np.testing.assert_allclose(m, t, rtol=2e-4, atol=2e-4 * max(1.0, np.abs(t).max()))


def test_the_device_and_the_cpu_agree_on_the_running_statistics():
    bn = {d: minidl.nn.BatchNorm1d(3, momentum=None).double().to(d) for d in ("cpu", "cuda")}
    rng = np.random.default_rng(4)
    for _ in range(3):
        x = rng.standard_normal((6, 3, 2))
        for d, m in bn.items():
            m(minidl.tensor(x, device=d))
    for name in ("running_mean", "running_var"):
        np.testing.assert_allclose(getattr(bn["cuda"], name).cpu().numpy(), getattr(bn["cpu"], name).numpy(),
                                   rtol=1e-13)
