"""Collectives where every rank talks to its peers directly: gather and scatter (the root posts
all its messages at once), all-to-all (n-1 pairwise exchanges: in step s, send to r+s and
receive from r-s, so each step is a permutation), and the dissemination barrier.
"""
from __future__ import annotations

import numpy as np


def gather(ch, send, blocks, root: int) -> None:
    """``blocks[i]`` (on the root) receives rank i's ``send``."""
    if ch.rank != root:
        ch.send(send, root)
        return
    pending = [ch.irecv(blocks[i], i) for i in range(ch.size) if i != root]
    blocks[root][...] = send
    ch.wait(pending)


def scatter(ch, blocks, recv, root: int) -> None:
    """Rank i's ``recv`` receives ``blocks[i]`` from the root."""
    if ch.rank != root:
        ch.recv(recv, root)
        return
    pending = [ch.isend(blocks[i], i) for i in range(ch.size) if i != root]
    recv[...] = blocks[root]
    ch.wait(pending)


def all_to_all(ch, send_blocks, recv_blocks) -> None:
    """``recv_blocks[i]`` receives rank i's ``send_blocks[rank]``."""
    n, r = ch.size, ch.rank
    recv_blocks[r][...] = send_blocks[r]
    for step in range(1, n):
        dst, src = (r + step) % n, (r - step) % n
        ch.exchange(send_blocks[dst], dst, recv_blocks[src], src)


def barrier(ch) -> None:
    """After round k every rank has heard, directly or not, from the 2**(k+1) ranks before it."""
    nothing = np.empty(0, np.uint8)
    sink = np.empty(0, np.uint8)
    k = 1
    while k < ch.size:
        ch.exchange(nothing, (ch.rank + k) % ch.size, sink, (ch.rank - k) % ch.size)
        k <<= 1
