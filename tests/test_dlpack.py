"""DLPack (issue 26): minidl tensors shared with numpy and PyTorch through capsules, both ways, with
their shapes, strides and offsets; writes through one side seen by the other; copies, versions,
lifetimes and refusals as torch 2.13 has them. numpy and torch are the oracles: the expected values
and layouts come from the same views taken in numpy, never from minidl."""
import ctypes
import gc
import os
import pickle
import subprocess
import sys
import weakref
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given

import minidl
import minidl.utils.dlpack
from minidl.kernels.cuda import runtime
from tests.cuda_support import sim_cuda_device
from tests.strategies import view_cases

BASE = np.arange(2 * 3 * 5, dtype=np.float64).reshape(2, 3, 5)

# (name, the view on a numpy array, the same view on a minidl tensor)
VIEWS = [
    ("whole", lambda a: a, lambda t: t),
    ("transposed", lambda a: a.transpose(2, 0, 1), lambda t: t.permute(2, 0, 1)),
    ("stepped-slice", lambda a: a[:, 1:, ::2], lambda t: t[:, 1:, ::2]),
    ("offset-row", lambda a: a[1, 2], lambda t: t[1, 2]),
    ("0-d", lambda a: a[1, 1, 3, ...], lambda t: t[1, 1, 3]),
    ("empty", lambda a: a[:, 2:2], lambda t: t[:, 2:2]),
    ("expanded", lambda a: np.broadcast_to(a[:, :1], (2, 4, 5)), lambda t: t[:, :1].expand(2, 4, 5)),
]


def byte_strides(t):
    return tuple(s * t.element_size() for s in t.stride())


def capsule_name(capsule) -> str:
    return repr(capsule).split('"')[1]


ROOT = Path(__file__).resolve().parent.parent
# (the test's own function object: the shared ctypes.pythonapi one's signature is anyone's to set)
_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


def versioned_fields(capsule):
    """(DLPack version, flags, device type, dtype code) read from a "dltensor_versioned" capsule's struct
    (DLPack 1.x: version at 0, flags at 24, the DLTensor at 32 with its device at +8 and dtype at +20)."""
    address = _get_pointer(capsule, b"dltensor_versioned")
    major, minor = (ctypes.c_uint32 * 2).from_address(address)
    flags = ctypes.c_uint64.from_address(address + 24).value
    device = ctypes.c_int32.from_address(address + 32 + 8).value
    code = ctypes.c_uint8.from_address(address + 32 + 20).value
    return (major, minor), flags, device, code


def write_legacy_field(capsule, offset, ctype, value):
    """Overwrite a field of a "dltensor" capsule's DLTensor (device type at 8, dtype code at 20)."""
    ctype.from_address(_get_pointer(capsule, b"dltensor") + offset).value = value


def run_python(code, **env):
    """Run ``code`` in a fresh interpreter (a crash fails the test instead of killing pytest)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), **env))


def freed(watch) -> bool:
    """Whether the object ``watch`` (a weakref) refers to is gone, once collected."""
    gc.collect()
    return watch() is None


# --------------------------------------------------------------------------------------- export
@pytest.mark.parametrize("name,np_view,view", VIEWS, ids=[v[0] for v in VIEWS])
def test_numpy_sees_the_tensor_with_its_layout_and_shares_its_memory(name, np_view, view):
    t = minidl.tensor(BASE)
    expected, v = np_view(BASE), view(t)
    n = np.from_dlpack(v)
    np.testing.assert_array_equal(n, expected)
    assert n.shape == expected.shape and n.dtype == expected.dtype
    if n.size:
        assert n.ctypes.data == v.data_ptr() and n.strides == expected.strides
        want = expected.copy()
        if name != "expanded":  # (a broadcast view is read-only in numpy)
            index = (0,) * n.ndim
            n[index] = want[index] = -7.0
            assert v[index].item() == -7.0
        t.add_(1)  # a write on the minidl side
        np.testing.assert_array_equal(n, want + 1)


@pytest.mark.parametrize("name,np_view,view", VIEWS, ids=[v[0] for v in VIEWS])
def test_torch_sees_the_tensor_with_its_layout_and_shares_its_memory(name, np_view, view):
    t = minidl.tensor(BASE)
    expected, v = np_view(BASE), view(t)
    x = torch.from_dlpack(v)
    assert tuple(x.shape) == expected.shape and x.dtype == torch.float64
    np.testing.assert_array_equal(x.numpy(), expected)
    if x.numel():
        assert x.data_ptr() == v.data_ptr() and tuple(x.stride()) == tuple(s // 8 for s in expected.strides)
        t.mul_(2)
        np.testing.assert_array_equal(x.numpy(), 2 * expected)
        if name != "expanded":  # (torch refuses writes through a broadcast view)
            x.add_(1)
            np.testing.assert_array_equal(v.numpy(), 2 * expected + 1)


def test_a_view_with_an_offset_exports_from_its_first_element():
    t = minidl.arange(20.)
    v = t[7:19:3]
    x = torch.from_dlpack(v)
    assert x.tolist() == [7.0, 10.0, 13.0, 16.0] and x.stride() == (3,)
    x[0] = 100.0
    assert t[7].item() == 100.0


@given(view_cases(max_steps=4))
def test_random_views_round_trip_through_numpy_torch_and_minidl(case):
    t, a = case.t, case.a
    n, back = np.from_dlpack(t), minidl.from_dlpack(t)
    np.testing.assert_array_equal(n, a)
    np.testing.assert_array_equal(torch.from_dlpack(t).numpy(), a)
    np.testing.assert_array_equal(back.numpy(), a)
    if a.size and not any(s < 0 and k > 1 for k, s in zip(a.shape, a.strides)):
        # shared, laid out as numpy lays out the same view (where a stride means anything)
        assert n.ctypes.data == back.data_ptr() == t.data_ptr()
        assert meaningful(a.shape, n.strides) == meaningful(a.shape, byte_strides(back)) == \
            meaningful(a.shape, a.strides)
    # and numpy's own view, negative strides included, comes in sharing its memory
    m = minidl.from_dlpack(a)
    np.testing.assert_array_equal(m.numpy(), a)
    if a.size:
        assert m.data_ptr() == a.__array_interface__["data"][0]
        assert meaningful(a.shape, byte_strides(m)) == meaningful(a.shape, a.strides)


def meaningful(shape, strides):
    """The strides of the dims with more than one element (the others' strides are arbitrary)."""
    return [s for n, s in zip(shape, strides) if n > 1]


def test_dlpack_device_and_capsule_versions_are_torchs():
    t, x = minidl.zeros(3), torch.zeros(3)
    assert t.__dlpack_device__() == x.__dlpack_device__() == (1, 0)
    assert t.__dlpack_device__()[0].name == "kDLCPU"
    for max_version in (None, (0,), (0, 8), (1, 0), (1, 3), (2, 0)):
        assert capsule_name(t.__dlpack__(max_version=max_version)) == \
            capsule_name(x.__dlpack__(max_version=max_version))
    assert capsule_name(minidl.utils.dlpack.to_dlpack(t)) == capsule_name(torch.utils.dlpack.to_dlpack(x)) \
        == "dltensor"
    (major, _), flags, device, _ = versioned_fields(t.__dlpack__(max_version=(1, 0)))
    assert major == 1 and flags == 0 and device == 1


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int16", "int32", "int64", "float16", "bfloat16", "float32",
                                   "float64"])
def test_every_dtype_crosses_to_torch_and_back(dtype):
    values = [[0, 1, 1], [1, 0, 1]] if dtype == "bool" else [[0, 3, 100], [-2.5, 7, 1]]
    if dtype == "uint8":
        values = [[0, 3, 100], [255, 7, 1]]
    elif dtype in ("int16", "int32", "int64"):
        values = [[0, 3, 100], [-2, 7, 1]]
    x = torch.tensor(values, dtype=getattr(torch, dtype)).t()
    m = minidl.from_dlpack(x)
    assert m.dtype is getattr(minidl, dtype) and m.stride() == x.stride() and m.data_ptr() == x.data_ptr()
    assert m.tolist() == x.tolist()
    y = torch.from_dlpack(m)
    assert y.dtype == x.dtype and y.tolist() == x.tolist() and y.data_ptr() == x.data_ptr()
    if dtype != "bfloat16":
        np.testing.assert_array_equal(np.from_dlpack(m), x.numpy())


def test_numpy_refusing_bfloat16_raises_its_own_error_and_frees_everything():
    """numpy cannot take bfloat16: its error must come through (not a SystemError from a Python
    capsule destructor clobbering it), and the buffer must be freed after."""
    bits = np.array([0x3FC0, 0x4020], np.uint16)  # 1.5 and 2.5 as bfloat16
    watch = weakref.ref(bits)
    capsule = bits.__dlpack__()
    write_legacy_field(capsule, 20, ctypes.c_uint8, 4)  # kDLBfloat
    del bits
    t = minidl.from_dlpack(capsule)
    assert t.dtype is minidl.bfloat16 and t.tolist() == [1.5, 2.5]
    with pytest.raises(RuntimeError, match="Unsupported dtype"):
        np.from_dlpack(t)
    del t, capsule
    assert freed(watch)


# ------------------------------------------------------------------------------ copies, negative strides
def test_negative_strides_go_out_as_a_contiguous_copy_and_never_with_copy_false():
    t = minidl.arange(6.)
    r = t.view(2, 3)[:, ::-1]
    assert r.stride() == (3, -1)
    x = torch.from_dlpack(r)  # (torch aborts the interpreter when handed a negative stride)
    assert x.tolist() == [[2.0, 1.0, 0.0], [5.0, 4.0, 3.0]] and x.is_contiguous()
    x[0, 0] = 50.0
    assert t[2].item() == 2.0  # a copy
    np.testing.assert_array_equal(np.from_dlpack(r), [[2.0, 1.0, 0.0], [5.0, 4.0, 3.0]])
    (_, flags, _, _) = versioned_fields(r.__dlpack__(max_version=(1, 0)))
    assert flags & 2  # DLPACK_FLAG_BITMASK_IS_COPIED
    with pytest.raises(BufferError, match="negative"):
        r.__dlpack__(copy=False)
    with pytest.raises(BufferError, match="negative"):
        np.from_dlpack(r, copy=False)


def test_copy_true_copies_and_copy_false_shares():
    t = minidl.arange(4.)
    for consumer in (torch.from_dlpack, np.from_dlpack, minidl.from_dlpack):
        copied, shared = consumer(t, copy=True), consumer(t, copy=False)
        copied[0] = 10.0
        shared[1] = 20.0
        assert t.tolist() == [0.0, 20.0, 2.0, 3.0]
        t[1] = 1.0
    (_, flags, _, _) = versioned_fields(t.__dlpack__(max_version=(1, 0), copy=True))
    assert flags & 2
    x = torch.arange(4.)
    m = minidl.from_dlpack(x, copy=True)
    m[0] = 9.0
    assert x[0].item() == 0.0


def test_negative_strides_from_numpy_come_in_shared():
    a = np.arange(12.).reshape(3, 4)[::-1, ::-2]
    m = minidl.from_dlpack(a)
    assert m.stride() == (-4, -2) and m.data_ptr() == a.__array_interface__["data"][0]
    np.testing.assert_array_equal(m.numpy(), a)
    m[0, 0] = -1.0
    assert a[0, 0] == -1.0
    a[2, 1] = -2.0
    assert m[2, 1].item() == -2.0


def test_read_only_memory_stays_read_only_both_ways():
    a = np.arange(3.)
    a.flags.writeable = False
    m = minidl.from_dlpack(a)
    with pytest.raises(RuntimeError, match="read-only"):
        m.add_(1)
    assert (m + 1).tolist() == [1.0, 2.0, 3.0]
    assert not np.from_dlpack(m).flags.writeable
    with pytest.raises(BufferError, match="readonly"):  # a 0.x capsule cannot say read-only (numpy's rule)
        m.__dlpack__()


def test_a_storage_minidl_will_not_write_goes_out_read_only():
    """Shared memory of a read-only array, and its mapping in another process (``from_shared(...,
    writable=False)``), hold writable numpy buffers that minidl treats as read-only: they go out as
    numpy's read-only arrays do."""
    a = np.arange(3.)
    a.flags.writeable = False
    with pytest.warns(UserWarning, match="not writable"):
        t = minidl.from_numpy(a).share_memory_()
    mapped = pickle.loads(ForkingPickler.dumps(t))  # (the handle, opened read-only)
    for v in (t, mapped):
        assert not np.from_dlpack(v).flags.writeable
        for export in (v.__dlpack__, lambda: minidl.utils.dlpack.to_dlpack(v)):
            with pytest.raises(BufferError, match="readonly"):  # a 0.x capsule cannot say read-only
                export()
        assert versioned_fields(v.__dlpack__(max_version=(1, 0)))[1] & 1  # DLPACK_FLAG_BITMASK_READ_ONLY
        with pytest.raises(RuntimeError, match="read-only"):
            minidl.from_dlpack(v).add_(1)
        # torch 2.13 takes a READ_ONLY capsule as a writable tensor, numpy's as ours: the flag is all
        # a producer can give it
        assert torch.from_dlpack(v).tolist() == torch.from_dlpack(a).tolist() == [0.0, 1.0, 2.0]


# ------------------------------------------------------------------------------------------ lifetimes
def test_the_consumer_keeps_the_memory_after_the_tensor_is_gone_and_then_frees_it():
    owner = np.arange(1000.)
    watch = weakref.ref(owner)
    t = minidl.from_numpy(owner)[::2]
    del owner
    x = torch.from_dlpack(t)
    del t
    assert not freed(watch)
    junk = [minidl.full((1000,), 7.0) for _ in range(50)]  # would reuse the memory were it freed
    np.testing.assert_array_equal(x.numpy(), np.arange(0, 1000, 2.0))
    del x, junk
    assert freed(watch)


def test_an_unconsumed_capsule_frees_what_it_holds():
    owner = np.arange(10.)
    watch = weakref.ref(owner)
    capsule = minidl.from_numpy(owner).__dlpack__(max_version=(1, 0))
    del owner
    assert not freed(watch)
    del capsule
    assert freed(watch)


def test_minidl_calls_the_producers_deleter_when_its_last_view_dies():
    owner = np.arange(10.)
    watch = weakref.ref(owner)
    m = minidl.from_dlpack(owner)
    del owner
    v = m[3:]
    del m
    assert not freed(watch) and v[0].item() == 3.0
    del v
    assert freed(watch)


def test_consumed_capsules_alive_at_exit_keep_their_names_after_minidl_is_torn_down():
    """A consumed capsule points at its "used_dltensor..." name until it dies, which can be after
    minidl's globals are freed at shutdown: numpy's destructor must still read that name."""
    out = run_python("import numpy, minidl\n"
                     "keep = []\n"
                     "for version in (None, (1, 0)):\n"
                     "    for _ in range(100):\n"
                     "        c = minidl.arange(3.).__dlpack__(max_version=version)\n"
                     "        minidl.from_dlpack(c)\n"
                     "        keep.append(c)\n"
                     "numpy.kept_capsules = keep  # (numpy, imported first, is torn down after minidl)\n")
    assert out.returncode == 0 and out.stderr == "", out.stderr[-2000:]


def test_a_torch_tensor_outlives_its_python_object_inside_minidl():
    x = torch.arange(100, dtype=torch.int64)
    m = minidl.from_dlpack(x)
    del x
    gc.collect()
    junk = [torch.full((100,), 5) for _ in range(50)]
    assert m.tolist() == list(range(100))
    del junk


# ------------------------------------------------------------------------------------------- refusals
def test_refusals_are_torchs():
    for exporter in (minidl.zeros(2, requires_grad=True), torch.zeros(2, requires_grad=True)):
        with pytest.raises(BufferError, match="Can't export tensors that require gradient, use tensor.detach()"):
            exporter.__dlpack__()
    for exporter in (minidl.zeros(2), torch.zeros(2)):
        with pytest.raises(AssertionError, match="stream should be None on cpu"):
            exporter.__dlpack__(stream=3)
        with pytest.raises(TypeError, match="stream must be"):
            exporter.__dlpack__(stream=1.0)
        capsule = exporter.__dlpack__()
        for importer in (minidl.from_dlpack, torch.from_dlpack):
            with pytest.raises(AssertionError, match="device and copy kwargs not supported"):
                importer(capsule, copy=True)
    for importer in (minidl.from_dlpack, torch.from_dlpack):
        with pytest.raises(AssertionError, match="from_dlpack: unsupported device type: <class 'int'>"):
            importer(np.arange(3.), device=5)
    assert minidl.from_dlpack(minidl.zeros(2, requires_grad=True).detach()).tolist() == [0.0, 0.0]


def test_signatures_others_set_on_ctypes_pythonapi_change_nothing(monkeypatch):
    """minidl calls the capsule API through its own function objects: the shared
    ``ctypes.pythonapi`` ones' signatures are whatever another library set last."""
    api = ctypes.pythonapi
    monkeypatch.setattr(api.PyCapsule_GetName, "restype", ctypes.c_void_p)
    monkeypatch.setattr(api.PyCapsule_GetName, "argtypes", [ctypes.py_object])
    monkeypatch.setattr(api.PyCapsule_SetName, "argtypes", [ctypes.py_object, ctypes.c_char_p])
    for max_version in (None, (1, 0)):
        t = minidl.tensor([1.5, -2.0]).bfloat16()
        capsule = t.__dlpack__(max_version=max_version)
        m = minidl.from_dlpack(capsule)
        assert m.dtype is minidl.bfloat16 and m.tolist() == [1.5, -2.0] and m.data_ptr() == t.data_ptr()
        assert capsule_name(capsule).startswith("used_dltensor")
    x = torch.arange(3.)
    assert minidl.from_dlpack(x).data_ptr() == x.data_ptr()


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="expected an object with __dlpack__.*got list"):
        minidl.from_dlpack([1, 2])
    with pytest.raises(TypeError, match="no dtype for DLPack's int8"):
        minidl.from_dlpack(torch.zeros(2, dtype=torch.int8))
    with pytest.raises(TypeError, match="no dtype for DLPack's uint16"):
        minidl.from_dlpack(np.zeros(2, np.uint16))
    with pytest.raises(TypeError, match="no dtype for DLPack's complex64"):
        minidl.from_dlpack(torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(BufferError, match=r"cannot export to DLPack device \(4, 0\)"):
        minidl.zeros(2).__dlpack__(dl_device=(4, 0))
    capsule = minidl.zeros(2).__dlpack__()
    torch.from_dlpack(capsule)
    with pytest.raises(RuntimeError, match="consumed already"):
        minidl.from_dlpack(capsule)
    capsule = minidl.zeros(2).__dlpack__(max_version=(1, 0))
    minidl.from_dlpack(capsule)
    with pytest.raises(RuntimeError, match="consumed already"):
        minidl.from_dlpack(capsule)


def test_a_refused_capsule_stays_unconsumed_and_is_freed_by_its_producer():
    owner = np.arange(4.)
    watch = weakref.ref(owner)
    capsule = owner.__dlpack__()
    write_legacy_field(capsule, 8, ctypes.c_int32, 4)  # kDLOpenCL
    del owner
    with pytest.raises(BufferError, match="kDLOpenCL"):
        minidl.from_dlpack(capsule)
    assert capsule_name(capsule) == "dltensor"
    del capsule
    assert freed(watch)


def test_producers_that_know_fewer_keywords_still_export():
    """An older producer's __dlpack__ takes only ``stream``: minidl leaves the newer keywords out
    (as torch.from_dlpack does) and makes the copy asked for itself."""
    class Old:
        def __init__(self, array):
            self.array = array

        def __dlpack__(self, stream=None):
            return self.array.__dlpack__(stream=stream)

        def __dlpack_device__(self):
            return self.array.__dlpack_device__()

    a = np.arange(5.)
    shared, copied = minidl.from_dlpack(Old(a)), minidl.from_dlpack(Old(a), copy=True)
    a[0] = 42.0
    assert shared[0].item() == 42.0 and copied[0].item() == 0.0
    assert torch.from_dlpack(Old(a))[0].item() == 42.0  # (the same dance in torch)


def test_utils_dlpack_is_torchs_module():
    x = torch.arange(3.)
    m = minidl.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(x))
    assert m.tolist() == [0.0, 1.0, 2.0] and m.data_ptr() == x.data_ptr()
    y = torch.utils.dlpack.from_dlpack(minidl.utils.dlpack.to_dlpack(m))
    assert y.data_ptr() == x.data_ptr()
    # to_dlpack, unlike __dlpack__, takes a tensor that requires grad (its data goes out)
    g = minidl.arange(3., requires_grad=True)
    assert torch.from_dlpack(minidl.utils.dlpack.to_dlpack(g)).tolist() == \
        torch.from_dlpack(torch.utils.dlpack.to_dlpack(torch.arange(3., requires_grad=True))).tolist()
    ours, theirs = minidl.utils.dlpack.DLDeviceType, torch.utils.dlpack.DLDeviceType
    assert [(d.name, d.value) for d in ours] == [(d.name, d.value) for d in theirs]
    assert m.__dlpack_device__()[0] is ours.kDLCPU and "DLDeviceType" in minidl.utils.dlpack.__all__


# ------------------------------------------------------------------------------ CUDA, on the simulator
@pytest.fixture
def sim():
    saved = runtime._sim_requested
    sim_cuda_device()
    yield
    runtime.sim_enable(saved)


def test_cuda_tensors_export_as_kdlcuda_and_come_back_shared(sim):
    """On the simulator a CUDA buffer is host memory, so minidl can both make and read the kDLCUDA
    capsule (CuPy's exporter and importer, used on a real GPU, are not exercised here)."""
    c = minidl.tensor(BASE, device="cuda")
    v = c.permute(2, 0, 1)[1:]
    assert v.__dlpack_device__() == (2, 0) and v.__dlpack_device__()[0].name == "kDLCUDA"
    (_, _, device, _) = versioned_fields(v.__dlpack__(max_version=(1, 0)))
    assert device == 2
    m = minidl.from_dlpack(v)
    assert m.device == minidl.device("cuda:0") and m.stride() == v.stride() and m.data_ptr() == v.data_ptr()
    np.testing.assert_array_equal(m.cpu().numpy(), BASE.transpose(2, 0, 1)[1:])
    m[0, 0, 0] = -3.0
    assert c[0, 0, 1].item() == -3.0
    with pytest.raises(RuntimeError, match="Unsupported device"):  # numpy reads host memory only
        np.from_dlpack(v)
    with pytest.raises(AssertionError, match="unsupported stream on CUDA: 0"):  # (torch's _check_stream)
        v.__dlpack__(stream=0)
    with pytest.raises(BufferError, match="per-thread default stream"):
        v.__dlpack__(stream=2)
    for stream in (None, -1, 1):
        assert minidl.from_dlpack(v.__dlpack__(stream=stream)).tolist() == v.tolist()


def test_cuda_tensors_cross_to_the_host_only_by_a_copy(sim):
    c = minidl.arange(6., device="cuda")
    host = np.from_dlpack(c, device="cpu")  # numpy asks for dl_device=(kDLCPU, 0)
    np.testing.assert_array_equal(host, np.arange(6.0))
    host[0] = 9.0
    assert c[0].item() == 0.0
    (_, flags, device, _) = versioned_fields(c.__dlpack__(max_version=(1, 0), dl_device=(1, 0)))
    assert device == 1 and flags & 2
    with pytest.raises(BufferError, match="lives on cuda:0, not cpu"):
        c.__dlpack__(dl_device=(1, 0), copy=False)
    m = minidl.from_dlpack(np.arange(3.), device="cuda")
    assert m.device.type == "cuda" and m.tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(ValueError, match="without copying"):
        minidl.from_dlpack(np.arange(3.), device="cuda", copy=False)
    assert minidl.from_dlpack(c, device="cpu").device.type == "cpu"
    b = minidl.tensor([1.5, -2.0]).bfloat16().cuda()
    assert minidl.from_dlpack(b).tolist() == [1.5, -2.0]


def test_the_simulator_refuses_kdlcuda_capsules_it_did_not_make():
    """Under the simulator a CUDA buffer is host memory, so the kDLCUDA capsules it exported are read
    as host memory; any other one (torch's or CuPy's, on a real GPU) holds a device address, which
    would crash the process if read: it is refused and stays its producer's."""
    out = run_python("""
import ctypes, gc, numpy as np, minidl
get = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_GetPointer", ctypes.pythonapi))
c = np.ones(4).__dlpack__()  # dressed as a real GPU's: kDLCUDA, an address not mapped here
p = get(c, b"dltensor")
ctypes.c_int32.from_address(p + 8).value = 2
ctypes.c_void_p.from_address(p).value = 0x7f0000000000 >> 4
try:
    minidl.from_dlpack(c)
except BufferError as e:
    print("refused:", e)
assert repr(c).split('"')[1] == "dltensor"
x = minidl.arange(4., device="cuda")
for version in (None, (1, 0)):
    m = minidl.from_dlpack(x.__dlpack__(max_version=version))
    assert m.device.type == "cuda" and m.data_ptr() == x.data_ptr() and m.tolist() == [0.0, 1.0, 2.0, 3.0]
    assert minidl.from_dlpack(x).data_ptr() == x.data_ptr()
del c, m
gc.collect()
assert not minidl._dlpack._SIMULATED  # (freed capsules are forgotten: their addresses may come back)
print("round trips")
""", MINIDL_CUDA_SIM="1")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "refused: from_dlpack: the CUDA simulator" in out.stdout and "round trips" in out.stdout
