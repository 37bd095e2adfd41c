"""Tensor factories and numpy interop."""
from __future__ import annotations

import functools
import math
import numbers
import warnings

import numpy as np

from .. import _dtype as dt
from .. import kernels
from .._device import explicit_default, factory_device
from .._layouts import strided
from .._tensor_base import Storage, as_device, make
from .._tensor_base import empty as _empty
from ..layout import Layout, Size, broadcast_shapes
from ..autograd import Function, grad_mode
from .core import as_operand, buf, cast, check_scalar_fits, from_host_array, host_scalar, integer_range, kernel
from .inplace import check_writable
from .random import draw, numpy_generator
from .registry import op


def _size(size):
    if len(size) == 1 and not isinstance(size[0], numbers.Integral) and not hasattr(size[0], "__index__"):
        size = tuple(size[0])
    shape = tuple(int(n) for n in size)
    if any(n < 0 for n in shape):
        raise RuntimeError(f"Trying to create tensor with negative dimension: {list(shape)}")
    return shape


def _strided_only(factory):
    """torch's ``layout=`` keyword of the factories: they make dense tensors, ``minidl.strided`` (the default), and
    refuse any other layout by name (a sparse tensor comes from ``.to_sparse()``)."""
    @functools.wraps(factory)
    def make(*args, layout=None, **kwargs):
        if layout is not None and layout is not strided:
            raise RuntimeError(f"{factory.__name__}: layout={layout} is not supported: it makes minidl.strided "
                               f"tensors (a sparse one comes from .to_sparse())")
        return factory(*args, **kwargs)
    return make


def _finish(t, requires_grad):
    if requires_grad:
        t.requires_grad_(True)
    return t


def _from_values(values, shape, dtype, device):
    """A new tensor of ``shape`` on ``device`` holding the host array ``values()``, which a meta tensor never
    computes: it keeps no values (and a meta ``eye(10**6)`` must cost nothing)."""
    if device.type == "meta":   # (no values computed: the shape checked as the host array would have been)
        if not all(isinstance(n, numbers.Integral) for n in shape):
            raise TypeError(f"expected integer sizes, got {tuple(shape)}")
        return _empty(_size(shape), dtype, device)
    return from_host_array(values(), device, dtype)


@op(method=False)
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


def _dtype_of_tensors_in(data):
    """PyTorch's dtype for a (nested) list holding tensors: the dtypes of its elements promoted
    together, a Python number counting as a bare number's dtype; None where it holds no tensor."""
    if not isinstance(data, (list, tuple)):
        return None
    tensors, numbers, stack = [], [], [data]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(item)
        elif hasattr(item, "_layout"):
            tensors.append(item.dtype)
        elif isinstance(item, (bool, int, float, np.number, np.bool_)):
            numbers.append(dt.scalar_dtype(item))
        else:
            return None
    return functools.reduce(dt.promote_types, tensors + numbers) if tensors else None


def _to_numpy_data(data):
    if hasattr(data, "_layout"):
        return data.detach()._host_values()
    if isinstance(data, (list, tuple)):
        try:
            return np.asarray([_to_numpy_data(d) for d in data]) if any(hasattr(d, "_layout") for d in data) \
                else np.asarray(data)
        except ValueError:
            _raise_if_ragged(data)
            raise
    return np.asarray(data)


def _raise_if_ragged(data):
    """Nested sequences that are no array: the error names the first dim that breaks the shape
    set by the first elements (PyTorch's wording and types)."""
    def sequence(x):
        return isinstance(x, (list, tuple)) or ((isinstance(x, np.ndarray) or hasattr(x, "_layout")) and x.ndim > 0)

    shape, first = [], data
    while sequence(first):
        shape.append(len(first))
        if not len(first):
            break
        first = first[0]

    def check(item, dim):
        if dim == len(shape):
            if sequence(item):
                raise TypeError(f"tensor: expected a number at dim {dim} (got a sequence of length {len(item)})")
            return
        if not sequence(item):
            raise TypeError(f"tensor: expected a sequence of length {shape[dim]} at dim {dim} (got {item!r})")
        if len(item) != shape[dim]:
            raise ValueError(f"tensor: expected sequence of length {shape[dim]} at dim {dim} (got {len(item)})")
        for sub in item:
            check(sub, dim + 1)

    check(data, 0)


def _raise_unless_fits(values: np.ndarray, dtype, op):
    """Python numbers put into an integer dtype must fit it: PyTorch raises rather than wrap."""
    if dtype.category != 1 or values.dtype.kind not in "iuf" or not values.size:
        return
    lo, hi = integer_range(dtype, values.dtype.kind != "f")
    # (a float compare against 2**63 - 1 would round it up to 2**63, which does not fit)
    below_top = values < 2.0 ** 63 if values.dtype.kind == "f" and hi == 2 ** 63 - 1 else values <= hi
    bad = ~((values >= lo) & below_top)
    if bad.any():
        raise RuntimeError(f"{op}: value {values[bad].flat[0]} cannot be converted to type {dtype.name} "
                           f"without overflow")


@op(method=False)
def tensor(data, dtype=None, device=None, requires_grad=False):
    """A new tensor that copies ``data`` (numbers, nested lists, numpy arrays, tensors).

    Numbers that do not fit an integer ``dtype`` raise, as in PyTorch; numpy arrays and tensors
    convert as ``.to(dtype)`` does."""
    if device is None and hasattr(data, "_layout") and explicit_default() is None:
        device = data.device   # (a tensor's own device, unless a default device was set: torch's rule)
    device = factory_device(device)
    if hasattr(data, "_layout") and data.is_meta:   # (no values to read: a new tensor of its shape, or no data)
        return _finish(data.detach().to(device, dtype or data.dtype, copy=True), requires_grad)
    array = _to_numpy_data(data)
    if dtype is not None:
        dtype = dt.to_dtype(dtype)
    elif hasattr(data, "_layout"):
        dtype = data.dtype
    elif isinstance(data, (np.ndarray, np.generic)):
        dtype = dt.from_numpy(array.dtype)  # numpy arrays and numpy scalars keep their dtype, as in PyTorch
    else:
        dtype = _dtype_of_tensors_in(data) or _infer_dtype(array)
    if not (isinstance(data, np.ndarray) or hasattr(data, "_layout")):  # numbers (numpy scalars too) must fit
        _raise_unless_fits(array, dtype, "tensor")
    elif array.dtype.kind == "f" and dtype.category == 1:  # arrays convert by the copy kernel's rule
        native = array.astype(array.dtype.newbyteorder("="))  # (a writable, native-order copy)
        return _finish(from_host_array(native, device).to(dtype), requires_grad)
    return _finish(from_host_array(np.array(array), device, dtype), requires_grad)  # (a copy, never data's memory)


def legacy_new(dtype, device, args, name):
    """The legacy constructors (``Tensor(...)``, ``FloatTensor(...)``, ``t.new(...)``), as PyTorch reads
    their arguments: integers (or a Size) are sizes of an uninitialised tensor, nothing is an empty
    one, a sequence or array is data, and a tensor of the same dtype is shared, not copied."""
    device = as_device(device) if device is not None else as_device("cpu")
    if not args:
        return _empty((0,), dtype, device)
    if isinstance(args[0], Size) and len(args) == 1:
        args = tuple(args[0])
    if all(isinstance(a, numbers.Integral) and not isinstance(a, bool) for a in args):
        return _empty(_size(args), dtype, device)
    if len(args) > 1:
        raise TypeError(f"{name}(): expected sizes (integers) or one sequence of data, got "
                        f"({', '.join(type(a).__name__ for a in args)})")
    data = args[0]
    if hasattr(data, "_layout"):
        if data.dtype is not dtype or data.device != device:
            raise TypeError(f"{name}(): expected a tensor of dtype {dtype.name} on {device}, got {data.dtype.name} "
                            f"on {data.device}")
        return data.detach()
    if isinstance(data, numbers.Number):
        raise TypeError(f"{name}(): data must be a sequence (got {type(data).__name__})")
    return tensor(data, dtype=dtype, device=device)


@op(method=False)
def as_tensor(data, dtype=None, device=None):
    """Like tensor(), but shares memory with a matching numpy array or tensor (on the default device if one was
    set, as torch's)."""
    if device is None:
        device = explicit_default()
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


@op(method=False)
@_strided_only
def empty(*size, dtype=None, device=None, requires_grad=False):
    return _finish(_empty(_size(size), dt.to_dtype(dtype) if dtype is not None else dt.get_default_dtype(),
                          factory_device(device)), requires_grad)


_fill_values: dict = {}


def _device_value(value, dtype, device):
    """A one-element device buffer holding ``value`` as ``dtype``, cached by its bytes (so -0.0 and
    NaN are their own entries): filling zeros every step then copies nothing from the host."""
    check_scalar_fits(value, dtype, "fill")
    host = host_scalar(value, dtype)
    key = (dtype, device, host.tobytes())
    found = _fill_values.get(key)
    if found is None:
        if len(_fill_values) > 512:
            _fill_values.clear()
        found = _fill_values[key] = kernels.get("from_host", device.type)(host)
    return found


def filled(shape, value, dtype, device):
    """A new tensor of ``shape`` holding ``value`` everywhere (no checks: the factories' core)."""
    t = _empty(shape, dtype, device)
    if t._layout.numel:
        kernel("copy", t)(_device_value(value, dtype, device), Layout(shape, (0,) * len(shape)), buf(t), t._layout)
    return t


@op(method=False)
@_strided_only
def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    if dtype is None:
        dtype = dt.scalar_dtype(fill_value)
    shape = _size((size,)) if not isinstance(size, numbers.Integral) else (size,)
    return _finish(filled(shape, fill_value, dt.to_dtype(dtype), factory_device(device)), requires_grad)


@op(method=False)
@_strided_only
def zeros(*size, dtype=None, device=None, requires_grad=False):
    return full(_size(size), 0, dtype=dtype or dt.get_default_dtype(), device=device, requires_grad=requires_grad)


@op(method=False)
@_strided_only
def ones(*size, dtype=None, device=None, requires_grad=False):
    return full(_size(size), 1, dtype=dtype or dt.get_default_dtype(), device=device, requires_grad=requires_grad)


def _like(x, dtype, device):
    return dict(dtype=dtype or x.dtype, device=device or x.device)


@op(method=False)
@_strided_only
def empty_like(x, dtype=None, device=None, requires_grad=False):
    return empty(x.shape, requires_grad=requires_grad, **_like(x, dtype, device))


@op(method=False)
@_strided_only
def zeros_like(x, dtype=None, device=None, requires_grad=False):
    return zeros(x.shape, requires_grad=requires_grad, **_like(x, dtype, device))


@op(method=False)
@_strided_only
def ones_like(x, dtype=None, device=None, requires_grad=False):
    return ones(x.shape, requires_grad=requires_grad, **_like(x, dtype, device))


@op(method=False)
@_strided_only
def full_like(x, fill_value, dtype=None, device=None, requires_grad=False):
    return full(x.shape, fill_value, requires_grad=requires_grad, **_like(x, dtype, device))


# arange on a GPU copies a cached device copy (models make the same positions or row indices every
# step; a copy from the host would wait for the bus each time)
_ranges: dict = {}
_RANGE_CACHE_MAX = 1 << 16


@op(method=False)
@_strided_only
def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    if end is None:
        start, end = 0, start
    values = [v.item() if hasattr(v, "item") else v for v in (start, end, step)]
    if step == 0:
        raise RuntimeError("arange: step must be nonzero")
    if dtype is None:
        dtype = dt.get_default_dtype() if any(isinstance(v, float) for v in values) else dt.int64
    dtype = dt.to_dtype(dtype)
    if dtype.is_floating_point:
        count = max(0, math.ceil((values[1] - values[0]) / values[2]))
    else:
        count, values = _integer_count(dtype, *values)
    device = factory_device(device)
    key = (dtype, device, count, values[0], values[2])
    source = _ranges.get(key) if device.type == "cuda" else None
    if source is None:
        wide = np.float64 if dtype.is_floating_point else np.int64
        source = _from_values(lambda: values[0] + np.arange(count, dtype=wide) * values[2], (count,), dtype, device)
        if device.type != "cuda" or count > _RANGE_CACHE_MAX:
            return _finish(source, requires_grad)
        if len(_ranges) > 256:
            _ranges.clear()
        _ranges[key] = source
    out = _empty(source.shape, dtype, device)
    kernel("copy", out)(buf(source), source._layout, buf(out), out._layout)
    return _finish(out, requires_grad)


def _integer_count(dtype, start, end, step):
    """arange's length and (start, end, step) in an integer dtype, as torch's: start and step are truncated
    to integers; int64 truncates end too and counts in integers, the other dtypes count with the values given."""
    values = [math.trunc(v) for v in (start, end, step)]
    if values[2] == 0:
        raise RuntimeError(f"arange: step {step} truncates to 0 in {dtype.name}; step must be nonzero")
    if dtype is not dt.int64:
        return max(0, math.ceil((end - start) / step)), values
    span = values[1] - values[0] + values[2] - (1 if values[2] > 0 else -1)
    count = abs(span) // abs(values[2]) if (span >= 0) == (values[2] > 0) else 0
    return count, values


@op(method=False)
@_strided_only
def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    """As torch's: the first half of the points count up from start and the rest down from end, so both ends
    are exact (one point is start); an integer dtype truncates start and end first, and then each point."""
    dtype = dt.to_dtype(dtype) if dtype is not None else dt.get_default_dtype()
    steps = int(steps)
    if steps < 0:
        raise RuntimeError(f"linspace: number of steps must be non-negative, got {steps}")
    compute = np.float32 if dtype.is_floating_point and dtype is not dt.float64 else np.float64
    first, last = (compute(float(v) if dtype.is_floating_point else math.trunc(float(v))) for v in (start, end))

    def points():
        step = (last - first) / compute(max(steps - 1, 1))
        i = np.arange(steps, dtype=compute)
        array = np.where((i < steps // 2) | (steps == 1), first + step * i, last - step * (steps - 1 - i))
        return array if dtype.is_floating_point else np.trunc(array).astype(np.int64)
    return _finish(_from_values(points, (steps,), dtype, factory_device(device)), requires_grad)


@op(method=False)
@_strided_only
def eye(n, m=None, dtype=None, device=None, requires_grad=False):
    dtype = dt.to_dtype(dtype) if dtype is not None else dt.get_default_dtype()
    return _finish(_from_values(lambda: np.eye(n, m), (n, n if m is None else m), dtype, factory_device(device)),
                   requires_grad)


@op(method=False)
@_strided_only
def logspace(start, end, steps, base=10.0, dtype=None, device=None, requires_grad=False):
    """``base`` to the powers ``linspace(start, end, steps)``, as torch's: an integer dtype truncates start
    and end, and then each power of base (not each exponent)."""
    dtype = dt.to_dtype(dtype) if dtype is not None else dt.get_default_dtype()
    start, end = (float(v.item()) if hasattr(v, "item") else float(v) for v in (start, end))
    if not dtype.is_floating_point:
        start, end = math.trunc(start), math.trunc(end)

    def powers():
        array = np.power(float(base), linspace(start, end, steps, dtype=dt.float64, device="cpu").numpy())
        return array if dtype.is_floating_point else np.trunc(array).astype(np.int64)
    return _finish(_from_values(powers, (int(steps),), dtype, factory_device(device)), requires_grad)


def _triangle_indices(op, row, col, offset, dtype, device, lower):
    dtype = dt.to_dtype(dtype)
    if dtype not in (dt.int64, dt.int32):
        raise RuntimeError(f"{op}: dtype must be torch.long or torch.int, got {dtype}")
    if row < 0 or col < 0:
        raise RuntimeError(f"{op}: row and col must be non-negative, got {row} and {col}")
    rows, cols = (np.tril_indices if lower else np.triu_indices)(row, offset, col)
    return from_host_array(np.stack([rows, cols]).astype(np.int64).reshape(2, -1), factory_device(device), dtype)


@op(method=False)
@_strided_only
def triu_indices(row, col, offset=0, dtype=dt.int64, device=None):
    """The coordinates (2, N) of a row x col matrix's elements on and above its ``offset``-th diagonal,
    row by row."""
    return _triangle_indices("triu_indices", row, col, offset, dtype, device, lower=False)


@op(method=False)
@_strided_only
def tril_indices(row, col, offset=0, dtype=dt.int64, device=None):
    """The coordinates (2, N) of a row x col matrix's elements on and below its ``offset``-th diagonal,
    row by row."""
    return _triangle_indices("tril_indices", row, col, offset, dtype, device, lower=True)


@op(method=False)
@_strided_only
def scalar_tensor(s, dtype=None, device=None, requires_grad=False):
    """A 0-d tensor holding the number s, of the default float dtype unless ``dtype`` says otherwise."""
    value = s.item() if hasattr(s, "item") else s
    dtype = dt.to_dtype(dtype) if dtype is not None else dt.get_default_dtype()
    return _finish(full((), value, dtype=dtype, device=device), requires_grad)


# ----------------------------------------------------------------------------- random
def _float_dtype(dtype, op: str):
    """The dtype a float draw is made in for ``dtype`` (float16 rounds a float32 draw)."""
    if not dtype.is_floating_point:
        raise RuntimeError(f"{op}: expected a floating point dtype, got {dtype.name}")
    return dtype if dtype is dt.float64 else dt.float32


def _random(kind, size, dtype, device, a, b, requires_grad, generator, op):
    dtype = dt.to_dtype(dtype) if dtype is not None else dt.get_default_dtype()
    compute = dt.int64 if kind == "integers" else _float_dtype(dtype, op)
    out = draw(kind, _size(size), compute, factory_device(device), a, b, generator)
    return _finish(cast(out, dtype), requires_grad)


@op(method=False)
@_strided_only
def rand(*size, generator=None, dtype=None, device=None, requires_grad=False):
    return _random("uniform", size, dtype, device, 0.0, 1.0, requires_grad, generator, "rand")


@op(method=False)
@_strided_only
def randn(*size, generator=None, dtype=None, device=None, requires_grad=False):
    return _random("normal", size, dtype, device, 0.0, 1.0, requires_grad, generator, "randn")


@op(method=False)
@_strided_only
def randint(low, high=None, size=None, generator=None, dtype=None, device=None, requires_grad=False):
    if size is None and isinstance(high, (tuple, list)):
        low, high, size = 0, low, high       # randint(high, size), as in PyTorch
    if high is None:
        low, high = 0, low
    if size is None:
        raise TypeError("randint() missing required argument 'size'")
    if int(low) >= int(high):
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={int(low)} >= to={int(high)}")
    return _random("integers", (size,), dtype or dt.int64, device, int(low), int(high), requires_grad, generator,
                   "randint")


@op(method=False)
@_strided_only
def randperm(n, generator=None, dtype=None, device=None, requires_grad=False):
    """A host draw (a shuffle is host work; the DataLoader's runs outside the training step)."""
    return _finish(_from_values(lambda: numpy_generator(generator).permutation(n), (n,), dt.to_dtype(dtype or dt.int64),
                                factory_device(device)), requires_grad)


@op(method=False)
@_strided_only
def normal(mean, std=1.0, size=None, generator=None, dtype=None, device=None, requires_grad=False):
    """torch's four forms: numbers and a ``size``; or a tensor mean and/or std (broadcast together), each
    element drawn from its own N(mean, std)."""
    if not (hasattr(mean, "_layout") or hasattr(std, "_layout")):
        if size is None:
            raise TypeError("normal: with a number for both mean and std, size is required (or pass a tensor)")
        return _random("normal", (size,), dtype, device or "cpu", float(mean), float(std), requires_grad, generator,
                       "normal")   # (on the CPU when given no device: torch's default device leaves normal be)
    if size is not None:
        raise TypeError("normal: size is taken only with a number for both mean and std (a tensor gives the shape)")
    for t in (mean, std):
        if hasattr(t, "_layout") and not t.dtype.is_floating_point:
            raise RuntimeError(f"normal: expected floating point mean and std tensors, got {t.dtype.name}")
    return _Normal.apply(*_operands(mean, std), generator)


def _operands(a, b):
    return (a, as_operand(b, a)) if hasattr(a, "_layout") else (as_operand(a, b), b)


class _Normal(Function):
    """Draws from N(mean, std) elementwise. The draw is not a function of mean and std that a gradient can follow
    through the noise, so both get a zero gradient, as from torch's NormalBackward."""

    @staticmethod
    def forward(ctx, mean, std, generator):
        result = dt.result_type(mean, std)
        if (std < 0).any().item():
            raise RuntimeError("normal expects all elements of std >= 0.0")
        shape = broadcast_shapes(mean.shape, std.shape, op="normal")
        noise = draw("normal", shape, _float_dtype(result, "normal"), mean.device, 0.0, 1.0, generator)
        ctx.inputs = [(t.shape, t.dtype, t.device) for t in (mean, std)]
        return cast(mean + std * noise, result)

    @staticmethod
    def backward(ctx, g):
        return tuple(zeros(shape, dtype=dtype, device=device) for shape, dtype, device in ctx.inputs) + (None,)


@op(method=False)
@_strided_only
def rand_like(x, dtype=None, device=None, requires_grad=False, generator=None):
    return rand(x.shape, generator=generator, requires_grad=requires_grad, **_like(x, dtype, device))


@op(method=False)
@_strided_only
def randn_like(x, dtype=None, device=None, requires_grad=False, generator=None):
    return randn(x.shape, generator=generator, requires_grad=requires_grad, **_like(x, dtype, device))


@op(method=False)
@_strided_only
def randint_like(x, low, high=None, dtype=None, device=None, generator=None):
    return randint(low, high, x.shape, generator=generator, **_like(x, dtype, device))


def _host(x) -> np.ndarray:
    return np.asarray(x.detach()._host_values() if hasattr(x, "_layout") else x, dtype=np.float64)


def _store(x, values):
    """Write ``values`` (x's shape) into x in place, converting to x's dtype."""
    kernel("copy", x)(buf(values), values._layout, buf(x), x._layout)
    x._bump_version()
    return x


def bernoulli_(x, p=0.5, generator=None):
    """Fill x with 0/1 draws, 1 with probability p (a number, or a tensor broadcast to x): uniform
    draws compared with p on x's device. A CPU tensor p is checked to lie in [0, 1]; a GPU one is
    not (that check would wait for the device)."""
    check_writable(x, "bernoulli_")
    is_tensor = hasattr(p, "_layout")
    if not is_tensor or p.device.type == "cpu":
        q = _host(p)
        if q.size and not ((q >= 0) & (q <= 1)).all():
            raise RuntimeError("bernoulli: expected all probabilities in [0, 1]")
    wide = x.dtype is dt.float64 or (is_tensor and p.dtype is dt.float64)
    u = draw("uniform", tuple(x.shape), dt.float64 if wide else dt.float32, x.device, 0.0, 1.0, generator)
    with grad_mode.no_grad():
        mask = u < (p.detach() if is_tensor else float(p))
    if mask.shape != x.shape:
        raise RuntimeError(f"bernoulli_: probabilities of shape {tuple(p.shape)} do not broadcast to {tuple(x.shape)}")
    return _store(x, mask)


@op()
def bernoulli(x, p=None, generator=None):
    """0/1 draws in x's shape and dtype, with probabilities x (or ``p`` when given)."""
    return bernoulli_(_empty(tuple(x.shape), x.dtype, x.device), x if p is None else p, generator)


@op()
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


def fill_random_(x, kind, a, b, generator=None, op="random fill"):
    """Overwrite ``x`` in place with draws of ``kind`` (see kernels.RANDOM_KINDS) made on its device."""
    check_writable(x, op)
    compute = dt.int64 if kind == "integers" else _float_dtype(x.dtype, op)
    return _store(x, draw(kind, tuple(x.shape), compute, x.device, a, b, generator))


def exponential_(x, lambd=1.0, generator=None):
    """-log(1 - u) / lambd of uniform draws u, on x's device."""
    if not lambd > 0:
        raise RuntimeError(f"exponential_: expects lambd > 0.0, but found lambd={lambd}")
    check_writable(x, "exponential_")
    u = draw("uniform", tuple(x.shape), _float_dtype(x.dtype, "exponential_"), x.device, 0.0, 1.0, generator)
    with grad_mode.no_grad():
        return _store(x, u.neg().log1p().neg() / float(lambd))
