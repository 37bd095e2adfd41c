"""Who is in the group after a change: numbered rounds of survivors and newcomers on the job's store.

The store must outlive the workers: the launcher's (``minidl.dist.run`` serves it), or one the user serves.
Every process of an elastic job has a uid and beats (a time stamp under ``beat/<uid>``) from a thread.

Round 0 is the group the job started with. When a collective fails (a peer died or froze), or a newcomer
waits to join, the members of round r go to round r + 1: each takes a join index there and waits until every
member of round r has either joined or stopped beating for ``dead_seconds`` (a killed process stops at once, a
stopped one too; the launcher also marks a worker it saw die, and one that finished leaves), and every newcomer
that was waiting has joined. Then each offers the round's record — the old members by their old rank, then the
newcomers — and the first offer stands (compare-and-set): every joiner can close the round, so the death of one
does not stall the others. Members of round r left out (dead or frozen) are marked dead, so the launcher ends
them. One that comes after the round closed waits as a newcomer for the next. The record refuses to go on —
every member raises MembershipError — where a worker's training function raised (its error, named: a bug is
not a lost worker), where no holder of the state is left, or below ``min_workers`` workers or ``min_nodes``
nodes (launchers); the launcher may then restart the job, which resumes from the last distributed checkpoint.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
import weakref

from .. import faults
from ..group import Config
from ..run.elastic_jobs import PREFIX
from ..store import DistStoreError

BEAT_SECONDS = 0.25
# a member whose beats stopped this long ago is left out of a round: as long as the transport's heartbeat
# (MINIDL_DIST_HEARTBEAT), so that a frozen worker is found by both at about the same time; a killed one is
# marked dead by the launcher at once
DEAD_SECONDS = float(os.environ.get("MINIDL_ELASTIC_DEAD_SECONDS", os.environ.get("MINIDL_DIST_HEARTBEAT", "10")))
POLL_SECONDS = 0.02


class MembershipError(RuntimeError):
    """The group could not be rebuilt (too few members left, or the store is gone): the message says why."""


class Membership:
    """This process's part in the rounds on ``store``."""

    def __init__(self, store, min_workers: int = 1, min_nodes: int = 1, timeout: float = 300.0,
                 dead_seconds: float = DEAD_SECONDS):
        self.store, self.min_workers, self.min_nodes = store, min_workers, min_nodes
        self.timeout, self.dead_seconds = timeout, dead_seconds
        self.uid = uuid.uuid4().hex
        # the node: its launcher (torch's agent); a worker started by hand (a newcomer, even with a copy of the
        # launcher's environment) is a node of its own
        host = os.environ.get("MINIDL_DIST_HOSTNAME") or socket.gethostname()
        launched = os.environ.get("MINIDL_ELASTIC_JOIN") != "1"
        self.node = (launched and os.environ.get("MINIDL_RUN_NODE_ID")) or f"{host}/{os.getpid()}"
        self.round = None            # the round this process is a member of
        self.members: list = []      # that round's uids, in rank order
        self._stop = threading.Event()
        self._beat_once()
        store.set(self._key("pid", self.node, os.getpid()), self.uid)   # (the launcher marks a worker it saw die)
        store.set(self._key("node", self.uid), self.node)
        beating = threading.Thread(target=_beat, args=(weakref.ref(self), self._stop), daemon=True,
                                   name="minidl elastic beat")
        beating.start()

    # -- the store ---------------------------------------------------------------------------------
    def _key(self, *parts) -> str:
        return PREFIX + "/".join(str(p) for p in parts)

    def _get_json(self, *parts):
        return json.loads(self.store.get(self._key(*parts)))

    def _has(self, *parts) -> bool:
        return self.store.check([self._key(*parts)])

    def _beat_once(self) -> None:
        self.store.set(self._key("beat", self.uid), repr(time.time()))

    def close(self) -> None:
        self._stop.set()

    # -- round 0 -----------------------------------------------------------------------------------
    def start(self, uids: list, rank: int, group_timeout: float = Config.timeout) -> None:
        """The job's first group: ``uids`` in rank order (every member calls it with the same list), its
        collectives' ``group_timeout`` that of every group the rounds rebuild."""
        if rank == 0:
            self.store.set(self._key("group_timeout"), repr(float(group_timeout)))
            self.store.compare_set(self._key("round", 0, "closed"), "", json.dumps({"order": uids, "refused": None}))
            self.store.set(self._key("latest"), "0")
        self.round, self.members = 0, list(uids)

    def group_timeout(self) -> float:
        """The collectives' timeout of the groups the rounds rebuild (the job's first group's: a newcomer's too)."""
        return float(self.store.get(self._key("group_timeout")).decode())

    # -- newcomers ---------------------------------------------------------------------------------
    def announce(self) -> None:
        """Say this process waits to join (a newcomer, or one that came after its round closed)."""
        k = self.store.add(self._key("waiting", "count"), 1) - 1
        self.store.set(self._key("waiting", k), self.uid)

    def stop_at(self, commit: int) -> bool:
        """Whether the members stop at this commit to take in a newcomer. Asked at every commit (two store calls
        while nobody waits); the first member to see a newcomer fixes the commit all stop at — the next one —
        so every member stops at the same commit whichever saw the newcomer first (the members commit in step:
        there is a collective between two commits)."""
        answered = self._answered()
        if self.store.add(self._key("waiting", "count"), 0) <= answered:
            return False
        at = self.store.compare_set(self._key("waiting", "stop_at", answered), "", str(commit + 1)).decode()
        return commit >= int(at)

    def _answered(self) -> int:
        """How many waits, in announcing order, are answered: the first unanswered one's index."""
        key = self._key("waiting", "answered")
        return int(self.store.compare_set(key, "", "0").decode())

    # -- the next round ------------------------------------------------------------------------------
    def next_round(self) -> tuple:
        """Join the round after the newest closed one; (round, rank, world size). Blocks until the round closes."""
        deadline = time.monotonic() + self.timeout
        while True:
            r = int(self.store.get(self._key("latest")).decode()) + 1
            index = self.store.add(self._key("round", r, "joins"), 1) - 1
            self.store.set(self._key("round", r, "joined", index), self.uid)
            closed = self._close(r, deadline)
            if closed["refused"]:
                raise MembershipError(f"elastic: the group cannot go on: {closed['refused']}")
            if self.uid in closed["order"]:
                self.round, self.members = r, closed["order"]
                return r, self.members.index(self.uid), len(self.members)
            self.announce()   # (the round closed without this process: wait for the next)

    def _close(self, r: int, deadline: float) -> dict:
        """Round r as closed: {"order": uids in rank order, "refused": why not, or None}. Every joiner waits for
        the same condition and offers the same record; the first offer stands (compare-and-set), so the round
        closes even where a joiner dies on the way."""
        key = self._key("round", r, "closed")
        previous = self._get_json("round", r - 1, "closed")["order"]
        unwritten_since = {}   # join index -> when first seen without its uid (its joiner may have died between)
        while not self._has("round", r, "closed"):
            joined, settled = self._joined(r, unwritten_since)
            missing = [u for u in previous if u not in joined and self._alive(u)]
            late = [u for u in self._waiting() if u not in joined and u not in previous and self._alive(u)]
            if (settled and not missing and not late) or time.monotonic() > deadline:
                self.store.compare_set(key, "", json.dumps(self._record(joined, previous)))
                break
            time.sleep(POLL_SECONDS)
        closed = json.loads(self.store.get(key))
        if int(self.store.get(self._key("latest")).decode()) < r:
            self._settle(closed["order"], previous, closed["refused"])
            self.store.set(self._key("latest"), str(r))
        return closed

    def _record(self, joined: list, previous: list) -> dict:
        order = [u for u in previous if u in joined] + [u for u in joined if u not in previous]
        errors = [f"{self.store.get(self._key('error', u)).decode()}" for u in previous if self._has("error", u)]
        nodes = {self.store.get(self._key("node", u)).decode() for u in order}
        refused = None
        if errors:
            refused = "a worker raised an error in the training function: " + "; ".join(errors)
        elif not any(u in previous for u in order):
            refused = "no worker holding the job's state is left (they all ended or died) for the newcomers to join"
        elif len(order) < self.min_workers or len(nodes) < self.min_nodes:
            refused = (f"{len(order)} worker(s) on {len(nodes)} node(s) are left, fewer than the minimum of "
                       f"{self.min_workers} worker(s) (MINIDL_ELASTIC_MIN_WORKERS) on {self.min_nodes} node(s) "
                       f"(the launcher's --nnodes MIN)")
        return {"order": order, "refused": refused}

    def _settle(self, order: list, previous: list, refused) -> None:
        """After a close: the waits it answered (in announcing order, up to the first still waiting: one that
        joined, or is dead) are counted answered, only ever forward; the members it left out while they were
        still members (not the ones that finished and left) are marked dead, so the launcher ends them. Safe
        to run by several joiners at once."""
        key, count = self._key("waiting", "answered"), self.store.add(self._key("waiting", "count"), 0)
        while True:
            current = self._answered()
            k = current
            while k < count and self._has("waiting", k):
                uid = self.store.get(self._key("waiting", k)).decode()
                if uid not in order and self._alive(uid):
                    break
                k += 1
            if k <= current or self.store.compare_set(key, str(current), str(k)).decode() == str(k):
                break
        if refused:
            return
        for u in previous:
            if u not in order and not self._has("left", u):
                self.store.set(self._key("dead", u), "1")

    def ready(self) -> None:
        """Say this member is about to start the round's group, and wait until every member has: a member that
        died after the close is found by its beats here (a DistError: the next round), rather than by the
        group's start waiting out its whole timeout."""
        from ..communicators.base import DistError
        self.store.set(self._key("round", self.round, "ready", self.uid), "1")
        faults.collective("elastic_ready", self.members.index(self.uid), len(self.members))
        deadline = time.monotonic() + self.timeout
        for u in self.members:
            while not self._has("round", self.round, "ready", u):
                if not self._alive(u) or time.monotonic() > deadline:
                    raise DistError(f"elastic: a member of round {self.round} died before its group started")
                time.sleep(POLL_SECONDS)

    def failed(self, error: BaseException) -> None:
        """This worker's training function raised (not a lost peer): the next round names it and refuses to go on,
        and the launcher fails the job even where the others finish."""
        try:
            self.store.set(self._key("error", self.uid), f"{type(error).__name__}: {error}")
            self.store.add(self._key("errors"), 1)
        except Exception:  # noqa: BLE001 -- the store may be gone too; the error is raised here anyway
            pass

    def leave(self) -> None:
        """This worker is done: it takes part in no later round (a newcomer then need not wait for its beats)."""
        try:
            self.store.set(self._key("left", self.uid), "1")
        except Exception:  # noqa: BLE001 -- the launcher's store may be gone at the very end
            pass
        self.close()

    def _joined(self, r: int, unwritten_since: dict) -> tuple:
        """(the uids that joined round r so far, whether every join index taken has its uid written, or has
        waited ``dead_seconds`` for it: a joiner that died between taking its index and writing its uid)."""
        count = self.store.add(self._key("round", r, "joins"), 0)
        written = [i for i in range(count) if self._has("round", r, "joined", i)]
        now = time.monotonic()
        waiting = [unwritten_since.setdefault(i, now) for i in range(count) if i not in written]
        settled = all(now - since >= self.dead_seconds for since in waiting)
        return [self.store.get(self._key("round", r, "joined", i)).decode() for i in written], settled

    def _waiting(self) -> list:
        count = self.store.add(self._key("waiting", "count"), 0)
        return [self.store.get(self._key("waiting", k)).decode() for k in range(count) if self._has("waiting", k)]

    def _alive(self, uid: str) -> bool:
        if self._has("dead", uid) or self._has("left", uid):
            return False
        try:
            last = float(self.store.get(self._key("beat", uid)).decode())
        except DistStoreError:
            return False
        return time.time() - last < self.dead_seconds


def _beat(ref, stop) -> None:
    while not stop.wait(BEAT_SECONDS):
        me = ref()
        if me is None:
            return
        try:
            me._beat_once()
        except Exception:  # noqa: BLE001 -- the store is gone: the next round says so
            return
        del me
