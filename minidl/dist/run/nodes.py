"""The launcher of one node among several (--nnodes N or MIN:MAX): rendezvous with the other launchers,
run this node's workers at the round's ranks, and start over when the membership changes.

Restarts are counted as torch 2.13 counts them: a failure of this node's workers uses one of
--max-restarts (and TORCHELASTIC_RESTART_COUNT goes up); a membership change (a node joined or left)
restarts the workers at the new world size without using one. Each round's workers meet under that
round's key prefix, so no attempt ever sees another's keys.

An elastic job (minidl.dist.elastic) survives lost workers and nodes in the job instead: a failed worker
ends nothing and a silent node is left behind, while the survivors on every node rebuild their group among
themselves. A node whose workers all died waits aside: done when the others finish the job, back in the next
round when there is one (the survivors' round was refused: fewer nodes than --nnodes MIN), or, when nobody
went on, a restart as usual. A node that joins still makes a new round: the workers start again and resume
from the last distributed checkpoint. A training function's error fails the round the usual way.
"""
from __future__ import annotations

import os
import sys
import time

from ..rendezvous import agent_prefix
from ..store import DistStoreError, PrefixStore
from .elastic_jobs import in_job, job_failed, tend
from .group import WorkerGroup, restart_or_fail
from .rounds import Rendezvous


def run_nodes(plan, store, log_root, envs_of) -> None:
    """Run rounds until this node's workers succeed (and the others' did) or fail with no restart left
    (ChildFailedError). The job's store going away (its host's launcher
    ended) is a clear SystemExit."""
    rdzv = Rendezvous(store, plan.run_id, plan.nproc, plan.min_nodes, plan.max_nodes,
                      node_rank=plan.node_rank, last_call=plan.last_call, join_timeout=plan.join_timeout,
                      keep_alive=plan.keep_alive, endpoint=f"{plan.host}:{plan.port}")
    try:
        _rounds(plan, rdzv, log_root, envs_of)
    except DistStoreError as e:
        raise SystemExit(f"minidl.dist.run: error: the job's store is gone, so this node stops: {e}") from None


def _rounds(plan, rdzv, log_root, envs_of) -> None:
    restarts = 0
    while True:
        rnd = rdzv.join()
        sys.stderr.write(f"minidl.dist.run: round {rnd.number}: node {rnd.group_rank} of {len(rnd.nodes)}, "
                         f"ranks {rnd.rank_offset}..{rnd.rank_offset + plan.nproc - 1} of {rnd.world_size}\n")
        folder = os.path.join(log_root, f"attempt_{restarts}_round_{rnd.number}")
        group = WorkerGroup(plan.cmd, envs_of(plan, restarts, folder, rnd),
                            [os.path.join(folder, str(i)) for i in range(plan.nproc)], plan.redirects, plan.tee)
        workers = PrefixStore(agent_prefix(plan.run_id, f"round{rnd.number}"), rdzv.store)
        aside = False   # (this node's workers of an elastic job died; the others may go on)
        try:
            outcome = _watch(group, rdzv, plan.monitor_interval, workers, plan.node_id)
            aside = isinstance(outcome, list) and in_job(workers) and not job_failed(workers)
            if isinstance(outcome, list) and not aside and restarts < plan.max_restarts:   # (tell the others first)
                rdzv.next_round(rnd.number)
            elif isinstance(outcome, list) and not aside:
                rdzv.finish("failed")
        finally:
            group.stop()
        if aside:
            outcome = _stand_by(plan, rdzv, outcome, restarts, workers)
        if outcome is None:
            if not aside:
                rdzv.wait_others(plan.monitor_interval, plan.serve)
            return
        if isinstance(outcome, str):
            sys.stderr.write(f"minidl.dist.run: {outcome}: restarting the workers after a new rendezvous\n")
            continue
        restarts = restart_or_fail(outcome, restarts, plan.max_restarts)


def _stand_by(plan, rdzv, failures, restarts, workers):
    """This node's workers of an elastic job all died, whose survivors on other nodes may go on: wait aside.
    None when another node's workers finished the job; why, when a node joining began a new round (this node
    is back in it without using a restart: the job had survived its loss); else the failures, for a restart:
    the survivors were refused, or nobody went on (then every node opens the next round while its restarts
    allow)."""
    sys.stderr.write(f"minidl.dist.run: this node's workers of the elastic job died "
                     f"({failures[0].describe().splitlines()[0]}): waiting while the other nodes go on\n")
    fate = rdzv.stand_by(plan.monitor_interval)
    if fate == "ok":
        rdzv.release(plan.monitor_interval, plan.serve)
        sys.stderr.write("minidl.dist.run: the other nodes finished the elastic job\n")
        return None
    if fate == "restart" and not job_failed(workers):
        return "a node joined the elastic job while this node's workers were gone"
    if fate == "lost" and restarts < plan.max_restarts:
        rdzv.next_round(rdzv.round.number)
    elif fate == "lost":
        rdzv.release(plan.monitor_interval, plan.serve)
    return failures


def _watch(group, rdzv, interval, store, node):
    """None when every worker succeeded, the failures when one failed (in an elastic job: when all ended, the
    survivors having gone on in the job, ``elastic_jobs.tend``), or why the membership changed.

    Once an elastic job failed as a whole (its round was refused), this node's workers end by themselves — they
    raise MembershipError — so their failure restarts this node, as the others' restart theirs, whichever node
    opens the next round first; only workers still running a keep-alive later are stopped for the new round.
    (Otherwise a node would restart without using a restart or by one, as the race went.)"""
    marked, failed_at = set(), None
    while True:
        elastic = in_job(store)
        if elastic:
            outcome = tend(group, store, marked, node)
            if outcome is not None:
                return outcome or None
            if failed_at is None and job_failed(store):
                failed_at = time.monotonic()
        else:
            failures = group.failures()
            if failures:
                return failures
            if group.done():
                return None
        if failed_at is not None and time.monotonic() - failed_at < rdzv.keep_alive:
            rdzv.beat()
        elif (why := rdzv.changed(elastic)) is not None:
            return why
        time.sleep(interval)
