"""Ring algorithms, bandwidth-optimal for large buffers: the buffer is cut into one block per
rank and blocks travel around the ring, each rank sending to its right neighbour while receiving
from its left one, so all links are busy at once.

All-reduce = reduce-scatter (n-1 steps; afterwards rank r holds the full reduction of block r)
then all-gather (n-1 steps passing the reduced blocks on). Each rank sends 2(n-1)/n of the buffer.
"""
from __future__ import annotations


def block_bounds(numel: int, n: int):
    """(start, stop) of n nearly equal blocks covering numel elements (the first ones 1 longer)."""
    q, extra = divmod(numel, n)
    starts = [i * q + min(i, extra) for i in range(n + 1)]
    return list(zip(starts[:-1], starts[1:]))


def reduce_scatter(ch, buf, op, bounds) -> None:
    """Reduce ``buf`` across the ring so that rank r's block ``bounds[r]`` holds the result
    (the other blocks keep partial sums)."""
    n, r = ch.size, ch.rank
    if n == 1:
        return
    incoming = ch.comm.scratch(max(b - a for a, b in bounds), buf.dtype)
    right, left = (r + 1) % n, (r - 1) % n
    for step in range(n - 1):
        sa, sb = bounds[(r - step - 1) % n]
        ra, rb = bounds[(r - step - 2) % n]
        ch.exchange(buf[sa:sb], right, incoming[:rb - ra], left)
        op.ufunc(buf[ra:rb], incoming[:rb - ra], out=buf[ra:rb])


def all_gather(ch, buf, bounds) -> None:
    """Rank r holds block ``bounds[r]`` of ``buf``; afterwards every rank holds all blocks."""
    n, r = ch.size, ch.rank
    right, left = (r + 1) % n, (r - 1) % n
    for step in range(n - 1):
        sa, sb = bounds[(r - step) % n]
        ra, rb = bounds[(r - step - 1) % n]
        ch.exchange(buf[sa:sb], right, buf[ra:rb], left)


def all_reduce(ch, buf, op) -> None:
    bounds = block_bounds(buf.size, ch.size)
    reduce_scatter(ch, buf, op, bounds)
    all_gather(ch, buf, bounds)
