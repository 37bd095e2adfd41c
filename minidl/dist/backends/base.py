"""What every backend provides: a communicator with non-blocking point-to-point on raw numpy
buffers, split into subgroups, and (optionally) native collectives. Collective algorithms,
timeouts and tensors live above this layer.

A message longer than ``chunk_elements`` goes out as several messages of at most that many
elements (MPI counts are C ints, so one message can't carry 2**31 elements or more); the receiver
posts the same pieces and per-peer message order keeps them matched.
"""
from __future__ import annotations

import time

ANY_SOURCE = None
DEFAULT_CHUNK = 2**31 - 1


class DistError(RuntimeError):
    """A collective or point-to-point operation that can't complete (timeout, a dead peer)."""


class Request:
    """One outstanding send or receive. ``peer`` is the other side's rank in the communicator
    (None for a native collective); ``source`` is known once a receive completed."""

    peer = None
    kind = "collective"
    source = None

    def test(self) -> bool:
        raise NotImplementedError


class _Pieces(Request):
    """A message sent or received as several chunks; complete when every chunk is."""

    def __init__(self, parts, peer, kind):
        self.parts, self.peer, self.kind = parts, peer, kind

    def test(self):
        self.parts = [p for p in self.parts if not p.test()]
        return not self.parts

    @property
    def source(self):
        return self.peer


class _AnySourceRecv(Request):
    """A chunked receive from whoever sends first: the first chunk finds the sender, the other
    chunks are then received from that sender only (so two senders' chunks can't interleave)."""

    kind = "recv"

    def __init__(self, comm, pieces, tag):
        self.comm, self.pieces, self.tag = comm, pieces, tag
        self.first = comm._irecv(pieces[0], None, tag)
        self.rest = None

    def test(self):
        if self.rest is None:
            if not self.first.test():
                return False
            self.source = self.peer = self.first.source
            self.rest = _Pieces([self.comm._irecv(p, self.source, self.tag) for p in self.pieces[1:]],
                                self.source, "recv")
        return self.rest.test()


class Communicator:
    """A set of ``size`` ranks that can message each other. Subclasses implement ``_isend``,
    ``_irecv``, ``split`` and ``host_name``; ``native`` names the collectives they run themselves."""

    rank: int
    size: int
    native: frozenset = frozenset()

    def __init__(self, chunk_elements=DEFAULT_CHUNK):
        if chunk_elements < 1:
            raise ValueError(f"chunk_elements must be positive, got {chunk_elements}")
        self.chunk_elements = int(chunk_elements)

    def _pieces(self, buf):
        c = self.chunk_elements
        return [buf[i:i + c] for i in range(0, max(buf.size, 1), c)]

    def isend(self, buf, dst: int, tag: int = 0) -> Request:
        return _Pieces([self._isend(p, dst, tag) for p in self._pieces(buf)], dst, "send")

    def irecv(self, buf, src, tag: int = 0) -> Request:
        pieces = self._pieces(buf)
        if src is ANY_SOURCE and len(pieces) > 1:
            return _AnySourceRecv(self, pieces, tag)
        if src is ANY_SOURCE:
            return self._irecv(pieces[0], None, tag)
        return _Pieces([self._irecv(p, src, tag) for p in pieces], src, "recv")

    # -- implemented by backends ----------------------------------------------------------------
    def _isend(self, buf, dst, tag) -> Request:
        raise NotImplementedError

    def _irecv(self, buf, src, tag) -> Request:
        raise NotImplementedError

    def split(self, color, key: int) -> "Communicator | None":
        """Collective over this communicator: ranks with the same color form a new communicator,
        ordered by key; color None gives None."""
        raise NotImplementedError

    def host_name(self) -> str:
        raise NotImplementedError

    def close(self) -> None:
        pass


def wait_all(requests, deadline: float, on_timeout) -> None:
    """Poll ``requests`` until all completed, sleeping between polls with a back-off growing to
    1 ms (ranks often outnumber cores, so spinning would starve the ranks we wait for).
    Past ``deadline`` (time.monotonic()), raise ``on_timeout(pending_requests)``."""
    pending = [r for r in requests if not r.test()]
    delay = 0.0
    while pending:
        if time.monotonic() > deadline:
            raise on_timeout(pending)
        time.sleep(delay)
        delay = min(max(2 * delay, 2e-6), 1e-3)
        pending = [r for r in pending if not r.test()]
