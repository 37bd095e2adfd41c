"""minidl.dist.ps on simulated ranks: the consistency models and sparse tables (tests/ps_cases.py,
also run under `mpiexec -n 3` and `-n 4` by test_dist_mpi.py), bad input named on the worker, a
malformed request refused by the server with its shard intact, a failing worker ending the job."""
import logging
import threading

import pytest

import minidl
import minidl.dist as dist
import ps_cases
from minidl.dist import ps
from minidl.dist.ps import protocol as P
from minidl.dist.ps.worker import Work, _Awaited


@pytest.mark.parametrize("size, transport", [(3, "links"), (4, "links"), (3, "group")])
def test_consistency_models_and_sparse_tables(size, transport, monkeypatch):
    """Over links (gloo's transport) and over the process group's messages (MPI's)."""
    monkeypatch.setenv("MINIDL_PS_TRANSPORT", transport)
    assert dist.sim.run(size, ps_cases.run_all, size) == [[]] * size


def test_bad_input_is_named_on_the_worker(caplog):
    def run(rank):
        if ps.init(num_servers=1) == "server":
            return None
        ps.register("w", minidl.zeros(4, 2), optimizer=ps.SGD(lr=0.1))
        ps.register("table", minidl.zeros(5, 2), optimizer=ps.SGD(lr=0.1), sparse=True)
        errors = []
        for call in (lambda: ps.push("nope", minidl.zeros(1)),
                     lambda: ps.register("w", minidl.zeros(3), optimizer=ps.SGD(lr=0.1)),
                     lambda: ps.pull("table", minidl.tensor([1, 5])),
                     lambda: ps.push("w", minidl.zeros(4, 3)),
                     lambda: ps.push("w", minidl.zeros(4, 2, dtype=minidl.float64)),
                     lambda: ps.push("w", minidl.zeros(4, 2), rows=minidl.tensor([0]))):
            try:
                call()
            except Exception as e:
                errors.append(f"{type(e).__name__}: {e}")
        if rank == 0:   # malformed requests, as from a broken client (one with a payload to consume)
            client = ps._client("push")
            for header, payload in ((P.header(P.PULL, key=99), ()),
                                    (P.header(P.PUSH, key=0, numel=3), [minidl.ones(3)]),
                                    (P.header(P.PUSH, key=99, numel=4), [minidl.full((4,), 100.0)])):
                bad = client.request(0, header, payload, _Awaited("bad", minidl.float32))
                try:
                    Work(client, [(0, bad)]).wait()
                except RuntimeError as e:
                    errors.append(f"server: {e}")
        ps.clock()
        intact, counts = ps.pull("w"), ps.stats()
        ps.shutdown()
        try:
            ps.push("w", minidl.zeros(4, 2))
        except RuntimeError as e:
            errors.append(str(e))
        return errors, intact.tolist(), counts["rejected"]
    with caplog.at_level(logging.WARNING, logger="minidl.dist.ps"):
        results = dist.sim.run(3, run)
    errors, intact, rejected = results[0]
    expected = ["KeyError: \"ps.push: no parameter named 'nope' was registered",
                "ValueError: ps.register('w'): registered before as 'w' ([4, 2], float32), now with shape [3], float32, dense",
                "IndexError: ps.pull('table'): rows from 1 to 5 for a table of 5 rows",
                "ValueError: ps.push('w'): a gradient of shape [4, 3] for 'w' ([4, 2], float32); expected [4, 2]",
                "TypeError: ps.push('w'): a float64 gradient for 'w'",
                "ValueError: ps.push('w'): rows are for row-sharded parameters",
                "server: ps.bad (worker 0, server 0): no parameter with key 99",
                "server: ps.bad (worker 0, server 0): push to 'w': a payload of 12 bytes where 8 float32 values were due",
                "server: ps.bad (worker 0, server 0): no parameter with key 99",
                "ps.push('w'): called after ps.shutdown() on worker 0"]
    assert len(errors) == len(expected) and all(e.startswith(want) for e, want in zip(errors, expected)), errors
    assert intact == [[0.0, 0.0]] * 4 and rejected == 3   # (the refused push's payload did not leak into w)
    assert "rejected a request from worker 0: no parameter with key 99" in caplog.text


def test_a_failing_worker_ends_the_job_naming_it():
    def run(rank):
        if ps.init(num_servers=1) == "server":
            return
        ps.register("w", minidl.zeros(3), optimizer=ps.SGD(lr=0.1))
        if rank == 1:
            raise ArithmeticError("worker 1 fails on purpose")
        for _ in range(3):
            ps.push("w", minidl.ones(3))
            ps.clock()
        ps.shutdown()
    with pytest.raises(ArithmeticError, match="worker 1 fails on purpose") as info:
        dist.sim.run(3, run)
    assert "sim rank 1" in str(info.value.__notes__)


def test_roles_and_init_errors():
    def run(rank):
        if ps.init(num_servers=2) == "server":
            return "server"
        out = (ps.worker_rank(), ps.num_workers(), ps.num_servers(), dist.get_world_size(ps.worker_group()))
        ps.shutdown()
        return out
    assert dist.sim.run(4, run) == [(0, 2, 2, 2), (1, 2, 2, 2), "server", "server"]
    with pytest.raises(ValueError, match="consistency='eventual'"):
        dist.sim.run(2, lambda r: ps.init(consistency="eventual"))
    with pytest.raises(ValueError, match="num_servers=2 on 2 ranks"):
        dist.sim.run(2, lambda r: ps.init(num_servers=2))


def test_workers_that_start_from_different_values_are_refused():
    """A model whose parameters differ between workers: the registration that reaches the server
    second is refused (whichever worker that is)."""
    def run(rank):
        if ps.init(num_servers=1) == "server":
            return None
        try:
            ps.register("w", minidl.full((3,), float(rank)), optimizer=ps.SGD(lr=0.1))
            outcome = "registered"
        except RuntimeError as e:
            outcome = str(e)
        ps.shutdown()
        return outcome
    outcomes = dist.sim.run(3, run)[:2]
    assert sorted(o == "registered" for o in outcomes) == [False, True], outcomes
    assert any("'s value differs from the one registered first" in o for o in outcomes)


def test_a_silent_worker_is_named_by_the_server_and_to_the_waiting_workers(monkeypatch):
    """Over the process group's messages (MPI's path): worker 1 goes silent (held on an event, as a
    frozen process) under BSP: after the stall time the server logs it; at the timeout the server
    ends naming it, and worker 0, waiting at its clock, gets that error (not a timeout blaming the
    server). The timeout, the group's, must outlast any pause of a loaded machine between the
    requests before."""
    monkeypatch.setenv("MINIDL_PS_TRANSPORT", "group")
    from minidl.dist.ps.server import WorkerLost
    release, found = threading.Event(), {}
    lines = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logging.getLogger("minidl.dist").addHandler(handler)

    def run(rank):
        if ps.init(num_servers=1) == "server":
            return
        ps.register("w", minidl.zeros(3), optimizer=ps.SGD(lr=0.1))
        if rank == 1:
            assert release.wait(60)
            return
        try:
            for _ in range(3):
                ps.push("w", minidl.ones(3))
                ps.clock()
        except RuntimeError as e:
            found[rank] = str(e)
        finally:
            release.set()
    try:
        with pytest.raises(WorkerLost, match=r"parameter server 0: worker rank\(s\) \[1\] sent no request for 10 s; "
                                             r"the job cannot go on \(clocks: worker 0 at clock 1, worker 1 at "
                                             r"clock 0\)"):
            dist.sim.run(3, run, timeout=10, stall_seconds=0.2)
    finally:
        logging.getLogger("minidl.dist").removeHandler(handler)
    assert found[0].startswith("ps.clock (worker 0, server 0): parameter server 0: worker rank(s) [1] sent no "
                               "request for 10 s"), found
    # (the wait for the request that never comes; on a loaded machine earlier waits may log too)
    waits = "the server waits for worker rank(s) [1]"
    assert any(line.startswith("rank 2: irecv from any rank (tag 7101)") and line.endswith(waits)
               for line in lines), lines


def test_a_reply_stuck_to_the_silent_worker_does_not_hide_its_name(caplog):
    """Under MPI a large reply to a frozen worker stays pending past its deadline; the server's
    WorkerLost must still be logged, returned and sent to the worker waiting at its clock."""
    from minidl.dist.ps.server import Server, WorkerLost
    from minidl.dist.ps.transports import GroupServerEnd

    class StuckSend:   # (as mpi4py's unmatched rendezvous send, whose deadline has passed)
        def is_completed(self):
            return False

        def wait(self):
            raise dist.DistTimeoutError("isend to rank 1 (tag 7104): timed out after 1 s on rank 2")

    def run(rank):
        if rank == 2:
            server = Server(None, 0, 1, 2, "bsp", 0)
            server.end = GroupServerEnd(None, server.silent)
            server.end.sends = [StuckSend()]
            server.clocks, server.waiting = {0: 1, 1: 0}, {0: (0.0, 5)}
            return server.fail([1], "sent no request for 1 s")
        if rank == 0:
            header = minidl.empty(3, dtype=minidl.int64)
            dist.recv(header, 2, tag=P.REPLY)
            status, nbytes, seq = header.tolist()
            assert seq == 5   # (the clock request it answers)
            body = minidl.empty(nbytes, dtype=minidl.uint8)
            dist.recv(body, 2, tag=P.REPLY_DATA)
            return status == P.ERROR, P.read_text(body)
    with caplog.at_level(logging.ERROR, logger="minidl.dist.ps"):
        told, _, error = dist.sim.run(3, run)
    message = ("parameter server 0: worker rank(s) [1] sent no request for 1 s; the job cannot go on "
               "(clocks: worker 0 at clock 1, worker 1 at clock 0)")
    assert isinstance(error, WorkerLost) and str(error) == message
    assert told == (True, message)
    assert [r.getMessage() for r in caplog.records] == [message]
