"""Every tutorial is a runnable script whose claims are ``assert``s: run each one and require success;
with --help each (and benchmarks/bench_import.py) says what it is and runs nothing."""
import os
import pathlib
import subprocess
import sys

import pytest
from example_runs import run_in_turn

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


HELPED = TUTORIALS + [ROOT / "benchmarks" / "bench_import.py"]


@pytest.fixture(scope="module")
def help_runs(tmp_path_factory):
    """(their folder, their results): every script above with --help, run in turn by one Python process."""
    folder = tmp_path_factory.mktemp("help")
    return folder, run_in_turn([(script, ("--help",)) for script in HELPED], cwd=folder,
                               env={"MINIDL_TUTORIAL_OUT": str(folder)})


@pytest.mark.parametrize("script", HELPED, ids=lambda p: p.name)
def test_help_describes_the_script_and_runs_nothing(script, help_runs):
    folder, results = help_runs
    code, out = results[str(script), ("--help",)]
    title = script.read_text(encoding="utf-8").split('"""')[1].splitlines()[0]
    assert code == 0 and out.startswith("usage:"), out
    assert " ".join(title.split()) in " ".join(out.split()), out
    assert "All claims checked" not in out
    assert not list(folder.iterdir()), "--help wrote files"
