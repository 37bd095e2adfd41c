"""The launcher of one node among several (--nnodes N or MIN:MAX): rendezvous with the other launchers,
run this node's workers at the round's ranks, and start over when the membership changes.

Restarts are counted as torch 2.13 counts them: a failure of this node's workers uses one of
--max-restarts (and TORCHELASTIC_RESTART_COUNT goes up); a membership change (a node joined or left)
restarts the workers at the new world size without using one. Each round's workers meet under that
round's key prefix, so no attempt ever sees another's keys.
"""
from __future__ import annotations

import os
import sys
import time

from ..store import DistStoreError
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
        try:
            outcome = _watch(group, rdzv, plan.monitor_interval)
            if isinstance(outcome, list) and restarts < plan.max_restarts:   # (tell the other nodes first)
                rdzv.next_round(rnd.number)
            elif isinstance(outcome, list):
                rdzv.finish("failed")
        finally:
            group.stop()
        if outcome is None:
            rdzv.wait_others(plan.monitor_interval, plan.serve)
            return
        if isinstance(outcome, str):
            sys.stderr.write(f"minidl.dist.run: {outcome}: restarting the workers after a new rendezvous\n")
            continue
        restarts = restart_or_fail(outcome, restarts, plan.max_restarts)


def _watch(group, rdzv, interval):
    """None when every worker succeeded, the failures when one failed, or why the membership changed."""
    while True:
        failures = group.failures()
        if failures:
            return failures
        if group.done():
            return None
        why = rdzv.changed()
        if why is not None:
            return why
        time.sleep(interval)
