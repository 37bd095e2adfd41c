"""The small namespaces PyTorch scripts touch: backends flags, cuda availability, AMP spellings, and
shared memory across processes (share_memory_, minidl.multiprocessing, Hogwild training)."""
import gc
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

import minidl
import minidl.multiprocessing as mp
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

    from minidl.kernels.cuda import runtime
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "cupy" else real(name, *a))
    monkeypatch.setattr(runtime, "_sim_requested", False)   # (tests before may have switched the simulator on)
    monkeypatch.setattr(runtime, "_runtime", None)
    assert minidl.cuda.is_available() is False and minidl.cuda.device_count() == 0


def test_cuda_available_on_the_simulator(monkeypatch):
    from minidl.kernels.cuda import runtime
    monkeypatch.setattr(runtime, "_sim_requested", True)   # what minidl.cuda.sim_enable() sets
    monkeypatch.setattr(runtime, "_runtime", None)
    assert minidl.cuda.is_available() and minidl.cuda.device_count() == 1


def test_import_minidl_imports_no_gpu_library():
    code = ("import sys, minidl; print(sorted(m for m in ('cupy', 'torch') if m in sys.modules)); "
            "minidl.cuda.is_available(); print('torch' in sys.modules)")  # (asking may load CuPy, not torch)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "False"]


# ----------------------------------------------------------------------------- automatic mixed precision
def test_autocast_spellings(monkeypatch):
    """The spellings scripts use (tests/test_amp.py checks what the regions do against PyTorch)."""
    monkeypatch.setattr(minidl.cuda, "is_available", lambda: False)
    x, w = minidl.randn(4, 3), minidl.randn(3, 2)
    expected = x @ w
    with minidl.autocast("cpu", dtype=minidl.float16), minidl.amp.autocast("cpu", enabled=False):
        assert minidl.equal(x @ w, expected)
    with pytest.warns(UserWarning, match="CUDA is not available. Disabling autocast."):
        region = minidl.amp.autocast("cuda")
    with pytest.warns(FutureWarning, match="minidl.cuda.amp.autocast"):
        old = minidl.cuda.amp.autocast(enabled=False)
    for region in (region, old, minidl.autocast("cuda", enabled=False)):
        with region:
            assert minidl.equal(x @ w, expected)

    @minidl.autocast("cpu", dtype=minidl.float16)
    def product(a, b):
        return a @ b

    assert product(x, w).dtype is minidl.float16
    assert minidl.allclose(product(x, w).float(), expected, rtol=1e-2, atol=1e-2)
    with pytest.raises(ValueError, match="Expected `device_type` of type `str`"):
        minidl.autocast(minidl.float16)


def _sgd_run(use_scaler):
    minidl.manual_seed(0)
    model = nn.Linear(3, 1)
    optimizer = minidl.optim.SGD(model.parameters(), lr=0.1)
    scaler = minidl.amp.GradScaler("cpu") if use_scaler else None
    x, y = minidl.randn(8, 3), minidl.randn(8, 1)
    for _ in range(3):
        optimizer.zero_grad()
        with minidl.autocast("cpu", enabled=False):
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


def test_grad_scaler_scaling_by_a_power_of_two_leaves_float32_steps_exact():
    plain, _ = _sgd_run(False)
    scaled, scaler = _sgd_run(True)
    for a, b in zip(plain, scaled):
        np.testing.assert_array_equal(a, b)
    assert scaler.is_enabled() and scaler.get_scale() == 2.0 ** 16
    state = scaler.state_dict()
    assert state == {"scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000,
                     "_growth_tracker": 3}
    fresh = minidl.amp.GradScaler("cpu", init_scale=1024.0)
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state


# ----------------------------------------------------------------------------- shared memory
def test_share_memory_moves_the_storage_in_place():
    t = minidl.arange(12.0).reshape(3, 4)
    view = t[1:, ::2]
    assert not t.is_shared()
    assert t.share_memory_() is t
    assert t.is_shared() and view.is_shared()
    assert t.tolist() == np.arange(12.0).reshape(3, 4).tolist()
    view.mul_(10)  # a view made before the move writes into the shared memory
    assert t[2].tolist() == [80.0, 9.0, 100.0, 11.0]
    handle = t._storage.shared
    assert t.share_memory_()._storage.shared == handle  # already shared: nothing moves
    model = nn.Linear(2, 2).share_memory()
    assert all(p.is_shared() for p in model.parameters())


def test_shared_tensors_pickle_by_handle_for_processes_and_by_value_otherwise():
    t = minidl.arange(6.0).share_memory_()
    p = nn.Parameter(minidl.ones(2)).share_memory_()
    t2, view, p2 = pickle.loads(mp.reduction.ForkingPickler.dumps((t, t[2:], p)))
    assert t2.is_shared() and t2._storage is view._storage and isinstance(p2, nn.Parameter) and p2.requires_grad
    t2.add_(1)
    p2.data.mul_(3)
    assert t.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0] and view.tolist() == [3.0, 4.0, 5.0, 6.0]
    assert p.tolist() == [3.0, 3.0]
    copy = pickle.loads(pickle.dumps(t))  # a plain pickle (a file, say) holds the values
    assert not copy.is_shared()
    copy.zero_()
    assert t[0].item() == 1.0


def test_pickling_keeps_leaves_and_refuses_history():
    w = minidl.ones(3, requires_grad=True)
    (w * 2).sum().backward()  # the leaf now has a gradient accumulator
    again = pickle.loads(pickle.dumps(w))
    assert again.requires_grad and again.is_leaf and again.tolist() == [1.0, 1.0, 1.0]
    with pytest.raises(RuntimeError, match="non-leaf tensor that requires grad"):
        pickle.dumps(w * 2)


def test_shared_memory_is_freed_with_its_tensor():
    t = minidl.zeros(1000).share_memory_()
    path = t._storage.shared[0]
    assert os.path.exists(path)
    handle = t._storage.shared
    del t
    gc.collect()
    assert not os.path.exists(path)
    with pytest.raises(RuntimeError, match="open_shared: the shared memory .* no longer exists"):
        minidl.kernels.get("open_shared", "cpu")(handle)


# ----------------------------------------------------------------------------- Hogwild
def _problem(seed):
    g = minidl.Generator().manual_seed(seed)
    x = minidl.randn(64, 3, generator=g)
    return x, x @ minidl.tensor([[1.0], [-2.0], [0.5]]) + 0.3


def _loss(model, x, y):
    return ((model(x) - y) ** 2).mean()


def _hogwild_worker(model, done, rank, steps):
    """Train the shared model on this worker's own data, then mark this rank done in shared memory."""
    x, y = _problem(rank + 1)
    optimizer = minidl.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        optimizer.zero_grad()
        _loss(model, x, y).backward()
        optimizer.step()
    done[rank] = 1.0


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_hogwild_children_train_the_parents_model(method):
    if method not in mp.get_all_start_methods():
        pytest.skip(f"no {method} start method here")
    minidl.manual_seed(0)
    model = nn.Linear(3, 1).share_memory()
    done = minidl.zeros(2).share_memory_()
    before = [p.detach().clone() for p in model.parameters()]
    x, y = _problem(0)
    with minidl.no_grad():
        loss_before = _loss(model, x, y).item()
    context = mp.get_context(method)
    workers = [context.Process(target=_hogwild_worker, args=(model, done, rank, 40)) for rank in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=300)
        assert w.exitcode == 0, f"worker exit code {w.exitcode}"
    assert done.tolist() == [1.0, 1.0]  # both children wrote into the parent's memory
    assert all(not minidl.equal(p, b) for p, b in zip(model.parameters(), before))
    with minidl.no_grad():
        assert _loss(model, x, y).item() < 0.05 * loss_before
