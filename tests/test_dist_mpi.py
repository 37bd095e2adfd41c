"""minidl.dist under real `mpiexec -n N`: each launch runs many cases in one script
(tests/dist_mpi_script.py; startup is the slow part) and is killed, with its whole process
group, if it outlives its timeout. Skipped where mpi4py or mpiexec are missing."""
import os
import signal
import subprocess
import sys
import time

import pytest

from minidl.dist.launch import find_mpiexec

pytest.importorskip("mpi4py")
MPIEXEC = find_mpiexec()
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not found")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tests", "dist_mpi_script.py")


def launch(n, mode, timeout=90):
    """(exit code, output, seconds) of `mpiexec -n n python dist_mpi_script.py mode`."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("MINIDL_DIST_DEBUG", None)
    start = time.monotonic()
    proc = subprocess.Popen([MPIEXEC, "-n", str(n), sys.executable, SCRIPT, mode], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"mpiexec -n {n} {mode} hung for {timeout} s; output:\n{out}")
    return proc.returncode, out, time.monotonic() - start


@pytest.mark.parametrize("suites, n", [("cases,ddp,pipelining,mismatches,dcp", 2), ("ps", 3),
                                      ("cases,ddp,pipelining,mismatches,ps,dcp,dtensor", 4)])
def test_every_case_on_every_rank(suites, n):
    """One launch runs several suites in turn (starting the ranks is the slow part). cases: every
    collective and algorithm; ddp: DistributedDataParallel (tests/ddp_cases.py); pipelining:
    pipelined steps against single-process training (tests/pipeline_cases.py); ps: the parameter
    server's consistency models and sparse tables (tests/ps_cases.py); mismatches: mismatched
    collectives and messages, without debug mode (tests/dist_mismatch_cases.py); dcp: distributed checkpoints
    saved on every rank and loaded in other splits (tests/dcp_cases.py); dtensor: every transition between
    placements on 1-D and 2-D meshes (tests/dtensor_cases.py)."""
    code, out, _ = launch(n, suites, timeout=90 * len(suites.split(",")))   # (90 s a suite, as when launched alone)
    assert code == 0, out
    assert "FAIL" not in out, out
    for suite in suites.split(","):
        for rank in range(n):
            assert f"DONE {suite} rank {rank}: 0 failures" in out, out


def test_debug_mode_catches_a_mismatch_on_every_rank():
    code, out, _ = launch(2, "mismatch")
    assert code == 0 and out.count("CAUGHT") == 2, out
    assert "shape=(3,)" in out and "shape=(4,)" in out and "dist_mpi_script.py:" in out, out


def test_timeout_names_the_missing_rank():
    code, out, _ = launch(2, "timeout")
    assert code == 0, out
    assert "all_reduce (collective #1 of the group): timed out after 0.5 s on rank 0: rank(s) [1] did not send" in out


def test_an_exception_on_one_rank_ends_the_job():
    code, out, seconds = launch(2, "crash", timeout=60)
    assert code != 0 and "rank 1 fails on purpose" in out, out
    assert seconds < 30


def test_a_failing_parameter_server_worker_ends_the_job():
    code, out, _ = launch(3, "ps_crash", timeout=60)   # (a hang fails at the launch's timeout)
    assert code != 0 and "worker 1 fails on purpose" in out, out


def test_a_worker_that_exits_without_shutdown_is_named_when_it_exits():
    code, out, _ = launch(3, "ps_exit", timeout=60)
    assert code != 0, out
    assert "parameter server 0: worker rank(s) [1] exited without calling ps.shutdown()" in out, out


def test_a_stalled_rank_logs_whom_it_waits_for_and_keeps_waiting():
    code, out, _ = launch(2, "stall", timeout=60)
    assert code == 0 and "STALL DONE [3.0, 3.0]" in out, out
    assert "rank 0: all_reduce (collective #1 of the group) in the group of ranks [0, 1] has waited 0.2 s: rank(s) " \
           "[1] did not send what rank 0 waits for; still waiting (timeout 60 s)" in out, out
