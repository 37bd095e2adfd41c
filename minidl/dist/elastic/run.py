"""elastic.run: training that survives a dead worker, in the job (Horovod's model, on minidl's pieces).

``run(train)(state)`` syncs the state from rank 0 and calls ``train(state)``. When a collective fails — a peer
was killed, froze, or raised — every survivor's collective raises DistError within the transport's bound (the
socket transport: at once for a closed connection, ``MINIDL_DIST_HEARTBEAT`` for a frozen peer). Then each
survivor rolls back to its last commit, closes the broken group, meets the others in the next round on the
job's store (``membership.py``), starts a new group among them at the new size, syncs the state from the new
rank 0 and calls ``train(state)`` again: the steps since the commit are redone by all alike, none committed
is lost. A worker started later (``MINIDL_ELASTIC_JOIN=1``) waits on the store; the next ``commit()`` of the
others stops them and they rebuild the group with it.
"""
from __future__ import annotations

import functools
import os
from datetime import timedelta

from .. import state as dist_state
from ..communicators.base import DistError
from ..rendezvous import _agent_store
from ..store import DistStoreError, PrefixStore
from .membership import PREFIX, Membership, MembershipError


START_SECONDS = 5.0   # the least time a rebuilt group's start may take (its members are all there)


class MembershipChanged(Exception):
    """Raised by ``commit()`` when a newcomer waits: the group is rebuilt from that commit."""


def run(train):
    """``train(state, *args, **kwargs)`` run elastically; see the module's docstring."""
    @functools.wraps(train)
    def wrapper(state, *args, **kwargs):
        membership = _start(state)
        object.__setattr__(state, "running", True)
        rebuild = membership.round is None   # (a newcomer builds its first group here)
        synced, failed_starts = False, 0
        try:
            while True:
                if rebuild or not synced:
                    try:
                        if rebuild:
                            _rebuild(membership, failed_starts)
                        state.sync()
                    except (DistError, DistStoreError, OSError):   # (a peer lost while the group starts, or
                        rebuild, failed_starts = True, failed_starts + 1   # during the sync: the round after)
                        continue
                    if membership.round:
                        state.on_reset()
                    rebuild, synced, failed_starts = False, True, 0
                try:
                    result = train(state, *args, **kwargs)
                except DistError:
                    state.restore()                 # (steps since the last commit: taken by some ranks only)
                except MembershipChanged:
                    pass                            # (everyone stopped right after the same commit)
                except BaseException as e:
                    membership.failed(e)            # (a bug, not a lost worker: the job ends, naming it)
                    raise
                else:
                    membership.leave()
                    return result
                rebuild = True
        finally:
            object.__setattr__(state, "running", False)
            membership.close()
    return wrapper


def _store():
    """The job's store, which must outlive any worker: the launcher's (minidl.dist.run serves it)."""
    kept = dist_state._process.get("store")
    if kept is not None:
        return kept
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":   # (a newcomer: the attempt's key space)
        return _agent_store(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), None, timedelta(minutes=5))
    raise RuntimeError("elastic.run: the job's store must outlive its workers: start the job with "
                       "python -m minidl.dist.run (its store lives in the launcher)")


def _start(state) -> Membership:
    """This process's membership: round 0 with the group it was started in, or a newcomer's wait."""
    joining = os.environ.get("MINIDL_ELASTIC_JOIN") == "1"
    if not joining and not dist_state.is_initialized():
        dist_state.init_process_group("gloo")
    if not joining and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        raise RuntimeError("elastic.run: the job's store must outlive its workers: start the job with "
                           "python -m minidl.dist.run (its store lives in the launcher), not with a store "
                           "rank 0 serves")
    membership = Membership(_store(), min_workers=int(os.environ.get("MINIDL_ELASTIC_MIN_WORKERS", "1")),
                            min_nodes=int(os.environ.get("MINIDL_ELASTIC_MIN_NODES", "1")))
    object.__setattr__(state, "membership", membership)
    state.commit_snapshot()   # (what the caller set up after State(...) is what the job starts from)
    if joining:
        membership.announce()
    else:
        from ..objects import all_gather_object
        uids = [None] * dist_state.get_world_size()
        all_gather_object(uids, membership.uid)
        membership.start(uids, dist_state.get_rank(), dist_state._default().config.timeout)
        membership.store.set(PREFIX + "in_job", "1")   # (the launcher then lets survivors go on)
        if getattr(state, "checkpoint_dir", None) is not None:
            state.resume()   # (a restarted job: from the newest distributed checkpoint, if there is one)
    return membership


def _rebuild(membership: Membership, tries: int) -> None:
    """Close the broken group (if any); meet the others in the next round; start the new group once every
    member is there (a DistError where one died meanwhile: the caller goes to the round after). The group
    starts with a short timeout — every member said it is ready, so one missing at the start has died, and
    the survivors learn so in seconds, not in the group's whole timeout — which is then set back. It doubles
    with each of the ``tries`` that failed before (up to the group's timeout), so a start slower than that (a
    loaded machine) gets there."""
    if dist_state.is_initialized():
        try:
            dist_state.destroy_process_group()
        except Exception:  # noqa: BLE001 -- a failed group may not close cleanly: it is left behind
            dist_state._process.pop("default", None)
            dist_state._process.pop("subgroups", None)
    try:
        r, rank, size = membership.next_round()
    except DistStoreError as e:   # (the launcher, and its store, are gone: the job is over)
        raise MembershipError(f"elastic: the job's store is gone ({e}); the job has ended") from None
    membership.ready()
    store = PrefixStore(f"{PREFIX}round/{r}/group", membership.store)
    timeout = membership.group_timeout()
    start = min(max(START_SECONDS, 3 * membership.dead_seconds) * 2 ** min(tries, 10), timeout)
    dist_state.init_process_group("gloo", store=store, rank=rank, world_size=size, timeout=start)
    dist_state._set_pg_timeout(timeout)
    dist_state._process["store"] = membership.store
