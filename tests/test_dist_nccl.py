"""The "nccl" backend. Without a GPU: the error when CuPy or a GPU is missing, the dtype and op
tables, and the communicator's calls into NCCL checked against a stand-in for ``cupy`` that
records them (the unique id handed over the host communicator, grouped sends and receives, pointers and byte
counts of the collectives), plus the tensor layer on CUDA tensors of the simulator. With a GPU:
the collectives on CUDA tensors at world size 1 under ``mpiexec -n 1`` (NCCL refuses two ranks on
one GPU), from the ``__main__`` block of this file.
"""
import importlib.util
import os
import pathlib
import subprocess
import sys
import threading
import types

import numpy as np
import pytest

import minidl
from minidl.dist.communicators import nccl
from minidl.dist.communicators.base import Communicator, DistError
from minidl.dist.communicators.sim import SimWorld, world_communicator as sim_world
from minidl.dist import ReduceOp

ROOT = pathlib.Path(__file__).resolve().parent.parent


# -- a stand-in for the cupy module -----------------------------------------------------------------
class FakeDeviceArray:
    """A numpy array that announces itself as device memory, as a cupy array does."""

    def __init__(self, host):
        self.host = host

    @property
    def __cuda_array_interface__(self):
        return self.host.__array_interface__

    def __getattr__(self, name):  # size, nbytes, dtype ...
        return getattr(self.host, name)

    def __getitem__(self, key):
        return FakeDeviceArray(self.host[key])

    def view(self, dtype):
        return FakeDeviceArray(self.host.view(dtype))


class FakeNcclModule(types.SimpleNamespace):
    """cupy.cuda.nccl: constants as in nccl.h, and every call appended to ``calls``."""

    def __init__(self):
        names = ("NCCL_INT8", "NCCL_UINT8", "NCCL_INT32", "NCCL_UINT32", "NCCL_INT64", "NCCL_UINT64",
                 "NCCL_FLOAT16", "NCCL_FLOAT32", "NCCL_FLOAT64")
        super().__init__(**{n: i for i, n in enumerate(names)}, NCCL_SUM=0, NCCL_PROD=1, NCCL_MAX=2, NCCL_MIN=3)
        self.calls = []
        module = self

        class NcclCommunicator:
            def __init__(self, ndev, unique_id, rank):
                module.calls.append(("NcclCommunicator", ndev, unique_id, rank))

            def __getattr__(self, method):
                return lambda *args: module.calls.append((method, *args))

        self.NcclCommunicator = NcclCommunicator

    def get_unique_id(self):
        self.calls.append(("get_unique_id",))
        return b"id-of-rank-0"

    def groupStart(self):
        self.calls.append(("groupStart",))

    def groupEnd(self):
        self.calls.append(("groupEnd",))


class FakeEvent:
    def __init__(self, disable_timing=False):
        self.done = False

    def record(self, stream=None):
        self.done = True  # the stand-in's NCCL calls complete at once


class FakeDevice:
    def __init__(self, index):
        self.index = index

    def use(self):
        pass

    def synchronize(self):
        pass


def fake_cupy(devices=1):
    lib = FakeNcclModule()
    cuda = types.SimpleNamespace(nccl=lib, Event=FakeEvent, Device=FakeDevice,
                                 Stream=types.SimpleNamespace(null=types.SimpleNamespace(ptr=7)),
                                 runtime=types.SimpleNamespace(getDeviceCount=lambda: devices))
    return types.SimpleNamespace(cuda=cuda, empty=lambda n, dtype: FakeDeviceArray(np.empty(n, dtype)))


class Done:
    kind, peer = "send", None

    def test(self):
        return True


class FakeHost(Communicator):
    """A host communicator of one rank whose messages are scripted: sends are kept, and a receive gets rank 0's
    unique id as share_unique_id sends it."""
    native = frozenset({"all_reduce", "broadcast", "reduce", "all_gather", "barrier"})

    def __init__(self, rank, size):
        super().__init__()
        self.rank, self.size, self.sent = rank, size, []

    def _isend(self, buf, dst, tag):
        self.sent.append((buf, dst))
        return Done()

    def _irecv(self, buf, src, tag):
        payload = nccl.pickle.dumps(b"id-of-rank-0")
        buf[:8 + len(payload)] = np.frombuffer(len(payload).to_bytes(8, "little") + payload, np.uint8)
        return Done()

    def host_name(self):
        return "node"


def communicator(rank=1, size=4):
    cupy = fake_cupy()
    comm = nccl.NCCLCommunicator(FakeHost(rank, size), cupy, FakeDevice(0))
    cupy.cuda.nccl.calls.clear()
    return comm, cupy.cuda.nccl


def device(array):
    return FakeDeviceArray(np.ascontiguousarray(array))


def ptr(buf):
    return buf.__cuda_array_interface__["data"][0]


# -- without CuPy or a GPU ----------------------------------------------------------------------------
@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed here")
def test_init_without_cupy_says_why():
    code = "import minidl.dist as dist; dist.init_process_group('nccl')"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), check=False)
    assert done.returncode != 0
    assert "RuntimeError: init_process_group('nccl'): the nccl backend moves CUDA tensors" in done.stderr
    assert "CuPy is not installed (pip install cupy-cuda13x" in done.stderr


def test_init_without_gpu_says_why(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(devices=0))
    monkeypatch.setitem(sys.modules, "cupy.cuda", sys.modules["cupy"].cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", sys.modules["cupy"].cuda.nccl)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    with pytest.raises(RuntimeError, match=r"init_process_group\('nccl'\): CuPy found no GPU"):
        nccl.import_cupy()


def test_more_ranks_than_gpus_says_why(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(RuntimeError, match=r"local rank 1 has no GPU of its own \(this node has 1\)"):
        nccl.world_communicator(cupy=fake_cupy(devices=1), host=(FakeHost(1, 2), None))


def on_sim_ranks(size, fn, hosts=None):
    """fn(host communicator) on each rank of a sim world (threads); the results by rank."""
    world, results = SimWorld(size, hosts), [None] * size

    def rank_main(rank):
        results[rank] = fn(sim_world(world, rank, 1 << 30))
    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def test_local_rank_from_the_launcher_else_from_the_host_names(monkeypatch):
    for name in nccl.LOCAL_RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    hosts = ["a", "b", "a", "b", "a"]
    assert on_sim_ranks(5, nccl.local_rank, hosts) == [0, 0, 1, 1, 2]
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3")
    assert nccl.local_rank(FakeHost(5, 8)) == 3


def test_tables():
    """Every dtype minidl reduces has an NCCL type; bools reduce as numpy's ufuncs do."""
    for name in ("float16", "float32", "float64", "int64", "uint8", "bool"):
        assert np.dtype(name) in nccl.DTYPES
    assert set(nccl.OPS) == set(nccl.BOOL_OPS) == {op.combining.value for op in ReduceOp}
    nccl_ufunc = {"NCCL_MAX": np.maximum, "NCCL_MIN": np.minimum}
    a, b = np.array([0, 0, 1, 1], np.bool_), np.array([0, 1, 0, 1], np.bool_)
    for op in ReduceOp:
        want = op.ufunc(a, b)
        got = nccl_ufunc[nccl.BOOL_OPS[op.combining.value]](a.view(np.uint8), b.view(np.uint8))
        np.testing.assert_array_equal(got.view(np.bool_), want)


# -- the communicator's calls, against the stand-in ---------------------------------------------------
def test_unique_id_goes_from_rank_0_over_the_host_communicator():
    def make(host):
        cupy = fake_cupy()
        comm = nccl.NCCLCommunicator(host, cupy, FakeDevice(0))
        return comm.rank, comm.size, cupy.cuda.nccl.calls
    for rank, size, calls in on_sim_ranks(3, make):
        made = [("get_unique_id",)] if rank == 0 else []
        assert calls == made + [("NcclCommunicator", 3, b"id-of-rank-0", rank)]
        assert size == 3


def test_sends_and_receives_go_out_as_one_group_at_the_first_wait():
    comm, lib = communicator()
    out, into = device(np.arange(5, dtype=np.float32)), device(np.zeros(3, np.int64))
    requests = [comm.isend(out, 2), comm.irecv(into, 0)]
    assert lib.calls == []  # queued: a lone send could block its stream
    assert [r.kind for r in requests] == ["send", "recv"] and [r.peer for r in requests] == [2, 0]
    assert requests[1].test()
    assert lib.calls == [("groupStart",), ("send", ptr(out), 20, lib.NCCL_UINT8, 2, 7),
                         ("recv", ptr(into), 24, lib.NCCL_UINT8, 0, 7), ("groupEnd",)]
    assert requests[0].test() and len(lib.calls) == 4  # issued once


def test_an_exchange_of_device_buffers_goes_through_nccl():
    """Recursive doubling and all-to-all exchange through one call, which MPI's fast path must not take."""
    comm, lib = communicator()
    out, into = device(np.arange(4, dtype=np.float32)), device(np.zeros(4, np.float32))
    assert all(r.test() for r in comm.exchange(out, 2, into, 0))
    assert lib.calls == [("groupStart",), ("send", ptr(out), 16, lib.NCCL_UINT8, 2, 7),
                         ("recv", ptr(into), 16, lib.NCCL_UINT8, 0, 7), ("groupEnd",)]


def test_a_group_that_fails_to_issue_fails_its_requests(monkeypatch):
    comm, lib = communicator()
    monkeypatch.setattr(comm, "nccl", types.SimpleNamespace(send=lambda *a: (_ for _ in ()).throw(RuntimeError("x")),
                                                            recv=lambda *a: None))
    requests = [comm.irecv(device(np.zeros(3, np.int64)), 0), comm.isend(device(np.zeros(2, np.float32)), 2)]
    with pytest.raises(RuntimeError, match="x"):
        comm.flush()
    assert lib.calls[-1] == ("groupEnd",)  # the group is closed even so
    for r in requests:
        with pytest.raises(DistError, match=f"the {r.kind} with rank {r.peer} could not be issued"):
            r.test()


def test_receive_from_any_source_is_refused():
    comm, _ = communicator()
    with pytest.raises(minidl.dist.DistError, match="any source is impossible"):
        comm.irecv(device(np.zeros(2)), None)


def test_host_buffers_take_the_host_path():
    comm, lib = communicator()
    host = np.arange(3.0)
    assert comm.isend(host, 1).test()
    assert comm.host.sent == [(host, 1)] and lib.calls == []
    assert isinstance(comm.scratch(4, host), np.ndarray)
    scratch = comm.scratch(4, device(np.zeros(1, np.float64)))
    assert isinstance(scratch, FakeDeviceArray) and scratch.dtype == np.float64 and scratch.size == 4
    assert comm.native == comm.host.native and comm.host_name() == "node"


def test_native_collectives():
    comm, lib = communicator(rank=1, size=4)
    x = device(np.ones(6, np.float32))
    assert all(r.test() for r in comm.all_reduce(x, "sum"))
    flags = device(np.ones(6, np.bool_))
    comm.all_reduce(flags, "sum")
    comm.reduce(x, "max", 3)
    comm.broadcast(x, 2)
    blocks = device(np.zeros((4, 3), np.float64))
    comm.all_gather(blocks)
    p = ptr(x)
    assert lib.calls == [("allReduce", p, p, 6, lib.NCCL_FLOAT32, lib.NCCL_SUM, 7),
                         ("allReduce", ptr(flags), ptr(flags), 6, lib.NCCL_UINT8, lib.NCCL_MAX, 7),
                         ("reduce", p, p, 6, lib.NCCL_FLOAT32, lib.NCCL_MAX, 3, 7),
                         ("bcast", p, 24, lib.NCCL_UINT8, 2, 7),
                         ("allGather", ptr(blocks) + 24, ptr(blocks), 24, lib.NCCL_UINT8, 7)]


def test_collective_issues_queued_messages_first():
    comm, lib = communicator()
    x = device(np.ones(2, np.float32))
    pending = comm.isend(x, 0)
    comm.all_reduce(x, "sum")
    assert [c[0] for c in lib.calls] == ["groupStart", "send", "groupEnd", "allReduce"]
    assert pending.test()


def test_reduction_of_an_unsupported_dtype_says_so():
    comm, _ = communicator()
    with pytest.raises(TypeError, match="NCCL can't reduce int16 buffers"):
        comm.all_reduce(device(np.zeros(3, np.int16)), "sum")


# -- the tensor layer on CUDA tensors (the simulator's: numpy buffers) --------------------------------
@pytest.fixture
def cuda():
    from cuda_support import sim_cuda_device

    import minidl.kernels.cuda.primitives  # noqa: F401  (registers the CUDA primitives)
    return sim_cuda_device()  # these tests need host arrays behind 'cuda' tensors, even where a GPU is


def test_tensor_buffers_stay_on_the_device(cuda):
    from minidl.dist.tensors import Writable, read
    t = minidl.arange(12, dtype=minidl.float32, device="cuda").reshape(3, 4)
    flat = read(t)
    assert np.shares_memory(flat, t._storage.buf)
    column = t[:, 1]
    out = Writable(column, "test")
    np.testing.assert_array_equal(out.array, [1, 5, 9])
    out.array[...] = -1
    version = column._version
    out.commit()
    np.testing.assert_array_equal(t.cpu().numpy()[:, 1], [-1, -1, -1])
    assert column._version > version


def test_backend_refuses_tensors_of_the_other_device(cuda):
    from minidl.dist.tensors import check_tensor
    with pytest.raises(RuntimeError, match=r"all_reduce: tensor is on cuda:0; the mpi backend handles cpu tensors"):
        check_tensor(minidl.ones(3, device="cuda"), "all_reduce", "mpi")
    with pytest.raises(RuntimeError, match=r"broadcast: tensor is on cpu; the nccl backend handles cuda tensors"):
        check_tensor(minidl.ones(3), "broadcast", "nccl")


# -- on a GPU -------------------------------------------------------------------------------------------
def _gpu_missing():
    if importlib.util.find_spec("cupy") is None:
        return "CuPy is not installed (pip install cupy-cuda13x)"
    if minidl.cuda.device_count() == 0:
        return "no GPU"
    from minidl.dist.launch import find_mpiexec
    return None if find_mpiexec() else "no mpiexec"


@pytest.mark.skipif(_gpu_missing() is not None, reason=f"the NCCL run needs a GPU: {_gpu_missing()}")
@pytest.mark.parametrize("algorithm", ["auto", "native"])
def test_collectives_on_a_gpu_at_world_size_1(algorithm):
    from minidl.dist.launch import find_mpiexec
    done = subprocess.run([find_mpiexec(), "-n", "1", sys.executable, __file__, algorithm], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "nccl world size 1: all collectives checked" in done.stdout


def _gpu_main(algorithm):
    """Every collective on CUDA tensors through NCCL; at world size 1 each is the identity
    (AVG and reduce_scatter included), so the results are known."""
    from minidl import dist
    dist.init_process_group("nccl", algorithm=algorithm)
    assert dist.get_backend() == "nccl" and dist.get_world_size() == 1
    x = minidl.arange(10, dtype=minidl.float32, device="cuda")
    want = np.arange(10, dtype=np.float32)
    for op in ReduceOp:
        y = x.clone()
        dist.all_reduce(y, op=op)
        np.testing.assert_array_equal(y.cpu().numpy(), want)
    strided = minidl.zeros(4, 10, device="cuda")[:, 3]  # through a contiguous copy
    strided.fill_(2.0)
    dist.all_reduce(strided)
    np.testing.assert_array_equal(strided.cpu().numpy(), [2, 2, 2, 2])
    flags = minidl.tensor([True, False], device="cuda")
    dist.all_reduce(flags)
    assert flags.cpu().numpy().tolist() == [True, False]
    y = x.clone()
    dist.broadcast(y, src=0)
    dist.reduce(y, dst=0)
    outs = [minidl.zeros(10, device="cuda")]
    dist.all_gather(outs, x)
    out = minidl.zeros(10, device="cuda")
    dist.reduce_scatter(out, [x])
    for t in (y, outs[0], out):
        np.testing.assert_array_equal(t.cpu().numpy(), want)
    dist.all_reduce(minidl.ones(1 << 22, device="cuda"))  # 16 MiB: the ring's size class
    dist.barrier()
    dist.destroy_process_group()
    print("nccl world size 1: all collectives checked")


if __name__ == "__main__":
    _gpu_main(sys.argv[1])
