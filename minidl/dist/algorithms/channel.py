"""What a collective algorithm sees: its rank and the group size, and point-to-point messages
that fail with a clear error instead of hanging (past the collective's deadline, or when a peer
is gone), naming the collective and the peers that did not deliver. A wait that outlasts the
group's stall time logs once what it waits on and keeps waiting, so a silent rank is named long
before the deadline (Horovod's stall inspector).

Ranks here are the group's ranks 0..size-1; error messages translate them to global ranks.
"""
from __future__ import annotations

import logging
import time

from ..communicators.base import DistError, wait_all

log = logging.getLogger("minidl.dist")


class DistTimeoutError(DistError):
    """A collective or point-to-point operation ran past the process group's timeout."""


class Channel:
    def __init__(self, comm, what: str, timeout: float, global_ranks, tag: int = 0, spin: float = 0.0,
                 stall: float = float("inf"), sent=None):
        """``spin``: seconds each wait may poll before it sleeps (communicators.base.wait_all);
        ``stall``: seconds after which a wait logs what it waits on (once per collective or message);
        ``sent``: a one-element list the bytes of the data messages this rank sends are added to (its group's
        count; the agreement's control messages, sent whole, are not counted)."""
        self.comm, self.name, self.timeout, self.tag, self.spin = comm, what, timeout, tag, spin
        self.sent = [0] if sent is None else sent
        self.rank, self.size = comm.rank, comm.size
        self.global_ranks = list(global_ranks)
        self.seq = None
        self.stall, self.note = stall, None   # note(): what the caller adds to a stall's log line
        self.logs_for = self   # the channel whose stall_at this one's waits use (a sub-channel's parent)
        now = time.monotonic()
        self.deadline, self.stall_at = now + timeout, now + stall

    def start(self, what: str, seq: int, spin: float) -> "Channel":
        """Reuse this channel for a group's collective number ``seq`` (they run one at a time):
        a fresh deadline, and a label formatted only if an error needs it."""
        self.name, self.seq, self.spin = what, seq, spin
        now = time.monotonic()
        self.deadline, self.stall_at = now + self.timeout, now + self.stall
        return self

    @property
    def what(self) -> str:
        return self.name if self.seq is None else f"{self.name} (collective #{self.seq} of the group)"

    def wait(self, requests) -> None:
        wait_all(requests, self.deadline, self._timed_out, self.spin, self.logs_for.stall_at, self._stalled)

    def _stalled(self, pending) -> None:
        """Log once (per collective or message) which ranks this rank still waits for."""
        self.logs_for.stall_at = float("inf")
        me = self.global_ranks[self.rank]
        log.warning("rank %d: %s in the group of ranks %s has waited %g s: %s; still waiting (timeout %g s)%s",
                    me, self.what, self.global_ranks, self.stall, self._missing(pending), self.timeout,
                    "" if self.note is None else f"; {self.note()}")

    def _timed_out(self, pending):
        me = self.global_ranks[self.rank]
        return DistTimeoutError(f"{self.what}: timed out after {self.timeout:g} s on rank {me}: "
                                + self._missing(pending))

    def _missing(self, pending) -> str:
        """Which ranks the ``pending`` requests wait for, in words."""
        me = self.global_ranks[self.rank]
        pending = [part for r in pending for part in r.unfinished()]
        sends = sorted({self.global_ranks[r.peer] for r in pending if r.kind == "send"})
        recvs = sorted({self.global_ranks[r.peer] for r in pending if r.kind == "recv" and r.peer is not None})
        parts = []
        if recvs:
            parts.append(f"rank(s) {recvs} did not send what rank {me} waits for")
        if sends:
            parts.append(f"rank(s) {sends} did not receive what rank {me} sent")
        if any(r.kind == "collective" for r in pending):
            parts.append(f"some of ranks {self.global_ranks} did not join the native collective")
        if any(r.kind == "recv" and r.peer is None for r in pending):
            parts.append("no rank sent a message to a receive from any source")
        return "; ".join(parts)

    # -- the operations algorithms use ----------------------------------------------------------
    def isend(self, buf, dst: int):
        self.sent[0] += buf.nbytes
        return self.comm.isend(buf, dst, self.tag)

    def irecv(self, buf, src: int):
        return self.comm.irecv(buf, src, self.tag)

    def send(self, buf, dst: int) -> None:
        self.wait([self.isend(buf, dst)])

    def recv(self, buf, src: int) -> None:
        self.wait([self.irecv(buf, src)])

    def exchange(self, send_buf, dst: int, recv_buf, src: int) -> None:
        """Send to ``dst`` while receiving from ``src`` (both posted first, so rings don't deadlock)."""
        self.sent[0] += send_buf.nbytes
        self.wait(self.comm.exchange(send_buf, dst, recv_buf, src, self.tag))

    def send_whole(self, buf, dst: int) -> None:
        """One message however long (Communicator.isend_whole): control messages."""
        self.wait([self.comm.isend_whole(buf, dst, self.tag)])

    def recv_whole(self, buf, src: int) -> None:
        """One message into ``buf``, which may be longer than it."""
        self.wait([self.comm.irecv_whole(buf, src, self.tag)])

    def exchange_whole(self, send_buf, dst: int, recv_buf, src: int) -> None:
        self.wait(self.comm.exchange_whole(send_buf, dst, recv_buf, src, self.tag))

    def native(self, name: str, *args) -> None:
        """Run the backend's own collective ``name``."""
        self.wait(getattr(self.comm, name)(*args))

    def sub(self, comm, global_ranks) -> "Channel":
        """A channel over subgroup ``comm`` (whose ranks are ``global_ranks``), same collective and deadline;
        its stall is this collective's, logged once whichever of its channels waits."""
        ch = Channel(comm, self.name, self.timeout, global_ranks, self.tag, self.spin, self.stall, self.sent)
        ch.seq, ch.deadline, ch.logs_for = self.seq, self.deadline, self.logs_for
        return ch
