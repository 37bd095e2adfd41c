"""What the launcher and minidl.dist.elastic's workers say to each other on the job's store: that the job is
elastic (its survivors go on after a worker fails), which worker process has which uid, and which uids are dead
(marked by the launcher when it saw one end, or by a round that left one out: the launcher then ends it)."""
from __future__ import annotations

PREFIX = "minidl/elastic/"


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


def errors(store) -> int:
    """How many workers' own training functions raised (elastic.run counts them): the job fails then."""
    return store.add(f"{PREFIX}errors", 0)
