"""Helpers every op uses: launching primitives on tensors, casting, scalars, broadcasting grads."""
from __future__ import annotations

import functools
import math

import numpy as np

from .. import _dtype as dt
from .. import _tracing, kernels
from .._tensor_base import Storage, TensorBase, as_device, empty, make
from ..autograd import grad_mode
from ..layout import Layout, broadcast_shapes, expand


def kernel(name: str, t: TensorBase):
    return kernels.get(name, t._storage.device.type)


def buf(t: TensorBase):
    return t._storage.buf


def new_like_shape(shape, dtype, like: TensorBase) -> TensorBase:
    """A fresh packed tensor on ``like``'s device (sharing its layout object when that fits)."""
    layout = like._layout
    if layout.shape is shape and layout.offset == 0 and layout._contiguous is True:
        buf = kernels.get("alloc", like._storage.device.type)(layout.numel, dtype)
        return make(Storage(buf, like._storage.device), layout, dtype)
    return empty(shape, dtype, like._storage.device)


def from_host_array(array: np.ndarray, device, dtype=None):
    """A new tensor holding a copy of a numpy array on ``device``."""
    dtype = dt.from_numpy(array.dtype) if dtype is None else dtype
    array = dtype.storage_of(array)  # (ascontiguousarray would make 0-d arrays 1-d)
    device = as_device(device)
    storage = Storage(kernels.get("from_host", device.type)(array.reshape(-1)), device)
    return make(storage, Layout(array.shape), dtype)


def cast(t: TensorBase, dtype) -> TensorBase:
    """``t`` converted to ``dtype`` (a new contiguous tensor; ``t`` itself when already that dtype)."""
    if t.dtype is dtype:
        return t
    out = new_like_shape(t.shape, dtype, t)
    kernel("copy", t)(buf(t), t._layout, buf(out), out._layout)
    return out


def contiguous_data(t: TensorBase) -> TensorBase:
    """``t`` if its layout is contiguous, else a packed copy (no autograd)."""
    if t._layout.is_contiguous:
        return t
    out = new_like_shape(t.shape, t.dtype, t)
    kernel("copy", t)(buf(t), t._layout, buf(out), out._layout)
    return out


_SCALAR_LAYOUT = Layout(())
_scalars: dict = {}


def packed_buffer(t: TensorBase):
    """The elements of ``t`` as a 1-D buffer slice, packing a copy first if need be."""
    t = contiguous_data(t)
    start = t._layout.offset
    return t._storage.buf[start:start + t._layout.numel]


@functools.lru_cache(maxsize=None)
def integer_range(dtype, integral: bool):
    """(lowest, highest) number that may be put into integer ``dtype``. As in PyTorch, integers
    down to -highest wrap into an unsigned dtype (-1 is 255 in uint8); floats must fit."""
    info = np.iinfo(dtype.np)
    return (-int(info.max) if integral and not dtype.is_signed else int(info.min)), int(info.max)


def check_scalar_fits(value, dtype, op: str) -> None:
    """A number put into an integer dtype must fit it: PyTorch raises rather than wrap (or, for a
    float, leave it to the undefined conversion of C). Floats in range truncate toward zero."""
    if dtype.category == 1:
        lo, hi = integer_range(dtype, isinstance(value, (int, np.integer)))
        if not lo <= value <= hi:  # exact for Python ints and floats alike; False for NaN
            raise RuntimeError(f"{op}: value {value} cannot be converted to type {dtype.name} without overflow")


def host_scalar(value, dtype) -> np.ndarray:
    """``[value]`` as a numpy array of ``dtype``. Into integer dtypes by way of int64: integers wrap
    into narrower ones (numpy would refuse -1 for uint8), floats truncate, and an integer beyond
    int64 raises OverflowError."""
    return np.array([value], dtype=np.int64).astype(dtype.np) if dtype.category == 1 else dtype.storage_of([value])


def scalar_tensor(value, dtype, device) -> TensorBase:
    """A 0-d tensor holding a Python number, marked as a 'wrapped number' for type promotion."""
    data = host_scalar(value, dtype)
    storage = Storage(kernels.get("from_host", device.type)(data), device)
    t = make(storage, _SCALAR_LAYOUT, dtype)
    t._wrapped_number = True
    return t


def written_operand(value, like: TensorBase, op: str) -> TensorBase:
    """``value`` as an operand to be written into ``like`` (setitem, fills): a number must fit
    like's dtype (a tensor converts by the copy rule instead)."""
    if not isinstance(value, TensorBase):
        check_scalar_fits(value, like.dtype, op)
    return as_operand(value, like)


def as_operand(x, like: TensorBase, full_precision: bool = False) -> TensorBase:
    """Tensors pass through; Python/numpy numbers become wrapped 0-d tensors on ``like``'s device.

    Wrapped numbers are internal and never written to, so recent ones are reused: on a GPU each
    new one is a copy from the host. (0.0 and -0.0 compare equal but differ: the sign is in the key.)
    """
    if isinstance(x, TensorBase):
        return x
    if not isinstance(x, (bool, int, float, np.number, np.bool_)):
        mixed = getattr(type(x), "__minidl_mixed__", None)   # (a DTensor: why it cannot meet a plain tensor)
        if mixed is not None:
            raise RuntimeError(mixed)
        raise TypeError(f"unsupported operand type {type(x).__name__}; expected a Tensor or a number")
    device = like._storage.device
    dtype = dt.scalar_dtype(x)
    if like.dtype is dt.float64 and dtype.is_floating_point:
        dtype = dt.float64  # keep the number's double precision; promotion gives float64 anyway
    elif like.dtype in dt.HALF and dtype is not dt.bool_ and not full_precision:
        # rounded to the half type first, as PyTorch does (x == 1.1 compares equal); its mul and div
        # read the number at full precision instead (full_precision)
        dtype = like.dtype
    if _tracing.active is not None and type(x) is not int and isinstance(x, int) and not isinstance(x, bool):
        # (a size an exporter traces, x.shape[1]: a tensor the exporter ties to it, never cached)
        return _tracing.active.size_operand(scalar_tensor(int.__int__(x), dtype, device), x)
    key = (type(x), x, math.copysign(1.0, x) if isinstance(x, (float, np.floating)) else 0, device, dtype)
    found = _scalars.get(key)
    if found is None:
        found = scalar_tensor(x, dtype, device)
        if x == x:
            if len(_scalars) > 512:
                _scalars.clear()
            _scalars[key] = found
    return found


def computed_in_float32(fn):
    """For ops that PyTorch computes in one float32 pass: float16 and bfloat16 tensor arguments are
    widened, the op runs in float32, and its result is rounded once to their dtype (composed of
    rounded steps, the op would round at every one)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        half = next((a.dtype for a in args if isinstance(a, TensorBase) and a.dtype in dt.HALF), None)
        if half is None:
            return fn(*args, **kwargs)
        wide = [a.to(dt.float32) if isinstance(a, TensorBase) and a.dtype is half else a for a in args]
        return fn(*wide, **kwargs).to(half)
    return wrapper


def check_devices(op: str, *tensors) -> None:
    devices = {t._storage.device for t in tensors if not t._wrapped_number}
    if len(devices) > 1:
        names = ", ".join(str(d) for d in devices)
        raise RuntimeError(f"{op}: expected all tensors to be on the same device, but found at least two "
                           f"devices: {names}")


def broadcast_layouts(op: str, *tensors):
    """(shape, [layouts broadcast to it])."""
    shapes = [t.shape for t in tensors]
    shape = shapes[0] if all(s == shapes[0] for s in shapes) else broadcast_shapes(*shapes, op=op)
    return shape, [expand(t._layout, shape, op) for t in tensors]


def sum_to(grad, shape):
    """Undo broadcasting in backward: sum ``grad`` down to ``shape``."""
    if grad.shape == shape:
        return grad
    lead = grad.ndim - len(shape)
    dims = tuple(range(lead)) + tuple(i + lead for i, n in enumerate(shape) if n == 1 and grad.shape[i + lead] != 1)
    out = grad.sum(dims, keepdim=True) if dims else grad
    if lead:
        out = out.reshape(shape)
    return out


def grad_enabled() -> bool:
    return grad_mode.state.enabled
