"""Mismatched collectives and point-to-point messages, shared by the sim tests and the mpiexec
script. In each collective case rank 0 calls something other than the rest; every rank must raise
the same DistError naming what differs (after the name of its own call), the group must then refuse further collectives, and a new
group must work. ``run_all(rank, size)`` returns the failures (strings), on every rank at once.
"""
import time

import numpy as np

import minidl
import minidl.dist as dist

f32, f64 = minidl.float32, minidl.float64


def _list(n, numel, dtype=f32):
    return [minidl.zeros(numel, dtype=dtype) for _ in range(n)]


# name: (what rank r calls on group g, the group's algorithm, what the error says differs)
COLLECTIVES = {
    "all_reduce 10 vs 20 float32": (lambda r, g: dist.all_reduce(minidl.zeros(10 if r == 0 else 20), group=g),
                                    "auto", "count"),
    "all_reduce float32 vs float64": (lambda r, g: dist.all_reduce(minidl.zeros(1000, dtype=f32 if r == 0 else f64),
                                                                   group=g), "auto", "dtype"),
    "all_reduce 20 float32 vs 10 float64 (same bytes)": (
        lambda r, g: dist.all_reduce(minidl.zeros(20, dtype=f32) if r == 0 else minidl.zeros(10, dtype=f64),
                                     group=g), "auto", "count, dtype"),
    "all_reduce SUM vs MAX": (lambda r, g: dist.all_reduce(minidl.zeros(5), dist.ReduceOp.SUM if r == 0
                                                           else dist.ReduceOp.MAX, group=g), "auto", "op"),
    "all_reduce ring, 100000 vs 100001": (lambda r, g: dist.all_reduce(minidl.zeros(100000 + (r > 0)), group=g),
                                          "auto", "count"),
    "all_reduce recursive doubling vs ring": (lambda r, g: dist.all_reduce(minidl.zeros(10 if r == 0 else 100000),
                                                                           group=g), "auto", "algorithm, count"),
    "all_reduce native, 10 vs 20": (lambda r, g: dist.all_reduce(minidl.zeros(10 if r == 0 else 20), group=g),
                                    "native", "count"),
    "all_reduce async, 3 vs 4": (lambda r, g: dist.all_reduce(minidl.zeros(3 + (r > 0)), group=g,
                                                              async_op=True).wait(), "auto", "count"),
    "broadcast 3 vs 5": (lambda r, g: dist.broadcast(minidl.zeros(3 if r == 0 else 5), 0, group=g), "auto", "count"),
    "broadcast src 0 vs 1": (lambda r, g: dist.broadcast(minidl.zeros(3), 0 if r == 0 else 1, group=g), "auto",
                             "root"),
    "reduce dst 0 vs 1": (lambda r, g: dist.reduce(minidl.zeros(3), 0 if r == 0 else 1, group=g), "auto", "root"),
    "reduce SUM vs MIN": (lambda r, g: dist.reduce(minidl.zeros(3), 0, dist.ReduceOp.SUM if r == 0
                                                   else dist.ReduceOp.MIN, group=g), "auto", "op"),
    "all_gather 4 vs 6": (lambda r, g: dist.all_gather(_list(g.size, 4 if r == 0 else 6),
                                                       minidl.zeros(4 if r == 0 else 6), group=g), "auto", "count"),
    "reduce_scatter 2 vs 3": (lambda r, g: dist.reduce_scatter(minidl.zeros(2 + (r > 0)), _list(g.size, 2 + (r > 0)),
                                                               group=g), "auto", "count"),
    "gather 3 vs 4": (lambda r, g: dist.gather(minidl.zeros(3 + (r > 0)), _list(g.size, 3) if r == 0 else None, 0,
                                               group=g), "auto", "count"),
    "scatter float32 vs float64": (lambda r, g: dist.scatter(minidl.zeros(3, dtype=f32 if r == 0 else f64),
                                                             _list(g.size, 3) if r == 0 else None, 0, group=g),
                                   "auto", "dtype"),
    "barrier vs all_reduce": (lambda r, g: dist.barrier(group=g) if r == 0 else dist.all_reduce(minidl.zeros(1),
                                                                                                group=g),
                              "auto", "collective, algorithm, count, dtype, op"),
    "all_to_all sizes pair by pair": (lambda r, g: dist.all_to_all(_list(g.size, 2), _list(g.size, 2 + (r == 0)),
                                                                   group=g), "auto", None),
}


def run_all(rank, size):
    failures = []
    for name, (call, algorithm, differ) in COLLECTIVES.items():
        g = dist.new_group(algorithm=algorithm)
        message = _raised(lambda: call(rank, g))
        if message is None:
            failures.append(f"rank {rank}: {name}: no DistError")
            message = ""
        wanted = ("don't match pair by pair" if differ is None
                  else f"the ranks called mismatched collectives (they differ in {differ})")
        if wanted not in message:
            failures.append(f"rank {rank}: {name}: the error does not say {wanted!r}: {message!r}")
        fresh = dist.new_group()
        everyone = [None] * size
        dist.all_gather_object(everyone, message, group=fresh)
        if len({m.partition(" of the group): ")[2] for m in everyone}) > 1:  # each names its own call first
            failures.append(f"rank {rank}: {name}: the ranks raised different errors: {everyone}")
        later = _raised(lambda: dist.all_reduce(minidl.ones(2), group=g)) or ""
        if "failed at an earlier collective" not in later or message.splitlines()[0] not in later:
            failures.append(f"rank {rank}: {name}: a later collective on the failed group said {later!r}")
        t = minidl.ones(2)
        dist.all_reduce(t, group=fresh)
        if t.tolist() != [float(size)] * 2:
            failures.append(f"rank {rank}: {name}: a new group's all_reduce gave {t.tolist()}")
    return failures + _point_to_point(rank)


def _raised(fn):
    try:
        fn()
    except dist.DistError as e:
        return str(e)
    return None


def _until_done(request):
    deadline = time.monotonic() + 30
    while not request.test():
        if time.monotonic() > deadline:
            raise AssertionError("a request never completed")
        time.sleep(1e-4)


def _point_to_point(rank):
    """Ranks 0 and 1: mismatched sizes and dtypes are errors naming both sides, after which the
    next message between them still arrives right; two receives outstanding from one peer get
    the messages in posting order, whichever is waited for first."""
    failures = []
    g = dist.new_group()
    if rank == 0:
        dist.send(minidl.arange(8.0), 1, group=g)
        dist.send(minidl.arange(8.0, dtype=f64), 1, group=g)
        dist.send(minidl.full((3,), 7.0), 1, group=g)
        dist.send(minidl.full((2,), 1.0), 1, group=g, tag=5)
        dist.send(minidl.full((3,), 2.0), 1, group=g, tag=5)
    elif rank == 1:
        for into, wanted in ((minidl.zeros(4), "rank 0 sent 8 elements of float32, but the receiving tensor on "
                                               "rank 1 holds 4 elements of float32"),
                             (minidl.zeros(8), "rank 0 sent 8 elements of float64, but the receiving tensor on "
                                               "rank 1 holds 8 elements of float32")):
            message = _raised(lambda: dist.recv(into, 0, group=g)) or ""
            if not message.startswith("recv from rank 0 (tag 0)") or wanted not in message:
                failures.append(f"rank 1: p2p mismatch said {message!r}, wanted {wanted!r}")
        after = minidl.zeros(3)
        if dist.recv(after, None, group=g) != 0 or after.tolist() != [7.0] * 3:
            failures.append(f"rank 1: the message after two mismatches arrived as {after.tolist()}")
        first, second = minidl.zeros(2), minidl.zeros(3)
        works = [dist.irecv(first, 0, group=g, tag=5), dist.irecv(second, 0, group=g, tag=5)]
        works[1].wait()
        works[0].wait()
        if first.tolist() != [1.0] * 2 or second.tolist() != [2.0] * 3:
            failures.append(f"rank 1: two outstanding receives got {first.tolist()} and {second.tolist()}")
    if rank < 2:  # each posts its receive, then sends blocking: large sends must not wait forever
        peer, mine = 1 - rank, minidl.full((1 << 20,), float(rank))
        into = minidl.zeros(1 << 20)
        work = dist.irecv(into, peer, group=g)
        dist.send(mine, peer, group=g)
        work.wait()
        if into[-1].item() != peer:
            failures.append(f"rank {rank}: a 4 MiB exchange received {into[-1].item()}")
    # below the headers, a backend's own truncation is a DistError too (MPI's error wrapped)
    comm = g.mailbox.headers
    if rank == 0:
        _until_done(comm.isend_whole(np.zeros(8, np.float32), 1, 9))
    elif rank == 1:
        message = _raised(lambda: _until_done(comm.irecv_whole(np.zeros(4, np.float32), 0, 9))) or ""
        if "truncat" not in message.lower():
            failures.append(f"rank 1: a truncated message said {message!r}")
    dist.barrier(group=g)
    return failures

