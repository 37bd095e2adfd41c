"""Recursive-doubling all-reduce, latency-optimal for small buffers: log2(n) rounds in which
each rank swaps its whole buffer with the rank whose number differs in one bit and combines.

For n not a power of two, with p the largest power of two below n and extra = n - p: the first
2*extra ranks pair up first, the even one handing its data to its odd neighbour and sitting out;
the p remaining ranks double; the odd ranks then hand the result back.
"""
from __future__ import annotations


def all_reduce(ch, buf, op) -> None:
    n, r = ch.size, ch.rank
    p = 1 << (n.bit_length() - 1)
    extra = n - p
    incoming = ch.comm.scratch(buf.size, buf)
    if r < 2 * extra:
        if r % 2 == 0:
            ch.send(buf, r + 1)
            ch.recv(buf, r + 1)
            return
        ch.recv(incoming, r - 1)
        op.ufunc(buf, incoming, out=buf)
        virtual = r // 2
    else:
        virtual = r - extra
    mask = 1
    while mask < p:
        partner = virtual ^ mask
        peer = 2 * partner + 1 if partner < extra else partner + extra
        ch.exchange(buf, peer, incoming, peer)
        op.ufunc(buf, incoming, out=buf)  # a+b here, b+a there: bitwise equal, ops commute
        mask <<= 1
    if r < 2 * extra:
        ch.send(buf, r - 1)
