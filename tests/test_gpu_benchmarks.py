"""The GPU benchmark scripts stay runnable: their --sim smoke runs (tiny sizes, the CUDA simulator; every
kernel source compiled by gpu_warm.py) and, on a machine without a GPU, their clear refusal to run for real."""
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from minidl.kernels.cuda import runtime

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPTS = ["gpu_ops.py", "gpu_train_step.py"]


def run(script, *args):
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT)), check=False)


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ for the CUDA simulator")
@pytest.mark.parametrize("script", SCRIPTS)
def test_sim_smoke_run(script):
    done = run(script, "--sim")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "minidl CUDA simulator" in done.stdout and "not GPU figures" in done.stdout


@pytest.mark.skipif(runtime.gpu_available(), reason="a GPU is here")
@pytest.mark.parametrize("script", SCRIPTS)
def test_without_a_gpu_says_why(script):
    done = run(script)
    assert done.returncode == 2
    assert "needs an NVIDIA GPU with CuPy" in done.stderr and "--sim" in done.stderr


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++ for the CUDA simulator")
def test_warm_compiles_every_kernel_source_on_the_simulator():
    done = run("gpu_warm.py", "--sim")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    sources = sorted(p.name for p in (ROOT / "minidl" / "kernels" / "cuda" / "csrc").glob("*.cu"))
    assert sorted(line.split(":")[0] for line in done.stdout.splitlines() if line.endswith(" s") and ".cu:" in line) \
        == sources
