"""Point-to-point: send, recv, isend, irecv on minidl tensors, on the group's user
communicators (separate from the collectives'), each message with a header that the receive
checks (mailbox.py). ``dst``/``src`` are global ranks; recv and irecv accept src=None (any
source), and recv returns the sender's rank.
"""
from __future__ import annotations

from .communicators.base import DistError
from .mailbox import dtype_name
from .state import resolve
from .tensors import Writable, check_tensor, read
from .work import RequestWork


def _peer(g, rank, what, name):
    peer = g.group_rank(rank, what, name)
    if peer == g.rank:
        raise ValueError(f"{what}: {name}={rank} is this rank itself")
    return peer


def isend(tensor, dst, group=None, tag=0):
    return _isend(tensor, dst, group, tag, "isend")


def irecv(tensor, src=None, group=None, tag=0):
    return _irecv(tensor, src, group, tag, "irecv")


def _isend(tensor, dst, group, tag, what):
    g = resolve(group, what)
    if g is None:
        return None
    peer = _peer(g, dst, what, "dst")
    ch = g.channel(f"{what} to rank {dst} (tag {tag})", comm=g.p2p, tag=tag)
    data = read(check_tensor(tensor, what, g.config.backend))
    g.sent[0] += data.nbytes   # (debug.sent_bytes counts messages too)
    return RequestWork(ch, g.mailbox.isend(data, peer, tag))


def _irecv(tensor, src, group, tag, what):
    g = resolve(group, what)
    if g is None:
        return None
    peer = None if src is None else _peer(g, src, what, "src")
    out = Writable(check_tensor(tensor, what, g.config.backend), what)
    ch = g.channel(f"{what} from {'any rank' if src is None else f'rank {src}'} (tag {tag})", comm=g.p2p, tag=tag)
    mine = out.array

    def mismatch(source, count, dtype):
        return DistError(f"{ch.what}: rank {g.ranks[source]} sent {count} elements of {dtype}, but the receiving "
                         f"tensor on rank {g.ranks[g.rank]} holds {mine.size} elements of {dtype_name(mine.dtype)}")
    request = g.mailbox.irecv(mine, peer, tag, mismatch)
    work = RequestWork(ch, [request], out.commit)
    work.source = lambda: None if request.source is None else g.ranks[request.source]   # (None: nothing came yet)
    return work


def send(tensor, dst, group=None, tag=0) -> None:
    work = _isend(tensor, dst, group, tag, "send")
    if work is not None:
        work.wait()


def recv(tensor, src=None, group=None, tag=0):
    """Receive into ``tensor``; returns the sender's global rank."""
    work = _irecv(tensor, src, group, tag, "recv")
    if work is None:
        return -1
    work.wait()
    return work.source()
