"""The device API as PyTorch scripts use it, on device 'cuda' (a GPU, or the simulator): factories
with device=, Tensor.to/.cuda/.cpu, Module.to, minidl.cuda's functions, clear errors when devices
are mixed, optimizers, DataLoader batches and checkpoints with GPU tensors."""
import contextlib
import os
import traceback

import numpy as np
import pytest

import minidl
from minidl import nn
from minidl.kernels.cuda import runtime
from minidl.utils.data import DataLoader, TensorDataset
from tests.cuda_support import cuda_device


@pytest.fixture(autouse=True)
def cuda():
    cuda_device()


def host(t):
    return t.detach().cpu().numpy()


# ----------------------------------------------------------------------------- factories and moves
def test_factories_take_device():
    made = {
        "zeros": minidl.zeros(2, 3, device="cuda"), "ones": minidl.ones(4, device="cuda:0"),
        "full": minidl.full((2,), 7.5, device=minidl.device("cuda")), "empty": minidl.empty(3, device="cuda"),
        "arange": minidl.arange(5, device="cuda"), "linspace": minidl.linspace(0, 1, 5, device="cuda"),
        "eye": minidl.eye(3, device="cuda"), "tensor": minidl.tensor([[1, 2], [3, 4]], device="cuda"),
        "rand": minidl.rand(3, device="cuda"), "randn": minidl.randn(3, device="cuda"),
        "randint": minidl.randint(0, 5, (3,), device="cuda"), "randperm": minidl.randperm(4, device="cuda"),
        "normal": minidl.normal(0.0, 1.0, (3,), device="cuda"), "as_tensor": minidl.as_tensor([1.0], device="cuda"),
    }
    x = minidl.zeros(2, 2, device="cuda")
    made.update(zeros_like=minidl.zeros_like(x), ones_like=minidl.ones_like(x), full_like=minidl.full_like(x, 2),
                empty_like=minidl.empty_like(x), rand_like=minidl.rand_like(x), randn_like=minidl.randn_like(x),
                randint_like=minidl.randint_like(x, 3), new_zeros=x.new_zeros(2), new_tensor=x.new_tensor([1]))
    for name, t in made.items():
        assert t.device == minidl.device("cuda:0") and t.is_cuda and str(t.device) == "cuda:0", name
    assert host(made["full"]).tolist() == [7.5, 7.5] and host(made["eye"]).tolist() == np.eye(3).tolist()
    assert host(made["arange"]).tolist() == list(range(5)) and host(made["ones_like"]).sum() == 4
    assert not minidl.zeros_like(x, device="cpu").is_cuda


def test_to_cuda_cpu_round_trip():
    x = minidl.randn(3, 4)
    for target in ("cuda", "cuda:0", minidl.device("cuda"), 0):
        y = x.to(target, non_blocking=True)
        assert y.is_cuda and y.shape == x.shape and np.array_equal(host(y), x.numpy())
    y = x.cuda()
    assert y.to("cuda") is y and y.cuda() is y and y.cpu().device.type == "cpu"
    assert y.to("cuda", copy=True) is not y
    z = y.to("cpu", minidl.float64)
    assert z.dtype is minidl.float64 and np.allclose(z.numpy(), x.numpy())
    assert x.to(y).is_cuda and x.to(y.device, minidl.float64, True).dtype is minidl.float64  # (device, dtype, non_blocking)
    with pytest.raises(TypeError, match="Use Tensor.cpu"):
        y.numpy()
    assert x.pin_memory() is x and not x.is_pinned()
    with pytest.raises(RuntimeError, match="cannot pin 'cuda:0' memory"):
        y.pin_memory()


def test_moves_are_differentiable():
    x = minidl.randn(3, requires_grad=True)
    y = x.cuda() * 2.0
    y.cpu().backward(minidl.ones(3))
    assert x.grad is not None and not x.grad.is_cuda and host(x.grad).tolist() == [2.0, 2.0, 2.0]


def test_module_to_moves_parameters_grads_and_buffers_in_place():
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    weight = model[0].weight
    model[0].weight.grad = minidl.ones(4, 3)
    assert model.to("cuda") is model
    assert model[0].weight is weight and weight.is_cuda and weight.grad.is_cuda     # the same Parameter object
    assert model[1].running_mean.is_cuda and model[1].num_batches_tracked.is_cuda
    assert all(p.is_cuda for p in model.parameters()) and all(b.is_cuda for b in model.buffers())
    model.cpu()
    assert not weight.is_cuda and not weight.grad.is_cuda and not model[1].running_var.is_cuda
    model.cuda()
    assert weight.is_cuda and weight.requires_grad and model.to(minidl.float64)[0].weight.dtype is minidl.float64


# ----------------------------------------------------------------------------- mixing devices
MIXES = ("add", "mul", "in-place add", "comparison", "matmul", "where", "cat", "stack", "linear",
         "mse_loss", "masked_fill")


def _mixes():
    a, b = minidl.ones(3), minidl.ones(3, device="cuda")
    m, mc = minidl.ones(3, 3), minidl.ones(3, 3, device="cuda")
    return dict([
        ("add", lambda: a + b), ("mul", lambda: b * a), ("in-place add", lambda: b.add_(a)),
        ("comparison", lambda: a < b), ("matmul", lambda: m @ mc), ("where", lambda: minidl.where(b > 0, a, b)),
        ("cat", lambda: minidl.cat([a, b])), ("stack", lambda: minidl.stack([a, b])),
        ("linear", lambda: minidl.nn.functional.linear(m, mc)),
        ("mse_loss", lambda: minidl.nn.functional.mse_loss(a, b)),
        ("masked_fill", lambda: b.masked_fill(a > 0, 0.0)),
    ])


@pytest.mark.parametrize("name", MIXES)
def test_mixing_devices_names_both(name):
    with pytest.raises(RuntimeError, match=r"expected all tensors to be on the same device.*(cpu.*cuda:0|cuda:0.*cpu)"):
        _mixes()[name]()


@pytest.mark.parametrize("op", ["gather", "take", "scatter_add", "cross_entropy"])
def test_mixing_devices_in_index_ops(op):
    x, i = minidl.ones(2, 3, device="cuda"), minidl.tensor([[0], [1]])
    calls = {"gather": lambda: x.gather(1, i), "take": lambda: x.take(i),
             "scatter_add": lambda: x.scatter_add(1, i, minidl.ones(2, 1, device="cuda")),
             "cross_entropy": lambda: minidl.nn.functional.cross_entropy(x, minidl.tensor([0, 1]))}
    with pytest.raises(RuntimeError, match="same device"):
        calls[op]()


def test_optimizer_step_with_state_on_another_device():
    p = nn.Parameter(minidl.ones(3, device="cuda"))
    p.grad = minidl.ones(3)
    with pytest.raises(RuntimeError, match="sgd_steps?: parameter .* on cuda:0 and its gradient/state .* on cpu"):
        minidl.optim.SGD([p], lr=0.1).step()


# ----------------------------------------------------------------------------- minidl.cuda
def test_cuda_namespace():
    assert minidl.cuda.is_available() and minidl.cuda.device_count() >= 1
    minidl.cuda.set_device(0)
    assert minidl.cuda.current_device() == 0
    minidl.cuda.synchronize()
    with pytest.raises(RuntimeError, match="invalid device ordinal 7"):
        minidl.cuda.set_device(7)
    assert minidl.cuda.sim_enable is runtime.sim_enable


def test_synchronize_raises_a_recorded_index_error():
    buf = runtime.error_buffer()
    buf[...] = runtime.get().xp.asarray(np.array([1, 12, 5], dtype=np.int64))  # as report_index_error writes it
    with pytest.raises(IndexError, match="index 12 is out of bounds for dimension with size 5"):
        minidl.cuda.synchronize()
    minidl.cuda.synchronize()  # reported once


def test_memory_statistics():
    minidl.cuda.empty_cache()
    minidl.cuda.reset_peak_memory_stats()
    base = minidl.cuda.memory_allocated()
    x = minidl.empty(1 << 16, device="cuda")  # 256 KiB of float32
    assert minidl.cuda.memory_allocated() - base >= 1 << 18
    del x
    minidl.cuda.empty_cache()
    assert minidl.cuda.memory_allocated() <= base + (1 << 10)
    assert minidl.cuda.max_memory_allocated() >= base + (1 << 18)
    minidl.cuda.reset_peak_memory_stats()
    assert minidl.cuda.max_memory_allocated() < base + (1 << 18)


def test_unavailable_runtime_is_explained(monkeypatch):
    monkeypatch.setattr(runtime, "_sim_requested", False)
    monkeypatch.setattr(runtime, "_runtime", None)
    if runtime.available():
        pytest.skip("a GPU is present")
    assert not minidl.cuda.is_available() and minidl.cuda.device_count() == 0
    with pytest.raises(runtime.Unavailable, match="CuPy"):
        minidl.cuda.synchronize()


# ----------------------------------------------------------------------------- training pieces
def test_optimizer_built_before_to_trains_on_the_gpu():
    model = nn.Linear(3, 1)
    optimizer = minidl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model.to("cuda")
    x, y = minidl.randn(16, 3, device="cuda"), minidl.zeros(16, 1, device="cuda")
    losses = []
    for _ in range(5):
        loss = ((model(x) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] and optimizer.state[model.weight]["momentum_buffer"].is_cuda


def test_dataloader_batches_move_to_the_gpu():
    data = TensorDataset(minidl.arange(12.0).reshape(6, 2), minidl.arange(6))
    seen = []
    for xb, yb in DataLoader(data, batch_size=4, shuffle=True, pin_memory=True,
                             generator=minidl.Generator().manual_seed(0)):
        xb, yb = xb.to("cuda", non_blocking=True), yb.cuda(non_blocking=True)
        assert xb.is_cuda and yb.is_cuda
        seen += host(yb).tolist()
    assert sorted(seen) == list(range(6))


def test_checkpoints_from_gpu_tensors_load_on_either_device(tmp_path):
    model = nn.Linear(2, 2).cuda()
    state = {"model": model.state_dict(), "step": 3, "cpu": minidl.ones(2)}
    path = tmp_path / "ckpt.safetensors"
    minidl.save(state, path)
    expected = host(model.weight)
    back = minidl.load(path)  # each tensor returns to the device it was saved from
    assert back["model"]["weight"].is_cuda and not back["cpu"].is_cuda and back["step"] == 3
    assert np.array_equal(host(back["model"]["weight"]), expected)
    for location in ("cpu", minidl.device("cpu"), {"cuda:0": "cpu"}, lambda t, where: t):
        loaded = minidl.load(path, map_location=location)
        assert not loaded["model"]["weight"].is_cuda and np.array_equal(loaded["model"]["weight"].numpy(), expected)
    loaded = minidl.load(path, map_location="cuda")
    assert loaded["cpu"].is_cuda and loaded["model"]["bias"].is_cuda
    assert minidl.load(path, map_location=lambda t, where: None)["model"]["weight"].is_cuda  # None: the default
    fresh = nn.Linear(2, 2)
    fresh.load_state_dict(minidl.load(path, map_location="cpu")["model"])
    assert np.array_equal(fresh.weight.detach().numpy(), expected)


def test_checkpoint_saved_on_gpu_needs_map_location_without_one(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.safetensors"
    minidl.save({"w": minidl.ones(2, device="cuda")}, path)
    monkeypatch.setattr(minidl.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="saved on 'cuda:0' but CUDA is not available.*map_location='cpu'"):
        minidl.load(path)
    assert not minidl.load(path, map_location="cpu")["w"].is_cuda


def test_optimizer_state_follows_its_parameters_device():
    p = nn.Parameter(minidl.ones(3))
    optimizer = minidl.optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = minidl.ones(3)
    optimizer.step()
    state = optimizer.state_dict()
    q = nn.Parameter(minidl.ones(3, device="cuda"))
    moved = minidl.optim.SGD([q], lr=0.1, momentum=0.9)
    moved.load_state_dict(state)
    assert moved.state[q]["momentum_buffer"].is_cuda


# ----------------------------------------------------------------------------- no hidden host round-trips
@contextlib.contextmanager
def host_transfers():
    """Every copy between host and device made inside the block, each as 'kind (bytes): the minidl
    calls that made it', innermost first."""
    seen = []

    def listener(kind, nbytes):
        frames = [f for f in traceback.extract_stack()[:-2] if "/minidl/" in f.filename.replace(os.sep, "/")]
        where = " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in reversed(frames[-10:]))
        seen.append(f"{kind} ({nbytes} B): {where}")

    runtime.transfer_listeners.append(listener)
    try:
        yield seen
    finally:
        runtime.transfer_listeners.remove(listener)


def test_transfers_are_counted():
    with host_transfers() as seen:
        x = minidl.tensor([1.0, 2.0, 3.0], device="cuda")
        x.tolist()
        minidl.tensor([1.0, 2.0], device="cuda")  # 8 bytes: a kernel argument, no copy
    assert [s.split(" ")[0] for s in seen if not s.startswith("error")] == ["from_host", "to_host"]
    assert "creation.py" in seen[0]


def _mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 4))


def _cnn():
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Dropout(0.1), nn.Linear(4 * 4 * 4, 4))


@pytest.mark.parametrize("make, shape, optimizer", [
    (_mlp, (6, 8), lambda ps: minidl.optim.SGD(ps, lr=0.1, momentum=0.9)),
    (_cnn, (6, 1, 8, 8), lambda ps: minidl.optim.Adam(ps, lr=1e-3)),
    (_cnn, (6, 1, 8, 8), lambda ps: minidl.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True)),
], ids=["mlp-dropout-sgd", "cnn-adam", "cnn-sgd"])
def test_a_training_step_makes_no_host_transfer_but_the_loss_item(make, shape, optimizer):
    minidl.manual_seed(0)
    model = make().to("cuda")
    opt = optimizer(model.parameters())
    x, y = minidl.randn(*shape, device="cuda"), minidl.randint(0, 4, (shape[0],), device="cuda")

    def step():
        loss = minidl.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    first = step().item()   # the first step makes the optimizer's state and caches constants
    with host_transfers() as seen:
        loss = step()
    assert seen == [], "hidden host transfers in a training step:\n" + "\n".join(seen)
    with host_transfers() as seen:
        last = loss.item()
    assert len([s for s in seen if s.startswith("to_host")]) == 1 and last < first + 1
