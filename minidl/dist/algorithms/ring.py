"""Ring algorithms, bandwidth-optimal for large buffers: the buffer is cut into one block per
rank and blocks travel around the ring, each rank sending to its right neighbour while receiving
from its left one, so all links are busy at once.

All-reduce = reduce-scatter (n-1 steps; afterwards rank r holds the full reduction of block r)
then all-gather (n-1 steps passing the reduced blocks on). Each rank sends 2(n-1)/n of the buffer.
Numbering the 2(n-1) steps s = 0, 1 ...: in step s rank r sends block r-s-1 and receives block
r-s-2, which it reduces into its own during the reduce-scatter (s < n-1) and keeps afterwards.

Blocks of 2 x ``segment_bytes`` or more are cut into segments that pipeline through the ring: each
segment takes its next step as soon as its previous one arrived (and was reduced), so one
segment is in flight while another is being added, and a reduced segment travels on before the
rest of its block is done. Each message costs a rendezvous, so small segments lose more than they
gain (measured in benchmarks/README.md, "All-reduce").
"""
from __future__ import annotations

SEGMENT_BYTES = 4 << 20


def piece(start: int, stop: int, k: int, parts: int):
    """(start, stop) of the k-th of ``parts`` nearly equal pieces of range(start, stop) (the first
    ones 1 longer, so piece k of a longer range is never shorter than piece k of a shorter one)."""
    q, extra = divmod(stop - start, parts)
    a = start + k * q + min(k, extra)
    return a, a + q + (k < extra)


def _steps(ch, buf, op, bounds, steps, segment_bytes) -> None:
    """Ring steps ``steps`` (a range within 0 .. 2n-3) over the blocks ``bounds`` of ``buf`` (the
    first one the longest), pipelined in segments of at least ``segment_bytes`` (one per block
    when they are smaller)."""
    n, r = ch.size, ch.rank
    if n == 1 or not steps:
        return
    longest = bounds[0][1] - bounds[0][0]
    segments = max(1, min(longest, longest * buf.dtype.itemsize // segment_bytes))
    if steps[0] < n - 1:  # receives to reduce: segment k lands in slot k of a block-sized scratch
        scratch = ch.comm.scratch(longest, buf)
    comm, tag, right, left = ch.comm, ch.tag, (r + 1) % n, (r - 1) % n

    def post(s, k):
        """Segment k's step s: its requests, the part of ``buf`` it receives, and where it lands."""
        sa, sb = piece(*bounds[(r - s - 1) % n], k, segments)
        ra, rb = piece(*bounds[(r - s - 2) % n], k, segments)
        if s < n - 1:
            slot = piece(0, longest, k, segments)[0]
            into = scratch[slot:slot + rb - ra]
        else:
            into = buf[ra:rb]
        return comm.isend(buf[sa:sb], right, tag), comm.irecv(into, left, tag), buf[ra:rb], into

    pending = [post(steps[0], k) for k in range(segments)]
    for s in steps:
        for k in range(segments):
            send, recv, mine, incoming = pending[k]
            ch.wait([recv])
            if s < n - 1:  # while the right neighbour may still be taking what we sent
                op.ufunc(mine, incoming, out=mine)
            ch.wait([send])  # before a later step writes where it read
            if s != steps[-1]:
                pending[k] = post(s + 1, k)


def reduce_scatter(ch, buf, op, bounds, segment_bytes) -> None:
    """Reduce ``buf`` across the ring so that rank r's block ``bounds[r]`` holds the result
    (the other blocks keep partial sums)."""
    _steps(ch, buf, op, bounds, range(ch.size - 1), segment_bytes)


def all_gather(ch, buf, bounds, segment_bytes) -> None:
    """Rank r holds block ``bounds[r]`` of ``buf``; afterwards every rank holds all blocks."""
    _steps(ch, buf, None, bounds, range(ch.size - 1, 2 * ch.size - 2), segment_bytes)


def all_reduce(ch, buf, op, segment_bytes) -> None:
    bounds = [piece(0, buf.size, i, ch.size) for i in range(ch.size)]
    _steps(ch, buf, op, bounds, range(2 * ch.size - 2), segment_bytes)
