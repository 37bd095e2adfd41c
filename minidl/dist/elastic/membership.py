"""Who is in the group after a change: numbered rounds of survivors and newcomers on the job's store.

The store must outlive the workers: the launcher's (``minidl.dist.run`` serves it), or one the user serves.
Every process of an elastic job has a uid and beats (a time stamp under ``beat/<uid>``) from a thread.

Round 0 is the group the job started with. When a collective fails (a peer died or froze), or a newcomer
waits to join, the members of round r go to round r + 1: each takes a join index there. The first to join
closes the round once every member of round r has either joined or stopped beating for ``dead_seconds``
(a killed process stops at once; a stopped one too; the launcher also marks a worker it saw die), and every
newcomer that was waiting has joined. It writes the new order — the old members by their old rank, then the
newcomers — and every joiner takes its new rank from it; a member of round r it left out (dead or frozen) is
marked dead, so the launcher ends it. One that comes after the round closed waits as a newcomer for the
next. A round with fewer than ``min_workers`` workers, or on fewer than ``min_nodes`` hosts (the launcher's
``--nnodes MIN``), is refused on every rank: the job then ends, and the launcher may restart it, resuming
from the last distributed checkpoint.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
import weakref

from ..store import DistStoreError

PREFIX = "minidl/elastic/"
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
        self.host = os.environ.get("MINIDL_DIST_HOSTNAME") or socket.gethostname()
        self.round = None            # the round this process is a member of
        self.members: list = []      # that round's uids, in rank order
        self._stop = threading.Event()
        self._beat_once()
        store.set(self._key("pid", os.getpid()), self.uid)   # (the launcher marks a worker it saw die)
        store.set(self._key("host", self.uid), self.host)
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
    def start(self, uids: list, rank: int) -> None:
        """The job's first group: ``uids`` in rank order (every member calls it with the same list)."""
        if rank == 0 and not self._has("round", 0, "members"):
            self.store.set(self._key("round", 0, "members"), json.dumps(uids))
            self.store.set(self._key("latest"), "0")
        self.round, self.members = 0, list(uids)

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
        taken = self.store.add(self._key("waiting", "taken"), 0)
        if self.store.add(self._key("waiting", "count"), 0) <= taken:
            return False
        at = self.store.compare_set(self._key("waiting", "stop_at", taken), "", str(commit + 1)).decode()
        return commit >= int(at)

    # -- the next round ------------------------------------------------------------------------------
    def next_round(self) -> tuple:
        """Join the round after the newest closed one; (round, rank, world size, whether this process was a
        member before). Blocks until the round closes."""
        deadline = time.monotonic() + self.timeout
        while True:
            r = int(self.store.get(self._key("latest")).decode()) + 1
            index = self.store.add(self._key("round", r, "joins"), 1) - 1
            self.store.set(self._key("round", r, "joined", index), self.uid)
            if index == 0:
                self._close(r, deadline)
            members = self._wait_closed(r, deadline)
            if self.uid in members:
                was_member = self.uid in self.members
                self.round, self.members = r, members
                return r, members.index(self.uid), len(members), was_member
            self.announce()   # (the round closed without this process: wait for the next)

    def _close(self, r: int, deadline: float) -> None:
        previous = self._get_json("round", r - 1, "members")
        while True:
            joined, settled = self._joined(r)
            missing = [u for u in previous if u not in joined and self._alive(u)]
            late = [u for u in self._waiting() if u not in joined and u not in previous and self._alive(u)]
            if settled and not missing and not late:
                break
            if time.monotonic() > deadline:
                break   # (the ones still missing are left out: they are as good as dead)
            time.sleep(POLL_SECONDS)
        joined = self._joined(r)[0]
        order = [u for u in previous if u in joined] + [u for u in joined if u not in previous]
        # every wait so far is answered (joined, or dead); one that joins after the close announces itself again
        answered = self.store.add(self._key("waiting", "count"), 0)
        self.store.add(self._key("waiting", "taken"), answered - self.store.add(self._key("waiting", "taken"), 0))
        for u in previous:
            if u not in order:
                self.store.set(self._key("dead", u), "1")   # (frozen, or dead: the launcher ends it)
        hosts = {self.store.get(self._key("host", u)).decode() for u in order}
        if not any(u in previous for u in order):
            self.store.set(self._key("round", r, "refused"), "no worker holding the job's state is left (they "
                                                             "all ended or died) for the newcomers to join")
        elif len(order) < self.min_workers or len(hosts) < self.min_nodes:
            self.store.set(self._key("round", r, "refused"),
                           f"{len(order)} worker(s) on {len(hosts)} host(s) are left, fewer than the minimum of "
                           f"{self.min_workers} worker(s) (MINIDL_ELASTIC_MIN_WORKERS) on {self.min_nodes} "
                           f"host(s) (the launcher's --nnodes MIN)")
        self.store.set(self._key("round", r, "members"), json.dumps(order))
        self.store.set(self._key("latest"), str(r))

    def _wait_closed(self, r: int, deadline: float) -> list:
        while not self._has("round", r, "members"):
            if time.monotonic() > deadline:
                raise MembershipError(f"elastic: round {r} did not close within {self.timeout:g} s")
            time.sleep(POLL_SECONDS)
        if self._has("round", r, "refused"):
            raise MembershipError(f"elastic: the group cannot go on: "
                                  f"{self.store.get(self._key('round', r, 'refused')).decode()}")
        return self._get_json("round", r, "members")

    def _joined(self, r: int) -> tuple:
        """(the uids that joined round r so far, whether each join index taken has its uid written yet)."""
        count = self.store.add(self._key("round", r, "joins"), 0)
        written = [i for i in range(count) if self._has("round", r, "joined", i)]
        return [self.store.get(self._key("round", r, "joined", i)).decode() for i in written], len(written) == count

    def _waiting(self) -> list:
        count = self.store.add(self._key("waiting", "count"), 0)
        return [self.store.get(self._key("waiting", k)).decode() for k in range(count) if self._has("waiting", k)]

    def _alive(self, uid: str) -> bool:
        if self._has("dead", uid):
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


def in_job(store) -> bool:
    """Whether the workers on ``store`` run under elastic.run (the launcher then lets survivors go on)."""
    return store.check([PREFIX + "in_job"])


def mark_dead(store, pid: int) -> None:
    """The launcher saw worker ``pid`` end: its round need not wait for its beats to stop."""
    key = f"{PREFIX}pid/{pid}"
    if store.check([key]):
        store.set(f"{PREFIX}dead/{store.get(key).decode()}", "1")


def left_out(store, pid: int) -> bool:
    """Whether a round left worker ``pid`` out (it froze, or came back too late): the launcher ends it."""
    key = f"{PREFIX}pid/{pid}"
    return store.check([key]) and store.check([f"{PREFIX}dead/{store.get(key).decode()}"])
