"""What every backend provides: a communicator with non-blocking point-to-point on raw numpy
buffers, split into subgroups, and (optionally) native collectives. Collective algorithms,
timeouts and tensors live above this layer.

A message longer than ``chunk_elements`` goes out as several messages of at most that many
elements (MPI counts are C ints, so one message can't carry 2**31 elements or more); the receiver
posts the same pieces and per-peer message order keeps them matched.
"""
from __future__ import annotations

import time

import numpy as np

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

    def unfinished(self) -> list:
        """The single sends and receives behind this request that have not completed (what a
        timeout message names)."""
        return [self]


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
    ``_irecv``, ``split`` and ``host_name``; ``native`` names the collectives they run themselves;
    ``spin``: seconds a wait polls without sleeping (0 where a spinning rank would hold a core or
    the GIL that the ranks it waits for need)."""

    rank: int
    size: int
    native: frozenset = frozenset()
    spin: float = 0.0

    def __init__(self, chunk_elements=DEFAULT_CHUNK):
        if chunk_elements < 1:
            raise ValueError(f"chunk_elements must be positive, got {chunk_elements}")
        self.chunk_elements = int(chunk_elements)
        self._scratch = np.empty(0, np.uint8)
        self._scratch_key = None
        self.kept = {}  # what algorithms keep between collectives on this communicator (agree.py's plans)

    def scratch(self, numel: int, like) -> np.ndarray:
        """A receive buffer kept between collectives (which run one at a time per communicator):
        a fresh large array costs a page fault per 4 KiB on every call. It stays as large as the
        largest one asked for. ``like``: the buffer it receives for (its dtype; its memory, for a
        backend that moves device buffers too)."""
        dtype = like.dtype
        if (numel, dtype) != self._scratch_key:  # the view is kept too: making one costs ~0.3 us
            nbytes = numel * dtype.itemsize
            if self._scratch.size < nbytes:
                self._scratch = np.empty(nbytes, np.uint8)
            self._scratch_key, self._scratch_view = (numel, dtype), self._scratch[:nbytes].view(dtype)
        return self._scratch_view

    def _pieces(self, buf):
        c = self.chunk_elements
        return [buf[i:i + c] for i in range(0, max(buf.size, 1), c)]

    def isend(self, buf, dst: int, tag: int = 0) -> Request:
        if buf.size <= self.chunk_elements:
            return self._isend(buf, dst, tag)
        return _Pieces([self._isend(p, dst, tag) for p in self._pieces(buf)], dst, "send")

    def irecv(self, buf, src, tag: int = 0) -> Request:
        if buf.size <= self.chunk_elements:
            return self._irecv(buf, src, tag)
        pieces = self._pieces(buf)
        if src is ANY_SOURCE:
            return _AnySourceRecv(self, pieces, tag)
        return _Pieces([self._irecv(p, src, tag) for p in pieces], src, "recv")

    def exchange(self, send_buf, dst: int, recv_buf, src: int, tag: int = 0) -> list:
        """Send to ``dst`` and receive from ``src``: the requests (the send posted first, so that its
        rendezvous starts while the receive is posted)."""
        return [self.isend(send_buf, dst, tag), self.irecv(recv_buf, src, tag)]

    # one message whatever ``chunk_elements`` says, into a receive that may be longer than what
    # arrives: for control messages (headers, agreements), far below MPI's count limit
    def isend_whole(self, buf, dst: int, tag: int = 0) -> Request:
        return self._isend(buf, dst, tag)

    def irecv_whole(self, buf, src, tag: int = 0) -> Request:
        return self._irecv(buf, src, tag)

    def exchange_whole(self, send_buf, dst: int, recv_buf, src: int, tag: int = 0) -> list:
        return [self._isend(send_buf, dst, tag), self._irecv(recv_buf, src, tag)]

    # -- implemented by each communicator ---------------------------------------------------------
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

    def set_timeout(self, seconds: float) -> None:
        """How long this communicator's own waits (a split's) may take from now on; most have no deadline of
        their own (MPI's and NCCL's splits wait as long as it takes)."""

    def close(self) -> None:
        pass


def wait_all(requests, deadline: float, on_timeout, spin: float = 0.0, stall_at: float = float("inf"),
             on_stall=None) -> None:
    """Poll ``requests`` until all completed: first back to back for up to ``spin`` seconds (a
    message at GB/s lands within microseconds, far below what a sleep can resolve: ~50 us on
    Linux), then sleeping between polls with a back-off growing to 1 ms, so ranks that outnumber
    the cores don't starve the ranks they wait for. Past ``deadline`` (time.monotonic()), raise
    ``on_timeout(pending_requests)``; past ``stall_at``, call ``on_stall(pending_requests)`` once
    and keep waiting (Horovod's stall inspector: a silent wait says what it waits on)."""
    pending = [r for r in requests if not r.test()]
    if not pending:
        return
    stop_spinning = time.monotonic() + spin
    delay = 0.0
    while pending:
        now = time.monotonic()
        if now > deadline:
            raise on_timeout(pending)
        if now > stall_at:
            on_stall(pending)
            stall_at = float("inf")
        if now > stop_spinning:
            time.sleep(delay)
            delay = min(max(2 * delay, 2e-6), 1e-3)
        pending = [r for r in pending if not r.test()]
