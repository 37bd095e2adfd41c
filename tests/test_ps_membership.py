"""minidl.dist.ps's membership over links, on simulated ranks (threads; real processes killed,
frozen and cut off: tests/test_ps_faults.py): a worker that leaves without ps.shutdown(), one that
joins later, and the bad input of both. Every worker pushes -1 on its own row of a parameter with
SGD(lr=1), so row w counts worker w's applied pushes: whole (every entry equal) and none twice."""
import socket
import threading

import numpy as np
import pytest

import minidl
import minidl.dist as dist
from minidl.dist import ps
from minidl.dist.communicators.base import DistError

COLS = 6


def one_hot(row, rows):
    g = minidl.zeros(rows, COLS)
    g[row] = -1.0
    return g


def steps(me, rows, count):
    for _ in range(count):
        ps.pull("w")
        ps.push("w", one_hot(me, rows)).wait()
        ps.clock()


@pytest.mark.parametrize("consistency, policy", [("asp", None), ("ssp", None), ("bsp", "shrink")])
def test_a_worker_that_leaves_is_dropped_and_the_others_finish(consistency, policy):
    """Worker 2 leaves after 5 steps without ps.shutdown() (its thread ends, its links with it): the
    others run 20 steps; stats name it with its clock and its 5 pushes, every row is whole, and the
    survivors' clocks count 2 active workers."""
    def run(rank):
        if ps.init(1, consistency, staleness=1, on_worker_failure=policy) == "server":
            return None
        ps.register("w", minidl.zeros(3, COLS), optimizer=ps.SGD(lr=1.0))
        steps(rank, 3, 5 if rank == 2 else 20)
        if rank == 2:
            return None
        ps.barrier()
        w, stats, active = ps.pull("w"), ps.stats(), ps.active_workers()
        ps.shutdown()
        return w, stats, active
    (w, stats, active), _, _, _ = dist.sim.run(4, run)
    assert active == 2   # (as the server answered the survivors' last clocks: DistributedModel's divisor)
    assert (w == w[:, :1]).all().item() and w[:, 0].tolist() == [20.0, 20.0, 5.0]
    assert [(e["worker"], e["clock"], e["pushes"]) for e in stats["lost"]] == [(2, 5, 5)]
    assert stats["lost"][0]["why"] == "exited without calling ps.shutdown()"
    assert stats["pushes_by"] == {0: 20, 1: 20, 2: 5} and stats["duplicates"] == 0


def test_under_bsp_a_lost_worker_makes_every_clock_raise_by_default():
    def run(rank):
        if ps.init(1, "bsp") == "server":
            return None
        ps.register("w", minidl.zeros(3, COLS), optimizer=ps.SGD(lr=1.0))
        if rank == 2:
            return None   # (leaves before its first step)
        try:
            steps(rank, 3, 3)
        except RuntimeError as e:
            return str(e)
    with pytest.raises(ps.server.WorkerLost, match="worker 2 was lost at clock 0"):
        dist.sim.run(4, run)


def test_a_worker_joins_at_step_50_and_every_push_counts():
    """SSP(2): workers 0 and 1 start; at worker 0's step 50 a third joins from a thread of its own
    (ps.join with the job's store address), registers the same parameter, and pushes 30 times
    from the slowest worker's clock; the run ends with all three's pushes counted."""
    joined = {}

    def joiner(address):
        joined["role"] = ps.join(address)
        ps.register("w", minidl.zeros(3, COLS), optimizer=ps.SGD(lr=1.0))
        joined["id"], joined["clock"] = ps.worker_rank(), ps.stats()["clocks"][ps.worker_rank()]
        steps(2, 3, 30)
        ps.shutdown()

    def run(rank):
        if ps.init(1, "ssp", staleness=2) == "server":
            return None
        ps.register("w", minidl.zeros(3, COLS), optimizer=ps.SGD(lr=1.0))
        thread = threading.Thread(target=joiner, args=(ps.store_address(),))
        for step in range(100):
            if rank == 0 and step == 50:
                thread.start()
            steps(rank, 3, 1)
        if rank == 0:
            thread.join()
        ps.barrier()
        w, stats = ps.pull("w"), ps.stats()
        ps.shutdown()
        return w, stats
    (w, stats), _, _ = dist.sim.run(3, run)
    assert joined["role"] == "worker" and joined["id"] == 3   # (after the ranks 0, 1 and the server, 2)
    assert 48 <= joined["clock"] < 100   # (the slowest clock when its request came)
    assert (w == w[:, :1]).all().item() and w[:, 0].tolist() == [100.0, 100.0, 30.0]
    assert stats["pushes_by"] == {0: 100, 1: 100, 3: 30}
    assert [(e["worker"], e["clock"]) for e in stats["joined"]] == [(3, joined["clock"])]


def test_joining_a_job_that_does_not_exist_or_has_ended_is_named():
    with socket.socket() as s:   # (a port nothing listens on)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DistError, match=f"ps.join: no parameter-server job at tcp://127.0.0.1:{port}"):
        ps.join(f"tcp://127.0.0.1:{port}", timeout=1)
    with pytest.raises(ValueError, match="'http://x:1' is not tcp://HOST:PORT"):
        ps.join("http://x:1")

    def run(rank):
        if ps.init(1, "asp") == "server":
            return None
        address = ps.store_address()
        ps.shutdown()
        return address
    address = dist.sim.run(2, run)[0]
    with pytest.raises(DistError, match="has ended"):
        ps.join(address, timeout=2)


def test_a_joining_worker_with_other_parameters_is_refused_naming_it():
    found = {}

    def joiner(address):
        ps.join(address)
        for value in (minidl.zeros(4), minidl.ones(3, COLS)):
            try:
                ps.register("w", value, optimizer=ps.SGD(lr=1.0))
            except RuntimeError as e:
                found.setdefault("errors", []).append(str(e))
        ps.shutdown()

    def run(rank):
        if ps.init(1, "asp") == "server":
            return None
        ps.register("w", minidl.zeros(3, COLS), optimizer=ps.SGD(lr=1.0))
        thread = threading.Thread(target=joiner, args=(ps.store_address(),))
        thread.start()
        thread.join()
        ps.shutdown()
    dist.sim.run(2, run)
    first, second = found["errors"]
    assert "register 'w' [4] float32 from worker 2: key 0 is already 'w' [3, 6] float32" in first
    assert "worker 2's value differs from the one registered first" in second


@pytest.mark.parametrize("options, words", [
    (dict(drop_stale_after=-1), "drop_stale_after=-1 must be a number of clocks >= 0"),
    (dict(drop_stale_after=1.5), "drop_stale_after=1.5 must be a number of clocks >= 0"),
    (dict(on_worker_failure="ignore"), "on_worker_failure='ignore'; it must be 'raise' or 'shrink'")])
def test_bad_options_are_named(options, words):
    with pytest.raises(ValueError, match=words):
        dist.sim.run(2, lambda rank: ps.init(1, "asp", **options))


def test_shrinking_needs_links(monkeypatch):
    monkeypatch.setenv("MINIDL_PS_TRANSPORT", "group")
    with pytest.raises(ValueError, match="surviving a worker's loss needs links"):
        dist.sim.run(2, lambda rank: ps.init(1, "asp", on_worker_failure="shrink"))


# -- the server's side of a broken link, driven request by request ------------------------------------
class RecordingEnd:
    """A transport end that keeps the server's replies: (worker, status, the seq it answers)."""
    tolerant = True

    def __init__(self):
        self.replies = []

    def reply(self, worker, status, body=None, seq=0):
        self.replies.append((worker, status, seq))
        return []

    def close(self, flush=True):
        pass


def ask(server, worker, kind, seq, payload=(), **words):
    from minidl.dist.ps import protocol as P
    header = P.header(kind, **words)
    header[P.SEQ] = seq
    parts = P.seal(header, payload)
    server.take(worker, np.frombuffer(parts[0], np.int64).tolist(), parts[1:])


def served(consistency):
    """A server of 2 workers holding w = zeros(2) under SGD(lr=1), registered by both (seqs 1)."""
    from minidl.dist.ps import protocol as P
    from minidl.dist.ps.server import Server
    server = Server(RecordingEnd(), 0, 1, 2, consistency, 0, "shrink")
    opt = ps.SGD(lr=1.0)
    for worker in (0, 1):
        ask(server, worker, P.REGISTER, 1, [P.text("w"), minidl.tensor([2]), minidl.tensor(opt.words() + [0.0],
            dtype=minidl.float64), minidl.zeros(2)], key=0, numel=2, name_len=1, ndim=1, optimizer=opt.kind)
    return server, P


def test_a_barrier_asked_again_after_its_answer_was_lost_is_answered_again():
    server, P = served("asp")
    ask(server, 0, P.BARRIER, 2)
    ask(server, 1, P.BARRIER, 2)
    answered = list(server.end.replies[-2:])
    ask(server, 0, P.BARRIER, 2)   # (its link broke before the answer came: sent again)
    assert sorted(answered) == [(0, 0, 2), (1, 0, 2)] and server.end.replies[-1] == (0, 0, 2)


def test_under_bsp_a_worker_back_after_a_broken_link_has_its_dropped_pushes_taken_again():
    """Worker 0 pushes in iteration 0, its link breaks and the server drops it (its push discarded,
    the iteration ends without it); on its new link the welcome says the last request taken before
    the discarded push, so the push sent again is applied (one iteration late), not taken as a repeat."""
    server, P = served("bsp")
    ask(server, 0, P.PUSH, 2, [-minidl.ones(2)], key=0, numel=2, clock=0)
    server.worker_gone(0, "its link broke")
    ask(server, 1, P.PUSH, 2, [-minidl.ones(2)], key=0, numel=2, clock=0)
    ask(server, 1, P.CLOCK, 3, clock=1)
    assert server.stats["discarded"] == 1 and server.shards[0].param.tolist() == [1.0, 1.0]
    assert server.admit(0) == [1]   # (its welcome: send again what came after request 1)
    ask(server, 0, P.PUSH, 2, [-minidl.ones(2)], key=0, numel=2, clock=0)
    ask(server, 0, P.CLOCK, 3, clock=1)
    assert server.shards[0].param.tolist() == [2.0, 2.0] and server.stats["duplicates"] == 0


def test_a_connected_worker_slow_to_ask_is_not_taken_for_one_that_never_came():
    server, _ = served("asp")
    server.heard.clear()
    server.admit(1)   # (worker 1's link is made: it connected)
    server.patience, server.started = 0.01, server.started - 1
    server.drop_absent()
    assert sorted(server.lost) == [0]
