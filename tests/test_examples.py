"""The examples run as a user runs them, and learn what they claim to learn."""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*args, cwd):
    out = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_spiral_mlp_demo_learns(tmp_path):
    out = _run(str(ROOT / "examples" / "train_mlp.py"), cwd=tmp_path)
    assert float(re.search(r"final accuracy ([\d.]+)", out).group(1)) > 0.9


def test_digits_mlp_trains_checkpoints_and_resumes(tmp_path):
    script = str(ROOT / "examples" / "train_digits.py")
    out = _run(script, "--model", "mlp", "--epochs", "12", cwd=tmp_path)
    accuracy = float(re.search(r"final test accuracy ([\d.]+)", out).group(1))
    assert accuracy > 0.95
    assert (tmp_path / "digits-mlp.safetensors").exists()
    resumed = _run(script, "--model", "mlp", "--epochs", "14", "--resume", cwd=tmp_path)
    assert "resumed from digits-mlp.safetensors at epoch 12" in resumed and "epoch  14" in resumed


def test_cuda_device_is_refused_clearly(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "train_digits.py"), "--device", "cuda"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "CUDA backend is not available" in out.stderr
