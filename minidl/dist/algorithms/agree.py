"""Agreement before a collective: every rank learns whether all ranks are about to run the same
one, in the recursive-doubling pattern of recursive_doubling.py, whatever their descriptors say
(so a mismatch can't itself deadlock: a ring on one rank against a tree on another would).

Each message is a header, the descriptor d and its negation -d (int64), which the ranks fold
with min: afterwards every rank holds min(d) and -max(d) over all ranks, and all agree exactly
when the two are equal. A rank that only ever received its own header knows that all agree
(each partner's header summarises the ranks it heard from); one that received another header
knows they don't, and so does every rank after the last round. A small all-reduce rides along: its
data follows the header in the same messages and is combined round by round, so agreeing costs it
no extra message. Receives are ``capacity`` bytes past the header, the largest payload any rank
sends (the group's small-message size), so a longer message than expected never truncates; the
data is combined only while the headers agree.
"""
from __future__ import annotations

import numpy as np

from .recursive_doubling import schedule, sends

MAX_PLANS = 64  # per communicator; past that they are all dropped and made again


def scratch_bytes(capacity: int, descriptor_words: int = 2) -> int:
    """Bytes of the communicator scratch an agreement receives into (``_Plan.got``): the header, a descriptor
    (descriptor.describe's two words) and its negation, and room for a small all-reduce's ``capacity`` bytes."""
    return 16 * descriptor_words + capacity


class _Plan:
    """The buffers of one (descriptor, payload) pair, kept on the communicator between calls: at
    4 KiB an all-reduce is mostly Python, and making these views took ~2 us a call."""

    def __init__(self, comm, descriptor, capacity, nbytes, dtype):
        self.descriptor, self.schedule = descriptor, schedule(comm.size, comm.rank)
        k = descriptor.size
        head_bytes = 16 * k
        self.header = np.concatenate([descriptor, -descriptor])
        self.header_bytes = self.header.tobytes()
        self.mine = np.empty(head_bytes + nbytes, np.uint8)
        self.head = self.mine[:head_bytes].view(np.int64)
        self.head[...] = self.header
        self.got = comm.scratch(scratch_bytes(capacity, k), self.mine)
        self.got_head = self.got[:head_bytes]
        self.data = self.mine[head_bytes:].view(dtype)
        self.incoming = self.got[head_bytes:head_bytes + nbytes].view(dtype)
        self.dirty = False  # the header was folded with another: write it again before reuse


def _plan(comm, descriptor, capacity, buf) -> _Plan:
    """``descriptor``s come from describe's cache, so one is usually the very same object."""
    nbytes, dtype = (0, np.uint8) if buf is None else (buf.nbytes, buf.dtype)
    key = (id(descriptor), capacity, nbytes, dtype)
    plans = comm.kept
    plan = plans.get(key)
    if plan is None or plan.descriptor is not descriptor:
        if len(plans) >= MAX_PLANS:
            plans.clear()
        plan = plans[key] = _Plan(comm, descriptor, capacity, nbytes, dtype)
    elif plan.dirty:
        plan.head[...] = plan.header
        plan.dirty = False
    return plan


def _fold(p, agreeing, buf, op) -> bool:
    """Fold the message just received into this rank's: the data while all headers agree, else the
    headers' min; whether they still agree."""
    if agreeing and p.got_head.tobytes() == p.header_bytes:
        if buf is not None:
            op.ufunc(p.data, p.incoming, out=p.data)
        return True
    p.dirty = True
    np.minimum(p.head, p.got_head.view(np.int64), out=p.head)
    return False


def agree(ch, descriptor, capacity: int, buf=None, op=None) -> bool:
    """Whether every rank passed the same ``descriptor`` (an int64 array of one length on all ranks);
    with ``buf`` (a host array of at most ``capacity`` bytes), also all-reduce it with ``op`` in
    place, which is valid only when the result is True."""
    p = _plan(ch.comm, descriptor, capacity, buf)
    mine, got = p.mine, p.got
    if buf is not None:
        p.data[...] = buf
    agreeing = True
    sits_out_with, folds_in, partners = p.schedule
    if sits_out_with is not None:  # hands its header and data over, gets the result back
        ch.send_whole(mine, sits_out_with)
        ch.recv_whole(got, sits_out_with)
        agreeing = p.got_head.tobytes() == p.header_bytes
    else:
        if folds_in is not None:
            ch.recv_whole(got, folds_in)
            agreeing = _fold(p, agreeing, buf, op)
        for peer in partners:
            ch.exchange_whole(mine, peer, got, peer)
            agreeing = _fold(p, agreeing, buf, op)
        if folds_in is not None:
            ch.send_whole(mine, folds_in)
    if buf is not None:   # (the data rode along: counted as the all-reduce's, as debug.sent_bytes promises)
        ch.sent[0] += buf.nbytes * sends(ch.size, ch.rank)
    if agreeing and buf is not None:
        buf[...] = p.incoming if sits_out_with is not None else p.data
    return agreeing
