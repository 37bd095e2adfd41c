"""examples/train_digits_elastic.py under the launcher, as the README runs it: a worker SIGKILLed halfway is
survived in the job, and the job ends on the weights of a run without the kill that follows the same
membership from the same commit.

That reference is two failure-free jobs: 3 workers for the 8 steps before the commit (--max-steps 8,
checkpointing it), then 2 workers resuming from that checkpoint. A plain 3-worker run would not do: the CNN's
BatchNorm normalises over each rank's batch (16 samples at 3 workers, 24 at 2) and dropout draws per rank, so
steps at another world size compute other numbers, not merely the same sum in another order. With the same
membership every step takes the same ranks, samples, masks and reduction order, so the weights (BatchNorm's
running statistics, rank 0's, included) agree to the last bit: the assertion leaves float32 a little room all
the same. What is compared is the in-memory rollback against a restart from a distributed checkpoint, the
two ways an elastic job recovers."""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minidl

ROOT = Path(__file__).resolve().parent.parent
SHORT = ["--epochs", "2", "--limit-batches", "6", "--commit-every", "4"]   # steps 0-5 in epoch 1, 6-11 in 2


def launch(nproc, *args, cwd):
    """(exit code, output) of the example's job of ``nproc`` workers under python -m minidl.dist.run."""
    proc = subprocess.Popen([sys.executable, "-m", "minidl.dist.run", "--standalone", "--nproc-per-node",
                             str(nproc), str(ROOT / "examples" / "train_digits_elastic.py"), *args],
                            cwd=cwd, env=dict(os.environ, PYTHONPATH=str(ROOT)), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = proc.communicate(timeout=300)   # (only a hang gets near this)
    except subprocess.TimeoutExpired:
        proc.terminate()   # (the launcher stops its workers)
        pytest.fail(f"the job hung: {proc.communicate(timeout=60)[0]}")
    return proc.returncode, out


def weights(path):
    return {k: v.numpy() for k, v in minidl.load(str(path)).items()}


def test_a_worker_killed_halfway_is_survived_and_the_job_ends_on_the_weights_of_a_run_without_the_kill(tmp_path):
    """The worker started as rank 1 dies as step 9 begins; the reference runs in a folder of its own."""
    killed, reference = tmp_path / "killed", tmp_path / "reference"
    killed.mkdir(), reference.mkdir()
    code, out = launch(3, *SHORT, "--kill-at", "9", "--checkpoint-dir", "ckpt", "--save-every", "2", cwd=killed)
    assert code == 0, out
    assert "rank 1 SIGKILLs itself at step 9" in out, out
    # the last commit before step 9 is step 8's: steps 8-11 are (re)done by two workers with 24 samples each
    assert "world size 3 -> 2: back to the commit at step 8 (epoch 2), 24 samples per rank per step" in out, out
    assert [int(n) for n in re.findall(r"epoch +\d+  world size (\d)", out)] == [3, 2], out
    assert re.search(r"final test accuracy [\d.]+ after 12 steps \(2 workers at the end", out), out

    code, out = launch(3, *SHORT, "--max-steps", "8", "--checkpoint-dir", "ref", "--save-every", "1", cwd=reference)
    assert code == 0 and "after 8 steps (3 workers at the end" in out, out
    code, out = launch(2, *SHORT, "--checkpoint-dir", "ref", "--save-every", "1", cwd=reference)
    assert code == 0 and "resumed from ref at step 8 (epoch 2)" in out, out
    assert "after 12 steps (2 workers at the end" in out, out
    expected = weights(reference / "digits-cnn-elastic.safetensors")
    got = weights(killed / "digits-cnn-elastic.safetensors")
    assert sorted(got) == sorted(expected)
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=0, atol=1e-6, err_msg=name)
