"""The user-facing Tensor: structure from ``_tensor_base``, behaviour delegated to ``minidl.ops``."""
from __future__ import annotations

import numpy as np

from . import _dtype as dt
from . import _tensor_base, _tracing, ops
from .autograd import engine
from ._layouts import preserve_format, strided
from ._tensor_base import TensorBase, as_device
from .ops import elementwise as ew
from .ops import inplace
from .ops.core import as_operand, grad_enabled


class Tensor(TensorBase):
    """A strided view of a device buffer, with autograd."""

    __slots__ = ()
    __array_priority__ = 1000

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Accumulate this tensor's gradient with respect to the graph's leaves into their ``.grad``."""
        engine.backward((self,), None if gradient is None else (gradient,), retain_graph, create_graph, inputs)

    def __new__(cls, *args, device=None):
        """The legacy constructor: ``Tensor(2, 3)`` is uninitialised, ``Tensor([1, 2])`` copies data, in
        the default dtype (``minidl.tensor`` and the factories are the modern way)."""
        return ops.creation.legacy_new(dt.get_default_dtype(), device, args, "Tensor")

    def __init__(self, *args, **kwargs):
        pass  # (everything happens in __new__)

    def new(self, *args, device=None):
        """The legacy constructor with this tensor's dtype and device (see ``Tensor.__new__``)."""
        return ops.creation.legacy_new(self.dtype, self.device if device is None else device, args, "new")

    # -- conversion -----------------------------------------------------------------------------
    def numpy(self, force=False) -> np.ndarray:
        """A numpy array over the same memory (CPU tensors without grad, as in PyTorch)."""
        if self._requires_grad and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() "
                               "instead.")
        if self.dtype is dt.bfloat16:
            raise TypeError("Got unsupported ScalarType BFloat16")  # numpy has no such type
        if self.device.type != "cpu":
            if not force:
                raise TypeError(f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() "
                                f"to copy the tensor to host memory first.")
            return self.cpu().numpy()
        _tracing.graph_break("Tensor.numpy() (or numpy.asarray) hands numpy the tensor's memory: what is written "
                             "through it is not seen")
        return self._cpu_view()

    def _cpu_view(self) -> np.ndarray:
        from .kernels.cpu.memory import numpy_view
        if _tracing.captures:   # (a CPU read needs no to_host kernel: tell the recorder, or it cannot check it)
            recorder = _tracing.recording()
            if recorder is not None:
                recorder.read_view(self._storage.buf, self._layout)
        return numpy_view(self._storage.buf, self._layout)

    def __array__(self, dtype=None, copy=None):
        array = self.detach().numpy(force=True)
        return array if dtype is None else array.astype(dtype)

    def __dlpack__(self, *, stream=-1, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule over this tensor's memory, for another framework's ``from_dlpack``
        (PyTorch's signature and rules; the exchange is ``minidl/_dlpack.py``)."""
        from ._dlpack import export
        return export(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self):
        from ._dlpack import device_of
        return device_of(self)

    def _host_values(self) -> np.ndarray:
        """The elements as a numpy array on the host, for Python to read: bfloat16, which numpy
        lacks, widened to float32 (exact)."""
        t = self.detach()
        t = t.float() if t.dtype is dt.bfloat16 else t
        if t.device.type != "cpu":
            t = t.cpu()   # (through the to_host kernel: minidl.compile's recorder sees the read)
        return t._cpu_view()

    def item(self):
        if self._storage.device.type == "meta":
            raise RuntimeError("Tensor.item() cannot be called on meta tensors")
        if self.numel() != 1:
            raise RuntimeError(f"a Tensor with {self.numel()} elements cannot be converted to Scalar")
        return self._host_values().reshape(-1)[0].item()

    def tolist(self):
        return self._host_values().tolist()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        if self.numel() != 1:
            raise RuntimeError(f"Boolean value of Tensor with {self.numel()} elements is ambiguous")
        return bool(self.item())

    def __index__(self):
        if self.dtype.category != 1 or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __len__(self):
        if self.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return iter(self.unbind(0))

    def __hash__(self):
        return id(self)

    def __format__(self, spec):
        if self.ndim == 0 and self._storage.device.type != "meta":
            return format(self.item(), spec)
        return format(repr(self), spec)

    def __repr__(self):
        from .printing import tensor_repr
        return tensor_repr(self)

    __str__ = __repr__

    def to(self, *args, **kwargs):
        """to(dtype) / to(device, dtype) / to(other_tensor), with PyTorch's non_blocking, copy and
        memory_format (non_blocking is accepted; copies between devices are synchronous here)."""
        unknown = sorted(set(kwargs) - {"dtype", "device", "non_blocking", "copy", "memory_format"})
        if unknown:
            raise TypeError(f"to() got an unexpected keyword argument '{unknown[0]}'")
        dtype, device, copy = kwargs.get("dtype"), kwargs.get("device"), kwargs.get("copy", False)
        flags = []
        for a in args:
            if isinstance(a, TensorBase):   # (first: ``a in (float, ...)`` would compare a tensor)
                dtype, device = a.dtype, a.device
            elif isinstance(a, bool):
                flags.append(a)             # positional non_blocking, copy
            elif isinstance(a, dt.dtype) or a in (float, int, bool):
                dtype = a
            elif a is not None:
                device = a
        copy = copy or (len(flags) > 1 and flags[1])
        out = self
        if device is not None and as_device(device) != self.device:
            out = ops.conversion.to_device(out, as_device(device))
        if dtype is not None and dt.to_dtype(dtype) is not out.dtype:
            out = ops.conversion.to_dtype(out, dt.to_dtype(dtype))
        memory_format = kwargs.get("memory_format")
        if memory_format not in (None, preserve_format) and ((copy and out is self)
                                                             or out.stride() != memory_format.strides(out.shape)):
            return out.clone(memory_format=memory_format)
        return out.clone() if copy and out is self else out

    def type(self, dtype=None):
        """Without an argument the legacy type name, such as ``'minidl.FloatTensor'``; with a dtype,
        a legacy class (``minidl.LongTensor``) or its name, this tensor converted to it."""
        from .legacy_tensors import legacy_type_name, legacy_type_dtype
        if dtype is None:
            return legacy_type_name(self.dtype, self.device)
        return self.to(legacy_type_dtype(dtype) if isinstance(dtype, (str, type)) else dtype)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None, non_blocking=False):
        return self.to("cuda" if device is None else f"cuda:{device}" if isinstance(device, int) else device)

    def pin_memory(self, device=None):
        """This CPU tensor itself: host memory is not page-locked here (copies to the GPU are
        synchronous either way), so pinning only checks that the tensor is on the CPU."""
        if self.device.type != "cpu":
            raise RuntimeError(f"cannot pin '{self.device}' memory: only CPU tensors can be pinned")
        return self

    def is_pinned(self, device=None) -> bool:
        return False

    def float(self, memory_format=preserve_format):
        return self.to(dt.float32, memory_format=memory_format)

    def double(self, memory_format=preserve_format):
        return self.to(dt.float64, memory_format=memory_format)

    def half(self, memory_format=preserve_format):
        return self.to(dt.float16, memory_format=memory_format)

    def bfloat16(self, memory_format=preserve_format):
        return self.to(dt.bfloat16, memory_format=memory_format)

    def long(self, memory_format=preserve_format):
        return self.to(dt.int64, memory_format=memory_format)

    def int(self, memory_format=preserve_format):
        return self.to(dt.int32, memory_format=memory_format)

    def bool(self, memory_format=preserve_format):
        return self.to(dt.bool_, memory_format=memory_format)

    def short(self, memory_format=preserve_format):
        return self.to(dt.int16, memory_format=memory_format)

    def byte(self, memory_format=preserve_format):
        return self.to(dt.uint8, memory_format=memory_format)

    # -- autograd -------------------------------------------------------------------------------
    @staticmethod
    def _zeros(shape, dtype, device):
        """Zeros standing in for a missing gradient (the engine calls this)."""
        return ops.creation.filled(shape, 0, dtype, device)

    def _ones_like_self(self):
        """The implicit gradient of a one-element root: one host value on the CPU (no kernel), a fill
        from a cached device scalar on a GPU (no copy from the host)."""
        if self.device.type == "cpu":
            return ops.core.from_host_array(np.ones(self._layout.shape), self.device, self.dtype)
        return ops.creation.filled(self._layout.shape, 1, self.dtype, self.device)

    def _grad_edge(self):
        """As Variable's, but a view whose memory was written in place since its history was made
        (through its base or another view) first re-reads its history from the base, as PyTorch does."""
        base = self._base
        if base is not None and self._history_version != self._storage.version:
            self._history_version = self._storage.version
            if base._requires_grad:
                fresh = ops.views.as_strided_(base, tuple(self._layout.shape), self._layout.strides,
                                              self._layout.offset)
                self.grad_fn, self._output_nr, self._requires_grad = fresh.grad_fn, 0, True
        return TensorBase._grad_edge(self)

    # -- pickling and shared memory ---------------------------------------------------------------
    def __reduce_ex__(self, protocol):
        """Storage, layout and dtype (tensors over one storage share it again when unpickled
        together); no autograd history, as in PyTorch."""
        if self.grad_fn is not None and self._requires_grad:
            raise RuntimeError("Can't pickle a non-leaf tensor that requires grad (it has autograd history); "
                               "pickle .detach() instead")
        return (_rebuild, (self._storage, self._layout, self.dtype, self._requires_grad))

    def share_memory_(self):
        """Move the storage into memory other processes can map, in place (views follow). Sent to
        processes through minidl.multiprocessing, the tensor then shares its memory with them."""
        self._storage.share_()
        return self

    def is_shared(self) -> bool:
        return self._storage.shared is not None

    def detach(self):
        # shares memory (and so the version counter) but is no autograd view: in-place ops on it are allowed
        return _tensor_base.make(self._storage, self._layout, self.dtype)

    def detach_(self):
        self.grad_fn = None
        self._requires_grad = False
        return self

    @property
    def data(self):
        return self.detach()

    @data.setter
    def data(self, other):
        _tracing.graph_break("a tensor's .data is replaced (a Python side effect)")
        self._storage, self._layout, self.dtype = other._storage, other._layout, other.dtype

    def view_as(self, other):
        return self.view(other.shape)

    def reshape_as(self, other):
        return self.reshape(other.shape)

    def expand_as(self, other):
        return self.expand(other.shape)

    def type_as(self, other):
        return self.to(other.dtype)

    @property
    def mT(self):
        return self.transpose(-2, -1)

    @property
    def T(self):
        return self.permute(tuple(range(self.ndim - 1, -1, -1)))

    @property
    def mH(self):
        """The conjugate transpose of the last two dims: of real matrices, ``mT``."""
        if self.ndim < 2:
            raise RuntimeError(f"tensor.mH is only supported on matrices or batches of matrices. Got "
                               f"{self.ndim}-D tensor.")
        return self.transpose(-2, -1)

    @property
    def H(self):
        """The conjugate transpose of a matrix (a 0-d tensor is its own)."""
        if self.ndim not in (0, 2):
            raise RuntimeError(f"tensor.H is only supported on matrices (2-D tensors). Got {self.ndim}-D tensor.")
        return self.transpose(0, 1) if self.ndim else self

    def new_zeros(self, *size, dtype=None, device=None, requires_grad=False):
        return ops.zeros(*size, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad)

    def new_ones(self, *size, dtype=None, device=None, requires_grad=False):
        return ops.ones(*size, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad)

    def new_full(self, size, fill_value, dtype=None, device=None, requires_grad=False):
        return ops.full(size, fill_value, dtype=dtype or self.dtype, device=device or self.device,
                        requires_grad=requires_grad)

    def new_empty(self, *size, dtype=None, device=None, requires_grad=False):
        return ops.empty(*size, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad)

    def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
        return ops.tensor(data, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad)

    # -- layout ---------------------------------------------------------------------------------
    layout = strided
    is_sparse = False

    def to_dense(self, dtype=None):
        """This tensor (already dense), as torch's; in ``dtype`` if given."""
        return self if dtype is None else self.to(dtype)

    def to_sparse(self, sparse_dim=None):
        """This tensor as a sparse COO tensor (``minidl.sparse``): its nonzero elements, or with
        ``sparse_dim`` its nonzero slices over the first sparse_dim dims."""
        from .sparse import dense_to_sparse
        return dense_to_sparse(self, sparse_dim)

    # -- operators ------------------------------------------------------------------------------
    # (an operand whose type has ``__minidl_mixed__`` — a DTensor — takes the operator itself: its reflected one)
    def __add__(self, other):
        if type(other) is Tensor:
            return ew.Add.apply(self, other)
        if getattr(other, "is_sparse", False):
            return ew.add(self, other)   # (dense + sparse: add's rule for a sparse operand)
        if hasattr(type(other), "__minidl_mixed__"):
            return NotImplemented
        return ew.Add.apply(self, as_operand(other, self))

    def __radd__(self, other):
        return ew.Add.apply(as_operand(other, self), self)

    def __sub__(self, other):
        if type(other) is Tensor:
            return ew.Sub.apply(self, other)
        if hasattr(type(other), "__minidl_mixed__"):
            return NotImplemented
        return ew.Sub.apply(self, as_operand(other, self))

    def __rsub__(self, other):
        return ew.Sub.apply(as_operand(other, self), self)

    def __mul__(self, other):
        if type(other) is Tensor:
            return ew.Mul.apply(self, other)
        if hasattr(type(other), "__minidl_mixed__"):
            return NotImplemented
        return ew.Mul.apply(self, as_operand(other, self, True))

    def __rmul__(self, other):
        return ew.Mul.apply(as_operand(other, self, True), self)

    def __truediv__(self, other):
        if type(other) is Tensor:
            return ew.Div.apply(self, other)
        if hasattr(type(other), "__minidl_mixed__"):
            return NotImplemented
        return ew.Div.apply(self, as_operand(other, self, True))

    def __rtruediv__(self, other):
        """``other / self`` as PyTorch defines it: ``self.reciprocal() * other`` (one more rounding)."""
        return ew.Mul.apply(self.reciprocal(), as_operand(other, self, True))

    def __floordiv__(self, other):
        return ew.FloorDivide.apply(self, other if type(other) is Tensor else as_operand(other, self))

    def __rfloordiv__(self, other):
        return ew.FloorDivide.apply(as_operand(other, self), self)

    def __mod__(self, other):
        return ew.Remainder.apply(self, other if type(other) is Tensor else as_operand(other, self))

    def __rmod__(self, other):
        return ew.Remainder.apply(as_operand(other, self), self)

    def __pow__(self, other):
        return ops.pow(self, other)   # (through the function: its autocast policy applies)

    def __rpow__(self, other):
        return ops.pow(other, self)

    def __matmul__(self, other):
        if type(other) is not Tensor and hasattr(type(other), "__minidl_mixed__"):
            return NotImplemented
        return ops.matmul(self, other)

    def __rmatmul__(self, other):
        return ops.matmul(other, self)

    def __neg__(self):
        return ew.neg(self)

    def __pos__(self):
        return self

    def __abs__(self):
        return ew.abs(self)

    def __invert__(self):
        if self.dtype.is_floating_point:  # (torch's ~ raises TypeError here, its bitwise_not NotImplementedError)
            raise TypeError(f"~ (bitwise_not) is only implemented on integer and bool tensors, got {self.dtype}")
        return ew.bitwise_not(self)

    def __and__(self, other):
        return ew.bitwise_and(self, other)

    def __or__(self, other):
        return ew.bitwise_or(self, other)

    def __xor__(self, other):
        return ew.bitwise_xor(self, other)

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__  # (commutative)

    def __lshift__(self, other):
        return ew.bitwise_left_shift(self, other)

    def __rlshift__(self, other):
        return ew.bitwise_left_shift(other, self)

    def __rshift__(self, other):
        return ew.bitwise_right_shift(self, other)

    def __rrshift__(self, other):
        return ew.bitwise_right_shift(other, self)

    def __eq__(self, other):
        return ew.eq(self, other)

    def __ne__(self, other):
        return ew.ne(self, other)

    def __lt__(self, other):
        return ew.lt(self, other)

    def __le__(self, other):
        return ew.le(self, other)

    def __gt__(self, other):
        return ew.gt(self, other)

    def __ge__(self, other):
        return ew.ge(self, other)

    def __getitem__(self, index):
        return ops.indexing.getitem(self, index)

    def __setitem__(self, index, value):
        ops.indexing.setitem(self, index, value)

    # -- in-place (the ops' in-place twins come from the registry, below) ----------------------------
    def copy_(self, src, non_blocking=False):
        if not isinstance(src, TensorBase):
            src = ops.tensor(src, dtype=self.dtype, device=self.device)
        if src.device != self.device:
            src = src.to(self.device)
        if not grad_enabled() or not (self._requires_grad or src._requires_grad):
            inplace.check_writable(self, "copy_")
            inplace.write_into(self, src, "copy_", casting=True)
            return self
        return inplace.assign(self, lambda t: ops.conversion.to_dtype(src, t.dtype).expand(t.shape), "copy_")

    def fill_(self, value):
        if isinstance(value, TensorBase):
            value = value.to(self.dtype).item()  # a tensor converts by the copy rule, as in PyTorch
        else:
            ops.core.check_scalar_fits(value, self.dtype, "fill_")
        return self.copy_(ops.core.scalar_tensor(value, self.dtype, self.device))

    def zero_(self):
        return self.fill_(0)

    def index_put_(self, indices, values, accumulate=False):
        ops.indexing.check_put_dtypes("index_put_", self, values)
        view, advanced = ops.indexing.plan(self, tuple(indices))
        if advanced and not (grad_enabled() and (self._requires_grad or getattr(values, "_requires_grad", False))) \
                and dt.compute_dtype(view.dtype) is view.dtype:
            # no graph to record: write the addressed elements in place (not a copy of the whole tensor)
            values = as_operand(values, view).to(view.dtype)
            if values._storage is view._storage:
                values = values.clone()   # (it may overlap what is written)
            inplace.check_writable(view, "index_put_")
            ops.take_put.put_(view, ops.indexing.flat_indices(view, advanced), values, accumulate)
            return self
        if accumulate:
            flat = ops.indexing.flat_indices(view, advanced)
            values = as_operand(values, view).to(view.dtype)
            return inplace.assign(view, lambda t: ops.take_put.IndexPut.apply(t, flat, values, True), "index_put_")
        self[tuple(indices)] = values
        return self

    def uniform_(self, a=0.0, b=1.0, generator=None):
        return ops.creation.fill_random_(self, "uniform", float(a), float(b), generator, "uniform_")

    def normal_(self, mean=0.0, std=1.0, generator=None):
        return ops.creation.fill_random_(self, "normal", float(mean), float(std), generator, "normal_")

    def bernoulli_(self, p=0.5, generator=None):
        """Fill with 0/1 draws, 1 with probability p (a number, or a tensor broadcast to self)."""
        return ops.creation.bernoulli_(self, p, generator)

    def exponential_(self, lambd=1.0, generator=None):
        return ops.creation.exponential_(self, lambd, generator)

    def random_(self, low=0, high=None, generator=None):
        low, high = (0, low) if high is None else (low, high)
        return ops.creation.fill_random_(self, "integers", int(low), int(high), generator, "random_")


def _rebuild(storage, layout, dtype, requires_grad):
    t = _tensor_base.make(storage, layout, dtype)
    t._requires_grad = requires_grad
    return t


for _name, _method in ops.registry.methods().items():  # x.sum(...), x.add_(...), ...: every op declared
    setattr(Tensor, _name, _method)
Tensor.__iadd__, Tensor.__isub__, Tensor.__imul__, Tensor.__itruediv__ = Tensor.add_, Tensor.sub_, Tensor.mul_, Tensor.div_
Tensor.__iand__, Tensor.__ior__, Tensor.__ixor__ = Tensor.bitwise_and_, Tensor.bitwise_or_, Tensor.bitwise_xor_
Tensor.__ilshift__, Tensor.__irshift__ = Tensor.bitwise_left_shift_, Tensor.bitwise_right_shift_

_tensor_base.use_class(Tensor)

