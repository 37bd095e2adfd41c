"""Binomial-tree broadcast and reduce: log2(n) rounds, rooted anywhere (ranks are renumbered
relative to the root). In round k the ranks that already have the data (broadcast) or that
finished collecting (reduce) pair with those 2**k apart.
"""
from __future__ import annotations

import numpy as np


def _relative(ch, root):
    return (ch.rank - root) % ch.size


def broadcast_sends(n: int, rank: int, root: int) -> int:
    """How many ranks ``rank`` of n hands the buffer to in broadcast: its children, rank + each power of two below
    its lowest set bit (relative to the root, which has every one) that is inside the group."""
    vr, mask, sends = (rank - root) % n, 1, 0
    while mask < n and not vr & mask:
        mask <<= 1
    while mask > 1:
        mask >>= 1
        sends += vr + mask < n
    return sends


def reduce_sends(n: int, rank: int, root: int) -> int:
    """How many times ``rank`` of n sends its buffer in reduce: once to its parent, never from the root."""
    return int(rank != root)


def broadcast(ch, buf, root: int) -> None:
    n, vr = ch.size, _relative(ch, root)
    mask = 1
    while mask < n:  # the parent is vr with its lowest set bit cleared
        if vr & mask:
            ch.recv(buf, (vr - mask + root) % n)
            break
        mask <<= 1
    mask >>= 1
    children = []
    while mask > 0:  # children: vr + every power of two below that bit
        if vr + mask < n:
            children.append(ch.isend(buf, (vr + mask + root) % n))
        mask >>= 1
    ch.wait(children)


def reduce(ch, buf, op, root: int) -> None:
    """The root's ``buf`` receives the reduction; the other ranks' buffers are left unchanged."""
    n, vr = ch.size, _relative(ch, root)
    acc, incoming = buf, None
    mask = 1
    while mask < n:
        if vr & mask:
            ch.send(acc, (vr - mask + root) % n)
            return
        if vr + mask < n:
            if incoming is None:
                incoming = np.empty_like(buf)
                acc = buf if vr == 0 else buf.copy()
            ch.recv(incoming, (vr + mask + root) % n)
            op.ufunc(acc, incoming, out=acc)
        mask <<= 1
