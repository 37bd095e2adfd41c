"""A server: its shard of every parameter, the workers' clocks, who the workers are, and the loop
that serves them.

The loop takes requests in arrival order from any worker and applies each push with the parameter's
server-side optimizer: at once under SSP and ASP; under BSP at the end of the iteration, once every
worker has clocked past it, the iteration's pushes to a parameter summed and applied as one
optimizer step, so that a pull during iteration c sees exactly the pushes of iterations before c
(synchronous SGD on the summed gradients, whatever the optimizer). Consistency is kept at the clock:
a worker's ``clock()`` is answered only once it is at most ``staleness`` clocks ahead of the slowest
active worker (0 for BSP; ASP answers at once). A worker sends its pushes before its clock, and a
link keeps their order, so when the answer comes every push made before the slowest worker's clock
has been applied. Each applied push records its staleness (how many clocks its worker is ahead of
the slowest active one) and its age (how many clocks it is behind the newest); with
``drop_stale_after`` a push older than that is dropped, not applied.

Membership (over links: transports.py): a worker lost (its link ended without ``ps.shutdown()``,
or went silent) is dropped from the clock and named in the log and in ``stats()``, with its clock
and how many of its pushes were applied; under BSP its pushes of the iteration it had not ended are
discarded. With ``on_worker_failure="raise"`` every worker's next ``clock()`` raises naming it
instead. A worker whose link broke comes back on a new one and is counted again from its clock;
a worker that joins later starts at the clock the first server gives it. Every request carries a
sequence number, so a push sent again after a broken link is applied once. Over the process group
(MPI) a lost worker ends the job, as MPI does.

A malformed request (an unknown kind or parameter, rows outside the shard, a payload of the wrong
size) is answered with an error and logged; the shard is left as it was.
"""
from __future__ import annotations

import json
import logging
import struct
import time
from collections import Counter

import numpy as np

import minidl

from .. import faults
from ..communicators.base import DistError
from ..communicators.socket import env_seconds
from . import protocol as P
from .optimizers import KINDS as OPTIMIZER_KINDS
from .optimizers import from_words
from .sharding import bounds

log = logging.getLogger("minidl.dist.ps")
TICK = 0.5   # how often an idle server looks for stalls (seconds)
BATCH = 64   # durable: at most this many waiting requests share one sync of the log


def stall_seconds() -> float:
    """How long workers wait at a clock for a silent one before the log names it (MINIDL_PS_STALL_LOG)."""
    return env_seconds("MINIDL_PS_STALL_LOG", 60.0)


class WorkerLost(DistError):
    """A worker went silent or exited without ``ps.shutdown()`` where the job cannot go on without it."""


class Shard:
    """This server's part of one parameter, as a leaf tensor its optimizer updates."""

    def __init__(self, name, shape, dtype, sparse, optimizer, server, servers, value=None, std=0.0, seed=0,
                 checksum=None):
        self.name, self.shape, self.dtype, self.sparse = name, tuple(shape), dtype, sparse
        self.spec, self.std, self.seed = optimizer, std, seed   # (what a checkpoint rebuilds it from)
        count = shape[0] if sparse else int(np.prod(shape))
        self.lo, self.hi = bounds(count, servers)[server:server + 2]
        local = (self.hi - self.lo,) + tuple(shape[1:]) if sparse else (self.hi - self.lo,)
        self.checksum = checksum   # (of the first registration's value: later ones must agree)
        if value is None:   # an embedding: rows drawn as the whole table's would be (counter-based)
            row = int(np.prod(shape[1:]))
            g = minidl.Generator().set_state(np.frombuffer(struct.pack("<QQ", seed, self.lo * row), np.uint8))
            value = minidl.empty(local, dtype=dtype).normal_(0.0, std, generator=g)
        self.param = minidl.nn.Parameter(value.reshape(local).to(dtype).clone())
        self.optimizer = optimizer.build(self.param, sparse)

    def apply(self, grad):
        self.param.grad = grad
        self.optimizer.step()
        self.param.grad = None


class Server:
    def __init__(self, end, server, servers, workers, consistency, staleness, on_worker_failure="raise",
                 drop_stale_after=None):
        self.end, self.server, self.servers = end, server, servers
        self.bound = None if consistency == "asp" else (0 if consistency == "bsp" else staleness)
        self.bsp, self.deferred = consistency == "bsp", []   # (BSP's pushes of the running iteration)
        self.raise_on_loss, self.drop_after = on_worker_failure == "raise", drop_stale_after
        self.shards = []
        self.clocks = {w: 0 for w in range(workers)}   # every worker the job has had
        self.finished, self.lost, self.waiting = set(), {}, {}   # waiting: worker -> (when its clock came, seq)
        self.seq, self.heard, self.pushes_by = {}, {}, Counter()
        self.released = {}   # worker -> the last clock of its that was answered
        self.at_barrier, self.barrier_answered = {}, {}   # worker -> the seq of its barrier request
        self.failure, self.ended, self.asking = None, False, 0
        self.told = set()   # (on_worker_failure="raise": the workers whose clock raised)
        self.store = None   # (server 0 over links: the job's store, membership.py)
        self.job, self.keeper = None, None   # (with checkpoint_dir: its settings, its checkpoints and log)
        self.chain = None   # (replicate=True: the link to its backup, replication.py)
        self.resumed_at = self.redone_before = None   # (ps.init(resume=True): recovery.resume)
        self.applied_through = 0   # (BSP: every iteration before this one is applied)
        self.linger_until = 0.0   # (a restarted server with no worker left answers their repeats until then)
        self.restored = 0   # (how many of the shards came from a checkpoint of an earlier job)
        self.patience = None   # (over links: how long a worker may stay silent, or never come)
        self.started, self.stall_after, self.stalls_named = time.monotonic(), stall_seconds(), set()
        self.stats = {"pushes": 0, "pulls": 0, "rejected": 0, "staleness": Counter(), "dropped_stale": 0,
                      "duplicates": 0, "discarded": 0, "age_applied": Counter(), "age_dropped": Counter(),
                      "lost": [], "joined": [], "resumed": []}
        self.handlers = {P.REGISTER: self.register, P.PUSH: self.push, P.PULL: self.pull, P.CLOCK: self.clock,
                         P.SHUTDOWN: self.shutdown, P.STATS: self.report, P.EXITED: self.exited,
                         P.JOIN: self.join, P.WHERE: self.where, P.BARRIER: self.barrier}

    def serve(self):
        """Answer requests until no worker is left (each shut down or lost), or, once a lost worker
        ends the job (``on_worker_failure="raise"``), until every other one was told so at its clock."""
        try:
            while ((self.active() or time.monotonic() < self.linger_until)
                   and not (self.failure and set(self.active()) <= self.told)):
                event = self.end.next(TICK if self.end.tolerant else None)
                if self.keeper is None:
                    self.handle(event)
                    continue
                with self.keeper.acknowledging(self):   # (durable: one sync for the requests waiting now)
                    self.handle(event)
                    for _ in range(BATCH - 1 if self.keeper.durable and event is not None else 0):
                        event = self.end.next(0)
                        if event is None:
                            break
                        self.handle(event)
                    if self.keeper.due(min((self.clocks[w] for w in self.active()), default=0)):
                        self.keeper.checkpoint(self)
        except BaseException:
            self.end_job(flush=False)
            raise
        self.end_job()
        if self.lost and (self.failure or not self.finished):
            raise WorkerLost(self.failure or f"parameter server {self.server}: every worker was lost: "
                                             f"{sorted(self.lost)}")

    def handle(self, event):
        """One event from the transport (None: a tick without one), then the checks due on every tick."""
        if event is not None:
            kind, worker, *rest = event
            if kind == "request":
                self.take(worker, *rest)
            elif kind == "lost":
                self.worker_gone(worker, rest[0] or "exited without calling ps.shutdown()")
            elif kind == "reconnected":
                self.note_resumed(worker, rest[0])
            elif kind == "silent":
                raise self.fail(self.silent(), rest[0])
        self.look_for_stalls()
        self.drop_absent()

    def end_job(self, flush=True):
        """No worker may join from now on."""
        self.ended = True
        if self.keeper is not None:
            self.keeper.close()
        if self.chain is not None:
            self.chain.close()
        if self.store is not None:
            self.store.set("ps/ended", "1")
        self.end.close(flush=flush)

    def active(self) -> list:
        return [w for w in self.clocks if w not in self.finished and w not in self.lost]

    def take(self, worker, words, parts):
        self.heard[worker] = time.monotonic()
        self.asking = 0 if words is None else words[P.SEQ]   # (the request a reply answers)
        try:
            if words is None:
                raise ValueError("a malformed request header")
            kind = words[P.KIND]
            handler = self.handlers.get(kind)
            if handler is None:
                raise ValueError(f"unknown request kind {kind}")
            if worker not in self.clocks and kind not in (P.JOIN, P.WHERE):
                raise ValueError(f"worker {worker} is not in this job: ps.join() first")
            returning = worker in self.lost
            if returning:
                self.resume(worker)
            repeat = words[P.SEQ] != 0 and words[P.SEQ] <= self.seq.get(worker, 0)
            if self.keeper is not None or self.chain is not None:
                self.keep(worker, words, parts, repeat, returning)
            self.seq[worker] = max(words[P.SEQ], self.seq.get(worker, 0))
            handler(worker, words, parts, repeat)
        except WorkerLost:
            raise
        except Exception as e:   # (a malformed request: refused, the shard untouched)
            self.stats["rejected"] += 1
            log.warning("parameter server %d: rejected a request from worker %d: %s", self.server, worker, e)
            self.reply(worker, error=str(e))

    def keep(self, worker, words, parts, repeat, returning):
        """With checkpoints: a new parameter's registration is checkpointed before it is first used,
        and (``durable``) a request that changes the state (or brings a lost worker back) is logged
        before it is applied; with a backup, it is applied there first."""
        if (self.keeper is not None and words[P.KIND] in (P.PUSH, P.PULL, P.CLOCK)
                and self.keeper.shards_saved < len(self.shards) and not self.keeper.replaying):
            self.keeper.checkpoint(self)
        if (words[P.KIND] in P.CHANGES_STATE and not repeat) or returning:
            self.record(worker, words, parts)

    def record(self, worker, words, parts):
        """A change of state, kept where it must be before it is applied: the log, the backup."""
        for follower in (self.keeper, self.chain):
            if follower is not None:
                follower.record(worker, words, parts)

    # -- replies ------------------------------------------------------------------------------
    def reply(self, worker, values=None, error=None, seq=None):
        """Answer request ``seq`` of the worker (the one being handled, by default)."""
        body = P.as_bytes(P.text(error)) if error is not None else None if values is None else P.as_bytes(values)
        return self.end.reply(worker, P.ERROR if error is not None else P.OK, body,
                              self.asking if seq is None else seq)

    def shard(self, words):
        key = words[P.KEY]
        if not 0 <= key < len(self.shards):
            raise ValueError(f"no parameter with key {key} (this server has {len(self.shards)})")
        return self.shards[key]

    @staticmethod
    def part(parts, i, numel, dtype, what):
        if i >= len(parts):
            raise ValueError(f"{what}: {len(parts)} payload part(s) where at least {i + 1} were due")
        return P.view(parts[i], numel, dtype, what)

    # -- requests -----------------------------------------------------------------------------
    def register(self, worker, words, parts, repeat):
        if not 0 <= words[P.DTYPE] < 2 or words[P.OPTIMIZER] not in OPTIMIZER_KINDS:
            raise ValueError(f"register: dtype code {words[P.DTYPE]} or optimizer kind {words[P.OPTIMIZER]} unknown")
        dtype = P.DTYPES[words[P.DTYPE]]
        name = P.read_text(self.part(parts, 0, words[P.NAME_LEN], minidl.uint8, "register").numpy())
        shape = tuple(self.part(parts, 1, words[P.NDIM], minidl.int64, "register").tolist())
        hyper = self.part(parts, 2, 4, minidl.float64, "register").tolist()
        value = self.part(parts, 3, words[P.NUMEL], dtype, "register") if not words[P.EMBEDDING] else None
        key = words[P.KEY]
        if key < len(self.shards):   # registered already: the same parameter, or an error
            s = self.shards[key]
            if (s.name, s.shape, s.dtype, s.sparse) != (name, shape, dtype, bool(words[P.SPARSE])):
                where = (f"the checkpoint this server resumed from holds {s.name!r}" if key < self.restored else
                         f"already {s.name!r}")
                raise ValueError(f"register {name!r} {list(shape)} {dtype.name}{' row-sharded' if words[P.SPARSE] else ''}"
                                 f" from worker {worker}: key {key} is {where} {list(s.shape)} {s.dtype.name}"
                                 f"{' row-sharded' if s.sparse else ''}"
                                 f"{' (a checkpoint of another job?)' if key < self.restored else ''}")
            if key >= self.restored and s.checksum != _checksum(value):   # (resumed: trained values, not these)
                raise ValueError(f"register {name!r}: worker {worker}'s value differs from the one registered first "
                                 f"(every worker, joining ones too, must start from the same parameters)")
        elif key == len(self.shards):
            self.shards.append(Shard(name, shape, dtype, bool(words[P.SPARSE]), from_words(words[P.OPTIMIZER], hyper),
                                     self.server, self.servers, value, hyper[3], words[P.SEED], _checksum(value)))
        else:
            raise ValueError(f"register {name!r}: key {key} out of order (next is {len(self.shards)})")
        self.reply(worker)

    def _rows(self, s, parts, words):
        rows = self.part(parts, 0, words[P.ROWS], minidl.int64, f"push to {s.name!r}")
        if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= s.hi - s.lo):
            raise ValueError(f"{s.name!r}: rows outside this server's {s.hi - s.lo} rows")
        return rows

    def push(self, worker, words, parts, repeat):
        s = self.shard(words)
        rows = self._rows(s, parts, words) if s.sparse else None
        width = int(np.prod(s.shape[1:])) if s.sparse else 1
        want = rows.numel() * width if s.sparse else s.hi - s.lo
        values = self.part(parts, 1 if s.sparse else 0, want, s.dtype, f"push to {s.name!r}")
        clock = words[P.WORKER_CLOCK]
        age = max(0, max((self.clocks[w] for w in self.active()), default=clock) - clock)
        if repeat or (self.redone_before is not None and clock < self.redone_before):
            self.stats["duplicates"] += 1   # (sent again after a broken link, or a resumed job's redone
            # iteration this server had applied: applied the first time)
        elif self.drop_after is not None and age > self.drop_after:
            self.stats["dropped_stale"] += 1
            self.stats["age_dropped"][age] += 1
        else:
            if s.sparse:
                grad = minidl.sparse_coo_tensor(rows.unsqueeze(0), values.reshape((rows.numel(),) + s.shape[1:]),
                                                s.param.shape)
            else:
                grad = values.reshape(s.param.shape)
            if self.bsp:   # (applied when the iteration ends)
                self.deferred.append((s, grad, clock, worker, words[P.SEQ], age))
            else:
                self.apply(s, grad)
                self.count(clock, worker, age)
        self.reply(worker)

    def count(self, clock, worker, age):
        self.stats["pushes"] += 1
        self.pushes_by[worker] += 1
        self.stats["staleness"][max(0, clock - min((self.clocks[w] for w in self.active()), default=clock))] += 1
        self.stats["age_applied"][age] += 1

    def apply_summed(self, due):
        """BSP: each ended iteration's pushes to a parameter, summed in the order of the workers'
        ids (the same sum however they arrived), as one optimizer step."""
        steps = {}
        for s, grad, clock, worker, _, age in sorted(due, key=lambda d: (d[2], d[3], d[4])):
            steps.setdefault((clock, id(s)), (s, []))[1].append(grad)
            self.count(clock, worker, age)
        for (clock, _), (s, grads) in sorted(steps.items(), key=lambda item: item[0][0]):
            self.apply(s, _sum(grads))

    def apply(self, shard, grad):
        shard.apply(grad)
        if self.job is not None:   # (MINIDL_FAULT at=ps_apply:N: applied, not yet logged as done or answered)
            faults.collective("ps_apply", self.job["rank"], self.servers + len(self.clocks))

    def pull(self, worker, words, parts, repeat):
        s = self.shard(words)
        self.stats["pulls"] += 1
        if s.sparse and words[P.ROWS] >= 0:
            self.reply(worker, s.param.detach()[self._rows(s, parts, words)])
        else:   # (a copy: the send may still read it while later pushes change the shard)
            self.reply(worker, s.param.detach().clone())

    def clock(self, worker, words, parts, repeat):
        if not repeat:   # (the worker's count: a server restored from an older checkpoint catches up)
            self.clocks[worker] = max(self.clocks[worker] + 1, words[P.WORKER_CLOCK])
        elif worker in self.waiting:   # (asked again after a broken link: answered when released)
            return
        if self.failure:
            self.reply(worker, error=self.failure)
            self.told.add(worker)
        elif self.bound is None or self.released.get(worker, 0) >= self.clocks[worker]:
            self.answer_clock(worker)
        else:   # (a repeat after the answer was lost with the link waits again, as the first did)
            self.waiting[worker] = (time.monotonic(), self.asking)
            self.release()

    def answer_clock(self, worker):
        """Its clock answered, with how many workers are active (a gradient's share of a round)."""
        _, seq = self.waiting.pop(worker, (0, self.asking))
        self.released[worker] = self.clocks[worker]
        self.reply(worker, minidl.tensor([len(self.active())]), seq=seq)

    def shutdown(self, worker, words, parts, repeat):
        self.finished.add(worker)
        self.waiting.pop(worker, None)
        self.at_barrier.pop(worker, None)
        self.reply(worker)
        self.release()

    def exited(self, worker, words, parts, repeat):
        self.worker_gone(worker, "exited without calling ps.shutdown()")

    def join(self, worker, words, parts, repeat):
        """A worker that was not there at the start: in the clock from the clock it asked for."""
        if worker not in self.clocks:
            self.clocks[worker] = words[P.WORKER_CLOCK]
            self.stats["joined"].append({"worker": worker, "at": time.time(), "clock": words[P.WORKER_CLOCK]})
            log.warning("parameter server %d: worker %d joined at clock %d", self.server, worker,
                        words[P.WORKER_CLOCK])
        self.reply(worker)

    def where(self, worker, words, parts, repeat):
        """The clock a joining worker starts at: the slowest active worker's."""
        self.reply(worker, minidl.tensor([min((self.clocks[w] for w in self.active()), default=0)]))

    def barrier(self, worker, words, parts, repeat):
        if self.barrier_answered.get(worker, 0) >= self.asking:   # (asked again: its answer was lost)
            self.reply(worker)
            return
        self.at_barrier[worker] = self.asking
        self.release_barrier()

    def release_barrier(self):
        active = set(self.active())
        if self.at_barrier and active <= set(self.at_barrier):
            for worker, seq in self.at_barrier.items():
                self.barrier_answered[worker] = seq
                self.reply(worker, seq=seq)
            self.at_barrier = {}

    def report(self, worker, words, parts, repeat):
        s = self.stats
        found = {**{k: s[k] for k in ("pushes", "pulls", "rejected", "dropped_stale", "duplicates", "discarded")},
                 **{k: dict(s[k]) for k in ("staleness", "age_applied", "age_dropped")},
                 "lost": s["lost"], "joined": s["joined"], "resumed": s["resumed"],
                 "pushes_by": dict(self.pushes_by), "clocks": dict(self.clocks)}
        self.reply(worker, P.text(json.dumps(found)))

    # -- membership ---------------------------------------------------------------------------
    def silent(self) -> list:
        """The active workers not waiting for this server's answer at their clock."""
        return [w for w in self.active() if w not in self.waiting]

    def worker_gone(self, worker, how):
        """A worker's link ended without ``ps.shutdown()`` (or it said it exits): dropped from the clock
        (over links), or the job's end (over the process group)."""
        if worker not in self.clocks or worker in self.finished or worker in self.lost:
            return
        if not self.end.tolerant:
            raise self.fail([worker], how)
        if self.keeper is not None or self.chain is not None:
            self.record(worker, P.header(P.LOST).tolist(), [P.as_bytes(P.text(how))])
        record = {"worker": worker, "at": time.time(), "clock": self.clocks[worker],
                  "pushes": self.pushes_by[worker], "why": how}
        self.lost[worker] = record
        self.stats["lost"].append(record)
        self.waiting.pop(worker, None)
        self.at_barrier.pop(worker, None)
        if self.bsp:   # (the iteration it did not end: its pushes are not part of it)
            mine = [d for d in self.deferred if d[3] == worker and d[2] >= self.clocks[worker]]
            self.deferred = [d for d in self.deferred if not (d[3] == worker and d[2] >= self.clocks[worker])]
            self.stats["discarded"] += len(mine)
            if mine:   # (sent again after a broken link, they are taken anew)
                self.seq[worker] = min(d[4] for d in mine) - 1
        log.error("parameter server %d: worker %d lost at clock %d, %d of its pushes applied: %s", self.server,
                  worker, self.clocks[worker], self.pushes_by[worker], how)
        if self.raise_on_loss:   # (the job ends: nothing is released or applied without the lost worker)
            self.failure = self.failure or (f"parameter server {self.server}: worker {worker} was lost at clock "
                                            f"{self.clocks[worker]} ({how}); on_worker_failure='raise' ends the job")
            for w, (_, seq) in self.waiting.items():
                self.reply(w, error=self.failure, seq=seq)
            self.told.update(self.waiting)
            self.waiting = {}
        else:
            self.release()
        self.release_barrier()

    def resume(self, worker):
        """A lost worker is back (its link broke, or it was frozen): counted again from its clock."""
        record = self.lost.pop(worker)
        self.note_resumed(worker, f"lost {time.time() - record['at']:.1f} s before: {record['why']}")

    def note_resumed(self, worker, why):
        """A worker came back on a new link (whether or not its old one's end was seen first)."""
        self.stats["resumed"].append({"worker": worker, "at": time.time(), "clock": self.clocks[worker]})
        log.warning("parameter server %d: worker %d is back on a new link at clock %d (%s)", self.server, worker,
                    self.clocks[worker], why)

    def admit(self, worker) -> list:
        """On a link's accept thread: the welcome words for a worker that connects (the last request
        taken from it, so that it sends the rest anew), or an error refusing it."""
        if self.ended:
            raise DistError("the parameter-server job has ended")
        self.heard.setdefault(worker, time.monotonic())   # (connected: not a worker that never came)
        return [self.seq.get(worker, 0)]

    def fail(self, workers, how) -> WorkerLost:
        """The error naming ``workers``, logged, and sent to every worker waiting at its clock (they
        would otherwise time out naming this server, which only waited for the others)."""
        clocks = ", ".join(f"worker {w} at clock {self.clocks[w]}" for w in self.active())
        message = (f"parameter server {self.server}: worker rank(s) {workers} {how}; the job cannot go on "
                   f"(clocks: {clocks})")
        log.error("%s", message)
        replies = [work for worker, (_, seq) in self.waiting.items() for work in self.reply(worker, error=message,
                                                                                             seq=seq)]
        self.waiting = {}
        for work in replies:
            try:
                work.wait()
            except DistError:
                pass   # (that worker is gone too: the error raised here names the job's end all the same)
        return WorkerLost(message)

    def drop_absent(self):
        """Over links: a worker of ps.init that never connected within the patience is lost (its
        ``ps.init`` failed), so that no clock or barrier waits for it for ever."""
        if self.patience is None or time.monotonic() - self.started < self.patience:
            return
        for w in [w for w in self.active() if w not in self.heard]:
            self.worker_gone(w, f"never connected in {self.patience:g} s (its ps.init failed?)")

    def look_for_stalls(self):
        """Name, once per clock, the active workers that have held others at their clock for
        ``MINIDL_PS_STALL_LOG`` seconds (a frozen worker, or a very slow one)."""
        if not self.waiting:
            return
        now = time.monotonic()
        since = min(t for t, _ in self.waiting.values())
        if now - since < self.stall_after:
            return
        slowest = min(self.clocks[w] for w in self.active())
        holding = [w for w in self.active() if w not in self.waiting and self.clocks[w] == slowest]
        fresh = [w for w in holding if (w, slowest) not in self.stalls_named]
        if fresh:
            self.stalls_named.update((w, slowest) for w in fresh)
            quiet = ", ".join(f"worker {w} silent for {now - self.heard.get(w, self.started):.0f} s" for w in fresh)
            log.warning("parameter server %d: workers %s have waited %.0f s at their clock for worker(s) %s at clock "
                        "%d (%s): frozen, or very slow?", self.server, sorted(self.waiting), now - since, fresh,
                        slowest, quiet)

    # -- consistency --------------------------------------------------------------------------
    def release(self):
        """Answer the clocks of the workers now within ``bound`` of the slowest active one."""
        if self.bound is None:
            return
        slowest = min((self.clocks[w] for w in self.active()), default=None)
        due = [d for d in self.deferred if slowest is None or d[2] < slowest]
        self.deferred = [d for d in self.deferred if not (slowest is None or d[2] < slowest)]
        self.apply_summed(due)   # (BSP: the ended iterations' pushes, before anyone goes on)
        self.applied_through = max([self.applied_through] + [d[2] + 1 for d in due] +
                                   ([] if slowest is None else [slowest]))
        for worker in list(self.waiting):
            if slowest is None or self.clocks[worker] - slowest <= self.bound:
                self.answer_clock(worker)


def _sum(grads):
    """Gradients of one shard added up: dense ones elementwise, sparse ones by row (coalesced)."""
    if len(grads) == 1:
        return grads[0]
    if grads[0].is_sparse:
        return minidl.sparse_coo_tensor(minidl.cat([g._indices() for g in grads], 1),
                                        minidl.cat([g._values() for g in grads]), grads[0].shape).coalesce()
    total = grads[0].clone()
    for g in grads[1:]:
        total.add_(g)
    return total


def _checksum(value):
    """Two sums that two registrations of the same values agree on exactly (None for a table the
    server makes itself)."""
    if value is None:
        return None
    v = value.double().reshape(-1)
    return float(v.sum()), float((v * minidl.arange(1, v.numel() + 1, dtype=minidl.float64)).sum())
