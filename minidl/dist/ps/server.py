"""A server: its shard of every parameter, the workers' clocks, and the loop that serves them.

The loop takes requests in arrival order from any worker and applies each push with the parameter's
server-side optimizer: at once under SSP and ASP; under BSP at the end of the iteration, once every
worker has clocked past it, the iteration's pushes to a parameter summed and applied as one
optimizer step, so that a pull during iteration c sees exactly the pushes of iterations before c
(synchronous SGD on the summed gradients, whatever the optimizer). Consistency is kept at the clock:
a worker's ``clock()`` is answered only once it is at most ``staleness`` clocks ahead of the slowest
unfinished worker (0 for BSP; ASP workers do not wait for an answer). A worker sends its pushes
before its clock, and messages between two ranks keep their order, so when the answer comes every
push made before the slowest worker's clock has been applied. Each applied push records its
staleness: how many clocks its worker is ahead of the slowest unfinished one, i.e. how many of the
slowest worker's iterations the parameters it computed on may lack (0 under BSP, at most
``staleness`` under SSP).

A malformed request (an unknown kind or parameter, rows outside the shard, a payload of the wrong
size) is answered with an error and logged; the shard is left as it was.

Silence is named by worker, not by server: when no request came for the group's timeout, the
server answers every worker waiting at its clock with an error naming the workers that went
silent (neither shut down nor waiting), and raises it. A worker whose process exits without
``ps.shutdown()`` says so on its way out (worker.py), and the server raises naming it at once.
"""
from __future__ import annotations

import logging
import struct
from collections import Counter

import numpy as np

import minidl

from ..algorithms.channel import DistTimeoutError
from ..communicators.base import DistError
from ..p2p import irecv, isend, recv
from ..state import resolve
from . import protocol as P
from .optimizers import KINDS as OPTIMIZER_KINDS
from .optimizers import from_words
from .sharding import bounds

log = logging.getLogger("minidl.dist.ps")


class WorkerLost(DistError):
    """A worker went silent or exited without ``ps.shutdown()``: the servers cannot serve on."""


class Shard:
    """This server's part of one parameter, as a leaf tensor its optimizer updates."""

    def __init__(self, name, shape, dtype, sparse, optimizer, server, servers, value=None, std=0.0, seed=0):
        self.name, self.shape, self.dtype, self.sparse = name, tuple(shape), dtype, sparse
        count = shape[0] if sparse else int(np.prod(shape))
        self.lo, self.hi = bounds(count, servers)[server:server + 2]
        local = (self.hi - self.lo,) + tuple(shape[1:]) if sparse else (self.hi - self.lo,)
        if value is None:   # an embedding: rows drawn as the whole table's would be (counter-based)
            row = int(np.prod(shape[1:]))
            g = minidl.Generator().set_state(np.frombuffer(struct.pack("<QQ", seed, self.lo * row), np.uint8))
            value = minidl.empty(local, dtype=dtype).normal_(0.0, std, generator=g)
        self.param = minidl.nn.Parameter(value.reshape(local).to(dtype).clone())
        self.optimizer = optimizer.build(self.param, sparse)
        self.inbox = None if sparse else minidl.empty(self.param.numel(), dtype=dtype)   # (every dense push's size)

    def apply(self, grad):
        self.param.grad = grad
        self.optimizer.step()
        self.param.grad = None


class Server:
    def __init__(self, group, server, servers, workers, consistency, staleness):
        self.group, self.server, self.servers, self.workers = group, server, servers, workers
        self.bound = None if consistency == "asp" else (0 if consistency == "bsp" else staleness)
        self.shards, self.clocks, self.finished, self.waiting = [], [0] * workers, set(), []
        self.bsp, self.deferred = consistency == "bsp", []   # (BSP's pushes of the running iteration)
        self.stats = {"pushes": 0, "pulls": 0, "rejected": 0, "staleness": Counter()}
        self.handlers = {P.REGISTER: self.register, P.PUSH: self.push, P.PULL: self.pull, P.CLOCK: self.clock,
                         P.SHUTDOWN: self.shutdown, P.STATS: self.report, P.EXITED: self.exited}
        self.sends = []

    def serve(self):
        """Answer requests until every worker has shut down."""
        while len(self.finished) < self.workers:
            h = minidl.empty(P.HEADER, dtype=minidl.int64)
            work = irecv(h, group=self.group, tag=P.REQUEST)
            work.channel.note = lambda: (f"parameter server {self.server} waits for worker rank(s) {self.silent()} "
                                         f"(neither shut down nor waiting at a clock)")
            try:
                work.wait()
            except DistTimeoutError as e:
                timeout = resolve(self.group, "ps").config.timeout
                raise self.lost(self.silent(), f"sent no request for {timeout:g} s") from e
            except DistError as e:   # (a header of another size arrived: consumed, and refused)
                if work.source() is None:
                    raise   # (no message came: a rank is gone)
                self.stats["rejected"] += 1
                log.warning("parameter server %d: rejected a malformed request header: %s", self.server, e)
                continue
            worker, words = work.source(), h.tolist()
            self.consumed = 0
            try:
                handler = self.handlers.get(words[P.KIND])
                if handler is None:
                    raise ValueError(f"unknown request kind {words[P.KIND]}")
                handler(worker, words)
            except WorkerLost:
                raise
            except Exception as e:   # (a malformed request: refused, the shard untouched)
                self.stats["rejected"] += 1
                log.warning("parameter server %d: rejected a request from worker %d: %s", self.server, worker, e)
                self.discard_payload(worker, words[P.PARTS] - self.consumed)
                self.reply(worker, error=str(e))
        for work in self.sends:
            work.wait()

    # -- replies ------------------------------------------------------------------------------
    def reply(self, worker, values=None, error=None) -> list:
        """Send the reply (kept in ``sends`` until done: its buffers must outlive it); returns its sends."""
        body = P.text(error) if error is not None else values
        status = P.ERROR if error is not None else P.OK
        numel = 0 if body is None else body.numel()
        posted = [isend(minidl.tensor([status, numel, 0, 0], dtype=minidl.int64), worker,
                        group=self.group, tag=P.REPLY)]
        if numel:
            posted.append(isend(body.contiguous().reshape(-1), worker, group=self.group, tag=P.REPLY_DATA))
        self.sends = [w for w in self.sends + posted if not w.is_completed()]
        return posted

    def payload(self, worker, numel, dtype, into=None):
        buf = into if into is not None and into.numel() == numel else minidl.empty(numel, dtype=dtype)
        self.consumed += 1   # (taken from the stream even when its size turns out wrong)
        recv(buf, worker, group=self.group, tag=P.PAYLOAD)
        return buf

    def discard_payload(self, worker, parts):
        """Take a refused request's remaining payload messages off the stream, whatever their size."""
        for _ in range(max(0, parts)):
            try:
                recv(minidl.empty(0), worker, group=self.group, tag=P.PAYLOAD)
            except DistTimeoutError:
                raise
            except DistError:
                pass   # (the size differed, as expected: the message is consumed all the same)

    def shard(self, words):
        key = words[P.KEY]
        if not 0 <= key < len(self.shards):
            raise ValueError(f"no parameter with key {key} (this server has {len(self.shards)})")
        return self.shards[key]

    # -- requests -----------------------------------------------------------------------------
    def register(self, worker, words):
        if not 0 <= words[P.DTYPE] < 2 or words[P.OPTIMIZER] not in OPTIMIZER_KINDS:
            raise ValueError(f"register: dtype code {words[P.DTYPE]} or optimizer kind {words[P.OPTIMIZER]} unknown")
        dtype = P.DTYPES[words[P.DTYPE]]
        name = P.read_text(self.payload(worker, words[P.NAME_LEN], minidl.uint8))
        shape = tuple(self.payload(worker, words[P.NDIM], minidl.int64).tolist())
        hyper = self.payload(worker, 4, minidl.float64).tolist()
        value = self.payload(worker, words[P.NUMEL], dtype) if not words[P.EMBEDDING] else None
        key = words[P.KEY]
        if key < len(self.shards):   # registered already: the same parameter, or an error
            s = self.shards[key]
            if (s.name, s.shape, s.dtype, s.sparse) != (name, shape, dtype, bool(words[P.SPARSE])):
                raise ValueError(f"register {name!r} {list(shape)} {dtype.name}: key {key} is already "
                                 f"{s.name!r} {list(s.shape)} {s.dtype.name}")
            if s.checksum != _checksum(value):
                raise ValueError(f"register {name!r}: this worker's value differs from the one registered first "
                                 f"(every worker must start from the same parameters)")
        elif key == len(self.shards):
            self.shards.append(Shard(name, shape, dtype, bool(words[P.SPARSE]), from_words(words[P.OPTIMIZER], hyper),
                                     self.server, self.servers, value, hyper[3], words[P.SEED]))
            self.shards[-1].checksum = _checksum(value)
        else:
            raise ValueError(f"register {name!r}: key {key} out of order (next is {len(self.shards)})")
        self.reply(worker)

    def _rows(self, s, worker, words):
        rows = self.payload(worker, words[P.ROWS], minidl.int64)
        if rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= s.hi - s.lo):
            raise ValueError(f"{s.name!r}: rows outside this server's {s.hi - s.lo} rows")
        return rows

    def push(self, worker, words):
        s = self.shard(words)
        rows = self._rows(s, worker, words) if s.sparse else None
        width = int(np.prod(s.shape[1:])) if s.sparse else 1
        want = rows.numel() * width if s.sparse else s.hi - s.lo
        values = self.payload(worker, words[P.NUMEL], s.dtype, s.inbox)
        if values.numel() != want:
            raise ValueError(f"push to {s.name!r}: {values.numel()} values where {want} were due")
        if s.sparse:
            grad = minidl.sparse_coo_tensor(rows.unsqueeze(0), values.reshape((rows.numel(),) + s.shape[1:]),
                                            s.param.shape)
        else:
            grad = values.reshape(s.param.shape)
        if self.bsp:   # (applied when the iteration ends: the inbox will hold the next push by then)
            self.deferred.append((s, grad if s.sparse else grad.clone(), words[P.WORKER_CLOCK]))
        else:
            self.apply(s, grad, words[P.WORKER_CLOCK])
        self.reply(worker)

    def apply(self, s, grad, clock):
        s.apply(grad)
        self.count(clock)

    def count(self, clock):
        self.stats["pushes"] += 1
        self.stats["staleness"][max(0, clock - min(self.active_clocks(), default=clock))] += 1

    def apply_summed(self, due):
        """BSP: each ended iteration's pushes to a parameter, summed, as one optimizer step."""
        steps = {}
        for s, grad, clock in due:
            steps.setdefault((clock, id(s)), (s, []))[1].append(grad)
            self.count(clock)
        for (clock, _), (s, grads) in sorted(steps.items(), key=lambda item: item[0][0]):
            s.apply(_sum(grads))

    def pull(self, worker, words):
        s = self.shard(words)
        self.stats["pulls"] += 1
        if s.sparse and words[P.ROWS] >= 0:
            self.reply(worker, s.param.detach()[self._rows(s, worker, words)])
        else:   # (a copy: under MPI the send may still read it while later pushes change the shard)
            self.reply(worker, s.param.detach().clone())

    def clock(self, worker, words):
        self.clocks[worker] += 1
        if self.bound is not None:
            self.waiting.append(worker)
            self.release()

    def shutdown(self, worker, words):
        self.finished.add(worker)
        self.release()

    def exited(self, worker, words):
        raise self.lost([worker], "exited without calling ps.shutdown()")

    def silent(self) -> list:
        """The workers neither shut down nor waiting for this server's answer at their clock."""
        return [w for w in range(self.workers) if w not in self.finished and w not in self.waiting]

    def lost(self, workers, how) -> WorkerLost:
        """The error naming ``workers``, logged, and sent to every worker waiting at its clock (they
        would otherwise time out naming this server, which only waited for the others). Only those
        replies are awaited: an earlier one may still be pending to the silent worker, past its deadline."""
        clocks = ", ".join(f"worker {w} at clock {self.clocks[w]}" for w in range(self.workers)
                           if w not in self.finished)
        message = (f"parameter server {self.server}: worker rank(s) {workers} {how}; the job cannot go on "
                   f"(clocks: {clocks})")
        log.error("%s", message)
        replies = [work for worker in self.waiting for work in self.reply(worker, error=message)]
        self.waiting = []
        for work in replies:
            try:
                work.wait()
            except DistError:
                pass   # (that worker is gone too: the error raised here names the job's end all the same)
        return WorkerLost(message)

    def report(self, worker, words):
        hist = self.stats["staleness"]
        top = max(hist, default=-1)
        counts = [hist.get(i, 0) for i in range(top + 1)]
        self.reply(worker, minidl.tensor([self.stats["pushes"], self.stats["pulls"], self.stats["rejected"]] + counts,
                                         dtype=minidl.int64))

    # -- consistency --------------------------------------------------------------------------
    def active_clocks(self):
        return [c for w, c in enumerate(self.clocks) if w not in self.finished]

    def release(self):
        """Answer the clocks of the workers now within ``bound`` of the slowest one."""
        if self.bound is None:
            return
        slowest = min(self.active_clocks(), default=None)
        due = [d for d in self.deferred if slowest is None or d[2] < slowest]
        self.deferred = [d for d in self.deferred if not (slowest is None or d[2] < slowest)]
        self.apply_summed(due)   # (BSP: the ended iterations' pushes, before anyone goes on)
        still = []
        for worker in self.waiting:
            if slowest is None or self.clocks[worker] - slowest <= self.bound:
                self.reply(worker)
            else:
                still.append(worker)
        self.waiting = still


def _sum(grads):
    """Gradients of one shard added up: dense ones elementwise, sparse ones by row (coalesced)."""
    if len(grads) == 1:
        return grads[0]
    if grads[0].is_sparse:
        return minidl.sparse_coo_tensor(minidl.cat([g._indices() for g in grads], 1),
                                        minidl.cat([g._values() for g in grads]), grads[0].shape).coalesce()
    total = grads[0]   # (a copy the server made: BSP's deferred dense pushes are cloned)
    for g in grads[1:]:
        total.add_(g)
    return total


def _checksum(value):
    """Two sums that two registrations of the same values agree on exactly (None for a table the
    server makes itself)."""
    if value is None:
        return None
    v = value.double()
    return float(v.sum()), float((v * minidl.arange(1, v.numel() + 1, dtype=minidl.float64)).sum())
