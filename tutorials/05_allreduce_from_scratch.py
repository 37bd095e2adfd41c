"""Tutorial 5: all-reduce from scratch, three ways, on simulated ranks.

Run it:  python tutorials/05_allreduce_from_scratch.py

Data-parallel training ends every step with an **all-reduce**: each of n ranks holds a gradient
buffer of S bytes, and afterwards every rank must hold the elementwise sum of all n buffers.
Only point-to-point messages are needed to build one, and how they are arranged decides the
cost. We write three all-reduces on top of ``minidl.dist``'s ``isend``/``recv`` and run them on
the **sim backend** (``minidl.dist.sim.run(n, fn)``: n ranks as threads of this process, no
MPI needed), check them against numpy, count the bytes each rank sends, and time them:

1. **naive**: everyone sends to rank 0, which adds and sends the sum back. Rank 0 sends and
   receives (n-1)·S bytes: its link is the bottleneck, and it grows with n.
2. **tree** (binomial): pairs add up in log2(n) rounds, then the sum fans back out the same
   way. log2(n) rounds instead of n-1, but the root still sends log2(n)·S.
3. **ring**: cut the buffer into n chunks; in n-1 steps each rank passes a chunk to its right
   neighbour, which adds it to its own (reduce-scatter; now rank r holds the full sum of chunk
   r+1), then n-1 more steps pass the finished chunks around (all-gather). Every rank sends
   2(n-1)/n·S bytes — less than 2·S however many ranks there are, and all links busy at once.
   This is why large all-reduces use the ring (minidl.dist's ``algorithm="ring"``, NCCL, ...).

Every claim is checked with ``assert``.
"""
import argparse
import time
from collections import Counter

import numpy as np

import minidl
import minidl.dist as dist

# --help says what this tutorial is and exits before anything runs; it takes no other arguments
argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()


def section(title):
    print()
    print("=" * 78)
    print(title)
    print("=" * 78)


SENT = Counter()  # bytes sent, per rank (each rank's thread only touches its own key)


def isend(rank, tensor, dst):
    """dist.isend, counting the bytes this rank sends."""
    SENT[rank] += tensor.numel() * tensor.element_size()
    return dist.isend(tensor, dst)


# =============================================================================================
# The three all-reduces: ``buf`` is this rank's 1-D tensor, summed in place
# =============================================================================================
def naive_all_reduce(rank, n, buf):
    if rank != 0:
        isend(rank, buf, 0).wait()
        dist.recv(buf, 0)
        return
    incoming = minidl.empty_like(buf)
    for src in range(1, n):
        dist.recv(incoming, src)
        buf.add_(incoming)
    for w in [isend(rank, buf, dst) for dst in range(1, n)]:
        w.wait()


def tree_all_reduce(rank, n, buf):
    incoming = minidl.empty_like(buf)
    step = 1
    while step < n:  # reduce: in each round, the ranks at odd multiples of step hand over
        if rank % (2 * step) == step:
            isend(rank, buf, rank - step).wait()
            break
        if rank + step < n:
            dist.recv(incoming, rank + step)
            buf.add_(incoming)
        step *= 2
    step = 1 << (n - 1).bit_length() >> 1
    while step >= 1:  # broadcast: the same pairs, in reverse order
        if rank % (2 * step) == 0 and rank + step < n:
            isend(rank, buf, rank + step).wait()
        elif rank % (2 * step) == step:
            dist.recv(buf, rank - step)
        step //= 2


def ring_all_reduce(rank, n, buf):
    edges = [len(buf) * i // n for i in range(n + 1)]

    def chunk(i):
        i %= n
        return buf[edges[i]:edges[i + 1]]
    right, left = (rank + 1) % n, (rank - 1) % n
    for step in range(n - 1):  # reduce-scatter: pass chunk rank-step right, add chunk rank-step-1
        sending = isend(rank, chunk(rank - step), right)
        incoming = minidl.empty_like(chunk(rank - step - 1))
        dist.recv(incoming, left)
        chunk(rank - step - 1).add_(incoming)
        sending.wait()  # post the send first and wait last: on MPI, n blocking sends could deadlock
    for step in range(n - 1):  # all-gather: pass the finished chunks around
        sending = isend(rank, chunk(rank + 1 - step), right)
        dist.recv(chunk(rank - step), left)
        sending.wait()


VARIANTS = {"naive": naive_all_reduce, "tree": tree_all_reduce, "ring": ring_all_reduce}


def data(rank, numel):
    return np.random.default_rng([rank, numel]).standard_normal(numel).astype(np.float32)


# =============================================================================================
section("1. Each variant against numpy, on 1..6 ranks and awkward sizes")
# =============================================================================================
def check(rank, n, variant, numel):
    buf = minidl.from_numpy(data(rank, numel))
    VARIANTS[variant](rank, n, buf)
    return buf.numpy()


for n in range(1, 7):
    for numel in (1, 5, 1000):
        expected = sum(data(r, numel).astype(np.float64) for r in range(n))
        for variant in VARIANTS:
            for got in dist.sim.run(n, check, n, variant, numel):
                np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
print("naive, tree and ring all-reduce agree with numpy's sum on 1..6 ranks (sizes 1, 5, 1000)")

# =============================================================================================
section("2. The bandwidth argument: bytes each rank sends")
# =============================================================================================
n, numel = 4, 1 << 16
S = numel * 4
print(f"n = {n} ranks, S = {S:,} bytes per rank\n")
print(f"{'variant':8} {'rank 0 sends':>14} {'busiest rank':>14} {'formula':>26}")
formulas = {"naive": ((n - 1) * S, "(n-1)·S at the root"),
            "tree": ((n - 1).bit_length() * S, "log2(n)·S at the root"),
            "ring": (2 * (n - 1) * S // n, "2(n-1)/n·S on every rank")}
for variant in VARIANTS:
    SENT.clear()
    dist.sim.run(n, check, n, variant, numel)
    expected_max, formula = formulas[variant]
    print(f"{variant:8} {SENT[0]:>14,} {max(SENT.values()):>14,} {formula + f' = {expected_max:,}':>26}")
    assert max(SENT.values()) == expected_max
assert all(SENT[r] == 2 * (n - 1) * S // n for r in range(n))  # the ring: every rank the same
print("\nThe ring's busiest rank sends 2(n-1)/n·S, under 2·S for any n; the naive root's (n-1)·S")
print("grows with every rank added. On a network, time ≈ bytes on the busiest link / its bandwidth.")

# =============================================================================================
section("3. Timed on this machine (sim backend)")
# =============================================================================================
print("""On the sim backend a message is a memory copy between threads of one process (which share
the GIL), so these times measure copies and Python overhead, not a network; the ring also pays
for 2(n-1) messages per rank where the naive root's n-1 are bigger. minidl.dist.all_reduce is
the library's version (recursive doubling for small buffers, its own ring above 64 KiB).
""")


def timed(rank, n, variant, numel, repeats):
    buf = minidl.from_numpy(data(rank, numel))
    run = VARIANTS.get(variant) or (lambda rank, n, buf: dist.all_reduce(buf))
    times = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        run(rank, n, buf)
        times.append(time.perf_counter() - start)
    return times


names = [*VARIANTS, "minidl.dist"]
print(f"median ms of the slowest rank, n = {n}:\n")
print(f"| {'float32 elements':>16} | " + " | ".join(f"{v:>11}" for v in names) + " |")
print(f"|{'-' * 17}:|" + "|".join("-" * 12 + ":" for _ in names) + "|")
for numel in (1 << 10, 1 << 14, 1 << 18, 1 << 20):
    cells = []
    for variant in names:
        per_rank = dist.sim.run(n, timed, n, variant, numel, 5)
        cells.append(np.median(np.max(per_rank, axis=0)) * 1e3)
    print(f"| {numel:>16,} | " + " | ".join(f"{c:>11.2f}" for c in cells) + " |")
    assert all(c > 0 for c in cells)

print()
print("All claims checked: three all-reduces from send/recv agree with numpy, and the ring sends")
print("2(n-1)/n·S per rank where the naive root sends (n-1)·S.")
