"""A parameter server killed (SIGKILL) at several points and restarted with ``python -m minidl.dist.ps
--resume``, with real processes (tests/ps_fault_script.py under the "gloo" backend).

Under BSP with ``durable=True`` the workers wait for the restart and go on, and the final parameters equal
both an uninterrupted run's and the closed recursion numpy computes (server-side Adam on the summed
least-squares gradients): no acknowledged push was lost, none applied twice.
"""
import signal

import numpy as np
import pytest
from ps_fault_job import Job, check_ledger

STEPS, WORKERS = 8, 2
DIM, BATCH, LR = 6, 16, 0.05   # (as tests/ps_fault_script.py's model=lsq)


def lsq_oracle(steps, workers):
    """BSP: each step, one Adam step (torch's formula) on the sum of the workers' gradients at v."""
    v, m, s = np.zeros(DIM), np.zeros(DIM), np.zeros(DIM)
    b1, b2, eps = 0.9, 0.999, 1e-8
    for t in range(1, steps + 1):
        g = np.zeros(DIM)
        for w in range(workers):
            rng = np.random.default_rng([w, t])
            x = rng.normal(size=(BATCH, DIM))
            y = x @ np.arange(1.0, DIM + 1) + 0.1 * rng.normal(size=BATCH)
            g += x.T @ (x @ v - y) / BATCH
        m = b1 * m + (1 - b1) * g
        s = b2 * s + (1 - b2) * g * g
        v = v - LR * (m / (1 - b1 ** t)) / (np.sqrt(s / (1 - b2 ** t)) + eps)
    return v


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    path = tmp_path_factory.mktemp("uninterrupted")
    with Job(path, WORKERS, 1, ["consistency=bsp", "model=lsq", f"steps={STEPS}", f"checkpoint_dir={path / 'ck'}",
                                "durable=1", "checkpoint_every=3"]) as job:
        assert job.finish() == [0] * (WORKERS + 1), job.everything()
        return np.array(job.result()["v"])


def test_the_uninterrupted_run_follows_the_numpy_recursion(uninterrupted):
    np.testing.assert_allclose(uninterrupted, lsq_oracle(STEPS, WORKERS), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("where", ["ps_wal:9", "ps_apply:3", "ps_checkpoint:3"])
def test_a_server_killed_and_restarted_loses_no_acknowledged_push(tmp_path, uninterrupted, where):
    """BSP, durable, checkpoint every 3 clocks; the server (rank 2) SIGKILLs itself in the middle of its
    9th log record, after its 3rd optimizer step, or in the middle of its 3rd checkpoint; restarted by
    hand, it loads its checkpoint and replays its log, the workers reconnect, and the final v equals the
    uninterrupted run's bit for bit."""
    ckpt = tmp_path / "ck"
    with Job(tmp_path, WORKERS, 1, ["consistency=bsp", "model=lsq", f"steps={STEPS}", f"checkpoint_dir={ckpt}",
                                    "durable=1", "checkpoint_every=3"],
             env={"MINIDL_FAULT": f"rank=2 at={where} do=kill"}) as job:
        job.until("the server to die", lambda: job.procs[2].poll() is not None)
        assert job.procs[2].poll() == -signal.SIGKILL, job.everything()
        job.restart_server(0, ckpt)
        codes = job.finish(victim=2)
        assert codes[:2] == [0, 0] and codes[3] == 0, job.everything()
        assert "restarted from checkpoint" in job.out(3), job.everything()
        np.testing.assert_array_equal(np.array(job.result()["v"]), uninterrupted)
