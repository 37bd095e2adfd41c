"""What carries the parameter server's messages: each end takes and gives whole requests and
replies (protocol.py), so the server and the worker never see a transport.

- Over the process group (MPI): point-to-point messages between fixed ranks. A dead process ends
  the job (MPI's rule), so nothing here survives one.
- Over links (the "gloo" backend and simulated ranks): one TCP connection between each worker and
  each server (communicators/links.py), made to the addresses the servers publish. A worker's loss
  is an event the server acts on; a worker whose connection broke connects again and sends its
  unanswered requests once more (the server drops the repeats by sequence number); a worker that
  was not there at the start joins the same way.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque

import numpy as np

import minidl

from ..algorithms.channel import DistTimeoutError
from ..communicators.base import DistError
from ..communicators.links import Listener, LinkLost, connect
from ..communicators.socket import _heartbeat
from ..p2p import irecv, isend, recv
from ..state import resolve
from . import protocol as P

log = logging.getLogger("minidl.dist.ps")
STANDBY = "a backup's standby: its primary still serves this range"


def _reply_parts(status, body, seq):
    """A reply: [status, byte count, the sequence number of the request it answers], then the body."""
    body = np.empty(0, np.uint8) if body is None else body
    return [np.array([status, body.nbytes, seq], np.int64).view(np.uint8), body]


class ServerLost(DistError):
    """A worker can no longer reach a parameter server: its job keeps no checkpoints, or the server was
    not restarted in time."""


# -- over the process group ----------------------------------------------------------------------------
class GroupServerEnd:
    """A server's requests from fixed worker ranks, over the group's point-to-point messages."""

    tolerant = False

    def __init__(self, group, silent_workers):
        self.group, self.silent_workers = group, silent_workers
        self.sends = []   # (kept until done: their buffers must outlive them)

    def next(self, timeout=None):
        """("request", worker, words, parts): the next request from any worker; ("silent", None, why)
        when none came for the group's timeout."""
        h = minidl.empty(P.HEADER, dtype=minidl.int64)
        work = irecv(h, group=self.group, tag=P.REQUEST)
        work.channel.note = lambda: f"the server waits for worker rank(s) {self.silent_workers()}"
        try:
            work.wait()
        except DistTimeoutError:
            return ("silent", None, f"sent no request for {resolve(self.group, 'ps').config.timeout:g} s")
        except DistError:   # (a header of another size came: consumed, and refused)
            if work.source() is None:
                raise   # (no message came: a rank is gone)
            return ("request", work.source(), None, [])
        words = h.tolist()
        worker = work.source()
        parts = []
        for i in range(min(max(words[P.PARTS], 0), P.MAX_PARTS)):
            buf = minidl.empty(max(words[P.BYTES0 + i], 0), dtype=minidl.uint8)
            recv(buf, worker, group=self.group, tag=P.PAYLOAD)
            parts.append(buf.numpy())
        return ("request", worker, words, parts)

    def reply(self, worker, status, body=None, seq=0):
        parts = _reply_parts(status, body, seq)
        posted = [isend(minidl.from_numpy(parts[0].view(np.int64)), worker, group=self.group, tag=P.REPLY)]
        if parts[1].nbytes:
            posted.append(isend(minidl.from_numpy(parts[1]), worker, group=self.group, tag=P.REPLY_DATA))
        self.sends = [w for w in self.sends + posted if not w.is_completed()]
        return posted

    def close(self, flush=True):
        for work in self.sends if flush else ():
            work.wait()


class GroupWorkerEnd:
    """A worker's requests to the servers (the group's last ranks) and their replies, in order."""

    def __init__(self, group, server_ranks):
        self.group, self.server_ranks = group, server_ranks
        self.posted = [None] * len(server_ranks)   # per server: the receive of its next reply's header
        self.sends = []

    def send(self, k, parts):
        rank = self.server_ranks[k]
        self.sends.append(isend(minidl.from_numpy(parts[0].view(np.int64)), rank, group=self.group, tag=P.REQUEST))
        for part in parts[1:]:
            self.sends.append(isend(minidl.from_numpy(part), rank, group=self.group, tag=P.PAYLOAD))
        self.sends = [w for w in self.sends if not w.is_completed()]

    def _header(self, k):
        """The receive of server k's next reply header. It waits twice the timeout: a server that
        waits for other workers answers within one with an error naming those that went silent,
        which a timeout here would blame on the server."""
        if self.posted[k] is None:
            h = minidl.empty(3, dtype=minidl.int64)
            work = irecv(h, self.server_ranks[k], group=self.group, tag=P.REPLY)
            work.channel.deadline += work.channel.timeout
            self.posted[k] = (h, work)
        return self.posted[k]

    def reply(self, k, wait, into=None):
        """Server k's next reply (status, uint8 body), received straight into ``into`` (a uint8
        array) when the sizes agree; None if ``wait`` is false and it has not come."""
        h, work = self._header(k)
        if not wait and not work.is_completed():
            return None
        work.wait()
        self.posted[k] = None
        status, nbytes, _ = h.tolist()
        body = into if into is not None and into.nbytes == nbytes else np.empty(nbytes, np.uint8)
        if nbytes:
            recv(minidl.from_numpy(body), self.server_ranks[k], group=self.group, tag=P.REPLY_DATA)
        return status, body

    def flush(self):
        for work in self.sends:
            work.wait()
        self.sends = []

    def close(self):
        self.flush()


# -- over links -----------------------------------------------------------------------------------------
class LinkServerEnd:
    """A server's links to the workers: requests, losses and (re)connections arrive as events in one
    queue, taken by the server's loop alone."""

    tolerant = True

    def __init__(self, me, admit, silence, port=0, standby=False):
        self.token, self.admit = None, admit
        self.known = threading.Event()   # (the token: set once the job is published)
        self.serving = threading.Event()   # (a backup's standby end refuses workers until it is promoted)
        if not standby:
            self.serving.set()
        self.events = queue.Queue()
        self.links = {}   # worker -> its current link (a reconnection replaces it)
        self.lock = threading.Lock()
        self.listener = Listener(me, self._hello, self._message, self._end, port=port, silence=silence,
                                 on_ready=self._ready)
        self.address = self.listener.address

    def set_token(self, token):
        self.token = token
        self.known.set()

    def promote(self):
        self.serving.set()

    def _hello(self, link):
        token = (list(link.words) + [None])[0]
        if not self.serving.is_set():
            raise DistError(STANDBY)
        self.known.wait(60)   # (a worker may learn the job before this server does)
        if token != self.token:
            raise DistError(f"worker {link.peer} belongs to another parameter-server job")
        return [self.token] + self.admit(link.peer)

    def _ready(self, link):
        """Its welcome went: replies to this worker go on this link from now on."""
        with self.lock:
            self.links[link.peer] = link

    def _message(self, link, parts):
        words = np.frombuffer(parts[0], np.int64).tolist() if parts and len(parts[0]) == P.HEADER * 8 else None
        self.events.put(("request", link, words, list(parts[1:])))

    def _end(self, link, why):
        self.events.put(("end", link, why, None))

    def next(self, timeout=None):
        """The next event, or None after ``timeout`` seconds: ("request", worker, words, parts) (words None:
        a malformed header), ("lost", worker, why) (why None: the worker's goodbye), or ("reconnected",
        worker, why) when a link ends that the worker has replaced already. A replaced link's requests
        are dropped (None): its unanswered ones come again on the new link."""
        try:
            kind, link, what, parts = self.events.get(timeout=timeout)
        except queue.Empty:
            return None
        with self.lock:
            if self.links.get(link.peer) is not link:   # (replaced by a reconnection)
                return ("reconnected", link.peer, what) if kind == "end" else None
            if kind == "request":
                return ("request", link.peer, what, parts)
            del self.links[link.peer]
        return ("lost", link.peer, what)

    def reply(self, worker, status, body=None, seq=0):
        """Answer on the worker's current link; a lost link drops it (the worker asks again)."""
        link = self.links.get(worker)
        if link is not None:
            try:
                link.send(_reply_parts(status, body, seq))
            except LinkLost:
                pass
        return []

    def close(self, flush=True):
        self.listener.close()
        for link in list(self.links.values()):
            link.close()


class LinkWorkerEnd:
    """A worker's links to every server. Each request is kept until answered (under BSP a push until
    the next clock is, since a server that lost this worker drops the pushes of the iteration it had
    not ended): when a link breaks the worker connects again (for up to ``silence`` seconds), the
    server's welcome says the last request it took, and what came after is sent anew, with every
    request still unanswered (the server answers a repeat without applying it again). Replies carry
    their request's number, so one that comes twice is taken once. In a job whose servers checkpoint,
    a server that cannot be reached is waited for ``patience`` seconds (restarted from its checkpoint,
    maybe elsewhere: ``locate(k)`` asks the job's store where it listens now)."""

    def __init__(self, me, token, addresses, silence=None, keep_pushes=False, patience=None, locate=None,
                 checkpoint_dir=None, backups=None):
        self.me, self.token, self.addresses, self.keep_pushes = me, token, list(addresses), keep_pushes
        self.backups = None if backups is None else list(backups)   # (replicate=True: where each range fails over)
        self.patience, self.locate, self.checkpoint_dir = patience, locate, checkpoint_dir
        self.silence = _heartbeat() if silence is None else silence
        self.cond = threading.Condition()
        n = len(addresses)
        self.sent = [{} for _ in range(n)]         # seq -> parts: sent, kept (see above)
        self.awaited = [deque() for _ in range(n)]   # seqs whose replies are not taken yet, in order
        self.replies = [{} for _ in range(n)]      # seq -> (status, body): received, not taken yet
        self.links = [None] * n
        for k in range(n):
            self.links[k] = self._connect(k, resume=False)

    def _connect(self, k, resume):
        def on_message(link, parts):
            status, _, seq = np.frombuffer(parts[0], np.int64).tolist()
            with self.cond:
                if self.links[k] is link and seq in self.awaited[k] and seq not in self.replies[k]:
                    self.replies[k][seq] = (status, np.frombuffer(parts[1], np.uint8))
                    self.cond.notify_all()

        def on_end(link, why):
            with self.cond:
                self.cond.notify_all()
        return connect(self.addresses[k], self.me, [self.token, int(resume)], on_message, on_end,
                       silence=self.silence)

    def _reconnect(self, k, why):
        """Link k broke: connect again and send what the server has not taken or not answered; a
        server that refuses (the job ended) or stays unreachable for ``silence`` seconds (``patience``
        in a job whose servers checkpoint) is named."""
        began = looked = time.monotonic()
        told, attempt = False, 0
        while True:
            attempt += 1
            if self.backups is not None and attempt > 1:   # (its address and its backup's in turn)
                self.addresses[k], self.backups[k] = self.backups[k], self.addresses[k]
            try:
                link = self._connect(k, resume=True)
                taken = link.words[1] if len(link.words) > 1 else 0   # (the server's last request from us)
                with self.cond:
                    self.links[k] = link
                    resend = [parts for seq, parts in sorted(self.sent[k].items())
                              if seq > taken or seq in self.awaited[k]]
                for parts in resend:
                    link.send(parts)
                if time.monotonic() - began > 1.0:
                    log.warning("ps worker %d: parameter server %d is back at %s after %.1f s", self.me, k,
                                self.addresses[k], time.monotonic() - began)
                return
            except DistError as e:   # (LinkLost too: the new link broke while sending again)
                if " has ended" in str(e) and self._only_goodbyes(k):
                    return   # (a restarted server that took every worker's shutdown ends at once)
                waited = time.monotonic() - began
                if (" refused " in str(e) and STANDBY not in str(e)) or waited > (self.patience or self.silence):
                    raise ServerLost(self._lost(k, why, e)) from None
                if self.patience and not told:
                    log.warning("ps worker %d: parameter server %d (%s) is gone (%s); waiting up to %g s for it to "
                                "be restarted (python -m minidl.dist.ps --resume %s --server %d)", self.me, k,
                                self.addresses[k], why, self.patience, self.checkpoint_dir, k)
                    told = True
                if self.locate is not None and time.monotonic() - looked > 1.0:
                    self.addresses[k] = self.locate(k) or self.addresses[k]
                    looked = time.monotonic()
                time.sleep(0.05)

    def _only_goodbyes(self, k) -> bool:
        """Whether this worker awaits only its shutdown's answer from server k: then a server that has
        ended took it (answered here as taken)."""
        with self.cond:
            kinds = {int(self.sent[k][seq][0].view(np.int64)[P.KIND]) for seq in self.awaited[k]}
            if kinds != {P.SHUTDOWN}:
                return False
            for seq in self.awaited[k]:
                self.replies[k][seq] = (P.OK, np.empty(0, np.uint8))
            return True

    def _lost(self, k, why, error) -> str:
        said = f"ps worker {self.me}: parameter server {k} ({self.addresses[k]}) cannot be reached: {why}; "
        if " refused " in str(error):
            return said + f"connecting again: {error}"
        if self.backups is not None:
            return said + f"neither it nor its backup ({self.backups[k]}) answers: {error}"
        if self.patience is None:
            return said + ("its job keeps no checkpoints (ps.init(checkpoint_dir=...)) nor replicas "
                           f"(replicate=True), so a server's loss ends it; connecting again: {error}")
        return said + (f"it was not restarted within {self.patience:g} s (MINIDL_PS_SERVER_TIMEOUT; python -m "
                       f"minidl.dist.ps --resume {self.checkpoint_dir} --server {k} restarts it)")

    def send(self, k, parts):
        seq = int(parts[0].view(np.int64)[P.SEQ])
        with self.cond:
            self.sent[k][seq] = parts
            self.awaited[k].append(seq)
        link = self.links[k]
        try:
            link.send(parts)
        except LinkLost:
            self._reconnect(k, link.lost or "its link ended")

    def reply(self, k, wait, into=None):
        with self.cond:
            seq = self.awaited[k][0]
            while seq not in self.replies[k]:
                link = self.links[k]
                if not link.over:
                    if not wait:
                        return None
                    self.cond.wait(0.5)
                    continue
                self.cond.release()
                try:
                    self._reconnect(k, link.lost or "its link ended")
                finally:
                    self.cond.acquire()
            status, body = self.replies[k].pop(seq)
            self.awaited[k].popleft()
            self._forget(k, seq)
        if into is not None and into.nbytes == body.nbytes:
            into[...] = body
            return status, into
        return status, body

    def _forget(self, k, seq):
        """A request answered: dropped, or (a BSP push) kept as a copy until the next clock is answered."""
        parts = self.sent[k][seq]
        kind = int(parts[0].view(np.int64)[P.KIND])
        if kind == P.CLOCK:
            for old in [s for s in self.sent[k] if s <= seq]:
                del self.sent[k][old]
        elif self.keep_pushes and kind == P.PUSH:   # (the caller may change its gradient once this returns)
            self.sent[k][seq] = [np.array(part, copy=True) for part in parts]
        else:
            del self.sent[k][seq]

    def flush(self):
        pass

    def close(self):
        for link in self.links:
            link.close()
