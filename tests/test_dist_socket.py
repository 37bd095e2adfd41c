"""The "gloo" backend (minidl.dist.communicators.socket) and fault injection (minidl.dist.faults):
the communicator with ranks as threads over real loopback sockets, then processes, each rank one,
meeting through minidl's FileStore: the collective suites, two faked nodes, and
ranks killed, frozen or failing mid-collective, mid-send and idle."""
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from minidl.dist import HashStore, TCPStore, faults
from minidl.dist.communicators import socket as gloo
from minidl.dist.communicators.base import DistError, wait_all

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tests", "dist_socket_script.py")


def wait(requests, seconds=10):
    wait_all(requests, time.monotonic() + seconds, lambda pending: AssertionError(f"timed out: {pending}"))


def on_threads(n, fn):
    """fn(rank) on n threads at once: the results in rank order (a thread's exception re-raised)."""
    results, errors = [None] * n, []

    def run(r):
        try:
            results[r] = fn(r)
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
    threads = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    if errors:
        raise errors[0]
    return results


@pytest.fixture
def world():
    store = HashStore()
    made = []

    def make(n):
        comms = on_threads(n, lambda r: gloo.world_communicator(store=store, rank=r, world_size=n, timeout=20))
        made.extend(comms)
        return comms
    yield make
    for c in made:
        c.close()


def test_messages_keep_their_order_match_by_tag_and_land_in_place(world):
    a, b, c = world(3)
    big = np.random.default_rng(0).random(300_000)   # 2.4 MB: from the sender's thread, into the posted buffer
    got_big = np.zeros_like(big)
    early = a._isend(np.arange(4.0), 1, 9)           # arrives before its receive is posted
    posted = b._irecv(got_big, 0, 3)
    wait([a._isend(big, 1, 3), posted, early])
    assert np.array_equal(got_big, big)
    first, second = np.zeros(4), np.zeros(4)
    wait([a._isend(np.ones(4), 1, 9), b._irecv(first, 0, 9), b._irecv(second, 0, 9)])
    assert first.tolist() == [0, 1, 2, 3] and second.tolist() == [1] * 4   # (non-overtaking)
    anyone = b._irecv(np.zeros(2), None, 1)
    wait([c._isend(np.ones(2), 1, 1), anyone])
    assert anyone.source == 2
    mine = np.zeros(3)
    wait([a._isend(np.full(3, 7.0), 0, 4), a._irecv(mine, 0, 4)])   # to itself
    assert mine.tolist() == [7.0] * 3
    short = b._irecv(np.zeros(2), 0, 5)
    a._isend(np.zeros(3), 1, 5)
    with pytest.raises(DistError, match="receive of 16 bytes from rank 0 got a message of 24 bytes"):
        wait([short])


def test_split_makes_communicators_of_their_own(world):
    comms = world(4)
    subs = on_threads(4, lambda r: comms[r].split(None if r == 3 else r % 2, -r))
    assert subs[3] is None
    assert [(s.rank, s.size, s.members) for s in subs[:3]] == [(1, 2, [2, 0]), (0, 1, [1]), (0, 2, [2, 0])]
    assert subs[0].context == subs[2].context != subs[1].context != 0
    got = np.zeros(1)
    wait([subs[2]._isend(np.ones(1), 1, 0), subs[0]._irecv(got, 0, 0)])
    assert got[0] == 1 and comms[0].host_name()


def test_a_cut_connection_fails_every_rank_and_a_closed_peer_is_named(world, monkeypatch):
    monkeypatch.setenv("MINIDL_DIST_HEARTBEAT", "1")   # (rank 2 hears of it through the store, polled at 0.2 s)
    a, b, c = world(3)
    pending = c._irecv(np.zeros(1), 0, 0)   # (rank 2 exchanges nothing with rank 1)
    a.mesh.partition(0, 1)
    for comm, who in ((a, "rank 1"), (b, "rank 0"), (c, "rank [01]")):
        with pytest.raises(DistError, match=f"{who} died or was cut off"):
            wait([comm._irecv(np.zeros(1), None, 0)])
    with pytest.raises(DistError, match="died or was cut off"):
        wait([pending])
    d, e = world(2)   # a second start on the same store is a new mesh
    e.close()
    with pytest.raises(DistError, match="rank 1 closed its process group and will never send"):
        wait([d._irecv(np.zeros(1), 1, 0)])


def test_bad_arguments_are_named(monkeypatch):
    store = HashStore()
    with pytest.raises(ValueError, match="pass store="):
        gloo.world_communicator(store=None, rank=0, world_size=1)
    with pytest.raises(ValueError, match="rank 2 and world_size 2"):
        gloo.world_communicator(store=store, rank=2, world_size=2)
    monkeypatch.setenv("MINIDL_DIST_HEARTBEAT", "soon")
    with pytest.raises(ValueError, match="MINIDL_DIST_HEARTBEAT must be a positive number"):
        gloo.world_communicator(store=store, rank=0, world_size=1)
    for text, words in (("rank=1 do=kill", "missing"), ("rank=1 at=x:1 do=explode", "do must be one of"),
                        ("rank=1 at=all_reduce do=kill", "NAME:N")):
        with pytest.raises(ValueError, match=words):
            faults.Fault(text)


def launch(tmp_path, n, mode, env=None, timeout=90, victim=None, nodes=1, store=None):
    """Start n ranks of dist_socket_script.py (``nodes`` faked hosts of n // nodes ranks each, with
    their own LOCAL_RANK), meeting through ``store`` (a TCPStore's "host:port", else a FileStore in
    tmp_path); wait for all but ``victim`` to end: (outputs by rank, the victim's exit time). Every
    process is killed at the end, whatever happened."""
    store = store or tmp_path / f"store-{mode}"
    procs, outs = [], []
    try:
        for r in range(n):
            node, local = divmod(r, n // nodes)
            out = open(tmp_path / f"{mode}-{r}.out", "w+")
            outs.append(out)
            procs.append(subprocess.Popen(
                [sys.executable, SCRIPT, mode], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                env=dict(os.environ, PYTHONPATH=ROOT, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(local),
                         MINIDL_DIST_HOSTNAME=f"node{node}", MINIDL_TEST_STORE=str(store), **(env or {}))))
        deadline, died = time.monotonic() + timeout, None
        while any(p.poll() is None for r, p in enumerate(procs) if r != victim):
            if victim is not None and died is None and procs[victim].poll() is not None:
                died = time.time()
            assert time.monotonic() < deadline, f"{mode} hung: " + read(outs)
            time.sleep(0.005)
        return [o.seek(0) or o.read() for o in outs], died
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        for o in outs:
            o.close()


def read(outs):
    return "\n".join(f"--- rank {r}\n{o.seek(0) or o.read()}" for r, o in enumerate(outs))


def test_every_case_on_two_ranks_with_loopback_timings(tmp_path):
    outs, _ = launch(tmp_path, 2, "bench,cases,mismatches,pipelining,dcp", timeout=180)
    text = "\n".join(outs)
    assert "FAIL" not in text and "Traceback" not in text, text
    for suite in ("bench", "cases", "mismatches", "pipelining", "dcp"):
        assert all(f"DONE {suite} rank {r}: 0 failures" in text for r in range(2)), text
    print(*[line for line in text.splitlines() if line.startswith("BENCH")], sep="\n")


def test_every_case_on_two_nodes_of_two_ranks(tmp_path):
    """Hosts node0 and node1 (MINIDL_DIST_HOSTNAME), joined through one TCPStore on 127.0.0.1 that this
    process serves: the hierarchical all-reduce really runs in two levels (cases runs it on every
    collective); DDP, the parameter server, distributed checkpoints and DTensor's transitions on the same
    ranks."""
    served = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)   # (the launcher's: it outlives them)
    outs, _ = launch(tmp_path, 4, "cases,ddp,ps,dcp,dtensor", nodes=2, timeout=240,
                     store=f"{served.host}:{served.port}")
    text = "\n".join(outs)
    assert "FAIL" not in text and "Traceback" not in text, text
    for suite in ("cases", "ddp", "ps", "dcp", "dtensor"):
        assert all(f"DONE {suite} rank {r}: 0 failures" in text for r in range(4)), text


@pytest.mark.parametrize("fault", ["at=all_reduce:3 do=kill", "at=send do=kill", "at=idle:1.5 do=kill",
                                   "at=all_reduce:2 do=raise", "at=all_reduce:2 do=stop"])
def test_a_failing_rank_is_named_by_every_survivor(tmp_path, fault):
    """Rank 1 of 3 is killed, fails, or freezes (found by heartbeat); ranks 0 (all-reducing with
    it) and 2 (waiting on rank 0) raise naming it, at once and at their next operation."""
    env = dict(MINIDL_FAULT=f"rank=1 {fault}", MINIDL_DIST_HEARTBEAT="1.5")
    outs, died = launch(tmp_path, 3, "fault", env, timeout=60, victim=1)
    words = {"kill": "rank 1 died or was cut off", "raise": "rank 1 failed with an uncaught exception: InjectedFault",
             "stop": "rank 1 sent nothing, not even a heartbeat"}[fault.split("do=")[1]]
    for r in (0, 2):
        caught = [line for line in outs[r].splitlines() if line.startswith("CAUGHT")]
        assert caught and words in caught[0], outs[r]
        assert "NEXT CAUGHT" in outs[r] and words in outs[r].split("NEXT CAUGHT")[1], outs[r]
        if "kill" in fault:   # (died: when this test saw rank 1 gone, polling every 5 ms)
            seconds = float(caught[0].split()[1]) - died
            print(f"rank {r} raised {seconds:.3f} s after rank 1's SIGKILL ({fault})")
            assert seconds < 5, outs[r]
    if "raise" in fault:
        assert "fails on purpose at all_reduce" in outs[1], outs[1]
