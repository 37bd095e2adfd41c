"""The pipelined GPT example under `mpiexec -n 4`: every schedule, alone and times data parallel,
trains the loss curve of the whole model trained in one process (float32, to 1e-5), keeps the two
copies of the tied weight equal and clips by the global norm. Each launch is killed, with its
process group, if it outlives its timeout; skipped where mpi4py or mpiexec are missing."""
import os
import re
import signal
import subprocess
import sys

import pytest

from minidl.dist.launch import find_mpiexec
from test_examples import ROOT

pytest.importorskip("mpi4py")
MPIEXEC = find_mpiexec()
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not found")
SCRIPT = str(ROOT / "examples" / "gpt_pipeline.py")
CLIP = 0.5


def launch(*args, ranks=4, timeout=90):
    """(exit code, stdout and stderr together) of `mpiexec -n ranks python gpt_pipeline.py args`."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([MPIEXEC, "-n", str(ranks), sys.executable, SCRIPT, *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"gpt_pipeline.py {' '.join(args)} hung for {timeout} s; output:\n{proc.communicate()[0]}")
    return proc.returncode, out


@pytest.mark.parametrize("schedule, dp", [("gpipe", 1), ("1f1b", 1), ("interleaved", 1), ("zb", 1), ("1f1b", 2),
                                          ("interleaved", 2), ("zb", 2)])
def test_pipelined_loss_curve_is_the_single_process_one(schedule, dp):
    code, out = launch("--schedule", schedule, "--dp", str(dp), "--steps", "12", "--clip", str(CLIP), "--check")
    assert code == 0, out
    rows = [tuple(map(float, r)) for r in re.findall(r"^ *\d+ +([\d.]+) +([\d.]+) +[\d.e+-]+$", out, re.M)]
    assert len(rows) == 12, out
    assert all(abs(pipelined - single) <= 1e-5 for pipelined, single in rows), out
    assert rows[-1][1] < rows[0][1] - 0.5, "the loss falls"
    norms = [float(v) for v in re.findall(r"grad norm ([\d.]+)", out)]
    assert len(norms) == 12 and sum(n > CLIP for n in norms) >= 6, "clipping scales most steps"
    assert "the embedding and the head's copy differ by 0\n" in out, out


def test_a_bad_layout_is_reported_once():
    code, out = launch("--dp", "3")
    assert code != 0 and out.count("error: --dp 3 does not divide the 4 ranks\n") == 1, out


def test_without_mpiexec_it_says_how_to_launch():
    out = subprocess.run([sys.executable, SCRIPT, "--steps", "1"], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert out.returncode != 0 and "mpiexec -n 4 python examples/gpt_pipeline.py" in out.stderr, out.stderr
