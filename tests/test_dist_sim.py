"""minidl.dist on the in-process sim backend: every collective against numpy oracles, the
algorithms, point-to-point, groups, async work, argument errors, and the no-hang guarantees."""
import importlib
import sys
import time

import numpy as np
import pytest

import minidl
import minidl.dist as dist
from dist_cases import DTYPES, run_all

sim = dist.sim


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("algorithm", ["ring", "recursive_doubling", "auto"])
def test_every_collective_matches_numpy(size, algorithm):
    failures = sim.run(size, run_all, size, algorithm=algorithm)
    assert not any(failures), "\n".join(f for per_rank in failures for f in per_rank[:10])


@pytest.mark.parametrize("size", [3, 4])
def test_small_chunks_split_every_message(size):
    sizes = (0, 1, 7, 8, 50)
    failures = sim.run(size, run_all, size, (minidl.float64, minidl.int64), sizes, chunk_elements=7,
                       algorithm="ring")
    assert not any(failures), failures


@pytest.mark.parametrize("size", [2, 3, 4])
@pytest.mark.parametrize("options", [dict(segment_bytes=24), dict(segment_bytes=40, chunk_elements=3)])
def test_ring_pipelined_in_segments(size, options):
    """Small segments: blocks of every length (0, 1, odd, not divisible by the segment count) are
    cut into segments, in all-reduce, reduce-scatter and all-gather, with and without chunks."""
    failures = sim.run(size, run_all, size, DTYPES, (0, 1, 7, 301), algorithm="ring", **options)
    assert not any(failures), "\n".join(f for per_rank in failures for f in per_rank[:10])


def test_segment_count_follows_segment_bytes(monkeypatch):
    from minidl.dist.communicators.sim import SimCommunicator
    sends = []
    isend = SimCommunicator.isend
    monkeypatch.setattr(SimCommunicator, "isend", lambda self, buf, dst, tag=0: sends.append((buf.dtype, buf.size))
                        or isend(self, buf, dst, tag))

    def fn(rank):
        t = minidl.from_numpy(np.arange(1000.0) * (rank + 1))
        dist.all_reduce(t)
        return np.array_equal(t.numpy(), np.arange(1000.0) * 3)
    assert sim.run(2, fn, algorithm="ring", segment_bytes=800) == [True, True]
    # per rank: 500-element blocks in 5 segments of 100 float64, 2 ring steps
    assert [n for dtype, n in sends if dtype == np.float64] == [100] * 20
    with pytest.raises(ValueError, match="segment_bytes must be positive"):
        sim.run(1, lambda r: None, segment_bytes=0)


def test_ring_reduces_through_a_window_of_recycled_slots(monkeypatch):
    """The reduce-scatter cuts its blocks into segments of REDUCE_SEGMENT_BYTES that land in WINDOW
    scratch slots, reused in turn (small enough to stay in cache), not in a block-sized scratch;
    the all-gather keeps whole-block messages; the result is still exact."""
    from minidl.dist.algorithms import ring
    from minidl.dist.communicators.sim import SimCommunicator
    monkeypatch.setattr(ring, "REDUCE_SEGMENT_BYTES", 800)
    asked, sends = [], []
    scratch, isend = SimCommunicator.scratch, SimCommunicator.isend
    monkeypatch.setattr(SimCommunicator, "scratch", lambda self, numel, like: asked.append((numel, like.dtype))
                        or scratch(self, numel, like))
    monkeypatch.setattr(SimCommunicator, "isend", lambda self, buf, dst, tag=0:
                        sends.append((self.rank, buf.dtype, buf.size)) or isend(self, buf, dst, tag))

    def fn(rank):
        t = minidl.from_numpy(np.arange(3000.0) * (rank + 1))
        dist.all_reduce(t)
        return np.array_equal(t.numpy(), np.arange(3000.0) * 6)
    assert sim.run(3, fn, algorithm="ring") == [True] * 3
    # per rank: 1000-element blocks; 2 reduce steps of 10 segments of 100 float64, 2 gather steps
    assert [n for n, dtype in asked if dtype == np.float64] == [ring.WINDOW * 100] * 3  # (the others: agreements)
    assert sorted(n for rank, dtype, n in sends if rank == 0 and dtype == np.float64) == [100] * 20 + [1000] * 2


@pytest.mark.parametrize("hosts", [["a", "a", "b", "b", "b"], ["a", "b", "a", "b", "c"], ["x"] * 5])
def test_hierarchical_all_reduce(hosts):
    def fn(rank):
        outcomes = []
        for numel in (0, 1, 13, 4000):
            t = minidl.from_numpy(np.arange(numel, dtype=np.float64) * (rank + 1))
            dist.all_reduce(t)
            outcomes.append(np.array_equal(t.numpy(), np.arange(numel) * 15.0))
        return outcomes
    for algorithm in ("hierarchical", "auto"):
        assert all(all(ok) for ok in sim.run(5, fn, hosts=hosts, algorithm=algorithm))


def test_auto_picks_the_hierarchy_when_ranks_span_hosts(monkeypatch):
    from minidl.dist import algorithms
    real, calls = algorithms.all_reduce_path, []
    monkeypatch.setattr(algorithms, "all_reduce_path", lambda *a: calls.append(real(*a)) or calls[-1])
    sim.run(4, lambda r: dist.all_reduce(minidl.ones(3)), hosts=["a", "a", "b", "b"])
    sim.run(4, lambda r: dist.all_reduce(minidl.ones(3)))
    assert calls == ["hierarchical"] * 4 + ["recursive_doubling"] * 4


def test_non_contiguous_tensors_and_version_counter():
    def fn(rank):
        base = minidl.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4) * (rank + 1))
        view = base.t()  # non-contiguous
        before = view._version
        dist.all_reduce(view)
        bumped = view._version > before
        return base.numpy().copy(), bumped
    for got, bumped in sim.run(3, fn):
        assert bumped
        np.testing.assert_array_equal(got, np.arange(12).reshape(3, 4) * 6.0)


def test_in_place_write_is_seen_by_autograd():
    def fn(rank):
        x = minidl.ones(3, requires_grad=True)
        y = x * 2
        z = (y * y).sum()  # saves y
        dist.all_reduce(y)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            z.backward()
    sim.run(2, fn)


def test_async_work_and_flat_buffers():
    def fn(rank):
        t = minidl.full((1000,), float(rank))
        work = dist.all_reduce(t, async_op=True)
        flat = np.full(10, rank + 1.0)
        work2 = dist.all_reduce_buffer(flat, op=dist.ReduceOp.AVG, async_op=True)
        assert isinstance(work, dist.Work)
        assert work.wait() and work2.wait() is True and work.is_completed()
        return t.numpy()[0], flat[0]
    assert sim.run(4, fn) == [(6.0, 2.5)] * 4


def test_blocking_calls_run_on_the_caller_only_when_nothing_is_queued(monkeypatch):
    import threading
    group = importlib.import_module("minidl.dist.group")  # (minidl.dist.group is torch's GroupMember)
    real, where = group.agree, []

    def slow_first(ch, *args):  # a small all-reduce runs in its agreement
        where.append(threading.current_thread().name)
        time.sleep(0.05 if len(where) <= 2 else 0)  # keeps the async call pending
        return real(ch, *args)
    monkeypatch.setattr(group, "agree", slow_first)

    def fn(rank):
        work = dist.all_reduce(minidl.ones(3), async_op=True)
        dist.all_reduce(minidl.ones(3))  # queued behind it: same thread, same order on every rank
        work.wait()
        dist.all_reduce(minidl.ones(3))  # nothing pending: runs right here
    sim.run(2, fn)
    assert sorted(where) == sorted(["minidl.dist group of ranks [0, 1] rank 0"] * 2 + ["sim rank 0"]
                                   + ["minidl.dist group of ranks [0, 1] rank 1"] * 2 + ["sim rank 1"])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timer slack is a Linux setting")
def test_a_communication_thread_for_a_rank_with_a_core_sleeps_precisely():
    """Its waits sleep between polls: Linux's default 50 us timer slack would stall every message
    of a pipelined collective, so such a thread asks for 1 us; one sharing a core keeps the
    default (as does the calling thread)."""
    import ctypes
    from minidl.dist.work import SLACK_NS, CommThread
    get_slack = lambda: ctypes.CDLL(None).prctl(30, 0, 0, 0, 0)  # noqa: E731  PR_GET_TIMERSLACK
    seen = {}
    for precise in (True, False):
        thread = CommThread("test", precise_sleeps=precise)
        thread.submit(lambda inline: seen.setdefault(precise, get_slack())).wait()
        thread.close()
    assert seen[True] == SLACK_NS and seen[False] == get_slack() != SLACK_NS


def test_groups_whose_waits_spin_get_a_precise_communication_thread(monkeypatch):
    from minidl.dist.communicators.sim import SimCommunicator
    from minidl.dist.state import resolve
    precise = lambda rank: resolve(None, "test").thread.precise_sleeps  # noqa: E731
    assert sim.run(2, precise) == [False, False]  # the sim's waits only sleep
    monkeypatch.setattr(SimCommunicator, "spin", 1e-3)
    assert sim.run(2, precise) == [True, True]


def test_an_error_in_a_blocking_call_leaves_the_group_usable(monkeypatch):
    import threading
    group = importlib.import_module("minidl.dist.group")  # (minidl.dist.group is torch's GroupMember)
    real, failed, where = group.agree, set(), []

    def fails_once_per_rank(ch, *args):  # a small all-reduce runs in its agreement
        where.append(threading.current_thread().name)
        if ch.rank not in failed:
            failed.add(ch.rank)
            raise ValueError(f"boom on rank {ch.rank}")
        return real(ch, *args)
    monkeypatch.setattr(group, "agree", fails_once_per_rank)

    def fn(rank):
        t = minidl.full((3,), float(rank + 1))
        with pytest.raises(ValueError, match=f"boom on rank {rank}"):
            dist.all_reduce(t)
        dist.all_reduce(t)  # nothing left pending: runs here again, and right
        return t.numpy().tolist()
    assert sim.run(2, fn) == [[3.0] * 3] * 2
    assert sorted(where) == ["sim rank 0"] * 2 + ["sim rank 1"] * 2


def test_read_only_tensor_is_refused():
    def fn(rank):
        array = np.zeros(3, np.float32)
        array.flags.writeable = False
        with pytest.warns(UserWarning, match="not writable"):
            t = minidl.from_numpy(array)
        with pytest.raises(RuntimeError, match="all_reduce: the tensor's memory is read-only"):
            dist.all_reduce(t)
    sim.run(1, fn)


def test_point_to_point():
    def fn(rank):
        n = dist.get_world_size()
        out = minidl.zeros(20)
        send = dist.isend(minidl.full((20,), float(rank)), (rank + 1) % n, tag=3)
        recv = dist.irecv(out, (rank - 1) % n, tag=3)
        recv.wait(), send.wait()
        assert recv.is_completed() and out.numpy()[0] == (rank - 1) % n
        if rank == 0:
            seen = sorted(dist.recv(minidl.zeros(9)) for _ in range(n - 1))
            assert seen == list(range(1, n))
        else:
            dist.send(minidl.full((9,), float(rank)), 0)
    sim.run(4, fn)
    sim.run(3, fn, chunk_elements=4)  # any-source receive of a chunked message


def test_objects():
    def fn(rank):
        found = [None] * 3
        dist.all_gather_object(found, {"rank": rank})
        items = ["hello", rank] if rank == 1 else [None, None]
        dist.broadcast_object_list(items, src=1)
        return found, items
    for found, items in sim.run(3, fn):
        assert found == [{"rank": 0}, {"rank": 1}, {"rank": 2}] and items == ["hello", 1]


def test_subgroups():
    def fn(rank):
        odd = dist.new_group([1, 3])
        t = minidl.full((5,), float(rank))
        dist.all_reduce(t, group=odd)
        dist.broadcast(t, src=3, group=odd)
        return dist.get_rank(odd), dist.get_world_size(odd), t.numpy()[0]
    assert sim.run(4, fn) == [(-1, -1, 0.0), (0, 2, 4.0), (-1, -1, 2.0), (1, 2, 4.0)]


def test_new_group_can_pick_its_own_algorithm(monkeypatch):
    from minidl.dist.algorithms import ring
    calls = []
    monkeypatch.setattr(ring, "all_reduce", lambda *a: calls.append("ring"))

    def fn(rank):
        dist.all_reduce(minidl.ones(3), group=dist.new_group(algorithm="ring"))
        dist.all_reduce(minidl.ones(3))  # the default group keeps "auto": recursive doubling here
        with pytest.raises(ValueError, match="unknown algorithm 'bogus'"):
            dist.new_group(algorithm="bogus")
    sim.run(2, fn)
    assert calls == ["ring"] * 2


@pytest.mark.parametrize("call, message", [
    (lambda r: dist.all_gather([minidl.zeros(2)], minidl.zeros(2)), "all_gather: tensor_list must be a list of 2"),
    (lambda r: dist.all_gather([minidl.zeros(2), minidl.zeros(3)], minidl.zeros(2)),
     r"all_gather: tensor_list\[1\] has shape \(3,\)"),
    (lambda r: dist.reduce_scatter(minidl.zeros(2), [minidl.zeros(2), minidl.zeros(2, dtype=minidl.int64)]),
     r"reduce_scatter: input_list\[1\] has shape \(2,\) and dtype int64"),
    (lambda r: dist.all_gather_into_tensor(minidl.zeros(3), minidl.zeros(2)),
     r"all_gather_into_tensor: output_tensor holds 3 elements; 2 ranks' input_tensor of 2 need 4"),
    (lambda r: dist.reduce_scatter_tensor(minidl.zeros(2), minidl.zeros(4, dtype=minidl.float64)),
     r"reduce_scatter_tensor: the tensors' dtypes differ \(minidl.float32 and minidl.float64\)"),
    (lambda r: dist.broadcast(minidl.zeros(2), src=5), r"broadcast: src=5 is not a rank of this group"),
    (lambda r: dist.all_reduce(minidl.zeros(2, dtype=minidl.int64), op=dist.ReduceOp.AVG),
     "all_reduce: ReduceOp.AVG needs a floating-point tensor"),
    (lambda r: dist.all_reduce(np.zeros(2)), "all_reduce: tensor must be a minidl tensor"),
    (lambda r: dist.gather(minidl.zeros(2), [minidl.zeros(2)] * 2, dst=1 - r) if r == 0 else
     dist.gather(minidl.zeros(2), None, dst=0), "gather: gather_list must not be given on rank 0"),
    (lambda r: dist.send(minidl.zeros(2), r), "send: dst=.* is this rank itself"),
])
def test_bad_arguments_name_the_collective(call, message):
    with pytest.raises((ValueError, TypeError), match=message):
        sim.run(2, call)


def test_uninitialized():
    with pytest.raises(RuntimeError, match="all_reduce: the default process group is not initialized"):
        dist.all_reduce(minidl.zeros(2))
    assert not dist.is_initialized()
    with pytest.raises(ValueError, match="env:// rendezvous: environment variable (RANK|WORLD_SIZE|MASTER_ADDR) "
                                         "expected"):   # (outside mpiexec, torch's default: env://)
        dist.init_process_group()


def test_a_failing_rank_fails_the_others_instead_of_hanging():
    """The waiting ranks fail because rank 1 is gone, not by the (30-minute) timeout."""
    found = {}

    def fn(rank):
        if rank == 1:
            raise KeyError("boom on rank 1")
        try:
            dist.all_reduce(minidl.zeros(100))
        except dist.DistError as e:
            found[rank] = str(e)
    with pytest.raises(KeyError, match="boom on rank 1"):
        sim.run(3, fn)
    assert sorted(found) == [0, 2] and all("rank 1" in e and "timed out" not in e for e in found.values()), found


def test_a_rank_that_returns_early_fails_the_waiting_recv():
    def fn(rank):
        if rank == 0:
            dist.recv(minidl.zeros(2), src=1)
    with pytest.raises(dist.DistError, match="rank 1 exited and will never deliver"):
        sim.run(2, fn)


def test_timeout_names_the_peers_that_did_not_deliver():
    """Rank 2 comes late. The agreement before the ring is recursive doubling: at 3 ranks rank 0
    hands its part to rank 1, which waits for rank 2: so rank 1 names rank 2, and rank 0 rank 1
    (timing out too, or finding rank 1 gone)."""
    def fn(rank):
        if rank == 2:
            time.sleep(1.0)
            return None
        with pytest.raises(dist.DistError) as caught:
            dist.all_reduce(minidl.zeros(10), op=dist.ReduceOp.MAX)
        return str(caught.value)
    found = sim.run(3, fn, timeout=0.3, algorithm="ring")
    assert found[1] == ("all_reduce (collective #1 of the group): timed out after 0.3 s on rank 1: "
                        "rank(s) [2] did not send what rank 1 waits for")
    assert "rank(s) [1] did not send what rank 0 waits for" in found[0] or "rank 1 exited" in found[0], found[0]


def test_debug_mode_reports_mismatched_collectives(monkeypatch):
    monkeypatch.setenv("MINIDL_DIST_DEBUG", "1")

    def fn(rank):
        if rank == 0:
            dist.all_reduce(minidl.zeros(4))
        else:
            dist.broadcast(minidl.zeros(4, dtype=minidl.int64), src=0)
    with pytest.raises(dist.DistError, match=r"(?s)called different collectives.*rank 0: all_reduce\(seq=1, "
                                             r"shape=\(4,\), dtype=float32.*rank 1: broadcast\(seq=1, shape=\(4,\), "
                                             r"dtype=int64, src=0\) at .*test_dist_sim.py:\d+"):
        sim.run(2, fn)


def test_each_rank_gets_its_share_of_the_cores_for_compute(monkeypatch):
    from threadpoolctl import threadpool_info

    from minidl import threads
    from minidl.dist.launch import fit_threads_to_cores
    before = minidl.get_num_threads()
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    try:
        minidl.set_num_threads(2)
        wide = minidl.get_num_threads()  # (2, or fewer where Numba has fewer)
        monkeypatch.setattr(threads, "_chosen", False)  # as if neither the user nor the environment chose a count
        fit_threads_to_cores(1)  # alone on the host: the pool stays as it is
        assert minidl.get_num_threads() == wide
        fit_threads_to_cores(2)  # two ranks on two cores: one compute thread each, BLAS's too
        assert minidl.get_num_threads() == 1
        assert all(pool["num_threads"] == 1 for pool in threadpool_info() if pool["user_api"] == "blas")
        minidl.set_num_threads(2)  # the user's own choice (before init_process_group) stays
        fit_threads_to_cores(2)
        assert minidl.get_num_threads() == wide
    finally:
        minidl.set_num_threads(before)


def test_a_truncation_landing_while_the_receiver_polls_is_still_an_error():
    """The sending thread fills a receive while the receiving one tests it: however the two
    interleave, a message longer than the buffer is an error, not a receive that completed."""
    from minidl.dist.communicators.sim import SimCommunicator, SimWorld, _SimRecv

    class FilledOnFirstLook(_SimRecv):   # (the fill lands right after the test's first read)
        landed = False

        def __getattribute__(self, name):
            value = object.__getattribute__(self, name)
            if name in ("done", "error") and not object.__getattribute__(self, "landed"):
                self.landed = True
                self.fill(0, np.zeros(8, np.float32))
            return value

    receiver = SimCommunicator(SimWorld(2), 0, 1, [0, 1], 1024)
    with pytest.raises(dist.DistError, match=r"receive of 16 bytes from rank 0 got a message of 32 bytes"):
        FilledOnFirstLook(receiver, np.zeros(4, np.float32), 0, 9).test()


@pytest.mark.parametrize("n", [2, 3])
def test_mismatched_calls_are_errors_on_every_rank(n):
    """tests/dist_mismatch_cases.py: every collective with each kind of mismatch, and point-to-point."""
    from dist_mismatch_cases import run_all as run_mismatches
    assert sim.run(n, run_mismatches, n) == [[]] * n


def test_a_receive_that_fails_does_not_fail_the_others():
    """Rank 0 waits on a receive from rank 1, which returns without sending: that receive fails,
    and rank 0's receive from rank 2 still arrives."""
    def fn(rank):
        g = dist.new_group()
        if rank == 0:
            doomed = dist.irecv(minidl.zeros(2), 1, group=g)
            time.sleep(0.2)  # rank 1 is gone by now
            t = minidl.zeros(2)
            assert dist.recv(t, 2, group=g) == 2 and t.tolist() == [1.0, 1.0]
            with pytest.raises(dist.DistError, match="rank 1 exited"):
                doomed.wait()
        elif rank == 2:
            dist.send(minidl.ones(2), 0, group=g)
    sim.run(3, fn, timeout=5)


def _draws(rank):
    first = minidl.rand(3).numpy()
    minidl.manual_seed(11)   # (this rank's generator only)
    return first, minidl.rand(2).numpy()


def test_each_rank_draws_from_its_own_generator_starting_where_the_callers_stands():
    """As forked processes: every rank's first draw is the caller's next, and seeding one rank touches
    neither the others nor the caller."""
    minidl.manual_seed(3)
    results = sim.run(3, _draws)
    caller_next = minidl.rand(3).numpy()
    minidl.manual_seed(3)
    want_first = minidl.rand(3).numpy()
    minidl.manual_seed(11)
    want_seeded = minidl.rand(2).numpy()
    assert all(np.array_equal(f, want_first) and np.array_equal(s, want_seeded) for f, s in results)
    assert np.array_equal(caller_next, want_first)


def _bytes_of_small_and_large_all_reduces(rank):
    from minidl.dist import debug
    sent = []
    for numel in (16, 1 << 16):   # (64 bytes ride in the agreement's messages; 256 KiB take the ring)
        before = debug.sent_bytes()
        dist.all_reduce(minidl.ones(numel))
        sent.append(debug.sent_bytes() - before)
    return sent


@pytest.mark.parametrize("size", [2, 4])
def test_sent_bytes_counts_an_all_reduces_data_whichever_way_it_went(size):
    """Recursive doubling sends the whole buffer log2(k) times, the ring 2(k-1)/k of it."""
    k = size.bit_length() - 1
    assert sim.run(size, _bytes_of_small_and_large_all_reduces) == [[64 * k, 2 * (size - 1) * (1 << 18) // size]] * size
