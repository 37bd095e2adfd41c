"""The simulated backend: N ranks as threads of one process, exchanging messages through
per-rank mailboxes under one lock. A send copies its data at once (it completes immediately,
like a buffered MPI send); a receive completes when a matching message is there.

It never hangs: when a rank fails or returns, every wait on it fails with a DistError naming
that rank (the waits poll ``test()``, which checks the world's state).
"""
from __future__ import annotations

import threading

import numpy as np

from .base import Communicator, DistError, Request, wait_all


ONE_RANK_PER_PROCESS = False  # ranks are threads: the default group is per thread


class SimWorld:
    """State shared by all ranks: mailboxes, split rendezvous, and which ranks are gone."""

    def __init__(self, size: int, hosts=None):
        if hosts is not None and len(hosts) != size:
            raise ValueError(f"sim: {len(hosts)} host names given for a world of {size} ranks")
        self.size = size
        self.hosts = list(hosts) if hosts is not None else ["sim"] * size
        self.lock = threading.Lock()
        self.messages = {}   # (context, dst) -> [(src, tag, data)] not yet received
        self.posted = {}     # (context, dst) -> [_SimRecv] not yet matched
        self.splits = {}     # (context, split number) -> {rank: (color, key)}
        self.next_context = 1
        self.gone = {}       # world rank -> "failed" | "exited"

    def leave(self, world_rank: int, how: str) -> None:
        with self.lock:
            self.gone.setdefault(world_rank, how)

    def check_alive(self, world_ranks, what: str) -> None:
        """Raise if any of ``world_ranks`` is gone (call with the lock held)."""
        for r in world_ranks:
            if r in self.gone:
                raise DistError(f"{what}: rank {r} {self.gone[r]} and will never deliver")


class _SimSend(Request):
    kind = "send"

    def __init__(self, peer):
        self.peer = peer

    def test(self):
        return True


class _SimRecv(Request):
    kind = "recv"

    def __init__(self, comm, buf, src, tag):
        self.comm, self.buf, self.peer, self.tag = comm, buf, src, tag
        self.done = False
        self.error = None

    def matches(self, src, tag):
        return tag == self.tag and self.peer in (None, src)

    def fill(self, src, data):
        """As MPI does: the message's bytes land at the start of the buffer, which may be longer; a
        longer message is an error (MPI's truncation)."""
        if data.nbytes > self.buf.nbytes:
            self.error = (f"rank {self.comm.rank}'s receive of {self.buf.nbytes} bytes from rank {src} got a "
                          f"message of {data.nbytes} bytes (truncated)")
        else:
            self.buf.reshape(-1).view(np.uint8)[:data.nbytes] = data.reshape(-1).view(np.uint8)
        self.source, self.done = src, True

    def test(self):
        if not self.done:
            world, comm = self.comm.world, self.comm
            with world.lock:
                if not self.done:
                    if self.peer is not None:
                        world.check_alive([comm.members[self.peer]], "recv")
                    else:   # (a failed rank ends the job, as under mpiexec; ranks that merely exited do not)
                        others = [m for i, m in enumerate(comm.members) if i != comm.rank]
                        failed = [m for m in others if world.gone.get(m) == "failed"]
                        if failed or all(m in world.gone for m in others):
                            world.check_alive(failed or others, "recv from any rank")
                    return False
        # (the error is read after done, which the sending thread sets after it: read the other way
        # round, a truncation landing between the two reads passed for a complete receive)
        if self.error:
            raise DistError(self.error)
        return True


class _Arrivals(Request):
    """Completes when every rank of ``comm`` has entered the split rendezvous ``entries``."""

    def __init__(self, comm, entries):
        self.comm, self.entries = comm, entries

    def test(self):
        comm = self.comm
        with comm.world.lock:
            if len(self.entries) == comm.size:
                return True
            comm.world.check_alive([comm.members[r] for r in range(comm.size) if r not in self.entries], "split")
        return False


class SimCommunicator(Communicator):
    """One rank's view of a communicator in a SimWorld. ``members`` maps its ranks to world ranks."""

    native = frozenset()

    def __init__(self, world: SimWorld, context: int, rank: int, members, chunk_elements):
        super().__init__(chunk_elements)
        self.world, self.context, self.rank, self.members = world, context, rank, list(members)
        self.size = len(self.members)
        self._splits = 0

    def _isend(self, buf, dst, tag):
        world = self.world
        key = (self.context, dst)
        with world.lock:
            posted = world.posted.get(key, [])
            for i, recv in enumerate(posted):
                if recv.matches(self.rank, tag):
                    del posted[i]
                    recv.fill(self.rank, buf)
                    break
            else:
                world.messages.setdefault(key, []).append((self.rank, tag, buf.copy()))
        return _SimSend(dst)

    def _irecv(self, buf, src, tag):
        world = self.world
        key = (self.context, self.rank)
        recv = _SimRecv(self, buf, src, tag)
        with world.lock:
            waiting = world.messages.get(key, [])
            for i, (s, t, data) in enumerate(waiting):
                if recv.matches(s, t):
                    del waiting[i]
                    recv.fill(s, data)
                    break
            else:
                world.posted.setdefault(key, []).append(recv)
        return recv

    def split(self, color, key):
        world = self.world
        self._splits += 1
        slot = (self.context, self._splits)
        with world.lock:
            entries, contexts = world.splits.setdefault(slot, ({}, {}))
            entries[self.rank] = (color, key)
        wait_all([_Arrivals(self, entries)], float("inf"), None)
        if color is None:
            return None
        with world.lock:
            if color not in contexts:
                contexts[color] = world.next_context
                world.next_context += 1
        same = sorted((k, r) for r, (c, k) in entries.items() if c == color)
        ranks = [r for _, r in same]
        return SimCommunicator(world, contexts[color], ranks.index(self.rank), [self.members[r] for r in ranks],
                                self.chunk_elements)

    def host_name(self):
        return self.world.hosts[self.members[self.rank]]


def world_communicator(world: SimWorld, rank: int, chunk_elements: int, **_):
    if not isinstance(world, SimWorld):
        raise ValueError("init_process_group('sim'): pass store=<SimWorld> (minidl.dist.sim.run does)")
    if not 0 <= rank < world.size:
        raise ValueError(f"init_process_group: rank {rank} out of range for a sim world of {world.size}")
    return SimCommunicator(world, 0, rank, range(world.size), chunk_elements)
