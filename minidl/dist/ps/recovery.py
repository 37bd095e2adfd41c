"""A server that outlives its process: what it checkpoints, what it logs ahead, and how a new
process takes its place.

- **Checkpoints** (``checkpoint_dir``): a server writes its whole state -- every shard's values and
  its optimizer's state, each worker's clock and last sequence number, BSP's pushes of the running
  iteration, the counts of ``ps.stats()`` and the job's settings -- to
  ``<checkpoint_dir>/server<k>/`` (durability.py: safetensors, atomic, checksummed): once at the
  start, once the registrations are done, then every ``checkpoint_every`` clocks of the slowest
  worker and/or ``checkpoint_seconds`` seconds.
- **The write-ahead log** (``durable=True``): every request that changes the state (register,
  push, clock, join, shutdown, barrier) and every lost or returning worker is appended to the log
  that follows the newest checkpoint before it is applied, and synced before it is answered (the
  requests that waited together share one sync). So an acknowledged push is on disk. Without it a restart loses what the server applied since its last checkpoint.
- **Restart** (``python -m minidl.dist.ps --resume DIR --server K``, or ``restart``): a new process
  loads the newest checkpoint, replays the log after it (with replies going nowhere), listens on the
  old port when it can (and says where in the job's store in any case; server 0 serves that store
  again on its old port), and serves. A worker waits for the restart (``MINIDL_PS_SERVER_TIMEOUT``),
  connects again, and sends every request the server has not answered: those the log had taken are
  repeats the server answers without applying again (their sequence numbers), the others are new.
"""
from __future__ import annotations

import logging
import os
import time
from collections import Counter
from contextlib import contextmanager

import numpy as np

import minidl

from . import membership
from . import protocol as P
from .durability import Checkpoints, DurabilityError, Log, check_writable, replay, start_log
from .optimizers import from_words
from .server import Server, Shard

log = logging.getLogger("minidl.dist.ps")
FORMAT = 1
LINGER = 10.0   # (seconds a restarted server whose workers all shut down still answers them)


def folder_of(checkpoint_dir, server) -> str:
    return os.path.join(os.fspath(checkpoint_dir), f"server{server}")


class Keeper:
    """One server's checkpoints and log, and when the next checkpoint is due."""

    def __init__(self, folder, every, seconds, durable, fault_rank):
        self.folder, self.every, self.seconds, self.durable = folder, every, seconds, durable
        self.checkpoints = Checkpoints(folder, fault_rank)
        self.fault_rank, self.log, self.replaying = fault_rank, None, False
        self.at_clock, self.at_time, self.shards_saved = 0, time.monotonic(), 0

    def follow(self, n):
        """Append from now on to the log that follows checkpoint ``n``."""
        if self.durable:
            self.log = Log(self.folder, n, self.fault_rank)

    def record(self, worker, words, parts):
        """A state-changing request (or a lost worker: kind LOST), logged before it is applied; made
        durable before anything is answered (``acknowledging``)."""
        if self.log is not None and not self.replaying:
            self.log.append([np.array([worker] + list(words), np.int64).view(np.uint8), *parts], sync=False)

    @contextmanager
    def acknowledging(self, server):
        """The server's replies held until what it logged meanwhile is synced to disk: the requests that
        waited together share one fdatasync (a group commit)."""
        if self.log is None:
            yield
            return
        end = server.end
        server.end = held = Held(end)
        try:
            yield
        finally:
            server.end = end
        self.log.sync()   # (a checkpoint meanwhile began a new log: it syncs what came after)
        for reply in held.replies:
            end.reply(*reply)

    def due(self, slowest) -> bool:
        if self.replaying:
            return False
        return ((self.every is not None and slowest - self.at_clock >= self.every)
                or (self.seconds is not None and time.monotonic() - self.at_time >= self.seconds))

    def checkpoint(self, server) -> int:
        started = time.monotonic()
        n = self.checkpoints.save(state_of(server))
        self.shards_saved = len(server.shards)
        self.close()
        self.follow(n)
        start_log(self.folder, n)
        self.at_clock = min((server.clocks[w] for w in server.active()), default=0)
        self.at_time = time.monotonic()
        log.info("parameter server %d: checkpoint %d written in %.3f s", server.server, n, self.at_time - started)
        return n

    def close(self):
        if self.log is not None:
            self.log.close()


# -- a server's state, as a checkpoint holds it ---------------------------------------------------------
def state_of(server) -> dict:
    s = server
    return {"format": FORMAT, "job": s.job, "clocks": dict(s.clocks), "seq": dict(s.seq),
            "released": dict(s.released), "finished": sorted(s.finished), "lost": dict(s.lost),
            "pushes_by": dict(s.pushes_by), "barrier_answered": dict(s.barrier_answered),
            "at_barrier": dict(s.at_barrier), "failure": s.failure, "told": sorted(s.told),
            "applied_through": s.applied_through, "redone_before": s.redone_before, "restored": s.restored,
            "stats": {k: dict(v) if isinstance(v, dict) else v for k, v in s.stats.items()},
            "shards": [_shard_state(shard) for shard in s.shards],
            "deferred": [_deferred_state(s.shards.index(shard), grad, clock, worker, seq, age)
                         for shard, grad, clock, worker, seq, age in s.deferred],
            "ids": None if s.store is None else int(s.store.add("ps/ids", 0)),
            "addresses": {} if s.store is None else membership.addresses(s.store, s.servers)}


def _shard_state(shard) -> dict:
    return {"name": shard.name, "shape": list(shard.shape), "dtype": P.DTYPES.index(shard.dtype),
            "sparse": shard.sparse, "optimizer": [shard.spec.kind] + shard.spec.words(), "std": shard.std,
            "seed": shard.seed, "checksum": None if shard.checksum is None else list(shard.checksum),
            "value": shard.param.detach(), "state": shard.optimizer.state_dict()}


def _deferred_state(key, grad, clock, worker, seq, age) -> dict:
    values = {"indices": grad._indices(), "values": grad._values()} if grad.is_sparse else {"dense": grad}
    return {"key": key, "clock": clock, "worker": worker, "seq": seq, "age": age, **values}


def restore(server, state, where) -> None:
    """Put a checkpoint's state into a server made from its job (``where`` names the file in errors)."""
    if state.get("format") != FORMAT:
        raise DurabilityError(f"{where}: not a parameter-server checkpoint of format {FORMAT} "
                              f"(format {state.get('format')!r})")
    s = server
    s.clocks, s.seq, s.released = dict(state["clocks"]), dict(state["seq"]), dict(state["released"])
    s.finished, s.lost = set(state["finished"]), dict(state["lost"])
    s.pushes_by, s.barrier_answered = Counter(state["pushes_by"]), dict(state["barrier_answered"])
    s.at_barrier, s.failure, s.told = dict(state["at_barrier"]), state["failure"], set(state["told"])
    s.applied_through, s.redone_before, s.restored = (state["applied_through"], state["redone_before"],
                                                      state["restored"])
    for k, v in state["stats"].items():
        s.stats[k] = Counter(v) if isinstance(s.stats[k], Counter) else v
    for saved in state["shards"]:
        kind, *words = saved["optimizer"]
        shard = Shard(saved["name"], tuple(saved["shape"]), P.DTYPES[saved["dtype"]], saved["sparse"],
                      from_words(kind, words), s.server, s.servers, saved["value"], saved["std"],
                      saved["seed"], None if saved["checksum"] is None else tuple(saved["checksum"]))
        shard.optimizer.load_state_dict(saved["state"])
        s.shards.append(shard)
    for d in state["deferred"]:
        shard = s.shards[d["key"]]
        grad = (d["dense"] if "dense" in d else
                minidl.sparse_coo_tensor(d["indices"], d["values"], shard.param.shape))
        s.deferred.append((shard, grad, d["clock"], d["worker"], d["seq"], d["age"]))


def replay_log(server, folder, n) -> int:
    """Apply the log after checkpoint ``n`` as the server first did (its replies go nowhere)."""
    count = 0
    for parts in replay(folder, n):
        words = np.frombuffer(parts[0], np.int64).tolist()
        worker, words = words[0], words[1:]
        if words[P.KIND] == P.LOST:
            server.worker_gone(worker, P.read_text(parts[1]))
        else:
            server.take(worker, words, [np.frombuffer(p, np.uint8) for p in parts[1:]])
        count += 1
    return count


class Held:
    """A transport end whose replies wait in a list (Keeper.acknowledging); the rest is the end's."""

    def __init__(self, end):
        self.end, self.replies = end, []

    def reply(self, worker, status, body=None, seq=0):
        self.replies.append((worker, status, body, seq))
        return []

    def __getattr__(self, name):
        return getattr(self.end, name)


class NoReplies:
    """Where a replaying server's replies go: the workers ask again, and are answered then."""

    tolerant = True

    def reply(self, worker, status, body=None, seq=0):
        return []


# -- a server's checkpoints from ps.init, and its restart -----------------------------------------------
def prepare(server):
    """Before the job is published: the server's checkpoint folder, made and proven writable, and with
    ``resume`` its state loaded from there; the problem's description if either fails (every rank then
    raises it)."""
    job = server.job
    folder = folder_of(job["checkpoint_dir"], server.server)
    what = f"ps.init(checkpoint_dir={job['checkpoint_dir']!r}{', resume=True' if job['resume'] else ''})"
    try:
        check_writable(folder, f"{what}: parameter server {server.server}")
        if job["resume"]:
            resume(server, folder)
    except (ValueError, DurabilityError) as e:
        return str(e) if isinstance(e, ValueError) else f"{what}: parameter server {server.server}: {e}"
    return None


def start(server) -> None:
    """The job is published: a checkpoint of where it starts (its settings, and a resumed state)."""
    job = server.job
    if server.keeper is None:
        server.keeper = Keeper(folder_of(job["checkpoint_dir"], server.server), job["checkpoint_every"],
                               job["checkpoint_seconds"], job["durable"], job["rank"])
    server.keeper.checkpoint(server)


def recover(server, folder, n, state) -> int:
    """Put checkpoint ``n``'s ``state`` (from ``folder``) into ``server`` and replay the log after it;
    how many logged requests were replayed."""
    restore(server, state, os.path.join(folder, f"checkpoint-{n:08d}"))
    job = server.job
    server.keeper = Keeper(folder, job["checkpoint_every"], job["checkpoint_seconds"], job["durable"], job["rank"])
    server.keeper.shards_saved, server.keeper.replaying = len(server.shards), True
    end, server.end = server.end, NoReplies()
    try:
        records = replay_log(server, folder, n)
    finally:
        server.end, server.keeper.replaying = end, False
    return records


def resume(server, folder) -> None:
    """``ps.init(resume=True)``: a new job of new processes goes on from this server's checkpoint and
    log. Every worker starts again at the slowest clock of the workers it brings back (``rewind``).
    Under BSP the iterations this server had applied in full are not applied again (their pushes are
    dropped as repeats) and the unfinished ones are redone from scratch (their pushes discarded);
    under SSP and ASP a push was applied when it came, and one redone above the slowest clock of the
    workers that were not lost is applied again."""
    began = time.monotonic()
    n, state = Checkpoints(folder).load()
    saved = state.get("job") or {}
    for key in ("servers", "consistency"):
        if saved.get(key) != server.job[key]:
            raise ValueError(f"the checkpoint in {folder} is of a job with {key}={saved.get(key)!r}, this one has "
                             f"{key}={server.job[key]!r}")
    records = recover(server, folder, n, state)
    back = [w for w in server.clocks if w < server.job["workers"]] or list(server.clocks)   # (the new job's)
    kept = [w for w in server.clocks if w not in server.lost] or list(server.clocks)   # (finished ones count)
    server.resumed_at = min((server.clocks[w] for w in back), default=0)
    if not server.bsp:   # (each push was applied when it came: up to the slowest clock, as far as is known)
        server.applied_through = min((server.clocks[w] for w in kept), default=0)
    server.redone_before = server.applied_through   # (BSP: iterations before it are applied, in full)
    server.stats["discarded"] += len(server.deferred)   # (its unfinished iterations: redone)
    server.deferred, server.restored = [], len(server.shards)
    log.warning("parameter server %d resumed from checkpoint %d and %d logged request(s) in %.2f s: workers start "
                "again at clock %d", server.server, n, records, time.monotonic() - began, server.resumed_at)


def rewind(server, clock, workers) -> None:
    """The resumed job's workers (new processes, numbered afresh) all start at ``clock``, the slowest
    over every server; a worker of the old job beyond them is gone."""
    server.clocks = {w: clock for w in range(workers)}
    server.finished, server.lost, server.seq, server.released = set(), {}, {}, {}
    server.barrier_answered, server.waiting, server.at_barrier = {}, {}, {}
    server.failure, server.told = None, set()   # (the stopped job's end is not the new one's)


def restart(checkpoint_dir, server=None) -> str:
    """Serve in this process as parameter server ``server`` of the job whose checkpoints are in
    ``checkpoint_dir``: load the newest checkpoint, replay the log after it, take the server's place
    (its old port when free), and serve until the job ends. Returns "server"."""
    folder = _server_folder(checkpoint_dir, server)
    began = time.monotonic()
    n, state = Checkpoints(folder).load()
    job = state.get("job") or {}
    s = Server(NoReplies(), job["server"], job["servers"], job["workers"], job["consistency"], job["staleness"],
               job["on_worker_failure"], job["drop_stale_after"])
    s.job = job
    records = recover(s, folder, n, state)
    s.keeper.follow(n)
    s.heard, s.started = {}, time.monotonic()   # (a worker that never comes back is dropped after the patience)
    if not s.active():   # (every worker's shutdown was taken: their answers may not have been)
        s.linger_until = s.started + LINGER
    s.end = membership.server_end(s, job["rank"], port=int(job["address"].rpartition(":")[2]))
    s.end.set_token(job["token"])
    membership.republish(s, state["ids"], state["addresses"])
    log.warning("parameter server %d restarted from checkpoint %d and %d logged request(s) in %.2f s; serving at %s",
                s.server, n, records, time.monotonic() - began, s.end.address)
    s.serve()
    return "server"


def _server_folder(checkpoint_dir, server) -> str:
    root = os.fspath(checkpoint_dir)
    if not os.path.isdir(root):
        raise DurabilityError(f"--resume {root}: no such folder (the checkpoint_dir given to ps.init)")
    found = sorted(int(name[6:]) for name in os.listdir(root) if name.startswith("server") and name[6:].isdigit())
    if server is None:
        if not found:
            raise DurabilityError(f"--resume {root}: no server checkpoints there (no server<k> folder: is it the "
                                  f"checkpoint_dir given to ps.init?)")
        if len(found) > 1:
            raise DurabilityError(f"--resume {root}: it holds the checkpoints of servers {found}; say which with "
                                  f"--server K")
        server = found[0]
    if server not in found:
        raise DurabilityError(f"--resume {root}: no checkpoint of server {server} there (servers found: "
                              f"{found or 'none'})")
    return folder_of(root, server)
