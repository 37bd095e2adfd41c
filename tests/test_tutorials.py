"""Every tutorial is a runnable script whose claims are ``assert``s: run each one and require success;
with --help each (and benchmarks/bench_import.py) says what it is and runs nothing."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
TUTORIALS = sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.py"))


def test_tutorials_exist():
    names = {p.name for p in TUTORIALS}
    assert {"01_tensors_and_strides.py", "02_autograd_from_scratch.py",
            "03_training_a_classifier.py", "04_cuda_kernels.py", "05_allreduce_from_scratch.py"} <= names


@pytest.mark.parametrize("script", TUTORIALS, ids=lambda p: p.name)
def test_tutorial_runs(script):
    result = subprocess.run([sys.executable, str(script.relative_to(ROOT))], cwd=ROOT, capture_output=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), text=True, timeout=300, check=False)
    assert result.returncode == 0, (f"{script.name} exited with {result.returncode}\n"
                                    f"--- stdout ---\n{result.stdout[-4000:]}\n--- stderr ---\n{result.stderr[-4000:]}")
    assert "All claims checked" in result.stdout


@pytest.mark.parametrize("script", TUTORIALS + [ROOT / "benchmarks" / "bench_import.py"], ids=lambda p: p.name)
def test_help_describes_the_script_and_runs_nothing(script, tmp_path):
    result = subprocess.run([sys.executable, str(script), "--help"], cwd=tmp_path, capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT), MINIDL_TUTORIAL_OUT=str(tmp_path)),
                            timeout=120, check=False)
    title = script.read_text(encoding="utf-8").split('"""')[1].splitlines()[0]
    assert result.returncode == 0 and result.stdout.startswith("usage:"), result.stdout + result.stderr
    assert " ".join(title.split()) in " ".join(result.stdout.split()), result.stdout
    assert "All claims checked" not in result.stdout
    assert not list(tmp_path.iterdir()), "--help wrote files"
