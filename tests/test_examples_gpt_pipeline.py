"""The pipelined GPT example under `mpiexec -n 4`: every schedule, alone and times data parallel,
trains the loss curve of the whole model trained in one process (float32, to 1e-5), keeps the two
copies of the tied weight equal and clips by the global norm. Each launch is killed, with its
process group, if it outlives its timeout; skipped where mpi4py or mpiexec are missing."""
import re

import pytest
from example_runs import ROOT, run_example

from minidl.dist.launch import find_mpiexec

pytest.importorskip("mpi4py")
MPIEXEC = find_mpiexec()
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not found")
CLIP = 0.5


def launch(*args, ranks=4, timeout=90):
    """(exit code, stdout and stderr together) of `mpiexec -n ranks python gpt_pipeline.py args`."""
    return run_example("gpt_pipeline.py", *args, cwd=ROOT, ranks=ranks, timeout=timeout)


# Each schedule's equivalence with one process is tested on simulated ranks (test_pipelining.py); here the example
# runs for real once per schedule, the interleaved and zero-bubble ones times data parallel (their weight passes
# and split backwards end in DDP's all-reduces), which costs a launch of 4 processes each.
@pytest.mark.parametrize("schedule, dp", [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb", 2)])
def test_pipelined_loss_curve_is_the_single_process_one(schedule, dp):
    code, out = launch("--schedule", schedule, "--dp", str(dp), "--steps", "6", "--clip", str(CLIP), "--check")
    assert code == 0, out
    rows = [tuple(map(float, r)) for r in re.findall(r"^ *\d+ +([\d.]+) +([\d.]+) +[\d.e+-]+$", out, re.M)]
    assert len(rows) == 6, out
    assert all(abs(pipelined - single) <= 1e-5 for pipelined, single in rows), out
    assert rows[-1][1] < rows[0][1] - 0.3, "the loss falls"
    norms = [float(v) for v in re.findall(r"grad norm ([\d.]+)", out)]
    assert len(norms) == 6 and sum(n > CLIP for n in norms) >= 3, "clipping scales most steps"
    assert "the embedding and the head's copy differ by 0\n" in out, out


def test_a_bad_layout_is_reported_once():
    code, out = launch("--dp", "3")
    assert code != 0 and out.count("error: --dp 3 does not divide the 4 ranks\n") == 1, out


def test_without_mpiexec_it_says_how_to_launch():
    code, out = run_example("gpt_pipeline.py", "--steps", "1", cwd=ROOT, timeout=60)
    assert code != 0 and "mpiexec -n 4 python examples/gpt_pipeline.py" in out, out


def test_heads_that_do_not_divide_the_width_are_reported_once():
    code, out = launch("--heads", "3")
    assert code == 2 and out.count("error: --heads 3 does not divide --width 32\n") == 1, out
