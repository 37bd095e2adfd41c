"""``minidl.dist.ps``: an asynchronous parameter server (the PS-worker design of ps-lite and
DistBelief's Downpour SGD), under mpiexec, the "gloo" backend or sim ranks::

    dist.init_process_group()
    if ps.init(num_servers=1, consistency="ssp", staleness=2) == "server":
        sys.exit()                      # a server served every worker, then returned
    ps.register("w", minidl.zeros(10, 3), optimizer=ps.SGD(lr=0.1))
    for step in range(steps):
        w = ps.pull("w")
        ps.push("w", gradient_of(w))    # asynchronous: a Work
        ps.clock()                      # the end of this worker's iteration
    ps.shutdown()

The last ``num_servers`` ranks are servers; each holds a contiguous range of every parameter (of
its elements, or of its rows for a row-addressed table, ``sparse=True`` or
``register_embedding``), and applies each push as it arrives with the parameter's server-side
optimizer (``ps.SGD``, ``ps.Adagrad``, ``ps.Adam``: minidl.optim's, lazily on pushed rows).
Consistency: BSP (a pull after clock c sees every worker's pushes from before its clock c, and
no later ones: each iteration's pushes to a parameter are summed and applied as one step of its
optimizer, synchronous SGD on the summed gradients), SSP (``clock()`` waits while this worker is more than ``staleness``
clocks ahead of the slowest) or ASP (nothing waits). Parameters are keyed by registration order
and their first registration sets their value: register the same parameters, with the same
values, in the same order on every worker. ``ps.stats()`` gives the servers' counts and the staleness histogram of the
applied pushes.

Failures (transports.py, server.py): under the "gloo" backend (and sim ranks) workers and servers
talk over links of their own, so a worker may die, freeze, lose its connection or join later
while the job goes on: a lost worker is dropped from the clock (``on_worker_failure="shrink"``) or
ends the job at every worker's next clock ("raise", BSP's default); a worker that reconnects sends
its unanswered requests again and each push is applied once; ``drop_stale_after`` drops pushes
computed too many clocks behind; ``ps.join`` adds a worker. With ``checkpoint_dir`` (and
``durable=True``) a server killed at any moment is restarted from its checkpoint and write-ahead log
while the workers wait (recovery.py), and ``resume=True`` starts a whole job again from there; with
``replicate=True`` each server's range is also kept on the next server, which serves it at once when
the server dies (replication.py). Under MPI one dead process ends the job (MPI's rule).
"""
from __future__ import annotations

import atexit
import json
import logging
import os
import threading
from collections import Counter

import numpy as np

import minidl

from .. import communicators, faults, sim
from .. import state as dist_state
from . import protocol as P
from .optimizers import SGD, Adagrad, Adam
from . import membership, recovery, replication
from .server import Server
from .transports import GroupServerEnd, GroupWorkerEnd
from .worker import Client, Param, Work, _Awaited

__all__ = ["init", "join", "barrier", "store_address", "shutdown", "current_clock", "worker_rank", "num_workers", "active_workers", "num_servers", "worker_group", "register",
           "register_embedding", "push", "pull", "clock", "stats", "SGD", "Adagrad", "Adam", "Work", "DistributedModel"]

CONSISTENCIES = ("bsp", "ssp", "asp")
FAILURE_POLICIES = ("raise", "shrink")
_local = threading.local()   # this rank's client (sim ranks are threads of one process)


def init(num_servers=1, consistency="bsp", staleness=0, *, on_worker_failure=None, drop_stale_after=None,
         checkpoint_dir=None, checkpoint_every=None, checkpoint_seconds=None, durable=False, resume=False,
         replicate=False) -> str:
    """Make the default group's last ``num_servers`` ranks servers and the rest workers
    (collective). A server serves until every worker has called ``shutdown()`` or was lost, then
    returns "server"; a worker returns "worker" at once.

    ``on_worker_failure``: "raise" (BSP's default: every worker's next ``clock()`` raises naming the
    lost worker) or "shrink" (SSP's and ASP's: the job goes on without it). ``drop_stale_after=K``:
    a push computed more than K clocks behind the newest worker is dropped, not applied. Surviving a
    worker's loss needs the "gloo" backend (or simulated ranks): under MPI a dead process ends the job.

    ``checkpoint_dir``: each server checkpoints its state to ``<checkpoint_dir>/server<k>/`` (at the
    start, after the registrations, then every ``checkpoint_every`` clocks of the slowest worker and/or
    ``checkpoint_seconds`` seconds; 60 s if neither is given), and a server killed at any moment is
    restarted from it by ``python -m minidl.dist.ps --resume <checkpoint_dir> --server <k>`` while the
    workers wait (``MINIDL_PS_SERVER_TIMEOUT``, 300 s) and then go on. ``durable=True``: each push (and
    clock, registration...) is appended to a write-ahead log and synced to disk before it is
    acknowledged (requests that wait together share one sync), so the restart loses no acknowledged push; without it the restart goes back to
    the last checkpoint. Server recovery needs links too (the "gloo" backend or simulated ranks).

    ``resume=True``: a job started again (every process, e.g. by ``minidl.dist.run --max-restarts``)
    goes on from the servers' checkpoints and logs in ``checkpoint_dir``: each worker starts at the
    clock ``ps.current_clock()`` says (the slowest worker's when the job stopped) and must redo its
    iterations from there. Under BSP a server drops the pushes of the iterations it had applied in
    full, and the result is the uninterrupted run's; under SSP and ASP, where each push was applied
    as it came, a faster worker's redone pushes (and those of the unfinished iteration) are applied
    again. The workers register the same parameters (shapes, dtypes) as
    the checkpoint's job, else they are refused; their values are the checkpoint's.

    ``replicate=True`` (2 servers or more, links, no checkpoint_dir): server k's range is also kept,
    request by request, on server (k + 1) % num_servers, which serves it at once when server k dies
    (replication.py): no restart, no acknowledged push lost; each push waits for the backup."""
    if consistency not in CONSISTENCIES:
        raise ValueError(f"ps.init: consistency={consistency!r}; it must be one of {', '.join(CONSISTENCIES)}")
    if consistency == "ssp" and staleness < 0:
        raise ValueError(f"ps.init: staleness={staleness} must be >= 0")
    if on_worker_failure not in (None,) + FAILURE_POLICIES:
        raise ValueError(f"ps.init: on_worker_failure={on_worker_failure!r}; it must be 'raise' or 'shrink'")
    if drop_stale_after is not None and (isinstance(drop_stale_after, bool) or not isinstance(drop_stale_after, int)
                                         or drop_stale_after < 0):
        raise ValueError(f"ps.init: drop_stale_after={drop_stale_after!r} must be a number of clocks >= 0 (or None)")
    size, rank, backend = dist_state.get_world_size(), dist_state.get_rank(), dist_state.get_backend()
    if not 1 <= num_servers < size:
        raise ValueError(f"ps.init: num_servers={num_servers} on {size} ranks; there must be at least one server "
                         f"and one worker")
    over_links = _over_links(backend)
    if on_worker_failure == "shrink" and not over_links:
        raise ValueError("ps.init(on_worker_failure='shrink'): this job runs over the process group's messages "
                         f"(backend {backend!r}{', MINIDL_PS_TRANSPORT=group' if backend != 'mpi' else ''}), where "
                         "one dead process ends the whole job (MPI's rule); surviving a worker's loss needs links: "
                         "the 'gloo' backend (init_process_group('gloo'), processes started with RANK, WORLD_SIZE, "
                         "MASTER_ADDR and MASTER_PORT)")
    keeping = _checkpoint_options(checkpoint_dir, checkpoint_every, checkpoint_seconds, durable, resume, over_links,
                                  backend)
    if replicate:
        _check_replication(num_servers, over_links, keeping, backend)
    policy = on_worker_failure or ("raise" if consistency == "bsp" else "shrink")
    workers = size - num_servers
    worker_group = dist_state.new_group(list(range(workers)))
    server = None
    if rank >= workers:
        server = Server(None, rank - workers, num_servers, workers, consistency, staleness, policy, drop_stale_after)
        server.end = (membership.server_end(server, rank) if over_links
                      else GroupServerEnd(None, server.silent))
        server.job = {"consistency": consistency, "staleness": staleness, "on_worker_failure": policy,
                      "drop_stale_after": drop_stale_after, "servers": num_servers, "server": rank - workers,
                      "workers": workers, "rank": rank, **(keeping or {})}
    backup = replication.Backup(server, lambda r: membership.server_end(r, rank, standby=True)) \
        if server is not None and replicate else None
    if over_links:
        problem = recovery.prepare(server) if server is not None and keeping else None
        job = membership.publish(server, rank, workers, num_servers, consistency, staleness, problem, backup)
    if server is not None:
        if keeping:
            if job["resumed_at"] is not None:
                recovery.rewind(server, job["resumed_at"], workers)
            recovery.start(server)
        if backup is not None:
            server.chain = replication.Chain(server, job["feeds"][(server.server + 1) % num_servers], job["token"])
        try:
            server.serve()
        finally:
            if backup is not None:
                backup.close()
        return "server"
    end = membership.worker_end(job, rank) if over_links else GroupWorkerEnd(None, list(range(workers, size)))
    _local.client = Client(end, rank, workers, num_servers, consistency)
    _local.client.job = job if over_links else None
    _local.client.clock_count = (job["resumed_at"] or 0) if over_links else 0
    _local.worker_group = worker_group
    if not communicators.load(backend).ONE_RANK_PER_PROCESS:   # (a simulated rank: a thread)
        if over_links:
            sim.at_rank_exit(_local.client.end.close)   # (its links end as a process's would)
    elif not over_links:
        atexit.register(_exit_without_shutdown, _local.client)
    return "worker"


def _checkpoint_options(folder, every, seconds, durable, resume, over_links, backend):
    """The servers' checkpoint settings (None: no checkpoints), each option checked."""
    if folder is None:
        given = [f"{name}={value!r}" for name, value in (("checkpoint_every", every), ("checkpoint_seconds", seconds),
                                                         ("durable", durable), ("resume", resume))
                 if value not in (None, False)]
        if given:
            raise ValueError(f"ps.init({', '.join(given)}): give checkpoint_dir too (where the servers write "
                             f"their checkpoints{' and logs' if durable else ''})")
        return None
    if every is not None and (isinstance(every, bool) or not isinstance(every, int) or every <= 0):
        raise ValueError(f"ps.init: checkpoint_every={every!r} must be a number of clocks >= 1 (or None)")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                or not seconds > 0):
        raise ValueError(f"ps.init: checkpoint_seconds={seconds!r} must be a number of seconds > 0 (or None)")
    if not over_links:
        raise ValueError(f"ps.init(checkpoint_dir=...): this job runs over the process group's messages (backend "
                         f"{backend!r}), where a dead server ends the whole job (MPI's rule) and cannot be "
                         f"restarted; server recovery needs links: the 'gloo' backend")
    return {"checkpoint_dir": os.path.abspath(os.fspath(folder)), "checkpoint_every": every,
            "checkpoint_seconds": 60.0 if every is None and seconds is None else seconds, "durable": bool(durable),
            "resume": bool(resume)}


def _check_replication(servers, over_links, keeping, backend):
    if servers < 2:
        raise ValueError(f"ps.init(replicate=True): num_servers={servers}; a range is kept on a second server, so "
                         f"at least 2 are needed")
    if not over_links:
        raise ValueError(f"ps.init(replicate=True): this job runs over the process group's messages (backend "
                         f"{backend!r}), where a dead server ends the whole job; replication needs links: the "
                         f"'gloo' backend")
    if keeping is not None:
        raise ValueError("ps.init(replicate=True, checkpoint_dir=...): choose one; a replicated range fails over to "
                         "its backup without a restart, and a restart from a checkpoint would not know what the "
                         "backup applied since")


def _over_links(backend) -> bool:
    """Links (fault tolerant) except under MPI; MINIDL_PS_TRANSPORT="group" keeps the process group's
    messages on any backend (how the MPI path is tested on simulated ranks), "links" asks for links."""
    choice = os.environ.get("MINIDL_PS_TRANSPORT", "")
    if choice not in ("", "group", "links"):
        raise ValueError(f"MINIDL_PS_TRANSPORT={choice!r}: it must be 'group' or 'links' (or unset)")
    if choice == "links" and backend == "mpi":
        raise ValueError("MINIDL_PS_TRANSPORT=links: under MPI the parameter server runs over MPI's messages")
    return choice == "links" or (choice == "" and backend != "mpi")


def join(init_method=None, timeout=None) -> str:
    """Join a running parameter-server job as a new worker, from any process: ``init_method``
    "tcp://HOST:PORT" is the job's own store (server 0 serves it; ``MINIDL_PS_PORT`` fixes its port),
    else the job's world store at MASTER_ADDR:MASTER_PORT tells where it is. The worker then
    registers the same parameters as the others, pulls their current values, and pushes from the
    slowest worker's clock. Returns "worker"."""
    if getattr(_local, "client", None) is not None and not _local.client.closed:
        raise RuntimeError("ps.join: this process is a parameter-server worker already")
    job, me = membership.find(init_method, timeout)
    client = Client(membership.worker_end(job, me), me, job["workers"], len(job["servers"]), job["consistency"])
    client.job = job
    found = []
    Work(client, [(0, client.request(0, P.header(P.WHERE), (),
                                     _Awaited("join", minidl.int64, lambda v: found.append(int(v[0])))))]).wait()
    client.clock_count = found[0]
    Work(client, [(k, client.request(k, P.header(P.JOIN, clock=found[0]))) for k in range(client.servers)]).wait()
    _local.client, _local.worker_group = client, None
    return "worker"


def _exit_without_shutdown(client) -> None:
    """At an MPI worker process's exit: if it never called ``shutdown()``, tell the servers, which end
    the job naming it, rather than wait for it until the timeout (over links, the link's end says so)."""
    if client.closed:
        return
    try:
        for k in range(client.servers):
            client.request(k, P.header(P.EXITED))
        client.end.flush()
    except Exception as e:   # (the process group may be gone already: the servers' timeout names it then)
        logging.getLogger("minidl.dist.ps").warning("ps worker %d exits without shutdown() and could not tell the "
                                                    "servers: %s", client.rank, e)


def _client(what) -> Client:
    client = getattr(_local, "client", None)
    if client is None:
        raise RuntimeError(f"ps.{what}: this rank is not a parameter-server worker; call ps.init(...) first "
                           f"(on a worker)")
    if client.closed:
        raise RuntimeError(f"ps.{what}: called after ps.shutdown() on worker {client.rank}")
    return client


def current_clock() -> int:
    """How many iterations this worker has ended (``clock()`` calls), counted from where it started:
    0, the joining clock after ``ps.join``, or where the job resumes after ``ps.init(resume=True)``."""
    return _client("current_clock").clock_count


def worker_rank() -> int:
    return _client("worker_rank").rank


def num_workers() -> int:
    return _client("num_workers").workers


def active_workers() -> int:
    """How many workers the servers counted as active (neither shut down nor lost) when they last
    answered this worker's clock: ps.init's number until then. ``DistributedModel`` divides its
    gradients by it, so a round of pushes stays one mean gradient after a worker is lost or joins."""
    c = _client("active_workers")
    return c.active if c.active is not None else c.workers


def num_servers() -> int:
    return _client("num_servers").servers


def worker_group():
    """A process group of the workers only (for their own collectives)."""
    c = _client("worker_group")
    if _local.worker_group is None:
        raise RuntimeError(f"ps.worker_group: worker {c.rank} joined with ps.join() and is in no process group; "
                           f"only the workers ps.init started share one")
    return _local.worker_group


def _register(name, shape, dtype, sparse, optimizer, value=None, std=0.0, seed=0):
    c = _client("register")
    if dtype not in (minidl.float32, minidl.float64):
        raise TypeError(f"ps.register({name!r}): parameters are float32 or float64, got {dtype.name}")
    if name in c.params:
        p = c.params[name]
        if (p.shape, p.dtype, p.sparse) != (tuple(shape), dtype, sparse):
            raise ValueError(f"ps.register({name!r}): registered before as {p.describe()}, now with shape "
                             f"{list(shape)}, {dtype.name}{', row-sharded' if sparse else ', dense'}")
        return
    p = Param(len(c.params), name, shape, dtype, sparse, c.servers, counts_steps=optimizer.counts_steps)
    # (kept once every server took it)
    flat = None if value is None else value.detach().reshape(-1)
    row = int(minidl.tensor(shape[1:]).prod()) if len(shape) > 1 else 1
    awaited = []
    for k in range(c.servers):
        lo, hi = p.bounds[k], p.bounds[k + 1]
        part = None if flat is None else flat[lo * row:hi * row] if sparse else flat[lo:hi]
        header = P.header(P.REGISTER, p.key, numel=0 if part is None else part.numel(), dtype=dtype,
                          name_len=len(name.encode()), ndim=len(shape), optimizer=optimizer.kind, sparse=sparse,
                          embedding=value is None, seed=seed)
        payload = [P.text(name), minidl.tensor(list(shape), dtype=minidl.int64),
                   minidl.tensor(optimizer.words() + [std], dtype=minidl.float64)] + ([] if part is None else [part])
        awaited.append((k, c.request(k, header, payload, _Awaited("register", dtype))))
    Work(c, awaited).wait()
    c.params[name] = p


def register(name, init, optimizer=None, sparse=False):
    """Every worker registers each parameter (same name, shape and dtype, in the same order); the
    first registration to reach a server sets its part of the value. ``sparse=True``: rows are
    pushed and pulled by id."""
    if optimizer is None:
        raise ValueError(f"ps.register({name!r}): give the server-side optimizer, e.g. optimizer=ps.SGD(lr=0.1)")
    if sparse and init.ndim < 1:
        raise ValueError(f"ps.register({name!r}): a row-sharded parameter needs at least one dim")
    _register(name, tuple(init.shape), init.dtype, sparse, optimizer, value=init)


def register_embedding(name, num_rows, dim, optimizer=None, init_std=0.01, seed=0, dtype=minidl.float32):
    """A (num_rows, dim) table made on the servers, N(0, init_std) (the same values for any number
    of servers), never built on a worker; rows are pushed and pulled by id."""
    if optimizer is None:
        raise ValueError(f"ps.register_embedding({name!r}): give the server-side optimizer")
    _register(name, (num_rows, dim), dtype, True, optimizer, std=init_std, seed=seed)


def _param(c, name, what):
    p = c.params.get(name)
    if p is None:
        raise KeyError(f"ps.{what}: no parameter named {name!r} was registered (registered: "
                       f"{sorted(c.params) or 'none'})")
    return p


def _rows_by_server(p, rows, what):
    """For a row-sharded parameter: each server's (positions in ``rows``, its local rows)."""
    if not isinstance(rows, minidl.Tensor) or rows.dtype is not minidl.int64 or rows.ndim != 1:
        raise TypeError(f"ps.{what}({p.name!r}): rows must be a 1-D int64 tensor, got "
                        f"{getattr(rows, 'dtype', type(rows).__name__)} {list(getattr(rows, 'shape', []))}")
    if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= p.shape[0]):
        raise IndexError(f"ps.{what}({p.name!r}): rows from {int(rows.min())} to {int(rows.max())} for a table of "
                         f"{p.shape[0]} rows")
    out = []
    for k in range(len(p.bounds) - 1):
        lo, hi = p.bounds[k], p.bounds[k + 1]
        where = ((rows >= lo) & (rows < hi)).nonzero().reshape(-1)
        out.append((where, rows[where] - lo))
    return out


def push(name, grad, rows=None) -> Work:
    """Send a gradient to the servers, which apply it with the parameter's optimizer; returns a Work
    whose ``wait()`` returns once every server has applied its part (under BSP: has taken it, to
    apply when every worker has ended this iteration). A sparse push goes to the servers holding
    its rows; with ``ps.Adam`` to every server, those without rows stepping on none of them, so that
    each shard counts the table's steps (bias correction, as one process's SparseAdam). As with
    ``isend``, the gradient's memory may still be read until then: do not change it before
    ``wait()``. ``grad``: the parameter's shape, or (len(rows), ...) with ``rows``, or a sparse COO
    gradient of a row-sharded one."""
    c = _client(f"push({name!r})")
    faults.collective("ps_push", c.rank, c.workers + c.servers)
    p = _param(c, name, "push")
    if getattr(grad, "is_sparse", False):
        if not p.sparse or tuple(grad.shape) != p.shape or grad.sparse_dim() != 1:
            raise ValueError(f"ps.push({p.name!r}): a sparse gradient of size {list(grad.shape)} with "
                             f"{grad.sparse_dim()} sparse dims for {p.describe()}; it must be the table's size, by row")
        grad = grad.coalesce()
        rows, grad = grad.indices()[0], grad.values()
    groups = _rows_by_server(p, minidl.arange(p.shape[0]) if rows is None else rows, "push") if p.sparse else None
    grad = grad.detach()
    if grad.dtype is not p.dtype:
        raise TypeError(f"ps.push({p.name!r}): a {grad.dtype.name} gradient for {p.describe()}")
    if rows is not None and not p.sparse:
        raise ValueError(f"ps.push({p.name!r}): rows are for row-sharded parameters; {p.describe()} is dense")
    want = p.shape if rows is None else (rows.numel(),) + p.shape[1:]
    if tuple(grad.shape) != tuple(want):
        raise ValueError(f"ps.push({p.name!r}): a gradient of shape {list(grad.shape)} for {p.describe()}"
                         f"{'' if rows is None else f' at {rows.numel()} rows'}; expected {list(want)}")
    awaited = []
    if not p.sparse:
        flat = grad.reshape(-1)
        for k in range(c.servers):
            part = flat[p.bounds[k]:p.bounds[k + 1]]
            awaited.append((k, c.request(k, P.header(P.PUSH, p.key, c.clock_count, numel=part.numel(), dtype=p.dtype),
                                         [part], _Awaited("push", p.dtype))))
        return Work(c, awaited)
    for k, (where, local) in enumerate(groups):
        if local.numel() or p.counts_steps:   # (Adam's bias correction counts the table's steps: no rows, a step)
            part = grad[where]
            header = P.header(P.PUSH, p.key, c.clock_count, rows=local.numel(), numel=part.numel(), dtype=p.dtype)
            awaited.append((k, c.request(k, header, [local, part], _Awaited("push", p.dtype))))
    return Work(c, awaited)


def pull(name, rows=None, async_op=False):
    """The parameter's current value from the servers (or its ``rows``, a 1-D int64 tensor, of a
    row-sharded one); with ``async_op`` a Work whose ``wait()`` returns it."""
    c = _client(f"pull({name!r})")
    faults.collective("ps_pull", c.rank, c.workers + c.servers)
    p = _param(c, name, "pull")
    if rows is not None and not p.sparse:
        raise ValueError(f"ps.pull({p.name!r}): rows are for row-sharded parameters; {p.describe()} is dense")
    if rows is None:   # (each server's part received straight into its place)
        width = int(np.prod(p.shape[1:])) if p.sparse else 1
        out = minidl.empty(p.bounds[-1] * width, dtype=p.dtype)
        awaited = [(k, c.request(k, P.header(P.PULL, p.key, c.clock_count, dtype=p.dtype), (),
                                 _Awaited("pull", p.dtype, into=out[p.bounds[k] * width:p.bounds[k + 1] * width])))
                   for k in range(c.servers)]
        work = Work(c, awaited, lambda: out.reshape(p.shape))
    else:
        out = minidl.empty((rows.numel(),) + p.shape[1:], dtype=p.dtype)
        awaited = []
        for k, (where, local) in enumerate(_rows_by_server(p, rows, "pull")):
            if local.numel():
                def place(values, where=where):
                    out[where] = values.reshape((where.numel(),) + p.shape[1:])
                header = P.header(P.PULL, p.key, c.clock_count, rows=local.numel(), dtype=p.dtype)
                awaited.append((k, c.request(k, header, [local], _Awaited("pull", p.dtype, place))))
        work = Work(c, awaited, lambda: out)
    return work if async_op else work.wait()


def clock() -> None:
    """End this worker's iteration. Under BSP and SSP it returns once this worker is at most
    ``staleness`` clocks (0 for BSP) ahead of the slowest active worker; it raises when a worker
    was lost and ``on_worker_failure`` is "raise"."""
    c = _client("clock")
    faults.collective("ps_clock", c.rank, c.workers + c.servers)
    c.clock_count += 1

    def count(values):   # (the servers' count of active workers, at this clock's answer)
        c.active = int(values[0])
    awaited = [(k, c.request(k, P.header(P.CLOCK, clock=c.clock_count), (), _Awaited("clock", minidl.int64, count)))
               for k in range(c.servers)]
    if c.consistency != "asp":
        Work(c, awaited).wait()


def barrier() -> None:
    """Wait until every active worker (ps.init's and joined ones, not the lost) has called it:
    over the servers, so a lost worker does not hold it up as a process-group barrier would."""
    c = _client("barrier")
    Work(c, [(0, c.request(0, P.header(P.BARRIER)))]).wait()


def stats() -> dict:
    """The servers' counts, summed over the servers (a dense push counts once per server):
    "pushes" applied, "pulls" served, "rejected" requests, "dropped_stale" pushes (``drop_stale_after``),
    "duplicates" (pushes sent again after a broken link, not applied again), "discarded" (BSP: a lost
    worker's pushes of the iteration it did not end); histograms "staleness" (applied pushes by how
    many clocks their worker was ahead of the slowest active one) and "age" ({"applied": ...,
    "dropped": ...} by how many clocks behind the newest); "lost" (per worker: when, at which clock,
    how many of its pushes were applied, why), "joined", "resumed", "pushes_by" worker and each
    worker's "clocks"."""
    c = _client("stats")
    found = [None] * c.servers

    def keep(k):
        return lambda values: found.__setitem__(k, json.loads(P.read_text(values.numpy())))
    Work(c, [(k, c.request(k, P.header(P.STATS), (), _Awaited("stats", minidl.uint8, keep(k))))
             for k in range(c.servers)]).wait()
    total = {key: sum(f[key] for f in found) for key in ("pushes", "pulls", "rejected", "dropped_stale",
                                                         "duplicates", "discarded")}

    def summed(key):
        hist = {}
        for f in found:
            for k, n in f[key].items():
                hist[int(k)] = hist.get(int(k), 0) + n
        return dict(sorted(hist.items()))
    total["staleness"] = summed("staleness")
    total["age"] = {"applied": summed("age_applied"), "dropped": summed("age_dropped")}
    for key in ("lost", "joined", "resumed"):   # (a worker's n-th event on every server is the same event)
        events = {}
        for f in found:
            nth = Counter()
            for e in f[key]:
                nth[e["worker"]] += 1
                events.setdefault((e["worker"], nth[e["worker"]]), []).append(e)
        total[key] = [dict(min(es, key=lambda e: e["at"]), **({"pushes": sum(e["pushes"] for e in es)}
                                                             if key == "lost" else {}))
                      for es in events.values()]
    total["pushes_by"] = {}
    for f in found:
        for w, n in f["pushes_by"].items():
            total["pushes_by"][int(w)] = total["pushes_by"].get(int(w), 0) + n
    total["clocks"] = {int(w): c for w, c in found[0]["clocks"].items()}
    return total


def store_address() -> str:
    """Where a worker joins this job: the "tcp://HOST:PORT" of the job's store, for ``ps.join``
    (over links only: under MPI no worker can join)."""
    c = _client("store_address")
    if c.job is None:
        raise RuntimeError("ps.store_address: this job runs over MPI, where no worker can join; the 'gloo' "
                           "backend lets workers join")
    return f"tcp://{c.job['store']}"


def shutdown() -> None:
    """This worker is done: its outstanding requests are completed, then every server is told."""
    c = _client("shutdown")
    c.drain_all()
    for k in range(c.servers):
        c.request(k, P.header(P.SHUTDOWN))
    c.drain_all()
    c.end.close()
    c.closed = True


from .model import DistributedModel  # noqa: E402  (it uses the functions above)
