"""A worker's side: what each registered parameter looks like and where its parts live, the
requests it sends, and the replies it matches to them.

Every request to a server gets one reply, in order, so a worker keeps a queue of what it awaits
per server; waiting for one reply receives the earlier ones first (completing their Works).
"""
from __future__ import annotations

from collections import deque

import numpy as np

import minidl

from ..p2p import irecv, isend, recv
from . import protocol as P
from .sharding import bounds


class Param:
    """A registered parameter as a worker knows it: key, shape, dtype, sharding."""

    def __init__(self, key, name, shape, dtype, sparse, servers, counts_steps=False):
        self.key, self.name, self.shape, self.dtype, self.sparse = key, name, tuple(shape), dtype, sparse
        self.bounds = bounds(shape[0] if sparse else int(np.prod(shape)), servers)
        self.counts_steps = counts_steps   # (its server optimizer counts steps: every push reaches every shard)

    def describe(self):
        return f"{self.name!r} ({list(self.shape)}, {self.dtype.name}{', row-sharded' if self.sparse else ''})"


class _Awaited:
    """One reply a request awaits from one server; ``on_reply(values)`` takes its values, received
    straight into ``into`` (a contiguous tensor of their size) when given."""

    def __init__(self, what, dtype, on_reply=None, into=None):
        self.what, self.dtype, self.on_reply, self.into = what, dtype, on_reply, into
        self.done, self.error = False, None


class Work:
    """An asynchronous push or pull: ``wait()`` returns once every server it went to has answered
    (for a pull, with the tensor)."""

    def __init__(self, client, awaited, result=None):
        self.client, self.awaited, self.result = client, awaited, result

    def wait(self):
        for server, item in self.awaited:
            self.client.drain(server, item)
        errors = [item.error for _, item in self.awaited if item.error]
        if errors:
            raise RuntimeError(errors[0])
        return self.result() if self.result is not None else None

    def is_completed(self) -> bool:
        """Without blocking: have all its replies come (receiving those that have)?"""
        for server in {server for server, item in self.awaited if not item.done}:
            self.client.poll(server)
        return all(item.done for _, item in self.awaited)


class Client:
    def __init__(self, group, rank, workers, servers, consistency):
        self.group, self.rank, self.workers, self.servers = group, rank, workers, servers
        self.consistency, self.params, self.clock_count, self.closed = consistency, {}, 0, False
        self.queues = [deque() for _ in range(servers)]
        self.posted = [None] * servers   # per server: the receive of its next reply's header, once posted
        self.sends = []

    def server_rank(self, k):
        return self.workers + k

    # -- sending and receiving ----------------------------------------------------------------
    def request(self, k, header, payload=(), awaited=None):
        """Send a request to server k; returns what its reply will fill (None: no reply)."""
        rank = self.server_rank(k)
        header[P.PARTS] = len(payload)
        self.sends.append(isend(header, rank, group=self.group, tag=P.REQUEST))
        for t in payload:
            self.sends.append(isend(t.contiguous().reshape(-1), rank, group=self.group, tag=P.PAYLOAD))
        self.sends = [w for w in self.sends if not w.is_completed()]
        if awaited is not None:
            self.queues[k].append(awaited)
        return awaited

    def _header(self, k):
        """The receive of server k's next reply header. It waits twice the timeout: a server that
        waits for other workers answers within one with an error naming those that went silent
        (server.py), which a timeout here would blame on the server."""
        if self.posted[k] is None:
            h = minidl.empty(4, dtype=minidl.int64)
            work = irecv(h, self.server_rank(k), group=self.group, tag=P.REPLY)
            work.channel.deadline += work.channel.timeout
            self.posted[k] = (h, work)
        return self.posted[k]

    def _take(self, k):
        """Server k's next reply, whose header is in: its values (or error) to the request first in line."""
        (h, _), self.posted[k] = self.posted[k], None
        item = self.queues[k].popleft()
        status, numel = h.tolist()[:2]
        if status == P.ERROR:
            body = minidl.empty(numel, dtype=minidl.uint8)
        elif item.into is not None:
            body = item.into if item.into.numel() == numel else minidl.empty(numel, dtype=item.dtype)
        else:
            body = minidl.empty(numel, dtype=item.dtype)
        if numel:
            recv(body, self.server_rank(k), group=self.group, tag=P.REPLY_DATA)
        if status == P.ERROR:
            item.error = f"ps.{item.what} (worker {self.rank}, server {k}): {P.read_text(body)}"
        elif item.into is not None and body is not item.into:
            item.error = (f"ps.{item.what} (worker {self.rank}, server {k}): the server sent {numel} values where "
                          f"{item.into.numel()} were due")
        elif item.on_reply is not None:
            item.on_reply(body)
        item.done = True

    def poll(self, k):
        """Take server k's replies that have arrived, without waiting."""
        while self.queues[k] and self._header(k)[1].is_completed():
            self._take(k)

    def drain(self, k, until):
        """Receive server k's replies in order until ``until`` has its own."""
        while not until.done:
            self._header(k)[1].wait()
            self._take(k)

    def drain_all(self):
        for k in range(self.servers):
            while self.queues[k]:
                self.drain(k, self.queues[k][-1])
        for work in self.sends:
            work.wait()
        self.sends = []
