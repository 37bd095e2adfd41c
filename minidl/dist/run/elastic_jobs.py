"""What the launcher and minidl.dist.elastic's workers say to each other on the job's store: that the job is
elastic (its survivors go on after a worker fails), which worker process has which uid, and which uids are dead
(marked by the launcher when it saw one end, or by a round that left one out: the launcher then ends it). A worker
is known by its node (its launcher's MINIDL_RUN_NODE_ID) and pid: pids repeat across nodes."""
from __future__ import annotations

import json

PREFIX = "minidl/elastic/"


def in_job(store) -> bool:
    """Whether the workers on ``store`` run under elastic.run (the launcher then lets survivors go on)."""
    return store.check([PREFIX + "in_job"])


def mark_dead(store, node: str, pid: int) -> None:
    """The launcher saw worker ``pid`` of its ``node`` end: its round need not wait for its beats to stop."""
    key = f"{PREFIX}pid/{node}/{pid}"
    if store.check([key]):
        store.set(f"{PREFIX}dead/{store.get(key).decode()}", "1")


def left_out(store, node: str, pid: int) -> bool:
    """Whether a round left worker ``pid`` of ``node`` out (it froze, or came back too late): the launcher ends it."""
    key = f"{PREFIX}pid/{node}/{pid}"
    return store.check([key]) and store.check([f"{PREFIX}dead/{store.get(key).decode()}"])


def trained(store, node: str, pid: int) -> bool:
    """Whether worker ``pid`` of ``node`` had finished its training function (it left the rounds): a failure
    after that is the script's own (a final save or export that raised), not a lost worker."""
    key = f"{PREFIX}pid/{node}/{pid}"
    return store.check([key]) and store.check([f"{PREFIX}left/{store.get(key).decode()}"])


def errors(store) -> int:
    """How many workers' scripts raised (in the training function: elastic.run counts them; after it: the
    launcher does): the job fails then."""
    return store.add(f"{PREFIX}errors", 0)


def job_failed(store) -> bool:
    """Whether the job as a whole failed (and may restart from its last distributed checkpoint): a script
    raised, or the newest round refused to go on (too few workers or nodes)."""
    latest = PREFIX + "latest"
    if errors(store):
        return True
    if not store.check([latest]):
        return False
    closed = f"{PREFIX}round/{store.get(latest).decode()}/closed"
    return store.check([closed]) and json.loads(store.get(closed))["refused"] is not None


def tend(group, store, marked: set, node: str):
    """One look at the workers of an elastic job that launcher ``node`` runs: a failed one is marked dead (once:
    ``marked``; one that failed after its training function returned counts as an error of the script's), one a
    round left out (frozen) is ended. Once all have ended: [] when one succeeded and no script raised anywhere,
    else the failures; None while some still run."""
    ended = group.ended()   # (first: a worker that ends during this look is in it, or in the next)
    for f in group.failures():
        if f.local_rank not in marked:
            pid = group.procs[f.local_rank].pid
            if trained(store, node, pid):
                store.add(f"{PREFIX}errors", 1)
            mark_dead(store, node, pid)
            marked.add(f.local_rank)
    for p in group.procs:
        if p.poll() is None and left_out(store, node, p.pid):
            group.end(p)
    if not ended:
        return None
    return group.failures() if not group.succeeded() or errors(store) else []
