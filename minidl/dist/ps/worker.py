"""A worker's side: what each registered parameter looks like and where its parts live, the
requests it sends, and the replies it matches to them.

Every request to a server gets one reply, in order, so a worker keeps a queue of what it awaits
per server; waiting for one reply receives the earlier ones first (completing their Works).
Each request carries the next sequence number for its server (the server drops a repeat).
"""
from __future__ import annotations

from collections import deque

import numpy as np

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
    """One reply a request awaits from one server; ``on_reply(values)`` takes its values (a tensor
    of ``dtype``), received straight into ``into`` (a contiguous tensor of their size) when given."""

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
    def __init__(self, end, rank, workers, servers, consistency):
        self.end, self.rank, self.workers, self.servers = end, rank, workers, servers
        self.consistency, self.params, self.clock_count, self.closed = consistency, {}, 0, False
        self.active = None   # (the servers' count of active workers, from the last clock answered)
        self.queues = [deque() for _ in range(servers)]
        self.seq = [0] * servers

    # -- sending and receiving ----------------------------------------------------------------
    def request(self, k, header, payload=(), awaited=None):
        """Send a request to server k; returns what its reply will fill (every request has one)."""
        self.seq[k] += 1
        header[P.SEQ] = self.seq[k]
        self.end.send(k, P.seal(header, payload))
        awaited = awaited if awaited is not None else _Awaited(P.KIND_NAMES.get(int(header[P.KIND]), "request"),
                                                                None)
        self.queues[k].append(awaited)
        return awaited

    def _take(self, k, wait):
        """Server k's next reply, to the request first in line; False if it has not come (``wait`` false)."""
        item = self.queues[k][0]
        into = None if item.into is None else P.as_bytes(item.into)
        got = self.end.reply(k, wait, into)
        if got is None:
            return False
        self.queues[k].popleft()
        status, body = got
        if status == P.ERROR:
            item.error = f"ps.{item.what} (worker {self.rank}, server {k}): {P.read_text(body)}"
        elif into is not None and body is not into:
            item.error = (f"ps.{item.what} (worker {self.rank}, server {k}): the server sent {body.nbytes} bytes "
                          f"where {into.nbytes} were due")
        elif item.on_reply is not None:
            item.on_reply(P.view(body, body.nbytes // item.dtype.itemsize, item.dtype, f"ps.{item.what}"))
        item.done = True
        return True

    def poll(self, k):
        """Take server k's replies that have arrived, without waiting."""
        while self.queues[k] and self._take(k, wait=False):
            pass

    def drain(self, k, until):
        """Receive server k's replies in order until ``until`` has its own."""
        while not until.done:
            self._take(k, wait=True)

    def drain_all(self):
        for k in range(self.servers):
            while self.queues[k]:
                self.drain(k, self.queues[k][-1])
        self.end.flush()
