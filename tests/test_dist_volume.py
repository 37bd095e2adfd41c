"""volume.sent_bytes, the bytes a planner predicts one rank sends in a collective, against what debug.sent_bytes
counts around the real collective: every rank of groups of 1..5 sim ranks, every root, sizes either side of the
small-message threshold, and bfloat16, whose reductions run in float32."""
import pytest

import minidl
import minidl.dist as dist
from minidl.dist import debug
from minidl.dist.algorithms import volume
from minidl.dist.group import Config
from minidl.dist.state import resolve

sim = dist.sim
ITEMSIZE = {minidl.float32: 4, minidl.float64: 8, minidl.bfloat16: 2}
# 16_384 float32 is small_bytes exactly (recursive doubling), 16_385 one past (the ring); 20_000 bfloat16 is past
# it only widened to float32; 1001 is not divisible by any group size but 1 and 7
NUMELS = (0, 1, 7, 1001, 16_384, 16_385, 20_000)


@pytest.fixture(autouse=True)
def _plain_environment(monkeypatch):
    """The defaults the predictions assume: no MINIDL_DIST_ALGO, no debug fingerprints (which are counted)."""
    monkeypatch.delenv("MINIDL_DIST_ALGO", raising=False)
    monkeypatch.delenv("MINIDL_DIST_DEBUG", raising=False)


def _cases(n, collectives, dtypes=tuple(ITEMSIZE), numels=NUMELS):
    """(collective, numel, dtype, root) for every root of the rooted ones."""
    return [(c, numel, dtype, root) for dtype in dtypes for numel in numels for c in collectives
            for root in (range(n) if c in volume.ROOTED else (None,))]


def _call(rank, n, collective, numel, dtype, root):
    tensor = minidl.ones(numel, dtype=dtype)
    if collective == "all_reduce":
        dist.all_reduce(tensor)
    elif collective == "broadcast":
        dist.broadcast(tensor, root)
    elif collective == "reduce":
        dist.reduce(tensor, root)
    elif collective == "all_gather":
        dist.all_gather([minidl.zeros(numel, dtype=dtype) for _ in range(n)], tensor)
    elif collective == "all_gather_into_tensor":
        dist.all_gather_into_tensor(minidl.zeros(n * numel, dtype=dtype), tensor)
    elif collective == "reduce_scatter":
        dist.reduce_scatter(tensor, [minidl.ones(numel, dtype=dtype) for _ in range(n)])
    elif collective == "reduce_scatter_tensor":
        dist.reduce_scatter_tensor(tensor, minidl.ones(n * numel, dtype=dtype))
    elif collective == "barrier":
        dist.barrier()
    else:  # send: to the right neighbour while receiving from the left
        work = dist.isend(tensor, (rank + 1) % n)
        dist.recv(minidl.zeros(numel, dtype=dtype), (rank - 1) % n)
        work.wait()


def _measured(rank, n, cases):
    sent = []
    for case in cases:
        before = debug.sent_bytes()
        _call(rank, n, *case)
        sent.append(debug.sent_bytes() - before)
    return sent


def _check(n, cases, init_options=None, **options):
    got = sim.run(n, _measured, n, cases, **(init_options or {}))
    for r in range(n):
        want = [volume.sent_bytes(c, numel, ITEMSIZE[dtype], n, r, root=root, **options,
                                  widened_itemsize=4 if dtype is minidl.bfloat16 else None)
                for c, numel, dtype, root in cases]
        wrong = [(case, g, w) for case, g, w in zip(cases, got[r], want) if g != w]
        assert not wrong, f"rank {r} of {n}: (case, sent, predicted): {wrong[:5]}"


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_every_collective_on_every_rank_sends_what_is_predicted(n):
    collectives = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
                   "reduce_scatter_tensor", "barrier") + (("send",) if n > 1 else ())
    _check(n, _cases(n, collectives) + _cases(n, ("all_reduce",), (minidl.float32,), (70_000,)))


@pytest.mark.parametrize("n", [3, 4, 5])
@pytest.mark.parametrize("algorithm", ["ring", "recursive_doubling", "hierarchical"])
def test_a_forced_all_reduce_algorithm(n, algorithm):
    _check(n, _cases(n, ("all_reduce",), (minidl.float32,), (0, 7, 1001, 20_000)), dict(algorithm=algorithm),
           algorithm=algorithm)


@pytest.mark.parametrize("hosts", [("a", "a", "b"), ("a", "b", "a", "b", "a"), ("a", "b", "c", "c")])
def test_the_hierarchical_all_reduce_of_ranks_spanning_hosts(hosts):
    """"auto" takes it at every size when some host has several ranks."""
    _check(len(hosts), _cases(len(hosts), ("all_reduce",), (minidl.float32, minidl.bfloat16), (7, 1001, 20_000)),
           dict(hosts=hosts), hosts=hosts)


def test_a_smaller_small_message_size_and_segments():
    """The ring from 257 bytes; segments of 1000 bytes cut its blocks without changing what is sent."""
    _check(4, _cases(4, ("all_reduce", "reduce_scatter_tensor"), (minidl.float32,), (7, 64, 65, 1001)),
           dict(small_message_bytes=256, segment_bytes=1000), small_bytes=256)


def _config(rank):
    config = resolve(None, "test").config
    return config.algorithm, config.small_bytes, config.segment_bytes


def test_the_sim_groups_defaults_are_the_ones_predicted_from():
    assert sim.run(2, _config) == [("auto", Config.small_bytes, Config.segment_bytes)] * 2


def test_the_arithmetic_in_closed_form():
    """Recursive doubling sends the buffer log2(n) times, the ring 2(n-1)/n of it, the tree's root to every child."""
    assert volume.sent_bytes("all_reduce", 16, 4, 4, 1) == 2 * 64
    assert volume.sent_bytes("all_reduce", 1 << 16, 4, 4, 1) == 2 * 3 * (1 << 18) // 4
    assert volume.sent_bytes("all_reduce", 1 << 14, 2, 4, 1, widened_itemsize=4) == 2 * (1 << 16)
    assert [volume.sent_bytes("broadcast", 1, 1, 5, r, root=0) for r in range(5)] == [3, 0, 1, 0, 0]
    assert volume.sent_bytes("all_gather_into_tensor", 10, 8, 5, 2) == 4 * 80


@pytest.mark.parametrize("args, kwargs, match", [
    (("all_to_all", 1, 4, 2, 0), {}, "unknown collective 'all_to_all'"),
    (("all_reduce", 1, 4, 0, 0), {}, r"sent_bytes\('all_reduce'\): rank 0 is not a rank of a group of 0"),
    (("all_reduce", 1, 4, 2, 2), {}, "rank 2 is not a rank of a group of 2"),
    (("all_reduce", 1, 4, 2, 0), dict(algorithm="native"), "native collective"),
    (("all_reduce", 1, 4, 2, 0), dict(algorithm="tree"), "unknown algorithm 'tree'"),
    (("all_reduce", -1, 4, 2, 0), {}, "numel=-1"),
    (("broadcast", 1, 4, 2, 0), {}, r"sent_bytes\('broadcast'\): root=None"),
    (("reduce", 1, 4, 2, 0), dict(root=2), "root=2"),
    (("all_reduce", 1, 4, 2, 0), dict(hosts=["a"]), "1 host names for a group of 2"),
])
def test_bad_input_is_named(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        volume.sent_bytes(*args, **kwargs)


def _scratch_after(rank, n, collective, numel, dtype):
    _call(rank, n, collective, numel, dtype, None)
    return resolve(None, "test").coll._scratch.size


@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("collective", ["all_reduce", "reduce_scatter_tensor", "all_gather_into_tensor"])
@pytest.mark.parametrize("numel", [7, 16_385, 300_001, 700_000])
def test_the_scratch_a_collective_keeps_is_predicted(n, collective, numel):
    """A fresh group's communicator scratch after one collective: what a plan's memory counts for it."""
    found = sim.run(n, _scratch_after, n, collective, numel, minidl.float32)
    assert found == [volume.scratch_bytes(collective, numel, 4, n)] * n
    if collective == "all_reduce" and numel == 700_000 and n == 2:   # (a ring's two 1 MiB-ish slots)
        assert found[0] > 1 << 20
