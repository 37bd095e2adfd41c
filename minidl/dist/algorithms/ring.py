"""Ring algorithms, bandwidth-optimal for large buffers: the buffer is cut into one block per
rank and blocks travel around the ring, each rank sending to its right neighbour while receiving
from its left one, so all links are busy at once.

All-reduce = reduce-scatter (n-1 steps; afterwards rank r holds the full reduction of block r)
then all-gather (n-1 steps passing the reduced blocks on). Each rank sends 2(n-1)/n of the buffer.
Numbering the 2(n-1) steps s = 0, 1 ...: in step s rank r sends block r-s-1 and receives block
r-s-2, which it reduces into its own during the reduce-scatter (s < n-1) and keeps afterwards.

Blocks of 2 x ``segment_bytes`` or more are cut into segments that pipeline through the ring: the
(step, segment) units run in order with ``WINDOW`` of them in flight, so one arrives while
another is being added, and a segment travels on before the rest of its block is done. Each
message costs a rendezvous, so the all-gather keeps large segments. The reduce-scatter cuts
finer, into segments of ``REDUCE_SEGMENT_BYTES`` (up to twice that, as the block divides) that
land in ``WINDOW`` recycled scratch slots: small enough to still be in cache when they are added,
where a block-sized scratch would be read back from memory. That is what puts the ring ahead of MPI_Allreduce at 16 MiB and up
(measured in benchmarks/README.md, "All-reduce").
"""
from __future__ import annotations

SEGMENT_BYTES = 4 << 20
REDUCE_SEGMENT_BYTES = 1 << 20
WINDOW = 2  # units in flight


def piece(start: int, stop: int, k: int, parts: int):
    """(start, stop) of the k-th of ``parts`` nearly equal pieces of range(start, stop) (the first
    ones 1 longer, so piece k of a longer range is never shorter than piece k of a shorter one)."""
    q, extra = divmod(stop - start, parts)
    a = start + k * q + min(k, extra)
    return a, a + q + (k < extra)


def sent_elements(numel: int, n: int, r: int) -> int:
    """Elements rank r of n sends in all_reduce of ``numel`` elements (debug.sent_bytes counts them): every block but
    its own in the reduce-scatter, every block but its right neighbour's in the all-gather, whole blocks however
    they are segmented."""
    def length(i):
        start, stop = piece(0, numel, i, n)
        return stop - start
    return 2 * numel - length(r) - length((r + 1) % n)


def phase_sent_elements(block: int, n: int) -> int:
    """Elements a rank sends in reduce_scatter or all_gather over n blocks of ``block`` elements: one block in
    each of the n - 1 steps."""
    return (n - 1) * block


def _segments(longest: int, itemsize: int, segment_bytes: int) -> int:
    """How many segments each block of a phase is cut into (its longest block ``longest`` elements)."""
    return max(1, min(longest, longest * itemsize // segment_bytes))


def reduce_scratch_elements(longest: int, itemsize: int, segment_bytes: int = SEGMENT_BYTES) -> int:
    """Elements of the scratch a reduce-scatter phase over blocks at most ``longest`` long receives into (the
    communicator keeps it, as large as the largest asked for): ``WINDOW`` slots of the longest segment."""
    segments = _segments(longest, itemsize, min(segment_bytes, REDUCE_SEGMENT_BYTES))
    return min(WINDOW, segments) * -(-longest // segments)


def _steps(ch, buf, op, bounds, steps, segment_bytes) -> None:
    """Ring steps ``steps`` of one phase (the reduce-scatter's 0 .. n-2, reducing with ``op``, or
    the all-gather's n-1 .. 2n-3, ``op`` None) over the blocks ``bounds`` of ``buf`` (the first one
    the longest), pipelined in segments of at least ``segment_bytes`` (one per block when they are
    smaller)."""
    n, r = ch.size, ch.rank
    if n == 1 or not steps:
        return
    longest = bounds[0][1] - bounds[0][0]
    segments = _segments(longest, buf.dtype.itemsize, segment_bytes)
    first, units = steps[0], len(steps) * segments  # unit i: segment i % segments of step first + i // segments
    window = min(WINDOW, segments)  # so a segment's previous step is done before its next is posted
    if op is not None:  # receives to reduce: unit i lands in scratch slot i % window
        slot_len = longest // segments + (longest % segments > 0)  # the longest segment
        scratch = ch.comm.scratch(window * slot_len, buf)
    right, left = (r + 1) % n, (r - 1) % n

    def post(i):
        """Unit i's requests, the part of ``buf`` it receives, and where that lands."""
        s, k = first + i // segments, i % segments
        sa, sb = piece(*bounds[(r - s - 1) % n], k, segments)
        ra, rb = piece(*bounds[(r - s - 2) % n], k, segments)
        if op is not None:
            slot = i % window * slot_len
            into = scratch[slot:slot + rb - ra]
        else:
            into = buf[ra:rb]
        return ch.isend(buf[sa:sb], right), ch.irecv(into, left), buf[ra:rb], into

    in_flight = [post(i) for i in range(window)]  # unit i at i % window
    for i in range(units):
        send, recv, mine, incoming = in_flight[i % window]
        ch.wait([recv])
        if op is not None:  # while the right neighbour may still be taking what we sent
            op.ufunc(mine, incoming, out=mine)
        ch.wait([send])  # before a later unit writes where it read
        if i + window < units:
            in_flight[i % window] = post(i + window)


def reduce_scatter(ch, buf, op, bounds, segment_bytes) -> None:
    """Reduce ``buf`` across the ring so that rank r's block ``bounds[r]`` holds the result
    (the other blocks keep partial sums)."""
    _steps(ch, buf, op, bounds, range(ch.size - 1), min(segment_bytes, REDUCE_SEGMENT_BYTES))


def all_gather(ch, buf, bounds, segment_bytes) -> None:
    """Rank r holds block ``bounds[r]`` of ``buf``; afterwards every rank holds all blocks."""
    _steps(ch, buf, None, bounds, range(ch.size - 1, 2 * ch.size - 2), segment_bytes)


def all_reduce(ch, buf, op, segment_bytes) -> None:
    bounds = [piece(0, buf.size, i, ch.size) for i in range(ch.size)]
    reduce_scatter(ch, buf, op, bounds, segment_bytes)
    all_gather(ch, buf, bounds, segment_bytes)
