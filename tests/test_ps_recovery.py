"""A parameter server killed (SIGKILL) at several points and restarted with ``python -m minidl.dist.ps
--resume``, with real processes (tests/ps_fault_script.py under the "gloo" backend).

Under BSP with ``durable=True`` the workers wait for the restart and go on, and the final parameters equal
both an uninterrupted run's and the closed recursion numpy computes (server-side Adam on the summed
least-squares gradients): no acknowledged push was lost, none applied twice.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest
from ps_fault_job import ROOT, SCRIPT, Job, check_ledger

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


def refuse_all(sock):
    while True:
        try:
            sock.accept()[0].close()
        except OSError:
            return


def test_a_restarted_server_on_another_port_is_found_through_the_store(tmp_path):
    """SSP, 2 servers, durable: server 1 (rank 3) SIGKILLs itself after its 5th optimizer step; the test
    holds its old port (listening, closing what connects) so that the restart must listen elsewhere; it says where in
    server 0's store, the workers find it there, and every push of both workers is applied exactly once
    on both servers."""
    ckpt = tmp_path / "ck"
    with Job(tmp_path, 2, 2, ["consistency=ssp", "staleness=1", f"steps={STEPS}", f"checkpoint_dir={ckpt}",
                              "durable=1", "checkpoint_every=2"],
             env={"MINIDL_FAULT": "rank=3 at=ps_apply:5 do=kill"}) as job:
        job.until("server 1 to die", lambda: job.procs[3].poll() is not None)
        job.until("a worker to notice", lambda: "parameter server 1 (" in job.out(0) + job.out(1))
        text = job.out(0) + job.out(1)
        port = int(text.split("parameter server 1 (")[1].split(")")[0].rpartition(":")[2])
        with socket.create_server(("127.0.0.1", port)) as holder:   # (closes what connects: not the server)
            threading.Thread(target=refuse_all, args=(holder,), daemon=True).start()
            job.restart_server(1, ckpt)
            codes = job.finish(victim=3)
        assert codes[:3] == [0, 0, 0] and codes[4] == 0, job.everything()
        assert f"port {port} is taken" in job.out(4), job.everything()
        assert check_ledger(job.result(), 2, {0: STEPS, 1: STEPS}) == [STEPS, STEPS]


def test_without_the_log_a_restart_goes_back_to_the_checkpoint_and_applies_nothing_twice(tmp_path):
    """ASP, not durable, checkpoints only at the start: the server dies after its 6th optimizer step and
    is restarted from the checkpoint taken after the registrations; the run finishes, the pushes the
    server had applied are lost (not replayed: 0 logged requests), and none is applied twice."""
    ckpt = tmp_path / "ck"
    with Job(tmp_path, 2, 1, ["consistency=asp", f"steps={STEPS}", f"checkpoint_dir={ckpt}",
                              "checkpoint_every=1000"], env={"MINIDL_FAULT": "rank=2 at=ps_apply:6 do=kill"}) as job:
        job.until("the server to die", lambda: job.procs[2].poll() is not None)
        job.restart_server(0, ckpt)
        assert job.finish(victim=2)[:2] == [0, 0], job.everything()
        assert "from checkpoint 2 and 0 logged request(s)" in job.out(3), job.everything()
        applied = check_ledger(job.result(), 1, {0: STEPS, 1: STEPS})
        assert sum(applied) <= 2 * STEPS - 5, applied   # (at least the 5 pushes acknowledged before the kill)


@pytest.mark.parametrize("fault, durable", [("rank=2 at=ps_apply:5", "0"), ("rank=1 at=ps_clock:5", "1")])
def test_the_launcher_restarts_the_job_and_resume_gives_the_uninterrupted_result(tmp_path, uninterrupted, fault,
                                                                                 durable):
    """minidl.dist.run --max-restarts 1: the server SIGKILLs itself after its 5th optimizer step, or worker 1
    at its 5th clock (in the first attempt only); the launcher starts every process again,
    ps.init(resume=True) loads the last checkpoint (and the log, durable), the workers start again at the
    slowest clock (the dead worker's too: under BSP's "raise" the survivor's iteration was not applied
    without it), and the final v equals the uninterrupted run's bit for bit."""
    ckpt = tmp_path / "ck"
    cmd = [sys.executable, "-m", "minidl.dist.run", "--standalone", "--nproc-per-node", "3", "--max-restarts", "1",
           SCRIPT, "servers=1", "consistency=bsp", "model=lsq", f"steps={STEPS}", f"checkpoint_dir={ckpt}",
           "checkpoint_every=3", "resume=auto", f"durable={durable}"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180,
                          env=dict(os.environ, PYTHONPATH=ROOT, MINIDL_FAULT=f"{fault} do=kill restart=0"))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "restarting the group (restart 1 of 1)" in out and "resumed from checkpoint" in out, out
    result = json.loads([line for line in out.splitlines() if line.startswith("RESULT ")][-1][len("RESULT "):])
    np.testing.assert_array_equal(np.array(result["v"]), uninterrupted)


@pytest.mark.parametrize("victim", [2, 3])
def test_a_replicated_range_fails_over_to_its_backup_without_a_restart(tmp_path, uninterrupted, victim):
    """BSP, 2 servers, replicate=True: server 0 (rank 2, the store's host) or server 1 (rank 3) SIGKILLs
    itself after its 5th optimizer step; nobody restarts it: its backup serves its range at once, and
    the final v equals the uninterrupted run's (on 1 server) bit for bit."""
    with Job(tmp_path, WORKERS, 2, ["consistency=bsp", "model=lsq", f"steps={STEPS}", "replicate=1"],
             env={"MINIDL_FAULT": f"rank={victim} at=ps_apply:5 do=kill"}) as job:
        codes = job.finish(victim=victim)
        assert codes[victim] == -signal.SIGKILL and codes[:2] == [0, 0], job.everything()
        assert codes[5 - victim] == 0, job.everything()
        assert f"parameter server {victim - 2} is gone" in job.out(5 - victim), job.everything()
        np.testing.assert_array_equal(np.array(job.result()["v"]), uninterrupted)


def test_under_ssp_a_failover_applies_every_push_exactly_once(tmp_path):
    """SSP(1), 2 servers, replicate=True, server 1 SIGKILLed after its 7th optimizer step: every push of
    both workers applied once on each range (the backup took what server 1 had applied, and the workers
    sent it again only what server 1 had not answered)."""
    with Job(tmp_path, 2, 2, ["consistency=ssp", "staleness=1", "steps=12", "replicate=1"],
             env={"MINIDL_FAULT": "rank=3 at=ps_apply:7 do=kill"}) as job:
        codes = job.finish(victim=3)
        assert codes[:3] == [0, 0, 0], job.everything()
        assert check_ledger(job.result(), 2, {0: 12, 1: 12}) == [12, 12]
