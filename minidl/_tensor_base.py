"""What a tensor *is*: a storage buffer, a layout over it, a dtype; plus its autograd state.

Ops (``minidl/ops``) build results with :func:`make`; the user-facing
``minidl.Tensor`` (which adds the methods) registers itself as the class to
build, so ops never import the layer above them.
"""
from __future__ import annotations

import sys

from . import _tracing, kernels
from ._device import as_device
from .autograd.variable import Variable
from .layout import Layout, normalize_dim


class Storage:
    """A flat device buffer shared by a tensor and all its views, with their version counter.

    ``writable`` is False for memory borrowed read-only (a read-only numpy array). ``shared`` is
    the handle of the buffer when it lives in memory other processes can map, else None.
    """

    __slots__ = ("buf", "device", "version", "writable", "shared")

    def __init__(self, buf, device, writable=True, shared=None):
        self.buf = buf
        self.device = device
        self.version = 0
        self.writable = writable
        self.shared = shared

    def share_(self):
        """Move the buffer into memory other processes can map; every tensor over it follows."""
        if self.shared is None:
            self.buf, self.shared = kernels.get("share_memory", self.device.type)(self.buf)

    # -- torch.UntypedStorage's spelling (``minidl.UntypedStorage``, ``Tensor.untyped_storage()``) --
    def nbytes(self) -> int:
        return int(self.buf.nbytes)

    size = nbytes

    def is_shared(self) -> bool:
        return self.shared is not None

    def share_memory_(self) -> "Storage":
        self.share_()
        return self

    @classmethod
    def from_shared(cls, handle, device, writable=True) -> "Storage":
        """The storage another process shared (its ``shared`` handle), mapped into this one: the same
        memory, not a copy."""
        device = as_device(device)
        return cls(kernels.get("open_shared", device.type)(handle), device, writable, shared=handle)

    def __reduce__(self):
        """Pickled by value, through host memory (minidl.multiprocessing sends shared ones by handle); a meta
        buffer, which has no value, as itself."""
        host = self.buf if self.device.type == "meta" else kernels.get("to_host", self.device.type)(self.buf)
        return (storage_from_host, (host, str(self.device), self.writable))


def storage_from_host(array, device, writable=True) -> Storage:
    device = as_device(device)
    return Storage(kernels.get("from_host", device.type)(array), device, writable)



class TensorBase(Variable):
    # _history_version: the storage version that grad_fn describes (see Tensor._grad_edge)
    __slots__ = ("_storage", "_layout", "dtype", "_base", "_wrapped_number", "_history_version")

    # -- structure ------------------------------------------------------------------------------
    @property
    def shape(self):
        return self._layout.shape

    def size(self, dim=None):
        if dim is None:
            return self._layout.shape
        return self._layout.shape[normalize_dim(dim, self.ndim, "size")]

    @property
    def ndim(self) -> int:
        return len(self._layout.shape)

    def dim(self) -> int:
        return len(self._layout.shape)

    def _owns_whole_storage(self) -> bool:
        """True when this tensor is the one packed view of a buffer that nothing else references
        (no other tensor, view or numpy array; a base only this view refers to is fine), so it
        may be kept without a defensive copy."""
        base = self._base
        if base is not None and sys.getrefcount(base) > 3:  # our _base slot, this local, the argument
            return False
        storage = self._storage  # referenced by this local, getrefcount's argument and the tensors
        holders = 3 if base is None else 4
        recorder = _tracing.recording()   # (minidl.compile's recorder holds buffers for its graph, not as tensors)
        graph = 0 if recorder is None else recorder.holding(storage.buf)
        return (storage.writable and self._layout.offset == 0 and self._layout.is_contiguous
                and self._layout.numel == storage.buf.size
                and sys.getrefcount(storage) <= holders and sys.getrefcount(storage.buf) <= 2 + graph)

    def numel(self) -> int:
        return self._layout.numel

    nelement = numel

    def stride(self, dim=None):
        if dim is None:
            return self._layout.strides
        return self._layout.strides[normalize_dim(dim, self.ndim, "stride")]

    def storage_offset(self) -> int:
        return self._layout.offset

    def is_contiguous(self, memory_format=None) -> bool:
        """Laid out densely in ``memory_format``'s dim order (torch's rule: dims of size 1 don't count)."""
        order = getattr(memory_format, "order", None)
        if order is None:
            return self._layout.is_contiguous
        if len(order) != self.ndim:
            return False
        expected = 1
        for d in order:
            if self.shape[d] != 1:
                if self._layout.strides[d] != expected:
                    return False
                expected *= self.shape[d]
        return True

    @property
    def device(self):
        return self._storage.device

    # Device predicates, as torch.Tensor's: True when the tensor lives on that device type. minidl
    # has devices 'cpu', 'cuda' and 'meta' only, so the others answer False (they exist for scripts that ask).
    @property
    def is_cpu(self) -> bool:
        return self._storage.device.type == "cpu"

    @property
    def is_cuda(self) -> bool:
        return self._storage.device.type == "cuda"

    @property
    def is_xpu(self) -> bool:
        return self._storage.device.type == "xpu"

    @property
    def is_mps(self) -> bool:
        return self._storage.device.type == "mps"

    @property
    def is_meta(self) -> bool:
        return self._storage.device.type == "meta"

    @property
    def is_xla(self) -> bool:
        return self._storage.device.type == "xla"

    @property
    def is_ipu(self) -> bool:
        return self._storage.device.type == "ipu"

    @property
    def is_mtia(self) -> bool:
        return self._storage.device.type == "mtia"

    @property
    def is_maia(self) -> bool:
        return self._storage.device.type == "maia"

    @property
    def is_vulkan(self) -> bool:
        return self._storage.device.type == "vulkan"

    @property
    def is_mkldnn(self) -> bool:
        """A tensor in torch's MKL-DNN (oneDNN) layout: minidl has no such layout."""
        return False

    @property
    def _version(self) -> int:
        return self._storage.version

    def _bump_version(self):
        self._storage.version += 1

    def element_size(self) -> int:
        return self.dtype.itemsize

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.dtype.itemsize * self._layout.numel

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def data_ptr(self) -> int:
        if self._storage.device.type == "meta":
            return 0   # (no memory, as torch's)
        buf = self._storage.buf
        iface = getattr(buf, "__cuda_array_interface__", None) or buf.__array_interface__
        return iface["data"][0] + self._layout.offset * self.dtype.itemsize

    def untyped_storage_id(self) -> int:
        return id(self._storage)

    def untyped_storage(self) -> Storage:
        """The flat storage under this tensor and all its views (``minidl.UntypedStorage``)."""
        return self._storage

    def _meta(self):
        """(shape, dtype, device, class): enough to make zeros standing in for a missing gradient."""
        return (self._layout.shape, self.dtype, self._storage.device, type(self))

    def _alias(self):
        """A new tensor object over the same storage and layout (no autograd history)."""
        return make(self._storage, self._layout, self.dtype, base=self._base if self._base is not None else self)


_tensor_class = TensorBase


def use_class(cls) -> None:
    global _tensor_class
    _tensor_class = cls


def make(storage: Storage, layout: Layout, dtype, base=None, requires_grad=False):
    t = object.__new__(_tensor_class)
    t._storage = storage
    t._layout = layout
    t.dtype = dtype
    t._base = base
    t._wrapped_number = False
    t._history_version = storage.version
    t._init_autograd(requires_grad)
    return t


def empty(shape, dtype, device) -> TensorBase:
    """A fresh contiguous tensor with uninitialised values."""
    layout = Layout(shape)
    buf = kernels.get("alloc", device.type)(layout.numel, dtype)
    return make(Storage(buf, device), layout, dtype)
