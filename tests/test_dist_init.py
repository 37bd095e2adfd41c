"""Starting distributed jobs without MPI, as PyTorch users do: a DDP script started with spawn, its group from the
environment (env://), gives torch's parameters with torch replaced by minidl; tcp://, file:// and store=; under
mpiexec, "gloo" meets over MPI and backend=None stays MPI. Bad input (a missing variable, a port in use, ranks that
never arrive, a rank out of range, world sizes that disagree) is an error naming it."""
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import torch.multiprocessing

import minidl.dist as dist
import minidl.multiprocessing

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dist_init_cases  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def environment(monkeypatch):
    """A clean rendezvous environment for the test (and the children it spawns)."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTHONPATH", ROOT + os.pathsep + os.path.join(ROOT, "tests"))
    return monkeypatch


def test_a_torch_ddp_script_started_by_spawn_runs_with_torch_replaced_by_minidl(environment, tmp_path):
    for library, spawn in (("torch", torch.multiprocessing.spawn), ("minidl", minidl.multiprocessing.spawn)):
        environment.setenv("MASTER_ADDR", "127.0.0.1")
        environment.setenv("MASTER_PORT", str(free_port()))
        environment.setenv("WORLD_SIZE", "2")
        spawn(dist_init_cases.ddp_script, args=(library, str(tmp_path)), nprocs=2)
    np.testing.assert_allclose(np.load(tmp_path / "minidl.npy"), np.load(tmp_path / "torch.npy"), rtol=1e-12)


def test_tcp_and_file_init_methods(environment, tmp_path):
    minidl.multiprocessing.spawn(dist_init_cases.init_methods, args=(2, free_port(), str(tmp_path / "store")),
                                 nprocs=2)


def test_gloo_under_mpiexec_meets_over_mpi_and_no_backend_is_mpi():
    from minidl.dist.launch import find_mpiexec
    pytest.importorskip("mpi4py")
    code = ("import sys, minidl, minidl.dist as dist\n"
            "for backend in ('gloo', None):\n"
            "    dist.init_process_group(backend)\n"
            "    t = minidl.ones(3)\n"
            "    dist.all_reduce(t)\n"
            "    sys.stdout.write(f'BACKEND {dist.get_backend()} {dist.get_rank()} {t.tolist()}\\n')\n"   # (one write)
            "    sys.stdout.flush()\n"
            "    dist.destroy_process_group()\n")
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    done = subprocess.run([find_mpiexec(), "-n", "2", sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=dict(env, PYTHONPATH=ROOT), check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    for backend in ("gloo", "mpi"):
        for rank in (0, 1):
            assert f"BACKEND {backend} {rank} [2.0, 2.0, 2.0]" in done.stdout, done.stdout


def test_a_missing_variable_is_named(environment):
    environment.setenv("MASTER_ADDR", "127.0.0.1")
    with pytest.raises(ValueError, match="env:// rendezvous: environment variable RANK expected, but not set"):
        dist.init_process_group("gloo")
    assert not dist.is_initialized()


def test_a_port_in_use_is_named(environment):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for name, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(port)), ("RANK", "0"),
                            ("WORLD_SIZE", "1")):
            environment.setenv(name, value)
        with pytest.raises(dist.DistNetworkError, match=f"127.0.0.1:{port}"):
            dist.init_process_group()


def test_ranks_that_never_arrive_and_a_rank_out_of_range_are_named(environment):
    with pytest.raises(dist.DistStoreError, match=r"waiting for rank\(s\) \[1\] of world_size=2; they never arrived"):
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=2, timeout=1)
    with pytest.raises(ValueError, match="rank 5 is out of range for world_size 2"):
        dist.init_process_group("gloo", store=dist.HashStore(), rank=5, world_size=2, timeout=1)
    with pytest.raises(ValueError, match="store= needs rank= and world_size="):
        dist.init_process_group("gloo", store=dist.HashStore())
    assert not dist.is_initialized()


def test_world_sizes_that_disagree_fail_on_every_rank(environment, tmp_path):
    with pytest.raises(minidl.multiprocessing.ProcessRaisedException, match="world sizes disagree") as raised:
        minidl.multiprocessing.spawn(dist_init_cases.disagreeing_world_size, args=(str(tmp_path / "store"),),
                                     nprocs=2)
    assert "world_size=3" in str(raised.value) and "world_size=2" in str(raised.value)


def test_a_frozen_store_host_is_named_by_every_survivor_within_the_heartbeat(environment, tmp_path):
    """Rank 0 serves the store (env://) and freezes (SIGSTOP) mid-run while the others send it small messages:
    they fail naming it after the heartbeat, not after the store's timeout."""
    for name, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(free_port())), ("WORLD_SIZE", "3"),
                        ("MINIDL_DIST_HEARTBEAT", "1.5"), ("MINIDL_FAULT", "rank=0 at=all_reduce:30 do=stop")):
        environment.setenv(name, value)
    context = minidl.multiprocessing.start_processes(dist_init_cases.survivor, args=(str(tmp_path), "stop"),
                                                     nprocs=3, join=False)
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"rank{r}.txt").exists() for r in (1, 2)):
            assert time.monotonic() < deadline, "the survivors did not fail within 60 s"
            time.sleep(0.1)
        for r in (1, 2):
            seconds, message = (tmp_path / f"rank{r}.txt").read_text().split(" ", 1)
            assert "rank 0" in message and float(seconds) < 20, message
    finally:
        for p in context.processes:
            os.kill(p.pid, signal.SIGKILL)
            p.join()


def test_a_rank_that_raises_under_spawn_is_named_as_failed(environment, tmp_path):
    for name, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(free_port())), ("WORLD_SIZE", "2")):
        environment.setenv(name, value)
    context = minidl.multiprocessing.start_processes(dist_init_cases.survivor, args=(str(tmp_path), "raise"),
                                                     nprocs=2, join=False)
    with pytest.raises(minidl.multiprocessing.ProcessRaisedException, match="rank 1 fails on purpose"):
        while not context.join(grace_period=20):
            pass
    message = (tmp_path / "rank0.txt").read_text()
    assert "rank 1 failed with an uncaught exception: KeyError" in message, message


def test_waiting_on_the_jobs_own_store_is_no_sign_of_a_frozen_rank(environment):
    environment.setenv("MINIDL_DIST_HEARTBEAT", "1")
    minidl.multiprocessing.spawn(dist_init_cases.waits_on_its_store, args=(free_port(),), nprocs=2)


def test_init_method_and_store_together_are_refused():
    with pytest.raises(ValueError, match="Cannot specify both init_method and store"):
        dist.init_process_group("gloo", init_method="env://", store=dist.HashStore(), rank=0, world_size=1)
