"""A key range on two servers (ps-lite's chain replication, with a chain of two): with
``ps.init(..., replicate=True)`` server k's range is also held by server (k + 1) % S, its backup, so
that when server k dies its range is served on at once, without a restart.

- **The primary** sends each request that changes its state (register, push, clock, join,
  shutdown, a lost worker: the write-ahead log's records, recovery.py) to its backup over a link of
  their own, and answers the worker only once the backup has applied it: an acknowledged push is on
  two servers. A backup that dies ends the replication of that range (logged), not the job.
- **The backup** applies what its primary sends to a replica (a Server of the primary's range whose
  replies go nowhere), in the primary's order, so it holds the same values, optimizer state,
  clocks and sequence numbers. It also listens, from the start, at a standby address the workers
  know (``job["backups"]``); it refuses them until its primary's link ends without a goodbye.
  Then it serves the range there, in a thread of its own.
- **A worker** whose server is gone tries its address and its backup's in turn; the backup's
  welcome says the last request the replica took, and the worker sends again every request not
  answered: repeats are answered without being applied again (their sequence numbers).
"""
from __future__ import annotations

import logging
import threading
import time

import numpy as np

from ..communicators.base import DistError
from ..communicators.links import Listener, LinkLost, connect
from . import protocol as P
from .recovery import NoReplies
from .server import Server

log = logging.getLogger("minidl.dist.ps")
ACK_TIMEOUT = 60.0   # (a backup that takes longer to apply one request is taken for dead)


class Backup:
    """On server k + 1: the replica of server k's range, its feed from server k, and its standby end."""

    def __init__(self, server, make_end):
        job = server.job
        primary = (server.server - 1) % server.servers
        self.replica = Server(NoReplies(), primary, server.servers, job["workers"], job["consistency"],
                              job["staleness"], job["on_worker_failure"], job["drop_stale_after"])
        self.replica.job = dict(job, server=primary)
        self.standby = make_end(self.replica)   # (refuses the workers until promoted)
        self.feed = Listener(job["rank"], self._hello, self._message, self._end)
        self.token, self.primary, self.thread, self.said_goodbye = None, None, None, False
        self.known = threading.Event()   # (the token: set once the job is published)
        self.lock = threading.Lock()

    def set_token(self, token):
        self.token = token
        self.standby.set_token(token)
        self.known.set()

    def _hello(self, link):
        self.known.wait(60)
        if self.primary is not None or (list(link.words) + [None])[0] != self.token:
            raise DistError("not this replica's primary")
        self.primary = link
        return []

    def _message(self, link, parts):
        """A request the primary took: applied to the replica, then acknowledged."""
        words = np.frombuffer(parts[0], np.int64).tolist()
        worker, words = words[0], words[1:]
        with self.lock:
            if words[P.KIND] == P.LOST:
                self.replica.worker_gone(worker, P.read_text(parts[1]))
            elif words[P.KIND] == P.SHUTDOWN and worker < 0:   # (the primary ends: no failover)
                self.said_goodbye = True
            else:
                self.replica.take(worker, words, [np.frombuffer(p, np.uint8) for p in parts[1:]])
        try:
            link.send([np.array([words[P.SEQ]], np.int64).view(np.uint8)])
        except LinkLost:
            pass

    def _end(self, link, why):
        """The primary's link ended: without its goodbye the primary is gone, and the replica serves."""
        if self.said_goodbye or self.replica.ended:
            return
        self.promote(why or "it closed the link without a goodbye")

    def promote(self, why):
        r = self.replica
        log.error("parameter server %d is gone (%s): its backup serves its range from %s", r.server, why,
                  self.standby.address)
        with self.lock:
            r.end, r.heard, r.started = self.standby, {}, time.monotonic()
            self.thread = threading.Thread(target=self._serve, daemon=True, name=f"minidl ps replica {r.server}")
            self.thread.start()
            self.standby.promote()

    def _serve(self):
        try:
            self.replica.serve()
        except Exception as e:   # noqa: BLE001 (named in the log: this thread's error reaches nobody else)
            log.error("parameter server %d (its backup's replica) ended with an error: %s", self.replica.server, e)

    def close(self):
        """This server is done: wait for the replica it serves (if it took over), then stop listening."""
        if self.thread is not None:
            self.thread.join()
        self.feed.close()
        if self.thread is None:
            self.standby.close()


class Chain:
    """On server k: the link to its backup, each state-changing request sent and acknowledged before
    it is applied (Server.keep)."""

    def __init__(self, server, address, token):
        self.server, self.acked, self.lost = server, threading.Condition(), None
        self.last = None
        self.link = connect(address, server.job["rank"], [token], self._ack, self._end)

    def _ack(self, link, parts):
        with self.acked:
            self.last = int(np.frombuffer(parts[0], np.int64)[0])
            self.acked.notify_all()

    def _end(self, link, why):
        with self.acked:
            self.lost = why or "it closed the link"
            self.acked.notify_all()

    def record(self, worker, words, parts):
        if self.lost is not None:
            return
        with self.acked:
            self.last = None
        try:
            self.link.send([np.array([worker] + list(words), np.int64).view(np.uint8), *parts])
        except LinkLost:
            pass
        with self.acked:
            if not self.acked.wait_for(lambda: self.last is not None or self.lost is not None, ACK_TIMEOUT):
                self.lost = f"no acknowledgement in {ACK_TIMEOUT:g} s"
            if self.lost is not None:
                self._say_lost()

    def _say_lost(self):
        log.error("parameter server %d: its backup (server %d) is lost (%s): its range is no longer replicated",
                  self.server.server, (self.server.server + 1) % self.server.servers, self.lost)

    def close(self):
        """The job ended here: the backup must not take over."""
        if self.lost is None:
            try:
                self.link.send([np.array([-1] + P.header(P.SHUTDOWN).tolist(), np.int64).view(np.uint8)])
            except LinkLost:
                pass
        self.link.close()
