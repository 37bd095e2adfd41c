"""ProcessGroup: a set of ranks with its communicators, settings, collective sequence number
and communication thread. Collectives are submitted as jobs and run on that thread in order.

Users' point-to-point messages and the collectives' own messages travel on two communicators
(split from the same ranks), so a user's recv never takes a collective's message.
"""
from __future__ import annotations

import ast
import dataclasses
import os

import numpy as np

from .. import _tracing
from . import algorithms, debug, faults
from .algorithms.agree import agree
from .algorithms.channel import Channel
from .communicators.base import DEFAULT_CHUNK, DistError
from .descriptor import explain
from .mailbox import Mailbox
from .work import CommThread


@dataclasses.dataclass
class Config:
    backend: str
    algorithm: str = "auto"
    timeout: float = 1800.0
    stall_seconds: float = 60.0
    chunk_elements: int = DEFAULT_CHUNK
    small_bytes: int = 64 * 1024
    segment_bytes: int = algorithms.ring.SEGMENT_BYTES
    debug: bool = False


class Hierarchy:
    """This group's ranks by host, and (built at first use, collectively) the per-host and the
    host-leaders communicators the hierarchical all-reduce runs on."""

    def __init__(self, group, hosts):
        self.group, self.hosts = group, hosts
        self.spans_hosts = 1 < len(set(hosts)) < len(hosts)
        self._channels = None

    def channels(self, ch):
        if self._channels is None:
            g, hosts = self.group, self.hosts
            mine = hosts[g.rank]
            order = sorted(set(hosts), key=hosts.index)
            local = g.coll.split(order.index(mine), g.rank)
            local_ranks = [g.ranks[i] for i in range(g.size) if hosts[i] == mine]
            leaders = g.coll.split(0 if local.rank == 0 else None, g.rank)
            leader_ranks = [g.ranks[hosts.index(h)] for h in order]
            self._channels = (local, local_ranks, leaders, leader_ranks)
        local, local_ranks, leaders, leader_ranks = self._channels
        return ch.sub(local, local_ranks), None if leaders is None else ch.sub(leaders, leader_ranks)


class ProcessGroup:
    def __init__(self, comm, global_ranks, config: Config):
        self.p2p, self.ranks, self.config = comm, list(global_ranks), config
        self.rank, self.size = comm.rank, comm.size
        self.coll = comm.split(0, comm.rank)
        self.mailbox = Mailbox(comm, comm.split(0, comm.rank))  # headers on p2p, the data on its own
        self.seq = 0
        self.sent = [0]  # bytes this rank's collectives on the group sent (our algorithms' messages)
        self.collective_channel = self.channel("")  # reused by every collective (see submit)
        self.thread = CommThread(f"minidl.dist group of ranks {self.ranks[:8]} rank {self.rank}",
                                 precise_sleeps=self.coll.spin > 0)  # waits spin: a core per rank
        self.failed = None  # the error that ended this group, if one did
        self.closed = False
        # the receives of an agreement hold small_bytes of data: the ranks must agree on it
        found = algorithms.all_gather_bytes(self.channel("init_process_group (host names and settings)"),
                                            f"{config.small_bytes} {comm.host_name()}".encode())
        small = {int(f.split(b" ", 1)[0]) for f in found}
        if len(small) > 1:
            raise ValueError(f"init_process_group: the ranks of {self.ranks} were given different "
                             f"small_message_bytes: {sorted(small)}; give every rank the same")
        self.hierarchy = Hierarchy(self, [f.split(b" ", 1)[1].decode() for f in found])

    def __repr__(self):
        return f"ProcessGroup(backend={self.config.backend!r}, ranks={self.ranks}, rank={self.rank})"

    def channel(self, what: str, comm=None, tag: int = 0, spin: bool = True) -> Channel:
        """``spin``: may the waits poll without sleeping for a while (see communicators.base.wait_all);
        not on the communication thread, whose spinning would take a core from the compute. (A message,
        as a collective in submit, is a graph break of minidl.compile.)"""
        _tracing.graph_break(f"{what}: a message of minidl.dist")
        comm = comm or self.coll
        return Channel(comm, what, self.config.timeout, self.ranks, tag, comm.spin if spin else 0.0,
                       self.config.stall_seconds, self.sent)

    def group_rank(self, global_rank, what: str, name: str) -> int:
        """The rank within this group of global rank ``global_rank``, with a clear error."""
        if global_rank not in self.ranks:
            raise ValueError(f"{what}: {name}={global_rank} is not a rank of this group (ranks {self.ranks})")
        return self.ranks.index(global_rank)

    def submit(self, what: str, job, async_op: bool, descriptor=None, fingerprint=None):
        """Run ``job(channel)`` on the communication thread; a Work if async_op, else wait for it.
        ``descriptor``: what the ranks agree on before the job (descriptor.describe); None where the
        job agrees itself (a small all-reduce carries its data in the agreement). ``fingerprint``:
        what MINIDL_DIST_DEBUG compares across ranks (tensor, op, root ...). Communication is a graph
        break of minidl.compile (a replay would not talk to the other ranks)."""
        _tracing.graph_break(f"{what}: a collective or message of minidl.dist")
        self.check_usable(what)
        debug.counted(what)
        faults.collective(what, self.ranks[self.rank], self.size)
        self.seq += 1
        seq = self.seq
        fp = debug.fingerprint(what, seq, **(fingerprint or {})) if self.config.debug else None

        def run(inline):
            self.check_usable(what)
            ch = self.collective_channel.start(what, seq, self.coll.spin if inline else 0.0)
            try:
                if fp is not None:
                    found = algorithms.all_gather_bytes(ch, repr(fp).encode())
                    debug.check([ast.literal_eval(f.decode()) for f in found], self.ranks)
                if descriptor is not None:
                    self.agree(ch, descriptor)
                job(ch)
            except DistError as e:  # its messages may still be in flight: the group can't go on
                self.failed = e
                raise
        if async_op:
            return self.thread.submit(run)
        self.thread.run(run)
        return None

    def agree(self, ch, descriptor, buf=None, op=None) -> None:
        """Check, on every rank, that all ranks run the collective ``descriptor`` says (and all-reduce
        a small host ``buf`` with ``op`` along the way: algorithms/agree.py); where they don't,
        every rank raises the same DistError, naming each rank's call."""
        if agree(ch, descriptor, self.config.small_bytes, buf, op):
            return
        every = np.zeros((self.size, descriptor.size), np.int64)
        every[self.rank] = descriptor
        algorithms.all_gather(ch, every, "auto")
        raise explain(ch.what, every, self.ranks)

    def set_timeout(self, seconds: float) -> None:
        """How long this group's operations may wait from now on (every collective's channel reads it)."""
        self.config.timeout = self.collective_channel.timeout = seconds

    def check_usable(self, what: str) -> None:
        if self.failed is not None:
            raise DistError(f"{what}: this process group failed at an earlier collective, whose messages "
                            f"may still be in flight; make a new group with new_group(). The failure: "
                            f"{self.failed}") from self.failed

    def close(self) -> None:
        self.closed = True
        self.thread.close()
        self.coll.close()
        self.mailbox.data.close()
        self.p2p.close()


def config_from(backend, algorithm, timeout, chunk_elements, small_bytes, segment_bytes,
                stall_seconds=None) -> Config:
    """Settings from the arguments, else the MINIDL_DIST_* environment, else the defaults."""
    algorithm = algorithm or os.environ.get("MINIDL_DIST_ALGO", "auto")
    if algorithm not in algorithms.ALGORITHMS:
        raise ValueError(f"init_process_group: unknown algorithm {algorithm!r}; one of {algorithms.ALGORITHMS}")
    if timeout is None:
        timeout = os.environ.get("MINIDL_DIST_TIMEOUT", 1800.0)
    if stall_seconds is None:
        stall_seconds = os.environ.get("MINIDL_DIST_STALL_SECONDS", 60.0)
    config = Config(backend, algorithm, _seconds(timeout, "timeout (or MINIDL_DIST_TIMEOUT)"),
                    _seconds(stall_seconds, "stall_seconds (or MINIDL_DIST_STALL_SECONDS)"), debug=debug.enabled())
    if chunk_elements is not None:
        config.chunk_elements = int(chunk_elements)
    if small_bytes is not None:
        config.small_bytes = int(small_bytes)
    if segment_bytes is not None:
        if int(segment_bytes) < 1:
            raise ValueError(f"init_process_group: segment_bytes must be positive, got {segment_bytes}")
        config.segment_bytes = int(segment_bytes)
    return config


def _seconds(value, name: str) -> float:
    """A positive number of seconds from a number, a string or a timedelta, with a clear error."""
    try:
        seconds = float(value.total_seconds() if hasattr(value, "total_seconds") else value)
    except (TypeError, ValueError):
        raise ValueError(f"init_process_group: {name} must be a number of seconds, got {value!r}") from None
    if not seconds > 0:
        raise ValueError(f"init_process_group: {name} must be positive, got {value!r}")
    return seconds
