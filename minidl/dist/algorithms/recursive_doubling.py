"""Recursive-doubling all-reduce, latency-optimal for small buffers: log2(n) rounds in which
each rank swaps its whole buffer with the rank whose number differs in one bit and combines.

For n not a power of two, with p the largest power of two below n and extra = n - p: the first
2*extra ranks pair up first, the even one handing its data to its odd neighbour and sitting out;
the p remaining ranks double; the odd ranks then hand the result back.
"""
from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def schedule(n: int, r: int):
    """(sits_out_with, folds_in, partners) of rank r: the odd neighbour it hands its data to and
    gets the result from, if it sits the doubling out; the even neighbour whose data it takes
    first and hands the result to, if any; and the ranks it swaps with, round by round.
    Computed once per (n, r): at 4 KiB an all-reduce is mostly Python."""
    p = 1 << (n.bit_length() - 1)
    extra = n - p
    if r < 2 * extra and r % 2 == 0:
        return r + 1, None, ()
    virtual = r // 2 if r < 2 * extra else r - extra
    partners = []
    mask = 1
    while mask < p:
        partner = virtual ^ mask
        partners.append(2 * partner + 1 if partner < extra else partner + extra)
        mask <<= 1
    return None, r - 1 if r < 2 * extra else None, tuple(partners)


def sends(n: int, r: int) -> int:
    """How many times rank r of n sends its whole buffer in all_reduce (or in agree.py's agreement, the same
    pattern, where a small all-reduce rides): once if it sits out, else once per partner, and once more
    to hand the result back to the rank it folded in."""
    sits_out_with, folds_in, partners = schedule(n, r)
    return 1 if sits_out_with is not None else len(partners) + (folds_in is not None)


def all_reduce(ch, buf, op) -> None:
    sits_out_with, folds_in, partners = schedule(ch.size, ch.rank)
    if sits_out_with is not None:
        ch.send(buf, sits_out_with)
        ch.recv(buf, sits_out_with)
        return
    incoming = ch.comm.scratch(buf.size, buf)
    if folds_in is not None:
        ch.recv(incoming, folds_in)
        op.ufunc(buf, incoming, out=buf)
    for peer in partners:
        ch.exchange(buf, peer, incoming, peer)
        op.ufunc(buf, incoming, out=buf)  # a+b here, b+a there: bitwise equal, ops commute
    if folds_in is not None:
        ch.send(buf, folds_in)
