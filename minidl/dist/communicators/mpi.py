"""The MPI backend over mpi4py's buffer API: messages are the numpy arrays themselves, never
pickled. Native collectives are the non-blocking MPI ones (Iallreduce ...), so a wait can poll,
back off and time out like any other.
"""
from __future__ import annotations

import os
import sys
import time
import traceback

import numpy as np
from mpi4py import MPI

from .base import DEFAULT_CHUNK, Communicator, DistError, Request

ONE_RANK_PER_PROCESS = True
# How long a wait polls before sleeping, when every rank has a core (MPI's own waits poll without
# end). 10 ms outlasts a ring step of 16-64 MiB even on a loaded machine; with 2 ms such steps
# ended asleep, stalling the peer's rendezvous too (16 MiB: 2-10 ms instead of ~2 ms).
SPIN_SECONDS = 10e-3
# How long a failing rank waits, after writing its traceback, before ending the job (see the hook below).
ABORT_PAUSE_SECONDS = 1.0

_OPS = {"sum": MPI.SUM, "product": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}
# numpy's add/multiply/maximum/minimum on bools are or/and/or/and; MPI wants logical ops there
_BOOL_OPS = {"sum": MPI.LOR, "product": MPI.LAND, "max": MPI.LOR, "min": MPI.LAND}


def _failed(error, kind, peer) -> DistError:
    """MPI's error as a DistError naming the operation (MPI's own text says only "Message truncated")."""
    where = "a native collective" if peer is None and kind == "collective" else f"a {kind} with rank {peer}"
    return DistError(f"MPI failed in {where}: {error.Get_error_string()}")


class _MPIRequest(Request):
    """``source``: the peer, or for a receive from any source (peer None) the sender once done."""

    def __init__(self, req, peer, kind):
        self.req, self.peer, self.kind, self.source = req, peer, kind, peer

    def test(self):
        try:
            return self.req.Test()
        except MPI.Exception as e:
            raise _failed(e, self.kind, self.peer) from None


class _AnySourceMPIRequest(_MPIRequest):
    def test(self):
        status = MPI.Status()
        try:
            done = self.req.Test(status)
        except MPI.Exception as e:
            raise _failed(e, self.kind, "any") from None
        if done:
            self.source = status.Get_source()
        return done


class _MPIExchange(Request):
    """A send and a receive tested together by one MPI_Testall (a small collective's step)."""

    def __init__(self, comm, send_buf, dst, recv_buf, src, tag):
        self.requests = [comm.Isend(send_buf, dst, tag), comm.Irecv(recv_buf, src, tag)]
        self.dst, self.src = dst, src

    def test(self):
        try:
            return MPI.Request.Testall(self.requests)
        except MPI.Exception as e:
            raise _failed(e, "exchange", self.src) from None

    def unfinished(self):
        send, recv = self.requests
        return [r for r in (_MPIRequest(send, self.dst, "send"), _MPIRequest(recv, self.src, "recv")) if not r.test()]


def _mpi_op(op: str, buf):
    return (_BOOL_OPS if buf.dtype == np.bool_ else _OPS)[op]


class MPICommunicator(Communicator):
    native = frozenset({"all_reduce", "broadcast", "reduce", "all_gather", "barrier"})

    def __init__(self, comm, chunk_elements=DEFAULT_CHUNK, spin=0.0):
        super().__init__(chunk_elements)
        self.comm, self.rank, self.size, self.spin = comm, comm.Get_rank(), comm.Get_size(), spin

    def _isend(self, buf, dst, tag):
        return _MPIRequest(self.comm.Isend(buf, dst, tag), dst, "send")

    def _irecv(self, buf, src, tag):
        if src is None:
            return _AnySourceMPIRequest(self.comm.Irecv(buf, MPI.ANY_SOURCE, tag), None, "recv")
        return _MPIRequest(self.comm.Irecv(buf, src, tag), src, "recv")

    def exchange(self, send_buf, dst, recv_buf, src, tag=0):
        if src is None or send_buf.size > self.chunk_elements or recv_buf.size > self.chunk_elements:
            return super().exchange(send_buf, dst, recv_buf, src, tag)
        return self.exchange_whole(send_buf, dst, recv_buf, src, tag)

    def exchange_whole(self, send_buf, dst, recv_buf, src, tag=0):
        return [_MPIExchange(self.comm, send_buf, dst, recv_buf, src, tag)]

    def split(self, color, key):
        sub = self.comm.Split(MPI.UNDEFINED if color is None else color, key)
        return None if sub == MPI.COMM_NULL else MPICommunicator(sub, self.chunk_elements, self.spin)

    def host_name(self):
        return os.environ.get("MINIDL_DIST_HOSTNAME") or MPI.Get_processor_name()

    def close(self):
        if self.comm not in (MPI.COMM_WORLD, MPI.COMM_SELF, MPI.COMM_NULL):
            self.comm.Free()

    # -- native collectives: lists of requests, one per chunk -----------------------------------
    def all_reduce(self, buf, op):
        return [_MPIRequest(self.comm.Iallreduce(MPI.IN_PLACE, p, _mpi_op(op, buf)), None, "collective")
                for p in self._pieces(buf)]

    def broadcast(self, buf, root):
        return [_MPIRequest(self.comm.Ibcast(p, root), None, "collective") for p in self._pieces(buf)]

    def reduce(self, buf, op, root):
        # the root reduces in place; the others' buffers are only read
        send = (lambda p: MPI.IN_PLACE) if self.rank == root else (lambda p: p)
        return [_MPIRequest(self.comm.Ireduce(send(p), p, _mpi_op(op, buf), root), None, "collective")
                for p in self._pieces(buf)]

    def all_gather(self, blocks):
        """``blocks``: (size, m) array whose row ``rank`` holds this rank's data; every row is
        filled. One request per column chunk (the rows' chunk is gathered through a packed copy
        only when the chunk doesn't cover whole rows)."""
        m = blocks.shape[1]
        if m <= self.chunk_elements:
            return [_MPIRequest(self.comm.Iallgather(MPI.IN_PLACE, blocks), None, "collective")]
        return [_Gathered(self.comm, blocks, j, min(j + self.chunk_elements, m))
                for j in range(0, m, self.chunk_elements)]

    def barrier(self):
        return [_MPIRequest(self.comm.Ibarrier(), None, "collective")]


class _Gathered(Request):
    """Columns j:k of an all-gather, through a contiguous (size, k-j) staging array."""

    def __init__(self, comm, blocks, j, k):
        self.blocks, self.j, self.k = blocks, j, k
        self.stage = np.empty((blocks.shape[0], k - j), blocks.dtype)
        self.req = comm.Iallgather(np.ascontiguousarray(blocks[comm.Get_rank(), j:k]), self.stage)

    def test(self):
        if not self.req.Test():
            return False
        self.blocks[:, self.j:self.k] = self.stage
        return True


def world_communicator(chunk_elements=DEFAULT_CHUNK, **_):
    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        raise RuntimeError("init_process_group: the MPI library was initialised without MPI_THREAD_MULTIPLE; "
                           "minidl.dist runs collectives on a communication thread and needs it")
    return MPICommunicator(MPI.COMM_WORLD, chunk_elements, 0.0 if _oversubscribed() else SPIN_SECONDS)


def _oversubscribed() -> bool:
    """More ranks on this node than cores: then a spinning wait steals the core of the rank it
    waits for. (Collective over COMM_WORLD.)"""
    local = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    ranks_here = local.Get_size()
    local.Free()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return ranks_here > cores


def abort_on_uncaught_exception() -> None:
    """An uncaught exception on one rank prints its traceback, then ends the whole job (as
    ``python -m mpi4py`` does), so the other ranks don't wait for it forever. The traceback goes out in
    one write: mpiexec forwards a rank's output in the chunks it reads, and the abort can stop it between
    two (a line-by-line traceback then arrived cut after its first line). It pauses before the abort:
    mpiexec reads a rank's output asynchronously and stops reading once the abort reaches it, so on a
    loaded machine an immediate abort could lose the traceback entirely."""
    def hook(kind, value, tb):
        sys.stderr.write("".join(traceback.format_exception(kind, value, tb)))
        sys.stderr.flush()
        time.sleep(ABORT_PAUSE_SECONDS)
        MPI.COMM_WORLD.Abort(1)
    sys.excepthook = hook
