"""The launchers' own rendezvous (torch's c10d "dynamic" rendezvous, in rounds), on the job's store.

A round is numbered; every launcher joins the current one (a join counter gives it an index) and the round
closes, for good, when ``max_nodes`` joined, or ``min_nodes`` joined and ``last_call`` seconds passed with
nobody new (torch's ``last_call_timeout``). The first ``closed`` joiners are the round's nodes; one that came
later announces itself as waiting and joins the next round. While workers run, each node beats (a time
stamp in the store) and watches: a newer round, a waiting node while there is room, or a node whose beats
stopped (its launcher died) makes it start the next round, and every node stops its workers and joins it.
With the static backend the node ranks are the given ``--node-rank``s and a round closes at exactly N nodes.
Beats compare wall clocks, so the nodes' clocks must agree to well within the keep-alive timeout.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

POLL_SECONDS = 0.05


class RendezvousClosedError(SystemExit):
    """A launcher could not join the job in time (torch's name): the message says why."""


@dataclass
class Round:
    """One closed round as this node sees it: its number, the nodes (join index -> their record), and
    this node's rank among them, the global rank of its first worker and the job's world size."""
    number: int
    index: int
    nodes: list
    group_rank: int
    rank_offset: int
    world_size: int


class Rendezvous:
    """This launcher's side of the rounds on ``store`` (a client of the job's store) under ``run_id``."""

    def __init__(self, store, run_id, nproc, min_nodes, max_nodes, node_rank=None, last_call=30.0,
                 join_timeout=600.0, keep_alive=5.0, endpoint=""):
        self.store, self.nproc, self.min, self.max = store, nproc, min_nodes, max_nodes
        self.node_rank, self.last_call, self.join_timeout = node_rank, last_call, join_timeout
        self.keep_alive, self.endpoint = keep_alive, endpoint
        self.prefix = f"minidl_run/{run_id}/"
        self.round = None
        self._beat_at = 0.0

    def _key(self, *parts) -> str:
        return self.prefix + "/".join(str(p) for p in parts)

    def _get(self, *parts):
        key = self._key(*parts)
        return self.store.get(key).decode() if self.store.check([key]) else None

    def current(self) -> int:
        return int(self.store.compare_set(self._key("current"), "", "0").decode())

    def next_round(self, number: int) -> None:
        """Open round ``number + 1`` unless someone did already."""
        self.store.compare_set(self._key("current"), str(number), str(number + 1))

    def join(self) -> Round:
        """Join the current round (or the next, when it closed without this node) and wait until it closes."""
        deadline = time.monotonic() + self.join_timeout
        while True:
            number = self.current()
            if self._get(number, "closed") is None:
                index = self.store.add(self._key(number, "joined"), 1) - 1
                self.store.set(self._key(number, "node", index),
                               json.dumps({"nproc": self.nproc, "node_rank": self.node_rank}))
                self.store.set(self._key(number, "last_join"), repr(time.time()))
                closed = self._wait_closed(number, deadline)
                if index < closed:
                    self.round = self._made(number, index, closed, deadline)
                    self.beat(force=True)
                    return self.round
            self.store.add(self._key(number, "waiting"), 1)   # (torch's num_nodes_waiting)
            while self.current() == number:
                self._check_deadline(deadline, f"the job is full ({self.max} node(s), --nnodes max) and did "
                                               "not make room")
                time.sleep(POLL_SECONDS)

    def _wait_closed(self, number, deadline) -> int:
        while True:
            closed = self._get(number, "closed")
            if closed is not None:
                return int(closed)
            joined = self.store.add(self._key(number, "joined"), 0)
            last = float(self._get(number, "last_join") or time.time())
            if joined >= self.max or (joined >= self.min and time.time() - last >= self.last_call):
                self.store.compare_set(self._key(number, "closed"), "", str(min(joined, self.max)))
                continue
            self._check_deadline(deadline, f"only {joined} of the minimum {self.min} node(s) joined round {number}")
            time.sleep(POLL_SECONDS)

    def _check_deadline(self, deadline, why) -> None:
        if time.monotonic() < deadline:
            return
        raise RendezvousClosedError(f"minidl.dist.run: error: rendezvous at {self.endpoint} timed out after "
                                    f"{self.join_timeout:g} s (join_timeout): {why}")

    def _record(self, number, j, deadline) -> dict:
        """Node ``j``'s record in round ``number``: a joiner takes its index before it writes its record, so a
        round can close in between, and the record is then waited for."""
        while (text := self._get(number, "node", j)) is None:
            self._check_deadline(deadline, f"node {j} of round {number} took its place but never said who it is "
                                           "(its launcher died while joining)")
            time.sleep(POLL_SECONDS)
        return json.loads(text)

    def _made(self, number, index, closed, deadline) -> Round:
        nodes = [self._record(number, j, deadline) for j in range(closed)]
        if self.node_rank is None:
            order = list(range(closed))
        else:
            ranks = [n["node_rank"] for n in nodes]
            if sorted(ranks) != list(range(closed)):
                raise RendezvousClosedError(f"minidl.dist.run: error: static rendezvous at {self.endpoint}: "
                                            f"the nodes' --node-rank values are {sorted(ranks)}, expected "
                                            f"0..{closed - 1} once each")
            order = sorted(range(closed), key=lambda j: ranks[j])
        group_rank = order.index(index)
        offset = sum(nodes[j]["nproc"] for j in order[:group_rank])
        return Round(number, index, nodes, group_rank, offset, sum(n["nproc"] for n in nodes))

    def beat(self, force=False) -> None:
        now = time.time()
        if force or now - self._beat_at >= self.keep_alive / 4:
            self.store.set(self._key(self.round.number, "beat", self.round.index), repr(now))
            self._beat_at = now

    def finish(self, outcome: str) -> None:
        """Say how this node's part of the round ended: "ok", "failed" (it opens the next round) or "left" (its
        workers of an elastic job died; the others may go on without them)."""
        self.store.set(self._key(self.round.number, "over", self.round.index), outcome)
        if outcome == "failed":
            self.next_round(self.round.number)

    def changed(self, elastic: bool = False) -> str | None:
        """Why the running round must end (a newer round, a node waiting for room, a silent node), or None. In an
        ``elastic`` job a silent node's workers are left behind by the others in the job, so it ends nothing."""
        r = self.round
        self.beat()
        if self.current() != r.number:
            return "another node began a new rendezvous round"
        if len(r.nodes) < self.max and self.store.add(self._key(r.number, "waiting"), 0) > 0:
            self.next_round(r.number)
            return "a new node is waiting to join"
        silent = None if elastic else self._silent()
        if silent is not None:
            self.next_round(r.number)
            return f"node {silent} stopped answering (no beat for {self.keep_alive:g} s)"
        return None

    def _parts(self) -> list:
        """Each node's part of the running round: how it ended ("ok", "failed", "left"), "silent" (its beats
        stopped: its launcher died), or None while it runs."""
        r, now = self.round, time.time()
        parts = []
        for j in range(len(r.nodes)):
            over, beat = self._get(r.number, "over", j), self._get(r.number, "beat", j)
            silent = j != r.index and over is None and beat is not None and now - float(beat) > self.keep_alive
            parts.append("silent" if silent else over)
        return parts

    def _silent(self):
        parts = self._parts()
        return parts.index("silent") if "silent" in parts else None

    def wait_others(self, interval, serving) -> None:
        """After this node's workers succeeded: wait until every node's part is over, one stopped answering or a
        new round began; then ``release``."""
        self.finish("ok")
        r = self.round
        while self.current() == r.number and self._silent() is None:
            if None not in self._parts():
                break
            self.beat()
            time.sleep(interval)
        self.release(interval, serving)

    def stand_by(self, interval) -> str:
        """This node's workers of an elastic job all died: say so ("left": it opens no round, and keeps its place
        in the job, so it is sure of one in the next round) and wait aside for the job's fate: "restart" once a
        new round began (this node joins it), "ok" once every node's part ended and one finished the job, "lost"
        once every node's part ended and none did (nobody went on)."""
        self.finish("left")
        r = self.round
        while self.current() == r.number:
            parts = self._parts()
            if None not in parts:
                return "ok" if "ok" in parts else "lost"
            self.beat()
            time.sleep(interval)
        parts = self._parts()   # (another node that saw nobody go on may have opened the next round first)
        return "lost" if None not in parts and "ok" not in parts else "restart"

    def release(self, interval, serving) -> None:
        """Say this node is done with the round's keys; the launcher ``serving`` the store waits (a keep-alive
        at most) until every node has, so that the store outlives their use of it."""
        r = self.round
        released = self.store.add(self._key(r.number, "released"), 1)
        deadline = time.monotonic() + self.keep_alive
        while serving and released < len(r.nodes) and time.monotonic() < deadline:
            time.sleep(interval)
            released = self.store.add(self._key(r.number, "released"), 0)
