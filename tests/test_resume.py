"""A seeded run resumed from a checkpoint reproduces the uninterrupted run's losses exactly."""
import numpy as np

import minidl
from minidl import nn
from minidl.optim import Adam
from minidl.optim.lr_scheduler import StepLR
from minidl.utils.data import DataLoader, TensorDataset


def _setup():
    minidl.manual_seed(0)
    data = np.random.default_rng(1)
    x = minidl.tensor(data.standard_normal((96, 5)).astype(np.float32))
    y = minidl.tensor(data.integers(0, 3, 96))
    model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 3))
    optimizer = Adam(model.parameters(), lr=0.01)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.5)
    generator = minidl.Generator().manual_seed(7)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True, generator=generator)
    return model, optimizer, scheduler, loader, generator


def _epoch(model, optimizer, scheduler, loader):
    losses = []
    for xb, yb in loader:
        loss = nn.functional.cross_entropy(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    scheduler.step()
    return losses


def test_resumed_run_matches_uninterrupted_run(tmp_path):
    model, optimizer, scheduler, loader, _ = _setup()
    uninterrupted = [_epoch(model, optimizer, scheduler, loader) for _ in range(3)]

    model, optimizer, scheduler, loader, generator = _setup()
    first = _epoch(model, optimizer, scheduler, loader)
    minidl.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                 "scheduler": scheduler.state_dict(), "epoch": 1, "rng": minidl.get_rng_state(),
                 "loader_rng": generator.get_state()}, tmp_path / "ck.safetensors")

    model, optimizer, scheduler, loader, generator = _setup()  # a fresh process would start here
    state = minidl.load(tmp_path / "ck.safetensors")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    minidl.set_rng_state(state["rng"])
    generator.set_state(state["loader_rng"])
    resumed = [first] + [_epoch(model, optimizer, scheduler, loader) for _ in range(state["epoch"], 3)]
    assert resumed == uninterrupted
