"""python -m minidl.dist.run (torchrun's launcher): the workers' environment, failure summaries, restarts that
meet after a kill mid-collective and a staggered start, snapshot resume, signals, and bad input; several
launchers on this machine standing for nodes: c10d and static rendezvous, a node joining a running job and one
SIGKILLed out of it (its workers die with it)."""
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from minidl.dist.run import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST = ["--nproc-per-node", "2", "--monitor-interval", "0.05"]


def _env(**extra):
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("MINIDL_FAULT", None)
    env.pop("OMP_NUM_THREADS", None)
    return env | extra


def _script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def _launch(args, timeout=60, **env):
    return subprocess.run([sys.executable, "-m", "minidl.dist.run", *args], env=_env(**env), cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


ENV_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
             "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
             "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE", "OMP_NUM_THREADS",
             "TORCHELASTIC_USE_AGENT_STORE")


def test_workers_get_torchruns_environment_and_meet_through_the_launchers_store(tmp_path):
    script = _script(tmp_path, "env.py", f"""
        import json, os, sys
        import minidl, minidl.dist as dist
        dist.init_process_group("gloo")
        t = minidl.tensor([float(dist.get_rank() + 1)])
        dist.all_reduce(t)
        env = {{k: os.environ.get(k) for k in {ENV_NAMES!r}}}
        json.dump(dict(env, total=t.tolist(), argv=sys.argv[1:]), open(f"{tmp_path}/rank{{dist.get_rank()}}.json", "w"))
        dist.destroy_process_group()
        """)
    r = _launch(["--nproc_per_node=2", "--max-restarts", "2", script, "--lr", "0.1"])
    assert r.returncode == 0, r.stderr
    seen = [json.load(open(tmp_path / f"rank{i}.json")) for i in range(2)]
    cores = max(1, len(os.sched_getaffinity(0)) // 2)
    for i, env in enumerate(seen):
        assert env["total"] == [3.0] and env["argv"] == ["--lr", "0.1"]
        assert (env["RANK"], env["LOCAL_RANK"], env["ROLE_RANK"]) == (str(i),) * 3
        assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["ROLE_WORLD_SIZE"]) == ("2",) * 3
        assert (env["GROUP_RANK"], env["GROUP_WORLD_SIZE"]) == ("0", "1")
        assert (env["TORCHELASTIC_RESTART_COUNT"], env["TORCHELASTIC_MAX_RESTARTS"]) == ("0", "2")
        assert env["TORCHELASTIC_USE_AGENT_STORE"] == "True" and env["OMP_NUM_THREADS"] == str(cores)
        assert env["TORCHELASTIC_ERROR_FILE"].endswith(f"attempt_0/{i}/error.json")
    assert seen[0]["MASTER_PORT"] == seen[1]["MASTER_PORT"] != "29500"   # (a free port: one node, no port given)
    assert seen[0]["TORCHELASTIC_RUN_ID"] == seen[1]["TORCHELASTIC_RUN_ID"]


def test_a_raising_worker_is_summarized_with_its_traceback_and_restarts_run_out(tmp_path):
    script = _script(tmp_path, "boom.py", f"""
        import os, time
        open(f"{tmp_path}/attempt{{os.environ['TORCHELASTIC_RESTART_COUNT']}}.{{os.environ['RANK']}}", "w").close()
        print(f"hello from rank {{os.environ['RANK']}}")
        if os.environ["RANK"] == "1":
            while not os.path.exists(f"{tmp_path}/attempt{{os.environ['TORCHELASTIC_RESTART_COUNT']}}.0"):
                time.sleep(0.01)   # (rank 0 has started before the group is stopped: no race with its start)
            raise ValueError("boom in the training step")
        """)
    r = _launch([*FAST, "--max-restarts", "1", "--log-dir", str(tmp_path / "logs"), "-r", "0:1", "--tee", "1:3",
                 script])
    assert r.returncode == 1
    assert "restarting the group (restart 1 of 1)" in r.stderr
    assert "the job failed (restarts used: 1 of 1)" in r.stderr
    assert "local_rank 1 (rank 1) exited with code 1: ValueError: boom in the training step" in r.stderr
    assert 'boom.py", line 8, in <module>' in r.stderr and "worker.py" not in r.stderr.split("job failed")[1]
    assert sorted(p.name for p in tmp_path.glob("attempt*")) == ["attempt0.0", "attempt0.1", "attempt1.0",
                                                                 "attempt1.1"]
    files = list((tmp_path / "logs").glob("*/attempt_1/1/error.json"))
    assert len(files) == 1 and "ValueError" in json.load(open(files[0]))["message"]["message"]
    logs = files[0].parent.parent   # (rank 0's stdout only in its file; rank 1's streams teed)
    assert (logs / "0" / "stdout.log").read_text() == "hello from rank 0\n" and "rank 0" not in r.stdout
    assert (logs / "1" / "stdout.log").read_text() == "hello from rank 1\n" and "hello from rank 1" in r.stdout
    assert "ValueError: boom" in (logs / "1" / "stderr.log").read_text()


def test_a_worker_killed_mid_collective_is_restarted_and_a_late_restarted_worker_still_meets(tmp_path):
    script = _script(tmp_path, "kill.py", f"""
        import os, time
        import minidl, minidl.dist as dist
        attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
        if attempt == "1" and os.environ["RANK"] == "1":
            time.sleep(2)   # restarted workers that start seconds apart
        dist.init_process_group("gloo")
        t = minidl.tensor([float(dist.get_rank() + 1)])
        for _ in range(4):
            dist.all_reduce(t)
        open(f"{tmp_path}/done{{dist.get_rank()}}", "w").write(f"{{attempt}} {{t.tolist()}}")
        dist.destroy_process_group()
        """)
    r = _launch([*FAST, "--max-restarts", "2", script],
                MINIDL_FAULT="rank=1 at=all_reduce:3 do=kill restart=0")
    assert r.returncode == 0, r.stderr
    assert "local_rank 1 (rank 1) was killed by signal SIGKILL" in r.stderr
    assert [(tmp_path / f"done{i}").read_text() for i in range(2)] == ["1 [24.0]"] * 2


TRAIN = """
    import os, sys
    import numpy as np
    import minidl, minidl.dist as dist, minidl.nn as nn, minidl.optim as optim
    snapshot, out = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    minidl.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    start = 0
    if os.path.exists(snapshot):
        state = minidl.load(snapshot)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["epoch"] + 1
        open(out + ".resumed", "w").write(str(start))
    rng = np.random.default_rng(rank)
    data = [(minidl.tensor(rng.standard_normal((8, 4), dtype=np.float32)),
             minidl.tensor(rng.standard_normal((8, 2), dtype=np.float32)))
            for _ in range(3)]
    for epoch in range(start, 4):
        for x, y in data:
            opt.zero_grad()
            ((model(x) - y) ** 2).mean().backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
            opt.step()
        if rank == 0:
            minidl.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": epoch},
                        snapshot + ".tmp")
            os.replace(snapshot + ".tmp", snapshot)
        dist.barrier()
    if rank == 0:
        np.save(out, np.concatenate([p.detach().numpy().ravel() for p in model.parameters()]))
    dist.destroy_process_group()
    """


def test_a_snapshot_resumed_job_killed_mid_run_ends_with_the_uninterrupted_runs_weights(tmp_path):
    script = _script(tmp_path, "train.py", TRAIN)
    clean = _launch([*FAST, script, str(tmp_path / "a.snap"), str(tmp_path / "a.npy")])
    assert clean.returncode == 0, clean.stderr
    # 2 parameters, 3 steps an epoch: the 14th all-reduce is in epoch 2, after the epoch-1 snapshot
    killed = _launch([*FAST, "--max-restarts", "1", script, str(tmp_path / "b.snap"), str(tmp_path / "b.npy")],
                     MINIDL_FAULT="rank=1 at=all_reduce:14 do=kill restart=0")
    assert killed.returncode == 0, killed.stderr
    assert "was killed by signal SIGKILL" in killed.stderr
    assert (tmp_path / "b.npy.resumed").read_text() == "2" and not (tmp_path / "a.npy.resumed").exists()
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"))


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # (a zombie left for its parent to reap counts as ended)
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_launcher_ends_every_worker_and_what_they_started(tmp_path, sig):
    script = _script(tmp_path, "sleeper.py", f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open(f"{tmp_path}/pids{{os.environ['RANK']}}", "w").write(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(60)
        """)
    launcher = subprocess.Popen([sys.executable, "-m", "minidl.dist.run", *FAST, script], env=_env(), cwd=ROOT,
                                stderr=subprocess.PIPE, text=True)
    pids = []
    try:
        deadline = time.monotonic() + 30
        while len(list(tmp_path.glob("pids*"))) < 2 or not all(p.read_text() for p in tmp_path.glob("pids*")):
            assert time.monotonic() < deadline and launcher.poll() is None
            time.sleep(0.05)
        pids = [int(x) for p in tmp_path.glob("pids*") for x in p.read_text().split()]
        launcher.send_signal(sig)
        assert launcher.wait(timeout=15) == 128 + sig
        assert f"got {signal.Signals(sig).name}" in launcher.stderr.read()
        deadline = time.monotonic() + 5
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if _alive(p)]
    finally:
        launcher.kill()
        launcher.wait()
        for p in pids:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("argv, words", [
    (["--nproc-per-node", "1", "missing_script.py"], "training script 'missing_script.py' does not exist"),
    (["--nproc-per-node", "0", __file__], "--nproc-per-node must be at least 1, got 0"),
    (["--nproc-per-node", "lots", __file__], "Unsupported nproc_per_node value: lots"),
    (["--nnodes", "3:2", __file__], "min_nodes must be > 0 and <= max_nodes, got min_nodes=3, max_nodes=2"),
    (["--nnodes", "1:2", __file__], "the static rendezvous backend needs a fixed number of nodes"),
    (["--nnodes", "2", "--node-rank", "2", __file__], "--node-rank 2: expected 0..1 for --nnodes 2"),
    (["--rdzv-conf", "last_call_timeout=soon", __file__], "last_call_timeout='soon': expected seconds"),
    (["--rdzv-backend", "etcd", __file__], "supported are c10d and static"),
])
def test_bad_command_lines_are_clear_errors_before_any_worker(argv, words, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and words in capsys.readouterr().err


def test_a_rendezvous_endpoint_nobody_listens_on_times_out_naming_it(tmp_path):
    port = _free_port()
    start = time.monotonic()
    with pytest.raises(SystemExit) as e:
        main(["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
              "--rdzv-conf", "is_host=false,join_timeout=1", _script(tmp_path, "never.py", "raise SystemExit(3)")])
    assert f"could not reach the rendezvous endpoint 127.0.0.1:{port} within 1 s" in str(e.value.code)
    assert time.monotonic() - start < 10


NODE = """
    import json, os, sys, time
    import minidl, minidl.dist as dist
    out, final_world = sys.argv[1], int(sys.argv[2])
    if os.environ.get("FAIL_FIRST") and os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
        raise RuntimeError("this node's first attempt fails")
    dist.init_process_group("gloo")
    t = minidl.tensor([1.0])
    dist.all_reduce(t)
    seen = {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                                       "TORCHELASTIC_RESTART_COUNT")}
    with open(out, "a") as f:
        f.write(json.dumps(dict(seen, total=t.item(), pid=os.getpid())) + "\\n")
    if dist.get_world_size() != final_world:
        time.sleep(60)   # until the launchers restart this worker at another world size
    dist.destroy_process_group()
    """
CONF = "keep_alive_interval=0.5,keep_alive_max_attempt=3,join_timeout=30,last_call_timeout="


def _node(tmp_path, nnodes, port, final_world, *extra, last_call=0.5, **env):
    args = [sys.executable, "-m", "minidl.dist.run", "--nproc-per-node", "1", "--monitor-interval", "0.05",
            "--nnodes", nnodes, *extra, _script(tmp_path, "node.py", NODE), str(tmp_path / "seen.jsonl"),
            str(final_world)]
    if "static" not in extra:
        args[3:3] = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "job",
                     "--rdzv-conf", f"{CONF}{last_call}"]
    return subprocess.Popen(args, env=_env(**env), cwd=ROOT, stderr=subprocess.PIPE, text=True)


def _seen(tmp_path, count, launchers, timeout=30):
    """The workers' records once there are ``count`` of them (while every launcher still runs)."""
    path, deadline = tmp_path / "seen.jsonl", time.monotonic() + timeout
    while not path.exists() or len(path.read_text().splitlines()) < count:
        assert time.monotonic() < deadline, [p.stderr.read() for p in launchers if p.poll() is not None]
        time.sleep(0.05)
    return [json.loads(line) for line in path.read_text().splitlines()]


def _listening(port, timeout=15):
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def _ended(launchers, timeout=30):
    """(exit code, stderr) of each launcher once it ended; any still running after ``timeout`` is killed."""
    try:
        return [(p.wait(timeout=timeout), p.stderr.read()) for p in launchers]
    finally:
        _kill(launchers)


def _kill(launchers):
    """SIGKILL (their workers die with them: PR_SET_PDEATHSIG) and reap."""
    for p in launchers:
        p.kill()
        p.wait()


def test_two_launchers_form_one_two_worker_job_through_c10d_rendezvous(tmp_path):
    port = _free_port()
    launchers = [_node(tmp_path, "2", port, 2) for _ in range(2)]
    ended = _ended(launchers)
    assert [code for code, _ in ended] == [0, 0], ended
    seen = sorted(_seen(tmp_path, 2, []), key=lambda s: s["RANK"])
    assert [(s["RANK"], s["GROUP_RANK"]) for s in seen] == [("0", "0"), ("1", "1")]
    assert all((s["WORLD_SIZE"], s["GROUP_WORLD_SIZE"], s["total"]) == ("2", "2", 2.0) for s in seen)


def test_a_worker_failure_on_one_node_uses_its_restart_and_every_node_meets_again(tmp_path):
    port = _free_port()
    launchers = [_node(tmp_path, "2", port, 2, "--max-restarts", "1"),
                 _node(tmp_path, "2", port, 2, "--max-restarts", "1", FAIL_FIRST="1")]
    ended = _ended(launchers)
    assert [code for code, _ in ended] == [0, 0], ended
    seen = _seen(tmp_path, 2, [])
    assert len(seen) == 2 and {s["WORLD_SIZE"] for s in seen} == {"2"}
    assert sorted(s["TORCHELASTIC_RESTART_COUNT"] for s in seen) == ["0", "1"]   # (the other node's was no failure)
    assert "this node's first attempt fails" in ended[1][1] and "restart 1 of 1" in ended[1][1]
    assert "another node began a new rendezvous round" in ended[0][1]


def test_a_node_joining_a_running_elastic_job_restarts_it_at_world_size_two(tmp_path):
    port = _free_port()
    launchers = [_node(tmp_path, "1:2", port, 2)]
    try:
        first = _seen(tmp_path, 1, launchers)
        launchers.append(_node(tmp_path, "1:2", port, 2))
        seen = _seen(tmp_path, 3, launchers)
    finally:
        ended = _ended(launchers)
    assert [code for code, _ in ended] == [0, 0], ended
    assert [(s["WORLD_SIZE"], s["total"]) for s in first] == [("1", 1.0)]
    assert sorted((s["RANK"], s["WORLD_SIZE"], s["total"]) for s in seen[1:]) == [("0", "2", 2.0), ("1", "2", 2.0)]
    assert {s["TORCHELASTIC_RESTART_COUNT"] for s in seen} == {"0"}   # (torch: a membership change is no failure)
    assert "a new node is waiting to join" in ended[0][1]


def test_a_sigkilled_launcher_takes_its_workers_along_and_the_other_goes_on_at_world_size_one(tmp_path):
    port = _free_port()
    launchers = [_node(tmp_path, "1:2", port, 1, last_call=3)]   # (time for the second to join round 0)
    try:
        _listening(port)   # (the first launcher hosts the store; the one killed is a client)
        launchers.append(_node(tmp_path, "1:2", port, 1, last_call=3))
        pairs = _seen(tmp_path, 2, launchers)
        assert [s["WORLD_SIZE"] for s in pairs] == ["2", "2"]
        victim = next(s["pid"] for s in pairs if s["GROUP_RANK"] == "1")
        launchers[1].kill()
        deadline = time.monotonic() + 10
        while _alive(victim):   # (PR_SET_PDEATHSIG: the worker dies with its launcher)
            assert time.monotonic() < deadline, "a worker outlived its SIGKILLed launcher"
            time.sleep(0.05)
        alone = _seen(tmp_path, 3, launchers[:1])[2]
        code, err = _ended(launchers[:1])[0]
    finally:
        _kill(launchers)
    assert code == 0, err
    assert (alone["RANK"], alone["WORLD_SIZE"], alone["total"]) == ("0", "1", 1.0)
    assert "node 1 stopped answering (no beat for 1.5 s)" in err


def test_static_rendezvous_ranks_two_nodes_by_their_node_rank(tmp_path):
    port = _free_port()
    launchers = [_node(tmp_path, "2", port, 2, "--rdzv-backend", "static", "--node-rank", str(r),
                       "--master-addr", "127.0.0.1", "--master-port", str(port)) for r in (1, 0)]
    ended = _ended(launchers)
    assert [code for code, _ in ended] == [0, 0], ended
    seen = sorted(_seen(tmp_path, 2, []), key=lambda s: s["RANK"])
    assert [(s["RANK"], s["GROUP_RANK"], s["WORLD_SIZE"], s["total"]) for s in seen] == [
        ("0", "0", "2", 2.0), ("1", "1", "2", 2.0)]


def test_a_node_arriving_at_a_full_job_waits_then_is_refused_clearly(tmp_path):
    port = _free_port()
    launchers = [_node(tmp_path, "2", port, 99) for _ in range(2)]   # (their workers wait for the end)
    try:
        _seen(tmp_path, 2, launchers)
        start = time.monotonic()
        with pytest.raises(SystemExit) as e:
            main(["--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id",
                  "job", "--rdzv-conf", "join_timeout=1", _script(tmp_path, "late.py", "raise SystemExit(3)")])
        assert time.monotonic() - start < 10
        assert "rendezvous at 127.0.0.1:" in str(e.value.code) and "the job is full (2 node(s)" in str(e.value.code)
        assert all(p.poll() is None for p in launchers)   # (the running job did not restart for it)
        assert len(_seen(tmp_path, 2, launchers)) == 2
    finally:
        _kill(launchers)
