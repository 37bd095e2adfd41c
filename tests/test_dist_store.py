"""Stores and rendezvous (minidl.dist.store, minidl.dist.rendezvous) against torch.distributed's."""
import gc
import multiprocessing as mp
import os
import signal
import socket
import threading
import time
from datetime import timedelta

import pytest

import minidl.dist as dist
from minidl.dist.rendezvous import join

import dist_store_procs as procs

torch = pytest.importorskip("torch")
tdist = torch.distributed

SHORT = timedelta(seconds=0.3)


# ---- the same operations on torch's stores and ours -------------------------------------------------

STEPS = [  # (name, operation, skipped on: torch's FileStore counts and lists an internal key, deletes
           # report True for absent keys, it polls a timeout once a second (one timeout is checked), and its
           # TCPStore drops the connection on a bad add)
    ("set str", lambda s: s.set("a", "1"), ()),
    ("set bytes", lambda s: s.set("b", b"\x00\xff"), ()),
    ("get", lambda s: (s.get("a"), s.get("b")), ()),
    ("num_keys", lambda s: s.num_keys(), ("file",)),
    ("add new", lambda s: s.add("c", 5), ()),
    ("add negative", lambda s: s.add("c", -2), ()),
    ("get counter", lambda s: s.get("c"), ()),
    ("add to '1'", lambda s: s.add("a", 1), ()),
    ("add to text", lambda s: (s.set("x", "abc"), s.add("x", 1)), ("tcp",)),
    ("add big", lambda s: s.add("big", 2**62), ()),
    ("check", lambda s: (s.check(["a", "c"]), s.check(["a", "zz"])), ()),
    ("compare_set absent, empty", lambda s: s.compare_set("n", "", "v"), ()),
    ("compare_set absent, other", lambda s: (s.compare_set("n2", "q", "v"), s.check(["n2"])), ()),
    ("compare_set wrong", lambda s: s.compare_set("n", "zz", "w"), ()),
    ("compare_set right", lambda s: (s.compare_set("n", "v", b"w"), s.get("n")), ()),
    ("append", lambda s: (s.append("ap", "x"), s.append("ap", b"y"), s.get("ap")), ()),
    ("multi_set/get", lambda s: (s.multi_set(["m1", "m2"], ["1", b"2"]), s.multi_get(["m1", "m2"])), ()),
    ("list_keys", lambda s: sorted(s.list_keys()), ("file",)),
    ("delete", lambda s: (s.delete_key("a"), s.check(["a"])), ()),
    ("delete absent", lambda s: s.delete_key("a"), ("file",)),
    ("set empty", lambda s: (s.set("e", ""), s.get("e")), ()),
    ("timeout", lambda s: s.timeout, ()),
    ("set_timeout", lambda s: (s.set_timeout(timedelta(seconds=0.05)), s.timeout), ()),
    ("get absent", lambda s: s.get("missing"), ()),
    ("wait absent", lambda s: s.wait(["missing", "c"]), ("file",)),
    ("wait absent, own timeout", lambda s: s.wait(["missing"], timedelta(seconds=0.02)), ("file",)),
    ("wait present", lambda s: s.wait(["c", "b"]), ()),
    ("multi_get absent", lambda s: s.multi_get(["c", "missing"]), ("file",)),
    ("int key", lambda s: s.set(3, "x"), ()),
    ("float amount", lambda s: s.add("c", 1.5), ()),
    ("set_timeout seconds", lambda s: s.set_timeout(5), ()),
    ("num_keys at the end", lambda s: s.num_keys(), ("file",)),
]


def _outcome(step, store):
    try:
        return step(store)
    except (TypeError, ValueError) as e:
        return type(e).__name__
    except RuntimeError as e:  # torch's FileStore times out with a RuntimeError, the others a DistStoreError
        return "RuntimeError (timeout)" if "imeout" in str(e) or "timed out" in str(e) else repr(e)


def _stores(kind, tmp_path):
    if kind == "hash":
        return tdist.HashStore(), dist.HashStore()
    if kind == "file":
        return tdist.FileStore(str(tmp_path / "torch"), 1), dist.FileStore(tmp_path / "ours", 1)
    if kind == "tcp":
        return (tdist.TCPStore("127.0.0.1", 0, 1, True, wait_for_workers=False),
                dist.TCPStore("127.0.0.1", 0, 1, True))
    return tdist.PrefixStore("pre", tdist.HashStore()), dist.PrefixStore("pre", dist.HashStore())


@pytest.mark.parametrize("kind", ["hash", "file", "tcp", "prefix"])
def test_methods_match_torch(kind, tmp_path):
    theirs, ours = _stores(kind, tmp_path)
    for name, step, skip in STEPS:
        if kind in skip:
            continue
        assert _outcome(step, ours) == _outcome(step, theirs), name


def test_timeout_names_keys_and_seconds(tmp_path):
    for store in (dist.HashStore(), dist.FileStore(tmp_path / "f"), dist.TCPStore("127.0.0.1", 0, is_master=True),
                  dist.PrefixStore("job", dist.HashStore())):
        store.set("here", "1")
        store.set_timeout(timedelta(seconds=0.2))
        start = time.monotonic()
        with pytest.raises(dist.DistStoreError, match=r"0\.2 s .*'(job/)?absent'"):
            store.get("absent")
        with pytest.raises(dist.DistStoreError, match=r"0\.1 s .*'(job/)?gone'\].*of"):
            store.wait(["here", "gone"], timedelta(seconds=0.1))
        assert time.monotonic() - start < 5


def test_prefix_store_keys_and_timeout():
    base = dist.HashStore()
    base.set("other", "1")
    store = dist.PrefixStore("job", dist.PrefixStore("run", base))
    store.set("k", "v")
    assert base.get("run/job/k") == b"v" and store.list_keys() == ["k"] and store.num_keys() == 2
    store.set_timeout(timedelta(seconds=3))
    assert base.timeout == timedelta(seconds=3) and isinstance(store.underlying_store, dist.PrefixStore)
    with pytest.raises(TypeError, match="Store"):
        dist.PrefixStore("x", 5)


def test_hash_store_threads():
    """Concurrent adds count distinctly; a get waits for another thread's set."""
    store, counts = dist.HashStore(), []
    got = []
    waiter = threading.Thread(target=lambda: got.append(store.get("late")))
    waiter.start()
    workers = [threading.Thread(target=lambda: counts.extend(store.add("n", 1) for _ in range(50))) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    store.set("late", "now")
    waiter.join(10)
    assert sorted(counts) == list(range(1, 201)) and got == [b"now"]


# ---- across processes -----------------------------------------------------------------------------

def _run_children(target, args_list, timeout=60):
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    children = [ctx.Process(target=target, args=(*args, out)) for args in args_list]
    try:
        for c in children:
            c.start()
        results = [out.get(timeout=timeout) for _ in children]
        for c in children:
            c.join(timeout)
            assert c.exitcode == 0
        return results
    finally:
        for c in children:
            if c.is_alive():
                c.kill()
                c.join()


def _listening():
    """A socket listening on a free port, for a master to take over (master_listen_fd), and its port."""
    sock = socket.create_server(("", 0))
    port = sock.getsockname()[1]
    return sock.detach(), port


def test_tcp_store_across_processes():
    """A master waits for its workers; concurrent adds from three processes get distinct counts."""
    fd, port = _listening()
    result = {}
    master = threading.Thread(target=lambda: result.update(store=dist.TCPStore(
        "127.0.0.1", port, 4, True, timeout=timedelta(seconds=60), master_listen_fd=fd)))
    master.start()
    counts = _run_children(procs.add_many, [(port, 20)] * 3)
    master.join(60)
    assert sorted(c for cs in counts for c in cs) == list(range(1, 61))
    assert result["store"].get("counter") == b"60" and result["store"].port == port


def test_file_store_across_processes(tmp_path):
    counts = _run_children(procs.file_add_many, [(str(tmp_path / "shared"), 20)] * 2)
    assert sorted(c for cs in counts for c in cs) == list(range(1, 41))


@pytest.mark.parametrize("module", [dist, tdist])
def test_file_store_deleted_by_last_user(module, tmp_path):
    """torch's clean-up: once world_size users closed the store and none is open, the file goes."""
    path = tmp_path / "f"
    a, b, c = (module.FileStore(str(path), 2) for _ in range(3))
    del a, b
    gc.collect()
    assert path.exists()  # c still uses it
    del c
    gc.collect()
    assert not path.exists()
    keep = module.FileStore(str(tmp_path / "kept"))
    del keep
    gc.collect()
    assert (tmp_path / "kept").exists()


def test_dead_server_is_named(tmp_path):
    """A client whose master process was SIGKILLed gets a DistStoreError naming it, not a hang."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    master = ctx.Process(target=procs.host_master, args=(out,))
    master.start()
    try:
        port = out.get(timeout=60)
        client = dist.TCPStore("127.0.0.1", port, timeout=timedelta(seconds=30))
        assert client.get("hello") == b"from the master"
        os.kill(master.pid, signal.SIGKILL)
        master.join(10)
        start = time.monotonic()
        with pytest.raises(dist.DistStoreError, match=f"127.0.0.1:{port} is gone.*get\\('never'\\)"):
            client.get("never")
        with pytest.raises(dist.DistStoreError, match=f"127.0.0.1:{port}"):
            client.set("after", "death")
        assert time.monotonic() - start < 5
    finally:
        if master.is_alive():
            master.kill()
        master.join()


def test_server_gone_mid_wait():
    """A client blocked in get learns at once when its in-process master goes away."""
    master = dist.TCPStore("127.0.0.1", 0, is_master=True)
    client = dist.TCPStore("127.0.0.1", master.port)
    errors = []

    def wait():
        try:
            client.get("never")
        except dist.DistStoreError as e:
            errors.append(str(e))

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.2)
    port = master.port
    del master
    gc.collect()
    waiter.join(10)
    assert not waiter.is_alive() and f"127.0.0.1:{port} is gone" in errors[0]


# ---- TCPStore's bad input ---------------------------------------------------------------------------

def test_port_in_use_is_named():
    taken = socket.create_server(("", 0))
    try:
        port = taken.getsockname()[1]
        with pytest.raises(dist.DistNetworkError, match=f"127.0.0.1:{port}: address already in use"):
            dist.TCPStore("127.0.0.1", port, is_master=True)
        with pytest.raises(tdist.DistNetworkError, match="address already in use"):
            tdist.TCPStore("127.0.0.1", port, is_master=True)
    finally:
        taken.close()


def test_wait_for_workers_names_how_many_joined():
    """The master counts itself: with one worker of two arrived, 2 of 3 joined."""
    fd, port = _listening()
    worker = threading.Thread(target=lambda: dist.TCPStore("127.0.0.1", port, timeout=SHORT))
    worker.start()
    try:
        with pytest.raises(dist.DistStoreError, match=r"0\.3 s waiting for workers: 2 of world_size=3 joined"):
            dist.TCPStore("127.0.0.1", port, 3, True, timeout=SHORT, master_listen_fd=fd)
    finally:
        worker.join(10)


def test_client_without_server_is_named():
    free = socket.create_server(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    start = time.monotonic()
    with pytest.raises(dist.DistNetworkError, match=f"127.0.0.1:{port} within 0.3 s"):
        dist.TCPStore("127.0.0.1", port, timeout=SHORT)
    assert time.monotonic() - start < 5


def test_tcp_store_arguments():
    with pytest.raises(ValueError, match="65535"):
        dist.TCPStore("127.0.0.1", 70000, is_master=True)
    with pytest.raises(ValueError, match="world_size"):
        dist.TCPStore("127.0.0.1", 0, 0, True)
    with pytest.raises(ValueError, match="master's port"):
        dist.TCPStore("127.0.0.1", 0)
    with pytest.raises(TypeError, match="timedelta"):
        dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=5)
    with pytest.raises(ValueError, match="world_size"):
        dist.FileStore("/tmp/unused-minidl-store", 0)


def test_multi_tenant_masters_share_a_server():
    a = dist.TCPStore("127.0.0.1", 0, is_master=True, multi_tenant=True)
    b = dist.TCPStore("127.0.0.1", a.port, is_master=True, multi_tenant=True)
    a.set("k", "shared")
    assert b.get("k") == b"shared" and b.port == a.port


# ---- rendezvous ------------------------------------------------------------------------------------

ENV = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")


@pytest.mark.parametrize("missing", ENV)
def test_env_missing_variable_is_torchs_error(missing, monkeypatch):
    for name, value in zip(ENV, ("127.0.0.1", "1", "1", "2")):
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(missing)
    with pytest.raises(ValueError) as theirs:
        next(tdist.rendezvous("env://"))
    with pytest.raises(ValueError) as ours:
        next(dist.rendezvous("env://"))
    assert str(ours.value) == str(theirs.value).replace("torch.distributed", "minidl.dist")
    assert missing in str(ours.value)


def test_env_and_tcp_rendezvous_meet(monkeypatch):
    master, rank, size = next(dist.rendezvous("tcp://127.0.0.1:0?rank=0&world_size=1", timeout=SHORT))
    assert (rank, size) == (0, 1) and master.port > 0
    master.set("x", "from rank 0")
    for name, value in zip(ENV, ("127.0.0.1", str(master.port), "1", "2")):
        monkeypatch.setenv(name, value)
    store, rank, size = next(dist.rendezvous("env://"))
    assert (rank, size) == (1, 2) and store.get("x") == b"from rank 0"
    client, rank, size = next(dist.rendezvous(f"tcp://127.0.0.1:{master.port}", rank=1, world_size=2))
    assert (rank, size) == (1, 2) and client.get("x") == b"from rank 0"


def test_rendezvous_url_errors_match_torch(tmp_path):
    urls = ["tcp://127.0.0.1?rank=0&world_size=1", "tcp://127.0.0.1:5?world_size=1", "tcp://127.0.0.1:5?rank=0",
            f"file://{tmp_path}/f?rank=0", "file://?rank=0&world_size=1"]
    for url in urls:
        with pytest.raises(ValueError) as theirs:
            next(tdist.rendezvous(url))
        with pytest.raises(ValueError) as ours:
            next(dist.rendezvous(url))
        assert str(ours.value) == str(theirs.value).replace("torch.distributed", "minidl.dist"), url
    with pytest.raises(AssertionError, match="already"):
        dist.rendezvous("tcp://h:5?rank=0&world_size=1", rank=0)
    with pytest.raises(RuntimeError, match="No rendezvous handler for nope://"):
        dist.rendezvous("nope://x")
    with pytest.raises(RuntimeError, match="already registered"):
        dist.register_rendezvous_handler("env", lambda url: None)


def test_file_rendezvous_and_rounds(tmp_path):
    """Two ranks meet through file://, then run two join rounds whose keys stay apart."""
    url = f"file://{tmp_path}/rdzv"
    stores = [next(dist.rendezvous(url, rank=r, world_size=2))[0] for r in range(2)]
    rounds = [[], []]

    def rank_main(r):
        for _ in range(2):
            rounds[r].append(join(stores[r], r, 2, timedelta(seconds=20), "job"))

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert rounds == [[0, 1], [0, 1]]
    assert {"job/round0/rank1", "job/round1/rank0"} <= set(stores[0].list_keys())


def test_join_names_missing_ranks():
    store = dist.HashStore()
    with pytest.raises(dist.DistStoreError, match=r"round 0: timed out after 0\.3 s waiting for rank\(s\) \[1, 2\]"):
        join(store, 0, 3, SHORT, "rdzv")


def test_join_world_size_disagreement():
    """Both ranks fail, naming both sizes: the one that sees it, and the one waiting for the other."""
    store, errors = dist.HashStore(), {}

    def rank_main(rank, size):
        try:
            join(store, rank, size, timedelta(seconds=20), "rdzv")
        except dist.DistStoreError as e:
            errors[rank] = str(e)

    first = threading.Thread(target=rank_main, args=(0, 2))
    first.start()
    while not store.check(["rdzv/round0/rank0"]):
        time.sleep(0.01)
    rank_main(1, 3)
    first.join(20)
    assert errors[0] == errors[1]
    assert "rank 1 was given world_size=3" in errors[1] and "world_size=2" in errors[1]


def test_join_arguments():
    store = dist.HashStore()
    with pytest.raises(ValueError, match="rank 3 is out of range for world_size 3"):
        join(store, 3, 3, SHORT, "rdzv")
    with pytest.raises(ValueError, match="rank -1 is out of range"):
        join(store, -1, 3, SHORT, "rdzv")
    with pytest.raises(ValueError, match="world_size must be at least 1"):
        join(store, 0, 0, SHORT, "rdzv")
    assert join(store, 0, 1, SHORT, "solo") == 0 and join(store, 0, 1, SHORT, "solo") == 1


def test_a_forgotten_store_finalized_while_a_server_is_made_does_not_deadlock():
    """Garbage collection may finalize a dropped master TCPStore (releasing its server) on a thread that is
    making another server under the servers' lock: the release takes that lock again, on the same thread."""
    from minidl.dist.store import tcp_server

    def make_and_forget():
        store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        with tcp_server._tenants_lock:   # (as acquire holds it when a collection runs the finalizer)
            del store
    worker = threading.Thread(target=make_and_forget, daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive(), "releasing a store's server under the servers' lock deadlocked"
