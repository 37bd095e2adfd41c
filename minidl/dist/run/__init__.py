"""``python -m minidl.dist.run``: torchrun's launcher for minidl scripts (torch 2.13's flags and the worker
environment torchrun gives: RANK, LOCAL_RANK, WORLD_SIZE, ..., TORCHELASTIC_RESTART_COUNT), on one node.

- **The store lives here**, in the launcher, so it outlives the workers. Workers reach it as MASTER_ADDR:
  MASTER_PORT and, told by ``TORCHELASTIC_USE_AGENT_STORE=True`` (torchrun's variable), connect as clients.
- **Restarts**: when a worker fails the others are stopped (SIGTERM, then SIGKILL) and, while --max-restarts
  allows, the group starts again with TORCHELASTIC_RESTART_COUNT one higher. Each attempt meets under a key
  prefix of its own on the same store (``rendezvous.agent_prefix``), rather than on a fresh store on a new
  port: the port the user chose stays the job's, no new port can be taken by someone else between attempts,
  and nothing a dead attempt left (round counters, socket addresses, abort notes) is visible to the next, so
  workers that start seconds apart still meet in a clean round.
- **Failures**: each worker runs under a small bootstrap (``worker.py``) that writes an uncaught exception's
  traceback to TORCHELASTIC_ERROR_FILE (scripts need no ``@record``); the summary names the failed local and
  global ranks, the exit code or signal and the traceback's first lines, and the launcher exits 1.
- **OMP_NUM_THREADS**, where unset, is each worker's share of the cores (cores // nproc, at least 1), not
  torchrun's 1: minidl measured that share best (``launch.fit_threads_to_cores``: 1 thread each wastes cores
  when there are fewer workers than cores, a machine-wide pool each is 8x slower), and setting it before the
  worker starts also reaches the BLAS library, which reads it once at load.
- **Several nodes** (--nnodes N or MIN:MAX): the launchers meet in rounds on the job's store (``rounds.py``,
  served by the launcher whose endpoint is local, or the first to bind it) and restart their workers at the
  new world size when a node joins or leaves (``nodes.py``); an elastic job's survivors go on instead.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time

from ..rendezvous import agent_prefix
from ..store import PrefixStore
from .args import parser, plan_of
from .elastic_jobs import in_job, tend
from .group import ChildFailedError, WorkerGroup, restart_or_fail
from .nodes import run_nodes

__all__ = ["main", "ChildFailedError"]


class _Signaled(Exception):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


def main(argv=None) -> None:
    """Launch the job ``argv`` describes (``sys.argv[1:]`` by default) and wait for it. Raises
    ChildFailedError when it fails, SystemExit for a bad command line or rendezvous."""
    p = parser()
    args = p.parse_args(argv)
    plan = plan_of(args, p.error)
    store = _store(plan)
    log_root = (tempfile.mkdtemp(prefix="minidl_run_") if plan.log_dir is None
                else tempfile.mkdtemp(prefix=f"{plan.run_id}_", dir=_made(plan.log_dir)))
    previous = {s: signal.signal(s, _raise) for s in _SIGNALS}
    try:
        if plan.max_nodes > 1:
            run_nodes(plan, store, log_root, _envs)
        else:
            _run(plan, store, log_root)
    except _Signaled as e:
        sys.stderr.write(f"minidl.dist.run: got {signal.Signals(e.signum).name}: stopped every worker\n")
        raise SystemExit(128 + e.signum)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if plan.log_dir is None:
            shutil.rmtree(log_root, ignore_errors=True)


def _made(path):
    os.makedirs(path, exist_ok=True)
    return path


_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _raise(signum, frame):
    for s in _SIGNALS:   # (a second Ctrl-C must not cut short the stopping of the workers)
        signal.signal(s, signal.SIG_IGN)
    raise _Signaled(signum)


def _store(plan):
    """The job's store: served here (a free port for port 0), or reached at the endpoint within join_timeout."""
    from datetime import timedelta

    from ..store import DistNetworkError, TCPStore
    timeout = timedelta(seconds=plan.join_timeout)
    try:
        try:
            store = TCPStore(plan.host, plan.port, None, is_master=plan.serve, wait_for_workers=False,
                             timeout=timeout)
        except DistNetworkError:   # (c10d: another launcher on this host serves it already: be a client)
            if not (plan.serve and plan.backend == "c10d" and plan.port):
                raise
            plan.serve = False
            store = TCPStore(plan.host, plan.port, None, timeout=timeout)
    except Exception as e:   # (a port in use, nobody listening at the endpoint: a clear message, no worker)
        what = "serve the store at" if plan.serve else "reach the rendezvous endpoint"
        raise SystemExit(f"minidl.dist.run: error: could not {what} {plan.host}:{plan.port} within "
                         f"{plan.join_timeout:g} s: {e}") from None
    plan.port = store.port if plan.serve else plan.port
    return store


def _run(plan, store, log_root):
    restarts = 0
    while True:
        folder = os.path.join(log_root, f"attempt_{restarts}")
        group = WorkerGroup(plan.cmd, _envs(plan, restarts, folder),
                            [os.path.join(folder, str(i)) for i in range(plan.nproc)],
                            plan.redirects, plan.tee)
        try:
            failures = _watch(group, plan.monitor_interval, PrefixStore(agent_prefix(plan.run_id, restarts), store),
                              plan.node_id)
        finally:
            group.stop()
        if not failures:
            return
        restarts = restart_or_fail(failures, restarts, plan.max_restarts)


def _watch(group, interval, store, node) -> list:
    """Poll every ``interval`` seconds until every worker succeeded ([]) or one failed (the failures). In an
    elastic job (its workers said so on ``store``: minidl.dist.elastic) the survivors of a failure go on
    (``elastic_jobs.tend``): the job fails only if none succeeds."""
    marked = set()
    while True:
        if in_job(store):
            outcome = tend(group, store, marked, node)
            if outcome is not None:
                return outcome
        else:
            failures = group.failures()
            if failures or group.done():
                return failures
        time.sleep(interval)


def _envs(plan, restart_count, folder, rnd=None) -> list:
    """Each local rank's environment; ``rnd`` (a closed round of several nodes) gives the node's rank, the
    ranks' offset, the world size and the key prefix (the round's number: rounds are the job's attempts)."""
    base = dict(os.environ, MINIDL_RUN_LAUNCHER_PID=str(os.getpid()))
    if "OMP_NUM_THREADS" not in base:
        base["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // plan.nproc))
    offset, world, node, nodes = (0, plan.nproc, 0, 1) if rnd is None else (
        rnd.rank_offset, rnd.world_size, rnd.group_rank, len(rnd.nodes))
    attempt = restart_count if rnd is None else f"round{rnd.number}"
    envs = []
    for i in range(plan.nproc):
        env = dict(base, RANK=str(offset + i), LOCAL_RANK=str(i), WORLD_SIZE=str(world),
                   LOCAL_WORLD_SIZE=str(plan.nproc), GROUP_RANK=str(node), GROUP_WORLD_SIZE=str(nodes),
                   ROLE_NAME="default", ROLE_RANK=str(offset + i), ROLE_WORLD_SIZE=str(world),
                   MASTER_ADDR=plan.host, MASTER_PORT=str(plan.port),
                   TORCHELASTIC_RESTART_COUNT=str(restart_count), MINIDL_RUN_ATTEMPT=str(attempt),
                   TORCHELASTIC_MAX_RESTARTS=str(plan.max_restarts), TORCHELASTIC_RUN_ID=plan.run_id,
                   TORCHELASTIC_USE_AGENT_STORE="True", MINIDL_ELASTIC_MIN_NODES=str(plan.min_nodes),
                   MINIDL_RUN_NODE_ID=plan.node_id,
                   TORCHELASTIC_ERROR_FILE=os.path.join(folder, str(i), "error.json"))
        envs.append(env)
    return envs
