"""Tensor factories and numpy interop."""
from __future__ import annotations

import math
import numbers
import warnings

import numpy as np

from .. import _dtype as dt
from .. import kernels
from .._tensor_base import Storage, as_device, make
from .._tensor_base import empty as _empty
from ..layout import Layout
from .core import buf, kernel
from .inplace import check_writable
from .random import numpy_generator


def _size(size):
    if len(size) == 1 and not isinstance(size[0], numbers.Integral) and not hasattr(size[0], "__index__"):
        size = tuple(size[0])
    shape = tuple(int(n) for n in size)
    if any(n < 0 for n in shape):
        raise RuntimeError(f"Trying to create tensor with negative dimension: {list(shape)}")
    return shape


def _finish(t, requires_grad):
    if requires_grad:
        t.requires_grad_(True)
    return t


def from_host_array(array: np.ndarray, device, dtype=None):
    """A new tensor holding a copy of a numpy array on ``device``."""
    dtype = dt.from_numpy(array.dtype) if dtype is None else dtype
    array = np.asarray(array, dtype=dtype.np, order="C")  # (ascontiguousarray would make 0-d arrays 1-d)
    device = as_device(device)
    storage = Storage(kernels.get("from_host", device.type)(array.reshape(-1)), device)
    return make(storage, Layout(array.shape), dtype)


def from_numpy(array: np.ndarray):
    """A CPU tensor sharing memory with ``array`` (any strides, negative ones too)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy: expected np.ndarray (got {type(array).__name__})")
    dtype = dt.from_numpy(array.dtype)
    item = array.itemsize
    if any(s % item for s in array.strides):
        raise ValueError(f"from_numpy: strides {array.strides} are not a multiple of the element size {item}")
    strides = tuple(s // item for s in array.strides)
    # flip the negatively strided axes to find the lowest address the array touches
    low = array[tuple(slice(None, None, -1) if s < 0 else slice(None) for s in strides) + (Ellipsis,)]  # view if 0-d
    offset = sum(-(n - 1) * s for n, s in zip(array.shape, strides) if s < 0) if array.size else 0
    span = 1 + sum((n - 1) * abs(s) for n, s in zip(array.shape, strides)) if array.size else 0
    flat = np.lib.stride_tricks.as_strided(low, shape=(span,), strides=(item,)) if span else np.empty(0, array.dtype)
    if not array.flags.writeable:
        warnings.warn("from_numpy: the numpy array is not writable; the tensor shares its memory and "
                      "in-place operations on it will raise", UserWarning, stacklevel=2)
    return make(Storage(flat, as_device("cpu"), array.flags.writeable), Layout(array.shape, strides, offset),
                dtype)


def _infer_dtype(data):
    arr = np.asarray(data)
    if arr.dtype == np.bool_:
        return dt.bool_
    if np.issubdtype(arr.dtype, np.integer):
        return dt.int64
    if np.issubdtype(arr.dtype, np.floating):
        return dt.get_default_dtype()
    raise TypeError(f"tensor(): could not infer a dtype for data of numpy dtype {arr.dtype}")


def _to_numpy_data(data):
    if hasattr(data, "_layout"):
        return data.detach().cpu().numpy()
    if isinstance(data, (list, tuple)):
        return np.asarray([_to_numpy_data(d) for d in data]) if any(hasattr(d, "_layout") for d in data) \
            else np.asarray(data)
    return np.asarray(data)


def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new tensor that copies ``data`` (numbers, nested lists, numpy arrays, tensors)."""
    if isinstance(data, (np.ndarray, np.generic)) or hasattr(data, "_layout"):
        array = _to_numpy_data(data)  # numpy arrays and numpy scalars keep their dtype, as in PyTorch
        dtype = dt.to_dtype(dtype) if dtype is not None else dt.from_numpy(array.dtype)
    else:
        array = _to_numpy_data(data)
        dtype = dt.to_dtype(dtype) if dtype is not None else _infer_dtype(array)
    device = as_device(device) if device is not None else (data.device if hasattr(data, "_layout") else as_device("cpu"))
    return _finish(from_host_array(array.astype(dtype.np), device, dtype), requires_grad)


def as_tensor(data, dtype=None, device=None):
    """Like tensor(), but shares memory with a matching numpy array or tensor."""
    if hasattr(data, "_layout"):
        out = data if dtype is None else data.to(dtype)
        return out if device is None else out.to(device)
    if isinstance(data, np.ndarray):
        try:
            t = from_numpy(data)  # shares memory; moving it to another device below copies
        except TypeError:
            return tensor(data, dtype=dtype, device=device)
        t = t if dtype is None else t.to(dtype)
        return t if device is None else t.to(device)
    return tensor(data, dtype=dtype, device=device)


def empty(*size, dtype=None, device=None, requires_grad=False):
    return _finish(_empty(_size(size), dt.to_dtype(dtype) if dtype is not None else dt.get_default_dtype(),
                          as_device(device)), requires_grad)


def filled(shape, value, dtype, device):
    """A new tensor of ``shape`` holding ``value`` everywhere (no checks: the factories' core)."""
    t = _empty(shape, dtype, device)
    if t._layout.numel:
        scalar = kernels.get("from_host", device.type)(np.array([value], dtype=dtype.np))
        kernel("copy", t)(scalar, Layout(shape, (0,) * len(shape)), buf(t), t._layout)
    return t


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    if dtype is None:
        dtype = dt.scalar_dtype(fill_value)
    shape = _size((size,)) if not isinstance(size, numbers.Integral) else (size,)
    return _finish(filled(shape, fill_value, dt.to_dtype(dtype), as_device(device)), requires_grad)


def zeros(*size, dtype=None, device=None, requires_grad=False):
    return full(_size(size), 0, dtype=dtype or dt.get_default_dtype(), device=device, requires_grad=requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False):
    return full(_size(size), 1, dtype=dtype or dt.get_default_dtype(), device=device, requires_grad=requires_grad)


def _like(x, dtype, device):
    return dict(dtype=dtype or x.dtype, device=device or x.device)


def empty_like(x, dtype=None, device=None, requires_grad=False):
    return empty(x.shape, requires_grad=requires_grad, **_like(x, dtype, device))


def zeros_like(x, dtype=None, device=None, requires_grad=False):
    return zeros(x.shape, requires_grad=requires_grad, **_like(x, dtype, device))


def ones_like(x, dtype=None, device=None, requires_grad=False):
    return ones(x.shape, requires_grad=requires_grad, **_like(x, dtype, device))


def full_like(x, fill_value, dtype=None, device=None, requires_grad=False):
    return full(x.shape, fill_value, requires_grad=requires_grad, **_like(x, dtype, device))


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    values = [v.item() if hasattr(v, "item") else v for v in (start, end, step)]
    if step == 0:
        raise RuntimeError("arange: step must be nonzero")
    if dtype is None:
        dtype = dt.get_default_dtype() if any(isinstance(v, float) for v in values) else dt.int64
    dtype = dt.to_dtype(dtype)
    count = max(0, math.ceil((values[1] - values[0]) / values[2]))
    array = (values[0] + np.arange(count, dtype=np.float64 if dtype.is_floating_point else np.int64) * values[2])
    return _finish(from_host_array(array.astype(dtype.np), device or "cpu", dtype), requires_grad)


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    dtype = dt.to_dtype(dtype) if dtype is not None else dt.get_default_dtype()
    array = np.linspace(float(start), float(end), int(steps))
    return _finish(from_host_array(array.astype(dtype.np), device or "cpu", dtype), requires_grad)


def eye(n, m=None, dtype=None, device=None, requires_grad=False):
    dtype = dt.to_dtype(dtype) if dtype is not None else dt.get_default_dtype()
    return _finish(from_host_array(np.eye(n, m, dtype=dtype.np), device or "cpu", dtype), requires_grad)


# ----------------------------------------------------------------------------- random
def _random(draw, size, dtype, device, requires_grad, generator):
    dtype = dt.to_dtype(dtype) if dtype is not None else dt.get_default_dtype()
    array = draw(numpy_generator(generator), _size(size))
    return _finish(from_host_array(np.asarray(array).astype(dtype.np), device or "cpu", dtype), requires_grad)


def rand(*size, generator=None, dtype=None, device=None, requires_grad=False):
    return _random(lambda g, s: g.random(s), size, dtype, device, requires_grad, generator)


def randn(*size, generator=None, dtype=None, device=None, requires_grad=False):
    return _random(lambda g, s: g.standard_normal(s), size, dtype, device, requires_grad, generator)


def randint(low, high=None, size=None, generator=None, dtype=None, device=None, requires_grad=False):
    if size is None and isinstance(high, (tuple, list)):
        low, high, size = 0, low, high       # randint(high, size), as in PyTorch
    if high is None:
        low, high = 0, low
    if size is None:
        raise TypeError("randint() missing required argument 'size'")
    return _random(lambda g, s: g.integers(low, high, s), (size,), dtype or dt.int64, device, requires_grad,
                   generator)


def randperm(n, generator=None, dtype=None, device=None, requires_grad=False):
    array = numpy_generator(generator).permutation(n)
    return _finish(from_host_array(array.astype(dt.to_dtype(dtype or dt.int64).np), device or "cpu"), requires_grad)


def normal(mean, std, size, generator=None, dtype=None, device=None, requires_grad=False):
    return _random(lambda g, s: g.normal(mean, std, s), (size,), dtype, device, requires_grad, generator)


def rand_like(x, dtype=None, device=None, requires_grad=False, generator=None):
    return rand(x.shape, generator=generator, requires_grad=requires_grad, **_like(x, dtype, device))


def randn_like(x, dtype=None, device=None, requires_grad=False, generator=None):
    return randn(x.shape, generator=generator, requires_grad=requires_grad, **_like(x, dtype, device))


def randint_like(x, low, high=None, dtype=None, device=None, generator=None):
    return randint(low, high, x.shape, generator=generator, **_like(x, dtype, device))


def _host(x) -> np.ndarray:
    return np.asarray(x.detach().cpu().numpy() if hasattr(x, "_layout") else x, dtype=np.float64)


def bernoulli_draws(g: np.random.Generator, shape, probabilities) -> np.ndarray:
    """bool array of ``shape``: True with the given probabilities (a number or a tensor)."""
    p = _host(probabilities)
    if p.size and not ((p >= 0) & (p <= 1)).all():
        raise RuntimeError("bernoulli: expected all probabilities in [0, 1]")
    return g.random(shape) < p


def bernoulli(x, p=None, generator=None):
    """0/1 draws in x's shape and dtype, with probabilities x (or ``p`` when given)."""
    draws = bernoulli_draws(numpy_generator(generator), tuple(x.shape), x if p is None else p)
    return from_host_array(draws.astype(x.dtype.np), x.device, x.dtype)


def multinomial(probs, num_samples, replacement=False, generator=None):
    """``num_samples`` category indices per row of ``probs`` (1-D or 2-D, non-negative weights that
    need not sum to 1). With replacement by the inverse of the cumulative weights; without, as the
    categories whose exponential draws divided by their weights are smallest (the same law as
    drawing one at a time and removing it)."""
    if probs.ndim not in (1, 2) or not probs.dtype.is_floating_point:
        raise RuntimeError(f"multinomial: expected a 1-D or 2-D floating point tensor of probabilities, got a "
                           f"{probs.ndim}-D {probs.dtype.name} tensor")
    if num_samples <= 0:
        raise RuntimeError(f"multinomial: cannot sample {num_samples} <= 0 samples")
    p = _host(probs).reshape(-1, probs.shape[-1])
    if not (np.isfinite(p) & (p >= 0)).all():
        raise RuntimeError("multinomial: probability tensor contains either inf, nan or element < 0")
    if p.shape[1] == 0 or (p.sum(1) <= 0).any():
        raise RuntimeError("multinomial: invalid multinomial distribution (sum of probabilities <= 0)")
    g = numpy_generator(generator)
    if replacement:
        cdf = np.cumsum(p, axis=1)
        u = g.random((p.shape[0], num_samples)) * cdf[:, -1:]
        last = p.shape[1] - 1 - np.argmax(p[:, ::-1] > 0, axis=1)   # a rounded-up u must not pass it
        out = np.stack([np.minimum(np.searchsorted(c, v, side="right"), k) for c, v, k in zip(cdf, u, last)])
    else:
        if num_samples > p.shape[1]:
            raise RuntimeError(f"multinomial: cannot sample {num_samples} > prob_dist.size(-1) = {p.shape[1]} "
                               f"samples without replacement")
        if ((p > 0).sum(1) < num_samples).any():
            raise RuntimeError(f"multinomial: fewer than {num_samples} categories have a non-zero probability; "
                               f"cannot sample them without replacement")
        with np.errstate(divide="ignore"):
            keys = g.exponential(size=p.shape) / p
        out = np.argsort(keys, axis=1, kind="stable")[:, :num_samples]
    out = out.reshape(tuple(probs.shape[:-1]) + (num_samples,))
    return from_host_array(out.astype(np.int64), probs.device)


def fill_random_(x, draw, generator=None):
    """Overwrite ``x`` in place with host-drawn values (used by uniform_, normal_ ...)."""
    check_writable(x, "random fill")
    values = from_host_array(np.asarray(draw(numpy_generator(generator), tuple(x.shape))).astype(x.dtype.np),
                             x.device, x.dtype)
    kernel("copy", x)(buf(values), values._layout, buf(x), x._layout)
    x._bump_version()
    return x
