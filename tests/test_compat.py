"""The small namespaces PyTorch scripts touch: backends flags, cuda availability, inert AMP."""
import subprocess
import sys

import numpy as np
import pytest

import minidl
from minidl import nn


# ----------------------------------------------------------------------------- backends and cuda
def test_backends_flags_are_settable_attributes():
    import minidl.backends.cudnn as cudnn
    cudnn.benchmark, cudnn.deterministic = True, True
    assert minidl.backends.cudnn.benchmark and minidl.backends.cudnn.deterministic
    for flag in ("enabled", "allow_tf32"):
        assert isinstance(getattr(cudnn, flag), bool)
    minidl.backends.cuda.matmul.allow_tf32 = True
    assert minidl.backends.cuda.matmul.allow_tf32
    assert not minidl.backends.mps.is_available() and not minidl.backends.cudnn.is_available()


def test_backends_names_exist_in_torch():
    torch = pytest.importorskip("torch")
    for flag in ("enabled", "benchmark", "deterministic", "allow_tf32", "is_available", "version"):
        assert hasattr(torch.backends.cudnn, flag) and hasattr(minidl.backends.cudnn, flag), flag
    assert hasattr(torch.backends.cuda.matmul, "allow_tf32") and hasattr(torch.backends.mps, "is_available")


def test_cuda_unavailable_without_cupy(monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "cupy" else real(name, *a))
    assert minidl.cuda.is_available() is False and minidl.cuda.device_count() == 0


def test_import_minidl_imports_no_gpu_library():
    code = "import sys, minidl; minidl.cuda.is_available(); print(sorted(m for m in ('cupy', 'torch') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ----------------------------------------------------------------------------- automatic mixed precision
def test_autocast_changes_nothing():
    x, w = minidl.randn(4, 3), minidl.randn(3, 2)
    expected = x @ w
    for region in (minidl.autocast("cpu", dtype=minidl.float16), minidl.amp.autocast("cuda"),
                   minidl.cuda.amp.autocast(), minidl.autocast("cuda", enabled=False)):
        with region:
            y = x @ w
        assert y.dtype is minidl.float32 and minidl.equal(y, expected)

    @minidl.autocast("cpu")
    def product(a, b):
        return a @ b

    assert minidl.equal(product(x, w), expected)
    with pytest.raises(ValueError, match="autocast: expected a device type"):
        minidl.autocast(minidl.float16)


def _sgd_run(use_scaler):
    minidl.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = minidl.optim.SGD(model.parameters(), lr=0.1)
    scaler = minidl.amp.GradScaler() if use_scaler else None
    x, y = minidl.randn(8, 3), minidl.randn(8, 1)
    for _ in range(3):
        optimizer.zero_grad()
        with minidl.autocast("cpu", enabled=use_scaler):
            loss = ((model(x) - y) ** 2).mean()
        if scaler is None:
            loss.backward()
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            scaler.step(optimizer)
            scaler.update()
    return [p.detach().numpy().copy() for p in model.parameters()], scaler


def test_grad_scaler_is_inert():
    plain, _ = _sgd_run(False)
    scaled, scaler = _sgd_run(True)
    for a, b in zip(plain, scaled):
        np.testing.assert_array_equal(a, b)
    assert not scaler.is_enabled() and scaler.get_scale() == 1.0
    state = scaler.state_dict()
    fresh = minidl.cuda.amp.GradScaler(init_scale=1024.0)
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state
    fresh.load_state_dict({"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000,
                           "_growth_tracker": 0})  # an enabled PyTorch scaler's state loads too
