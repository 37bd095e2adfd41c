"""``minidl.dist.ps``: an asynchronous parameter server (the PS-worker design of ps-lite and
DistBelief's Downpour SGD) on minidl.dist's point-to-point layer, under mpiexec or sim ranks::

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
"""
from __future__ import annotations

import atexit
import logging
import threading

import numpy as np

import minidl

from .. import communicators
from .. import state as dist_state
from . import protocol as P
from .optimizers import SGD, Adagrad, Adam
from .server import Server
from .worker import Client, Param, Work, _Awaited

__all__ = ["init", "shutdown", "worker_rank", "num_workers", "num_servers", "worker_group", "register",
           "register_embedding", "push", "pull", "clock", "stats", "SGD", "Adagrad", "Adam", "Work", "DistributedModel"]

CONSISTENCIES = ("bsp", "ssp", "asp")
_local = threading.local()   # this rank's client (sim ranks are threads of one process)


def init(num_servers=1, consistency="bsp", staleness=0) -> str:
    """Make the default group's last ``num_servers`` ranks servers and the rest workers
    (collective). A server serves until every worker has called ``shutdown()``, then returns
    "server"; a worker returns "worker" at once."""
    if consistency not in CONSISTENCIES:
        raise ValueError(f"ps.init: consistency={consistency!r}; it must be one of {', '.join(CONSISTENCIES)}")
    if consistency == "ssp" and staleness < 0:
        raise ValueError(f"ps.init: staleness={staleness} must be >= 0")
    size, rank = dist_state.get_world_size(), dist_state.get_rank()
    if not 1 <= num_servers < size:
        raise ValueError(f"ps.init: num_servers={num_servers} on {size} ranks; there must be at least one server "
                         f"and one worker")
    workers = size - num_servers
    worker_group = dist_state.new_group(list(range(workers)))
    if rank >= workers:
        Server(None, rank - workers, num_servers, workers, consistency, staleness).serve()
        return "server"
    _local.client = Client(None, rank, workers, num_servers, consistency)
    _local.worker_group = worker_group
    if communicators.load(dist_state.get_backend()).ONE_RANK_PER_PROCESS:
        atexit.register(_exit_without_shutdown, _local.client)
    return "worker"


def _exit_without_shutdown(client) -> None:
    """At a worker process's exit: if it never called ``shutdown()``, tell the servers, which end
    the job naming it, rather than wait for it until the timeout."""
    if client.closed:
        return
    try:
        for k in range(client.servers):
            client.request(k, P.header(P.EXITED))
        for work in client.sends:
            work.wait()
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


def worker_rank() -> int:
    return _client("worker_rank").rank


def num_workers() -> int:
    return _client("num_workers").workers


def num_servers() -> int:
    return _client("num_servers").servers


def worker_group():
    """A process group of the workers only (for their own collectives)."""
    _client("worker_group")
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
    ``staleness`` clocks (0 for BSP) ahead of the slowest unfinished worker."""
    c = _client("clock")
    c.clock_count += 1
    replies = c.consistency != "asp"
    awaited = [(k, c.request(k, P.header(P.CLOCK, clock=c.clock_count), (),
                             _Awaited("clock", minidl.int64) if replies else None)) for k in range(c.servers)]
    if replies:
        Work(c, awaited).wait()


def stats() -> dict:
    """The servers' counts (pushes applied, pulls served, requests rejected) and the histogram of
    the applied pushes' staleness (how many clocks the pushing worker was ahead of the slowest
    unfinished one), summed over the servers: a dense push counts once per server. Under BSP a
    push is counted once applied, when every worker has ended its iteration."""
    c = _client("stats")
    found = [None] * c.servers

    def keep(k):
        return lambda values: found.__setitem__(k, values.tolist())
    Work(c, [(k, c.request(k, P.header(P.STATS), (), _Awaited("stats", minidl.int64, keep(k))))
             for k in range(c.servers)]).wait()
    hist = {}
    for values in found:
        for staleness, count in enumerate(values[3:]):
            if count:
                hist[staleness] = hist.get(staleness, 0) + count
    return {"pushes": sum(v[0] for v in found), "pulls": sum(v[1] for v in found),
            "rejected": sum(v[2] for v in found), "staleness": hist}


def shutdown() -> None:
    """This worker is done: its outstanding requests are completed, then every server is told."""
    c = _client("shutdown")
    c.drain_all()
    for k in range(c.servers):
        c.request(k, P.header(P.SHUTDOWN))
    c.drain_all()
    c.closed = True


from .model import DistributedModel  # noqa: E402  (it uses the functions above)
