"""DLPack: tensors shared with numpy, PyTorch, CuPy and any other framework, without a copy.

A DLPack *capsule* is a ``PyCapsule`` named ``"dltensor"`` (DLPack 0.x) or ``"dltensor_versioned"``
(1.x) holding a C struct: the data pointer, device, dtype, shape and strides (in elements), and a
``deleter`` the consumer calls when it no longer needs the memory. The consumer renames the capsule
``"used_dltensor..."`` so that it is consumed once; a capsule dropped unconsumed frees the struct
through its own destructor.

Exporting (``Tensor.__dlpack__``): the capsule is made by numpy's exporter for host memory (and
CuPy's for GPU memory) over a view with the tensor's shape, strides and offset, and then minidl
writes what they cannot know into the struct before anyone else sees it (bfloat16's type code, the
CUDA device of a simulator buffer, the "copied" flag). The reason is the capsule destructor: it runs
when the capsule is freed, often while the consumer is raising an error (numpy refusing a dtype,
say), and a Python function called through ctypes at that moment clobbers the pending exception
(the consumer then fails with a SystemError) and leaks the memory. numpy's and CuPy's destructors are
C functions that save and restore the error, and their deleters keep the buffer alive until the
consumer lets it go, however long the minidl tensor lives.

Importing (``minidl.from_dlpack``): minidl reads the struct with ctypes, renames the capsule, and
wraps the memory as a storage owned by an object that calls the producer's deleter when the last
tensor over it is gone. The storage spans exactly the elements the strides reach, so views with
offsets and negative strides (which numpy exports) keep their layout.

Negative strides go out as a contiguous copy (or BufferError when ``copy=False``): numpy takes
them, but PyTorch aborts the whole interpreter when handed one, and a producer cannot know its
consumer.
"""
from __future__ import annotations

import ctypes
import enum
import weakref

import numpy as np

from . import _dtype as dt
from . import _tracing
from . import kernels
from ._device import device as Device
from ._tensor_base import Storage, as_device, make
from .layout import Layout


class DLDeviceType(enum.IntEnum):
    """The device codes of the DLPack standard (``torch.utils.dlpack.DLDeviceType``)."""
    kDLCPU = 1
    kDLCUDA = 2
    kDLCUDAHost = 3
    kDLOpenCL = 4
    kDLVulkan = 7
    kDLMetal = 8
    kDLVPI = 9
    kDLROCM = 10
    kDLROCMHost = 11
    kDLExtDev = 12
    kDLCUDAManaged = 13
    kDLOneAPI = 14
    kDLWebGPU = 15
    kDLHexagon = 16
    kDLMAIA = 17


# ---------------------------------------------------------------------------------- the C structs
class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32), ("dtype", _DataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)  # void deleter(DLManagedTensor[Versioned] *self), GIL released


class _Managed(ctypes.Structure):          # DLManagedTensor, DLPack 0.x
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]


class _Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _ManagedVersioned(ctypes.Structure):  # DLManagedTensorVersioned, DLPack 1.x
    _fields_ = [("version", _Version), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_READ_ONLY, _IS_COPIED = 1 << 0, 1 << 1  # DLPACK_FLAG_BITMASK_*


def _c_function(library, name, restype, *argtypes, prototype=ctypes.PYFUNCTYPE):
    """minidl's own typed handle on a C function: the shared ``ctypes.pythonapi.<name>`` object's
    argtypes and restype belong to whichever library set them last."""
    return prototype(restype, *argtypes)((name, library))


_get_name = _c_function(ctypes.pythonapi, "PyCapsule_GetName", ctypes.c_char_p, ctypes.py_object)
_get_pointer = _c_function(ctypes.pythonapi, "PyCapsule_GetPointer", ctypes.c_void_p, ctypes.py_object,
                           ctypes.c_char_p)
_set_name = _c_function(ctypes.pythonapi, "PyCapsule_SetName", ctypes.c_int, ctypes.py_object, ctypes.c_void_p)
_raw_malloc = _c_function(ctypes.pythonapi, "PyMem_RawMalloc", ctypes.c_void_p, ctypes.c_size_t)


def _kept_forever(text: bytes) -> int:
    """A C string holding ``text`` that is never freed (Python's raw allocator: every platform)."""
    at = _raw_malloc(len(text) + 1)
    ctypes.memmove(at, text + b"\0", len(text) + 1)
    return at


_LEGACY, _VERSIONED = b"dltensor", b"dltensor_versioned"
# PyCapsule_SetName keeps the pointer, not a copy, and a consumed capsule may outlive this module
# (its globals are freed at shutdown): the names are C strings that are never freed
_USED = {_LEGACY: _kept_forever(b"used_dltensor"), _VERSIONED: _kept_forever(b"used_dltensor_versioned")}
# The kDLCUDA capsules the CUDA simulator exported (host memory) by struct address, each to the
# array the capsule holds until it frees the struct (the entry goes with it): any other kDLCUDA
# capsule holds real device memory, which the simulator cannot read
_SIMULATED = weakref.WeakValueDictionary()

# (type code, bits) of each dtype: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6
_CODES = {dt.bool_: (6, 8), dt.uint8: (1, 8), dt.int16: (0, 16), dt.int32: (0, 32), dt.int64: (0, 64),
          dt.float16: (2, 16), dt.bfloat16: (4, 16), dt.float32: (2, 32), dt.float64: (2, 64)}
_DTYPES = {code: d for d, code in _CODES.items()}
_CODE_NAMES = {0: "int", 1: "uint", 2: "float", 3: "opaque handle", 4: "bfloat", 5: "complex", 6: "bool"}


def _managed(capsule, name):
    """The struct a capsule of this name holds: ``_ManagedVersioned`` for 1.x, ``_Managed`` for 0.x."""
    return (_ManagedVersioned if name == _VERSIONED else _Managed).from_address(_get_pointer(capsule, name))


# ---------------------------------------------------------------------------------------- export
def device_of(t) -> tuple:
    """``Tensor.__dlpack_device__``: (DLDeviceType, device index)."""
    if t.device.type == "cuda":
        return DLDeviceType.kDLCUDA, t.device.index
    if t.device.type == "meta":
        raise ValueError("Unknown device type meta for Dlpack")
    return DLDeviceType.kDLCPU, 0


def _target_device(t, dl_device):
    """The minidl device ``dl_device`` names (the tensor's own when None)."""
    if dl_device is None:
        return t.device
    kind, index = (int(v) for v in dl_device)
    if kind == DLDeviceType.kDLCPU:
        return as_device("cpu")
    if kind == DLDeviceType.kDLCUDA:
        return as_device(f"cuda:{index}")
    raise BufferError(f"__dlpack__: cannot export to DLPack device {tuple(dl_device)}: minidl has kDLCPU (1) "
                      f"and kDLCUDA (2) memory")


def _check_stream(t, stream):
    """PyTorch's rules for the consumer's stream: an int (or None); none on the CPU."""
    if stream is not None and type(stream) is not int:
        raise TypeError("stream must be ``int`` or ``none``")
    if t.device.type == "cpu" and stream not in (None, -1):
        raise AssertionError("stream should be None on cpu.")
    if t.device.type == "cuda" and stream == 2:
        raise BufferError("per-thread default stream is not supported.")
    if t.device.type == "cuda" and stream == 0:  # (CUDA has no stream 0 to name: 1 is the legacy default)
        raise AssertionError("unsupported stream on CUDA: 0.")


def export(t, stream=-1, max_version=None, dl_device=None, copy=None):
    """``Tensor.__dlpack__``: a capsule over ``t``'s memory (0.x unless ``max_version`` asks for 1.x).

    ``copy=True`` always copies, ``False`` never does (BufferError where sharing is impossible: a
    negative stride, another device), ``None`` copies only then. A copy is contiguous, and a 1.x
    capsule says so in its flags."""
    if t._requires_grad:
        raise BufferError("Can't export tensors that require gradient, use tensor.detach()")
    if t.device.type == "meta":
        raise BufferError("Cannot pack tensors on meta")
    _check_stream(t, stream)
    if t.device.type == "cuda":
        current = _cuda_runtime().device_id()
        if t.device.index != current:
            raise BufferError(f"Can't export tensors on a different CUDA device index. Expected: {t.device.index}. "
                              f"Current device: {current}.")
    target = _target_device(t, dl_device)
    negative = t.numel() > 0 and any(s < 0 and n > 1 for n, s in zip(t.shape, t.stride()))
    if copy is False and (negative or target != t.device):
        why = (f"its strides {t.stride()} are negative (DLPack consumers such as PyTorch cannot take them)"
               if negative else f"it lives on {t.device}, not {target}")
        raise BufferError(f"__dlpack__(copy=False): the tensor cannot be shared without a copy: {why}")
    copied = bool(copy) or negative or target != t.device
    _tracing.graph_break("__dlpack__ hands another library the tensor's memory")
    t = t.detach()
    if target != t.device:
        t = t.to(target)    # (a packed copy)
    elif copied:
        t = t.clone()
    kwargs = {} if max_version is None or max_version[0] < 1 else {"max_version": max_version}
    if not _on_host(t):
        kwargs["stream"] = stream  # CuPy orders the consumer's stream after ours
    array = _exporter_array(t)
    capsule = array.__dlpack__(**kwargs)
    _stamp(capsule, t, copied, array)
    return capsule


def _on_host(t) -> bool:
    """True where the buffer is a numpy array: a CPU tensor, or a CUDA one of the simulator."""
    return isinstance(t._storage.buf, np.ndarray)


def _exporter_array(t):
    """An array of the library that makes the capsule (numpy on the host, CuPy on a GPU) showing
    ``t``'s elements with its strides; it holds the buffer alive for as long as the consumer needs it.
    A read-only storage gives a read-only array: numpy then refuses a 0.x capsule (which cannot say
    so) and marks a 1.x one READ_ONLY."""
    if _on_host(t):
        from .kernels.cpu.memory import numpy_view  # (the CPU kernels load on first use)
        view = numpy_view(t._storage.buf, t._layout)
        if not t._storage.writable:
            view.flags.writeable = False
        return view
    import cupy
    item, layout, buf = t.dtype.itemsize, t._layout, t._storage.buf
    start = 0 if layout.numel == 0 else layout.offset * item
    return cupy.ndarray(tuple(layout.shape), buf.dtype, buf.data + start, tuple(s * item for s in layout.strides))


def _stamp(capsule, t, copied, array):
    """Write into the new capsule's struct what its maker (holding ``array``) could not know."""
    name = _get_name(capsule)
    managed = _managed(capsule, name)
    if t.dtype is dt.bfloat16:  # numpy and CuPy have no bfloat16: the buffer holds its uint16 bits
        managed.dl_tensor.dtype.code = _CODES[dt.bfloat16][0]
    if t.device.type == "cuda" and _on_host(t):
        managed.dl_tensor.device.device_type = DLDeviceType.kDLCUDA
        managed.dl_tensor.device.device_id = t.device.index
        _SIMULATED[ctypes.addressof(managed)] = array
    if name == _VERSIONED and copied:
        managed.flags |= _IS_COPIED


def _cuda_runtime():
    from .kernels.cuda import runtime
    return runtime.get()


def _simulated() -> bool:
    """Whether device 'cuda' is the CPU simulator, whose device memory is host memory."""
    return _cuda_runtime().xp is np


# ---------------------------------------------------------------------------------------- import
def from_dlpack(ext_tensor, *, device=None, copy=None):
    """A tensor sharing memory with ``ext_tensor``: an object with ``__dlpack__`` (a numpy array, a
    torch or CuPy tensor, a minidl tensor) or a DLPack capsule. ``device`` moves it (a copy);
    ``copy=True`` asks the producer for a copy, ``copy=False`` forbids one (``torch.from_dlpack``)."""
    if not hasattr(ext_tensor, "__dlpack__"):
        if type(ext_tensor).__name__ != "PyCapsule":
            raise TypeError(f"from_dlpack: expected an object with __dlpack__ (a tensor or array) or a DLPack "
                            f"capsule, got {type(ext_tensor).__name__}")
        if device is not None or copy is not None:
            raise AssertionError("device and copy kwargs not supported when ext_tensor is already a DLPack capsule.")
        return _consume(ext_tensor)
    if device is not None and not isinstance(device, (str, Device)):
        raise AssertionError(f"from_dlpack: unsupported device type: {type(device)}")
    source = tuple(int(v) for v in ext_tensor.__dlpack_device__())
    target = None if device is None else as_device(device)
    crossing = target is not None and _dl_device(target) != source
    if crossing and copy is False:
        raise ValueError(f"cannot move DLPack tensor from device {source} to {_dl_device(target)} without copying. "
                         f"Set copy=None or copy=True.")
    kwargs = {"max_version": (1, 0)}
    if copy is not None:
        kwargs["copy"] = copy
    if target is not None and not crossing:
        kwargs["dl_device"] = source
    if source[0] == DLDeviceType.kDLCUDA:
        handle = int(_cuda_runtime().current_stream().ptr)
        kwargs["stream"] = 1 if handle == 0 else handle  # 1: the legacy default stream, as the standard says
    capsule = _ask(ext_tensor, kwargs)
    t = _consume(capsule)
    if copy and "copy" not in kwargs and not crossing:
        t = t.clone()   # the producer could not be asked for the copy
    return t.to(target) if crossing else t


def _ask(producer, kwargs):
    """``producer.__dlpack__(**kwargs)``, leaving out in turn the keywords an older producer does not
    know (max_version, copy, dl_device: as torch.from_dlpack does); ``kwargs`` keeps those it took."""
    for key in ("max_version", "copy", "dl_device", None):
        try:
            return producer.__dlpack__(**kwargs)
        except TypeError:
            if key is None:
                raise
            kwargs.pop(key, None)


def _dl_device(device) -> tuple:
    return (int(DLDeviceType.kDLCUDA), device.index) if device.type == "cuda" else (int(DLDeviceType.kDLCPU), 0)


def _consume(capsule):
    """Take ownership of a capsule's tensor: check everything first (a refused capsule stays the
    producer's to free), then rename the capsule and wrap its memory."""
    name = _get_name(capsule)
    if name in (b"used_dltensor", b"used_dltensor_versioned"):
        raise RuntimeError("from_dlpack: this DLPack capsule was consumed already (a capsule can be consumed "
                           "only once; call __dlpack__ again for a new one)")
    if name not in (_LEGACY, _VERSIONED):
        raise TypeError(f"from_dlpack: a capsule named {name!r} is no DLPack capsule (expected 'dltensor' or "
                        f"'dltensor_versioned')")
    managed = _managed(capsule, name)
    if name == _VERSIONED and managed.version.major != 1:
        raise BufferError(f"from_dlpack: the capsule is of DLPack {managed.version.major}.{managed.version.minor}; "
                          f"minidl reads DLPack 1.x")
    tensor = managed.dl_tensor
    code = (tensor.dtype.code, tensor.dtype.bits)
    if code not in _DTYPES or tensor.dtype.lanes != 1:
        lanes = "" if tensor.dtype.lanes == 1 else f" in {tensor.dtype.lanes} lanes"
        raise TypeError(f"from_dlpack: minidl has no dtype for DLPack's {_CODE_NAMES.get(code[0], code[0])}"
                        f"{code[1]}{lanes}; supported: {', '.join(d.name for d in _CODES)}")
    dtype, device = _DTYPES[code], _import_device(tensor.device)
    if device.type == "cuda" and _simulated() and ctypes.addressof(managed) not in _SIMULATED:
        raise BufferError("from_dlpack: the CUDA simulator (MINIDL_CUDA_SIM=1) reads only the kDLCUDA "
                          "capsules it exported itself; this one holds real GPU memory")
    shape = tuple(tensor.shape[i] for i in range(tensor.ndim))
    layout = Layout(shape, tuple(tensor.strides[i] for i in range(tensor.ndim)) if tensor.strides
                    else None)  # (0.x allowed no strides for row-major)
    readonly = name == _VERSIONED and bool(managed.flags & _READ_ONLY)
    _set_name(capsule, _USED[name])
    owner = _Owner(ctypes.addressof(managed), managed.deleter)  # from here on, the deleter is ours to call
    lo, hi = layout.span()
    first = (tensor.data or 0) + tensor.byte_offset  # the address of element 0
    buf = _wrap(owner, first + lo * dtype.itemsize, hi - lo + 1, dtype, device, readonly)
    return make(Storage(buf, device, writable=not readonly),
                Layout(shape, layout.strides, -lo if layout.numel else 0), dtype)


def _import_device(device):
    """The minidl device of DLPack's (type, index), which must be one minidl can use now."""
    kind, index = device.device_type, device.device_id
    if kind in (DLDeviceType.kDLCPU, DLDeviceType.kDLCUDAHost):  # (pinned host memory is host memory)
        return as_device("cpu")
    if kind == DLDeviceType.kDLCUDA:
        count = _cuda_runtime().device_count()  # (raises, saying why, where device 'cuda' cannot run)
        if not 0 <= index < count:
            raise BufferError(f"from_dlpack: the tensor is on CUDA device {index}, but there are {count}")
        return as_device(f"cuda:{index}")
    name = DLDeviceType(kind).name if kind in DLDeviceType._value2member_map_ else f"of type {kind}"
    raise BufferError(f"from_dlpack: minidl cannot use memory of DLPack device {name} (index {index}); it has "
                      f"kDLCPU and kDLCUDA memory")


class _Owner:
    """A consumed capsule's memory: calls the producer's deleter when the buffer over it dies
    (numpy and CuPy keep it as the buffer's base). ``_wrap`` sets ``__array_interface__``."""

    __slots__ = ("_managed", "_deleter", "__array_interface__")

    def __init__(self, managed: int, deleter):
        self._managed, self._deleter = managed, deleter

    def __del__(self):
        if self._deleter:  # (a producer with nothing to free may leave it NULL)
            self._deleter(self._managed)


def _wrap(owner, address, count, dtype, device, readonly):
    """A 1-D buffer of ``count`` elements at ``address`` for ``device``, holding ``owner``."""
    if count <= 0:  # nothing to share: the producer is told so at once (owner dies here)
        return kernels.get("alloc", device.type)(0, dtype)
    if device.type == "cpu" or _simulated():
        owner.__array_interface__ = {"data": (address, readonly), "shape": (count,), "typestr": dtype.np.str,
                                     "version": 3}
        return np.asarray(owner)
    import cupy
    memory = cupy.cuda.UnownedMemory(address, count * dtype.itemsize, owner, device.index)
    return cupy.ndarray((count,), dtype.np, cupy.cuda.MemoryPointer(memory, 0))
