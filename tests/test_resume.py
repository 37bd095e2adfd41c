"""A seeded run resumed from a checkpoint reproduces the uninterrupted run's losses exactly; the
digits example refuses to resume from a checkpoint that is missing or damaged, and leaves one that
is already at the epochs asked for as it is."""
import numpy as np
from example_runs import ROOT, run_example, run_in_turn

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


def test_resume_without_a_checkpoint_is_an_error_naming_it(tmp_path):
    code, out = run_example("train_digits.py", "--model", "mlp", "--resume", "--checkpoint", "gone.safetensors",
                            cwd=tmp_path, timeout=120)
    assert code == 2 and "error: --resume: there is no checkpoint gone.safetensors" in out, out
    assert not list(tmp_path.iterdir()), "nothing trained, nothing written"


def test_resume_to_an_epoch_already_reached_trains_nothing_and_keeps_the_checkpoint(tmp_path):
    args = ("--model", "mlp", "--limit-batches", "1")
    code, out = run_example("train_digits.py", *args, "--epochs", "2", cwd=tmp_path, timeout=120)
    assert code == 0, out
    checkpoint = tmp_path / "digits-mlp.safetensors"
    saved = checkpoint.read_bytes()
    resumes = [(ROOT / "examples" / "train_digits.py", (*args, "--epochs", epochs, "--resume")) for epochs in "12"]
    for epochs, (code, out) in zip("12", run_in_turn(resumes, cwd=tmp_path).values()):   # (one Python process)
        assert code == 0 and f"is at epoch 2; --epochs {epochs} has nothing to train" in out, out
        assert "loss" not in out
    assert checkpoint.read_bytes() == saved
    damaged = bytearray(saved)
    damaged[-64:] = bytes(255 - b for b in damaged[-64:])  # the last tensor's last bytes
    checkpoint.write_bytes(damaged)
    code, out = run_example("train_digits.py", *args, "--epochs", "3", "--resume", cwd=tmp_path, timeout=120)
    assert code == 2 and "error: --resume: cannot resume from digits-mlp.safetensors" in out, out
    assert "Traceback" not in out and checkpoint.read_bytes() == damaged
