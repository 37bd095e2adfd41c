"""The NCCL backend: CUDA tensors' device buffers move through NCCL (CuPy's ``cupy.cuda.nccl``),
one process and one GPU per rank. A host communicator does what NCCL can't: MPI's under ``mpiexec``, the
socket one (rendezvoused through the store) otherwise. It hands rank 0's NCCL unique id to the others,
tells each rank its local rank (which picks its GPU) where the launcher did not, and carries host buffers
(the control messages minidl.dist sends: host names, pickled objects, flags): the communicator is the host
one with device buffers rerouted.

NCCL sends and receives are stream operations, not requests: a send holds its stream until the
peer posts the matching receive, so two ranks that each send and then receive would deadlock
unless both operations are issued together, between ``groupStart()`` and ``groupEnd()``. Here
``isend``/``irecv`` of a device buffer only queue the operation; the first ``test()`` of a
queued request issues everything queued so far as one group and records an event, which the
requests then poll. Algorithms post a send and its matching receive before they wait (the ring
keeps two segments' pairs in flight), so each group holds what the peers need to progress. NCCL messages carry no tag and no "any source": messages between two ranks match
in the order they were posted.

All NCCL work runs on the device's legacy default stream, which orders it after the kernels that
produced its buffers and before those that read the results. CUDA's current device is per
thread, so every entry point makes the rank's GPU current on the calling thread (the group's
communication thread included) before it allocates or issues anything.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import pickle
import time

import numpy as np

from ...cuda import set_device
from ...kernels.cuda import runtime
from .base import DEFAULT_CHUNK, Communicator, DistError, Request, wait_all

ONE_RANK_PER_PROCESS = True
ID_BYTES = 4096   # the most a pickled NCCL unique id takes (NCCL's is 128 bytes)
_host_module = None   # the backend module of the world's host communicator: its abort ends the job

# The NCCL datatype of each dtype a reduction can run on (names of cupy.cuda.nccl's constants).
# Bools travel as bytes, reduced with max (or) and min (and), as numpy's ufuncs treat them.
DTYPES = {np.dtype(np.float16): "NCCL_FLOAT16", np.dtype(np.float32): "NCCL_FLOAT32",
          np.dtype(np.float64): "NCCL_FLOAT64", np.dtype(np.int8): "NCCL_INT8", np.dtype(np.uint8): "NCCL_UINT8",
          np.dtype(np.int32): "NCCL_INT32", np.dtype(np.int64): "NCCL_INT64", np.dtype(np.bool_): "NCCL_UINT8"}
OPS = {"sum": "NCCL_SUM", "product": "NCCL_PROD", "max": "NCCL_MAX", "min": "NCCL_MIN"}
BOOL_OPS = {"sum": "NCCL_MAX", "product": "NCCL_MIN", "max": "NCCL_MAX", "min": "NCCL_MIN"}
# Where launchers put the local rank; the ranks' host names are the fallback.
LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK")


def on_device(buf) -> bool:
    return hasattr(buf, "__cuda_array_interface__")


def _pointer(buf) -> int:
    return buf.__cuda_array_interface__["data"][0]


class _Grouped(Request):
    """A device send or receive: queued, then issued with the others of its group."""

    def __init__(self, comm, peer, kind):
        self.comm, self.peer, self.kind, self.source = comm, peer, kind, peer
        self.event = self.failure = None

    def test(self):
        if self.event is None and self.failure is None:
            self.comm.flush()
        if self.failure is not None:
            raise DistError(f"nccl: the {self.kind} with rank {self.peer} could not be issued: {self.failure}")
        return self.event.done


class _Issued(Request):
    """A native collective, done when the event recorded after it is."""

    def __init__(self, event):
        self.event = event

    def test(self):
        return self.event.done


class NCCLCommunicator(Communicator):
    """The ranks of host communicator ``host`` with an NCCL communicator over the same ranks on ``device``
    (made here: collective over ``host``). ``cupy``: the cupy module (tests pass a stand-in that records
    calls). Host buffers, and the collectives the host runs natively, go to the host."""

    def __init__(self, host, cupy, device):
        super().__init__(host.chunk_elements)
        self.host, self.rank, self.size, self.spin, self.native = host, host.rank, host.size, host.spin, host.native
        self.cupy, self.lib, self.device = cupy, cupy.cuda.nccl, device
        unique_id = share_unique_id(host, self.lib)
        device.use()
        self.nccl = self.lib.NcclCommunicator(self.size, unique_id, self.rank)
        self.stream = cupy.cuda.Stream.null.ptr
        self.queued = []  # (request, NCCL method name, its arguments) not yet issued
        self.device_scratch = None

    # -- point-to-point ---------------------------------------------------------------------------
    def _isend(self, buf, dst, tag):
        if not on_device(buf):
            return self.host._isend(buf, dst, tag)
        return self._queue("send", dst, _pointer(buf), buf.nbytes, self.lib.NCCL_UINT8, dst)

    def _irecv(self, buf, src, tag):
        if not on_device(buf):
            return self.host._irecv(buf, src, tag)
        if src is None:
            raise DistError("nccl: a receive from any source is impossible (NCCL messages name their peer); "
                            "pass src")
        return self._queue("recv", src, _pointer(buf), buf.nbytes, self.lib.NCCL_UINT8, src)

    def exchange(self, send_buf, dst, recv_buf, src, tag=0):
        """Device buffers as a queued send and receive (the host's one-call exchange is for host memory)."""
        if on_device(send_buf) or on_device(recv_buf):
            return super().exchange(send_buf, dst, recv_buf, src, tag)
        return self.host.exchange(send_buf, dst, recv_buf, src, tag)

    def exchange_whole(self, send_buf, dst, recv_buf, src, tag=0):
        if on_device(send_buf) or on_device(recv_buf):
            return super().exchange_whole(send_buf, dst, recv_buf, src, tag)
        return self.host.exchange_whole(send_buf, dst, recv_buf, src, tag)

    def _queue(self, kind, peer, *args):
        request = _Grouped(self, peer, kind)
        self.queued.append((request, kind, args))
        return request

    def flush(self) -> None:
        """Issue the queued sends and receives as one NCCL group."""
        if not self.queued:
            return
        queued, self.queued = self.queued, []
        self.device.use()
        self.lib.groupStart()
        try:
            for _, method, args in queued:
                getattr(self.nccl, method)(*args, self.stream)
        except Exception as e:  # the requests must fail as DistErrors, not wait for an event never made
            for request, _, _ in queued:
                request.failure = e
            raise
        finally:
            self.lib.groupEnd()
        event = self._record()
        for request, _, _ in queued:
            request.event = event

    def _record(self):
        event = self.cupy.cuda.Event(disable_timing=True)
        event.record(self.cupy.cuda.Stream.null)
        return event

    def scratch(self, numel, like):
        if not on_device(like):
            return self.host.scratch(numel, like)
        nbytes = numel * like.dtype.itemsize
        if self.device_scratch is None or self.device_scratch.size < nbytes:
            self.device.use()
            self.device_scratch = self.cupy.empty(nbytes, np.uint8)
        return self.device_scratch[:nbytes].view(like.dtype)

    # -- native collectives: one request each (NCCL counts are size_t: no chunks) ---------------
    def _collective(self, method, *args):
        self.flush()  # queued point-to-point goes first, in posting order
        self.device.use()
        getattr(self.nccl, method)(*args, self.stream)
        return [_Issued(self._record())]

    def _reduction(self, buf, op):
        try:
            dtype = DTYPES[buf.dtype]
        except KeyError:
            raise TypeError(f"nccl: NCCL can't reduce {buf.dtype} buffers; one of "
                            f"{sorted(d.name for d in DTYPES)}") from None
        return getattr(self.lib, dtype), getattr(self.lib, (BOOL_OPS if buf.dtype == np.bool_ else OPS)[op])

    def all_reduce(self, buf, op):
        if not on_device(buf):
            return self.host.all_reduce(buf, op)
        p = _pointer(buf)
        return self._collective("allReduce", p, p, buf.size, *self._reduction(buf, op))

    def broadcast(self, buf, root):
        if not on_device(buf):
            return self.host.broadcast(buf, root)
        return self._collective("bcast", _pointer(buf), buf.nbytes, self.lib.NCCL_UINT8, root)

    def reduce(self, buf, op, root):
        if not on_device(buf):
            return self.host.reduce(buf, op, root)
        p = _pointer(buf)  # in place: the root's buffer receives, the others' are only read
        return self._collective("reduce", p, p, buf.size, *self._reduction(buf, op), root)

    def all_gather(self, blocks):
        """In place: NCCL reads this rank's row where its result goes (row ``rank``)."""
        if not on_device(blocks):
            return self.host.all_gather(blocks)
        row = blocks[0].nbytes
        p = _pointer(blocks)
        return self._collective("allGather", p + self.rank * row, p, row, self.lib.NCCL_UINT8)

    # -- the rest ---------------------------------------------------------------------------------
    def split(self, color, key):
        sub = self.host.split(color, key)
        return None if sub is None else NCCLCommunicator(sub, self.cupy, self.device)

    def host_name(self):
        return self.host.host_name()

    def close(self):
        self.flush()
        self.device.synchronize()  # NCCL work still queued on the stream must finish first
        self.nccl.destroy()
        self.host.close()


def share_unique_id(host, lib, timeout: float = 300.0):
    """Rank 0's new NCCL unique id, on every rank of ``host`` (collective; the host communicator is new, so its
    messages are the only ones on it): one message to each other rank, its length first."""
    deadline = time.monotonic() + timeout

    def wait(requests):
        wait_all(requests, deadline, lambda pending: DistError(
            f"init_process_group('nccl'): rank {host.rank} waited {timeout:.0f} s for rank 0's NCCL unique id"))
    if host.rank == 0:
        unique_id = lib.get_unique_id()
        payload = pickle.dumps(unique_id)
        message = np.frombuffer(len(payload).to_bytes(8, "little") + payload, np.uint8)
        wait([host.isend_whole(message, r) for r in range(1, host.size)])
        return unique_id
    message = np.zeros(ID_BYTES, np.uint8)
    wait([host.irecv_whole(message, 0)])
    length = int.from_bytes(message[:8].tobytes(), "little")
    return pickle.loads(message[8:8 + length].tobytes())


def local_rank(host, timeout: float = 300.0) -> int:
    """This process's rank among those on its node (collective over ``host``): the launcher's variable where
    it sets one, else its place among the ranks of its host name (every rank sends every other its name)."""
    for name in LOCAL_RANK_VARIABLES:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    mine = np.zeros(256, np.uint8)
    encoded = host.host_name().encode()[:256]
    mine[:len(encoded)] = np.frombuffer(encoded, np.uint8)
    names = {host.rank: mine}
    requests = []
    for r in range(host.size):
        if r != host.rank:
            names[r] = np.zeros(256, np.uint8)
            requests += host.exchange_whole(mine, r, names[r], r)
    wait_all(requests, time.monotonic() + timeout, lambda pending: DistError(
        f"init_process_group('nccl'): rank {host.rank} waited {timeout:.0f} s for the other ranks' host names"))
    return sum(1 for r in range(host.rank) if np.array_equal(names[r], mine))


def abort_on_uncaught_exception() -> None:
    """The host's: an uncaught exception on one rank ends the job."""
    _host_module.abort_on_uncaught_exception()


def import_cupy():
    """CuPy with NCCL and a GPU, or a RuntimeError saying which is missing."""
    what = "init_process_group('nccl')"
    if importlib.util.find_spec("cupy") is None:
        raise RuntimeError(f"{what}: the nccl backend moves CUDA tensors with CuPy's NCCL bindings, and CuPy is not "
                           f"installed (pip install cupy-cuda13x, on a machine with an NVIDIA GPU); for CPU tensors "
                           f"use backend='mpi'")
    import cupy
    from cupy.cuda import nccl
    if not getattr(nccl, "available", True):
        raise RuntimeError(f"{what}: this CuPy was built without NCCL (cupy.cuda.nccl.available is False); "
                           f"install NCCL (pip install nvidia-nccl-cu13) or use backend='mpi' with CPU tensors")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001  (no driver: CuPy's errors vary by version)
        raise RuntimeError(f"{what}: CuPy found no usable GPU ({e})") from None
    if count == 0:
        raise RuntimeError(f"{what}: CuPy found no GPU")
    return cupy


def world_communicator(chunk_elements=DEFAULT_CHUNK, cupy=None, host=None, **_):
    """``host``: the world's host communicator and its backend module, (communicator, module); default MPI's.
    ``cupy``: for tests, a stand-in for the cupy module."""
    global _host_module
    cupy = cupy or import_cupy()
    if host is None:
        module = importlib.import_module("minidl.dist.communicators.mpi")
        host = (module.world_communicator(chunk_elements), module)
    base, _host_module = host
    local, count = local_rank(base), cupy.cuda.runtime.getDeviceCount()
    if local >= count:
        raise RuntimeError(f"init_process_group('nccl'): local rank {local} has no GPU of its own (this node has "
                           f"{count}); NCCL needs one GPU per rank: start at most {count} ranks per node")
    device = cupy.cuda.Device(local)
    device.use()
    if runtime.available():  # (not with a stand-in cupy in tests)
        set_device(local)  # so current_device(), the generators and the error records agree
    return NCCLCommunicator(base, cupy, device)
