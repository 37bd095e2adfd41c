"""Point-to-point: send, recv, isend, irecv on minidl tensors, on the group's user
communicator (separate from the collectives'). ``dst``/``src`` are global ranks; recv and
irecv accept src=None (any source), and recv returns the sender's rank.
"""
from __future__ import annotations

from .state import resolve
from .tensors import Writable, check_tensor, read
from .work import RequestWork


def _peer(g, rank, what, name):
    peer = g.group_rank(rank, what, name)
    if peer == g.rank:
        raise ValueError(f"{what}: {name}={rank} is this rank itself")
    return peer


def isend(tensor, dst, group=None, tag=0):
    what = "isend"
    g = resolve(group, what)
    if g is None:
        return None
    peer = _peer(g, dst, what, "dst")
    ch = g.channel(f"{what} to rank {dst} (tag {tag})", comm=g.p2p, tag=tag)
    return RequestWork(ch, [ch.isend(read(check_tensor(tensor, what, g.config.backend)), peer)])


def irecv(tensor, src=None, group=None, tag=0):
    what = "irecv"
    g = resolve(group, what)
    if g is None:
        return None
    peer = None if src is None else _peer(g, src, what, "src")
    out = Writable(check_tensor(tensor, what, g.config.backend), what)
    ch = g.channel(f"{what} from {'any rank' if src is None else f'rank {src}'} (tag {tag})", comm=g.p2p, tag=tag)
    request = ch.comm.irecv(out.array, peer, tag)
    work = RequestWork(ch, [request], out.commit)
    work.source = lambda: g.ranks[request.source]
    return work


def send(tensor, dst, group=None, tag=0) -> None:
    work = isend(tensor, dst, group, tag)
    if work is not None:
        work.wait()


def recv(tensor, src=None, group=None, tag=0):
    """Receive into ``tensor``; returns the sender's global rank."""
    work = irecv(tensor, src, group, tag)
    if work is None:
        return -1
    work.wait()
    return work.source()
