"""The examples run as a user runs them, and learn what they claim to learn."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import minidl
from minidl.kernels.cuda import runtime
from minidl.utils.data import DataLoader
from minidl.vision.datasets import Digits
from example_runs import run_example, run_in_turn

ROOT = Path(__file__).resolve().parent.parent


def _run(*args, cwd):
    """Run with this checkout's minidl (not whichever one is installed)."""
    out = subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_spiral_mlp_demo_learns(tmp_path):
    out = _run(str(ROOT / "examples" / "train_mlp.py"), cwd=tmp_path)
    assert float(re.search(r"final accuracy ([\d.]+)", out).group(1)) > 0.9


EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py"))
NONSENSE = [
    ("train_digits.py", ["--epochs", "0"], "argument --epochs: must be at least 1, not 0"),
    ("train_digits.py", ["--batch-size", "0"], "argument --batch-size: must be at least 1, not 0"),
    ("train_digits.py", ["--lr", "-1"], "argument --lr: must be positive, not -1"),
    ("train_digits_ddp.py", ["--limit-batches", "0"], "argument --limit-batches: must be at least 1, not 0"),
    ("gpt_pipeline.py", ["--microbatches", "0"], "argument --microbatches: must be at least 1, not 0"),
    ("gpt_pipeline.py", ["--layers", "0"], "argument --layers: must be at least 1, not 0"),
    ("char_gpt.py", ["--heads", "3"], "--heads 3 does not divide --width 64"),
    ("char_gpt.py", ["--steps", "0"], "argument --steps: must be at least 1, not 0"),
    ("lstm_sequence.py", ["--length", "1"], "--length 1: a sequence needs a marked step in each half"),
    ("hogwild.py", ["--processes", "0"], "argument --processes: must be at least 1, not 0"),
    ("train_mlp.py", ["--hidden", "0"], "argument --hidden: must be at least 1, not 0"),
]


@pytest.fixture(scope="module")
def runs_that_stop_early(tmp_path_factory):
    """(their folder, their results): every example with --help and with each nonsensical number, run
    in turn by one Python process (tests/example_runs.py) in a folder of their own."""
    folder = tmp_path_factory.mktemp("runs-that-stop-early")
    calls = [(ROOT / "examples" / script, ("--help",)) for script in EXAMPLES]
    calls += [(ROOT / "examples" / script, tuple(args)) for script, args, _ in NONSENSE]
    return folder, run_in_turn(calls, cwd=folder)


@pytest.mark.parametrize("script", EXAMPLES)
def test_every_example_answers_help_without_training(script, runs_that_stop_early):
    folder, results = runs_that_stop_early
    code, out = results[str(ROOT / "examples" / script), ("--help",)]
    assert code == 0 and out.startswith("usage:") and not re.search(r"(epoch|step)\s+\d", out), out[:500]
    assert not list(folder.iterdir()), "--help wrote files"


def test_digits_mlp_trains_checkpoints_and_resumes(tmp_path):
    script = str(ROOT / "examples" / "train_digits.py")
    out = _run(script, "--model", "mlp", "--epochs", "6", cwd=tmp_path)
    accuracy = float(re.search(r"final test accuracy ([\d.]+)", out).group(1))
    assert accuracy > 0.95
    assert (tmp_path / "digits-mlp.safetensors").exists()
    resumed = _run(script, "--model", "mlp", "--epochs", "7", "--resume", cwd=tmp_path)
    assert "resumed from digits-mlp.safetensors at epoch 6" in resumed and "epoch   7" in resumed


def test_digits_compiled_steps_train_exactly_as_eager_ones(tmp_path):
    """--compile replays each captured step (CNN: batch norm, dropout, Adam, a scheduler between epochs, the
    last batch a new shape): the printed losses and accuracies are the eager run's, digit for digit."""
    script = str(ROOT / "examples" / "train_digits.py")
    args = ("--epochs", "2", "--limit-batches", "12", "--checkpoint", "digits.safetensors")
    eager = _run(script, *args, cwd=tmp_path)
    compiled = _run(script, *args, "--compile", cwd=tmp_path)
    pattern = r"loss ([\d.]+)  test accuracy ([\d.]+)"
    assert re.findall(pattern, compiled) == re.findall(pattern, eager) != [], (eager, compiled)


def test_digits_logs_loss_and_accuracy_for_tensorboard(tmp_path):
    """--tensorboard DIR: each epoch's printed training loss and test accuracy, read back by
    TensorBoard's own reader; a resumed run goes on logging into the same run."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    script = str(ROOT / "examples" / "train_digits.py")
    args = ("--model", "mlp", "--limit-batches", "3", "--tensorboard", "tb")
    out = _run(script, "--epochs", "2", *args, cwd=tmp_path)
    out += _run(script, "--epochs", "3", "--resume", *args, cwd=tmp_path)
    printed = [(float(loss), float(accuracy)) for loss, accuracy in
               re.findall(r"loss ([\d.]+)  test accuracy ([\d.]+)", out)]
    events = EventAccumulator(str(tmp_path / "tb")).Reload()
    losses, accuracies = events.Scalars("loss/train"), events.Scalars("accuracy/test")
    assert [e.step for e in losses] == [e.step for e in accuracies] == [1, 2, 3] and len(printed) == 3
    for (loss, accuracy), logged_loss, logged_accuracy in zip(printed, losses, accuracies):
        assert logged_loss.value == pytest.approx(loss, abs=1e-4)  # (printed to 4 decimals)
        assert logged_accuracy.value == pytest.approx(accuracy, abs=1e-4)


def test_hogwild_processes_train_one_shared_model(tmp_path):
    out = _run(str(ROOT / "examples" / "hogwild.py"), "--processes", "2", "--steps", "100", cwd=tmp_path)
    before = float(re.search(r"test loss before: ([\d.]+)", out).group(1))
    after = float(re.search(r"test loss after .*: ([\d.]+)", out).group(1))
    assert after < 0.01 * before


def test_cuda_device_is_refused_clearly_without_a_cuda_runtime(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "MINIDL_CUDA_SIM"}
    if runtime.gpu_available():
        pytest.skip("a GPU is here: device 'cuda' is available")
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "train_digits.py"), "--device", "cuda"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120, env=dict(env, PYTHONPATH=str(ROOT)))
    assert out.returncode != 0 and "device 'cuda' is not available here" in out.stderr


def test_digits_trains_on_cuda_in_the_simulator(tmp_path):
    """A few batches on device 'cuda' (the simulator where no GPU is): it runs and the loss falls."""
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "train_digits.py"), "--device", "cuda", "--model",
                          "mlp", "--epochs", "3", "--limit-batches", "4", "--lr", "1e-2"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=str(ROOT), MINIDL_CUDA_SIM="1"))
    assert out.returncode == 0, out.stderr[-2000:]
    losses = [float(v) for v in re.findall(r"loss ([\d.]+)", out.stdout)]
    assert len(losses) == 3 and losses[-1] < losses[0]
    resumed = subprocess.run([sys.executable, str(ROOT / "examples" / "train_digits.py"), "--device", "cuda",
                              "--model", "mlp", "--epochs", "4", "--limit-batches", "2", "--resume"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=300,
                             env=dict(os.environ, PYTHONPATH=str(ROOT), MINIDL_CUDA_SIM="1"))
    assert resumed.returncode == 0 and "resumed from digits-mlp.safetensors at epoch 3" in resumed.stdout


def _ddp_example(*args, cwd, ranks=2):
    """(exit code, stdout and stderr together) of train_digits_ddp.py under mpiexec."""
    return run_example("train_digits_ddp.py", *args, cwd=cwd, ranks=ranks, timeout=120)


@pytest.mark.parametrize("args, error", [(["--batch-size", "31"], "error: --batch-size 31 does not split evenly"),
                                         (["--epochs", "x"], "error: argument --epochs: invalid int value")])
def test_a_bad_argument_under_mpiexec_is_reported_once(args, error, tmp_path):
    code, out = _ddp_example(*args, cwd=tmp_path)
    assert code != 0 and out.count(error) == 1, out
    assert re.search(re.escape(error) + r"[^\n]*\n", out), "the message ends its line"


def test_digits_ddp_runs_under_mpiexec_and_its_checkpoint_loads_in_one_process(tmp_path):
    code, out = _ddp_example("--epochs", "1", "--limit-batches", "8", cwd=tmp_path)
    assert code == 0, out
    assert out.count("final test accuracy") == 1 and out.count("epoch   1") == 1, out  # rank 0 alone prints
    printed = float(re.search(r"final test accuracy ([\d.]+)", out).group(1))
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from train_digits import evaluate, make_model
    finally:
        sys.path.pop(0)
    model = make_model("cnn")
    model.load_state_dict(minidl.load(str(tmp_path / "digits-cnn-ddp.safetensors"))["model"])
    accuracy = evaluate(model, DataLoader(Digits(train=False), batch_size=256))
    assert abs(accuracy - printed) <= 5e-5 and accuracy > 0.3  # printed to 4 places; 8 steps beat chance


@pytest.mark.parametrize("script, args, error", NONSENSE)
def test_a_nonsensical_number_is_one_error_line_naming_the_flag(script, args, error, runs_that_stop_early):
    folder, results = runs_that_stop_early
    code, out = results[str(ROOT / "examples" / script), tuple(args)]
    assert code == 2 and f"error: {error}" in out and "Traceback" not in out, out
    assert not list(folder.iterdir()), "nothing ran"


def test_digits_ddp_without_mpiexec_says_how_to_launch_it(tmp_path):
    code, out = run_example("train_digits_ddp.py", "--epochs", "1", cwd=tmp_path, timeout=120)
    assert code == 2 and "Traceback" not in out, out
    assert out.count("error:") == 1 and "mpiexec -n 2 python examples/train_digits_ddp.py" in out, out
