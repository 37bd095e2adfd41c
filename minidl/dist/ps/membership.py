"""Who is in a parameter-server job over links: every server's address and the job's token, told to
the ranks at ``ps.init``, and kept in a store that server 0 serves, where a worker that comes later
(``ps.join``) finds them and takes a worker id (after the ranks'). Server 0 serves it rather than
the world's store, whose host (rank 0, a worker) may be the process that dies. A restarted server
(recovery.py) writes where it listens now in that store, and server 0 serves the store again.
"""
from __future__ import annotations

import json
import logging
import os
import secrets
from datetime import timedelta
from urllib.parse import urlparse

from .. import state as dist_state
from ..communicators.base import DistError
from ..communicators.socket import address, env_seconds
from ..objects import all_gather_object
from ..store import TCPStore
from .transports import LinkServerEnd, LinkWorkerEnd

log = logging.getLogger("minidl.dist.ps")
WORLD_KEY = "minidl/ps/store"   # in the world's store (gloo): where the job's own store is
WORKER_TIMEOUT = 120.0


def worker_timeout() -> float:
    """How long a worker may send nothing, not even a heartbeat, before the servers drop it as lost
    (MINIDL_PS_WORKER_TIMEOUT; a SIGKILLed worker is found at once, by its closed connection)."""
    return env_seconds("MINIDL_PS_WORKER_TIMEOUT", WORKER_TIMEOUT)


def server_end(server, rank, port=0, standby=False) -> LinkServerEnd:
    """A server's links; a restarted server asks for its old ``port`` (workers try that address first)
    and takes another when it is not free; a backup's ``standby`` end refuses workers until promoted."""
    server.patience = worker_timeout()
    try:
        return LinkServerEnd(rank, server.admit, server.patience, port=port, standby=standby)
    except OSError as e:
        log.warning("parameter server %d: port %d is taken (%s); listening on another one", server.server, port, e)
        return LinkServerEnd(rank, server.admit, server.patience)


def publish(server, rank, workers, servers, consistency, staleness, problem=None, backup=None) -> dict:
    """Collective over the world: every rank learns the job (servers' addresses, token, store), or
    every rank raises the ``problem`` a server found (a checkpoint folder it cannot write)."""
    mine = {"problem": problem, "resumed_at": None if server is None else server.resumed_at}
    if server is not None and problem is None:
        mine.update(address=server.end.address, checkpoint_dir=server.job.get("checkpoint_dir"),
                    **({} if backup is None else {"feed": backup.feed.address, "standby": backup.standby.address}))
        if server.server == 0:
            port = int(os.environ.get("MINIDL_PS_PORT", "0"))
            server.store = TCPStore(address(), port, is_master=True, wait_for_workers=False)
            mine.update(store=f"{server.store.host}:{server.store.port}", token=secrets.randbits(62))
    gathered = [None] * dist_state.get_world_size()
    all_gather_object(gathered, mine)
    problems = [g["problem"] for g in gathered if g["problem"]]
    if problems:
        if server is not None:
            server.end.close()
            server.store = None   # (its server stops with it)
        raise ValueError(problems[0])
    first = gathered[workers]
    job = {"servers": [g["address"] for g in gathered[workers:]], "token": first["token"], "store": first["store"],
           "workers": workers, "consistency": consistency, "staleness": staleness,
           "checkpoint_dir": first["checkpoint_dir"],   # (workers wait for a lost server when it is set)
           "resumed_at": min((g["resumed_at"] for g in gathered[workers:] if g["resumed_at"] is not None),
                             default=None)}   # (ps.init(resume=True): the clock every worker starts at)
    if "standby" in first:   # (replicate=True: range k fails over to server k + 1's standby end)
        job["backups"] = [gathered[workers + (k + 1) % servers]["standby"] for k in range(servers)]
        job["feeds"] = [g["feed"] for g in gathered[workers:]]
    if server is not None:
        server.job.update(token=job["token"], store=job["store"], address=server.end.address, published=job)
        server.end.set_token(job["token"])
        if backup is not None:
            backup.set_token(job["token"])
        if server.server == 0:
            server.store.set("ps/job", json.dumps(job))
            server.store.add("ps/ids", len(gathered))   # (a joining worker's id follows the ranks')
            world = dist_state._state().get("store")
            if world is not None:
                world.set(WORLD_KEY, job["store"])
            log.info("parameter server 0: workers may join this job with ps.join('tcp://%s')", job["store"])
    return job


def republish(server, ids, moved=None) -> None:
    """A restarted server says where it listens now, in the job's store: server 0 serves that store
    again, on its old port, with what it held (the job, the next worker id)."""
    job = server.job["published"]
    host, port = _host_port(job["store"])
    key = f"ps/server/{server.server}"
    try:
        if server.server == 0:
            server.store = TCPStore(address(), port, is_master=True, wait_for_workers=False)
            server.store.set("ps/job", json.dumps(job))
            server.store.add("ps/ids", max(int(ids or 0), max(server.clocks, default=-1) + 1))
            for k, where in (moved or {}).items():   # (the other servers' restarts, as its checkpoint knew them)
                server.store.set(f"ps/server/{k}", where)
            server.store.set(key, server.end.address)
        else:
            TCPStore(host, port, is_master=False, timeout=timedelta(seconds=5)).set(key, server.end.address)
    except (DistError, OSError, RuntimeError) as e:
        log.warning("parameter server %d: could not tell the job's store at %s where it listens now (%s); workers "
                    "find it at its old address %s only", server.server, job["store"], e, job["servers"][server.server])


def addresses(store, servers) -> dict:
    """The servers' addresses a store says (written by restarted servers), by server."""
    return {k: store.get(f"ps/server/{k}").decode() for k in range(servers) if store.check([f"ps/server/{k}"])}


def locate(job, k):
    """Where server k listens now (the store's word, after a restart), or None if the store cannot say."""
    try:
        return addresses(TCPStore(*_host_port(job["store"]), is_master=False, timeout=timedelta(seconds=2)),
                         len(job["servers"])).get(k)
    except (DistError, OSError, RuntimeError):
        return None


def _host_port(where):
    host, _, port = where.rpartition(":")
    return host, int(port)


def worker_end(job, me) -> LinkWorkerEnd:
    """A worker's links; in a job whose servers checkpoint, a lost server is waited for (restarted)."""
    waits = job.get("checkpoint_dir") is not None
    return LinkWorkerEnd(me, job["token"], job["servers"], keep_pushes=job["consistency"] == "bsp",
                         patience=recovery_wait() if waits else None,
                         locate=(lambda k: locate(job, k)) if waits else None, checkpoint_dir=job.get("checkpoint_dir"),
                         backups=job.get("backups"))


def recovery_wait() -> float:
    """How long a worker waits for a lost server to be restarted (MINIDL_PS_SERVER_TIMEOUT)."""
    return env_seconds("MINIDL_PS_SERVER_TIMEOUT", 300.0)


def find(init_method, timeout) -> tuple:
    """(the job, a new worker id) from the job's store at ``init_method`` (tcp://HOST:PORT), or from the
    world's store at MASTER_ADDR:MASTER_PORT."""
    wait = timedelta(seconds=30 if timeout is None else float(timeout))
    if init_method is None:
        host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        if not host or not port:
            raise ValueError("ps.join: give init_method='tcp://HOST:PORT' (the job's store, logged by parameter "
                             "server 0), or set MASTER_ADDR and MASTER_PORT to the job's world store")
        world = _open(f"tcp://{host}:{port}", "the world's store", wait)
        if not world.check([WORLD_KEY]):
            raise ValueError(f"ps.join: the store at {host}:{port} knows no parameter-server job (no ps.init over "
                             f"the 'gloo' backend met there)")
        init_method = f"tcp://{world.get(WORLD_KEY).decode()}"
    store = _open(init_method, "the job's store", wait)
    if not store.check(["ps/job"]):
        raise ValueError(f"ps.join: {init_method} holds no parameter-server job")
    if store.check(["ps/ended"]):
        raise DistError(f"ps.join: the parameter-server job at {init_method} has ended")
    job = json.loads(store.get("ps/job"))
    for k, where in addresses(store, len(job["servers"])).items():   # (servers restarted elsewhere)
        job["servers"][k] = where
    return job, store.add("ps/ids", 1) - 1


def _open(url, what, timeout):
    parts = urlparse(url)
    if parts.scheme != "tcp" or not parts.hostname or not parts.port:
        raise ValueError(f"ps.join: {url!r} is not tcp://HOST:PORT")
    try:
        return TCPStore(parts.hostname, parts.port, is_master=False, timeout=timeout)
    except (DistError, OSError, RuntimeError) as e:
        raise DistError(f"ps.join: no parameter-server job at {url} ({what} cannot be reached: {e}); it has ended "
                        f"or never started") from None
