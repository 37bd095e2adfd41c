"""``minidl.accelerator``, as ``torch.accelerator``: the device-generic API for the current accelerator.

minidl's only accelerator is device 'cuda' (a GPU through CuPy, or the CPU simulator once
:func:`minidl.cuda.sim_enable` / ``MINIDL_CUDA_SIM=1`` switched it on). The answers are
``minidl.cuda``'s: where ``minidl.cuda.is_available()`` is True (the simulator included) the
accelerator is ``device('cuda')``; where it is False there is none, as in a CPU-only torch build:
``is_available()`` is False, ``current_accelerator()`` None, ``device_count()`` 0, and the functions
that need a device raise torch's ``RuntimeError``.
"""
from __future__ import annotations

import functools
import warnings
from collections import OrderedDict

from . import cuda as _cuda
from ._device import device as _Device
from .cuda.graphs import CUDAGraph as _CUDAGraph

__all__ = [
    "Graph", "current_accelerator", "current_device_idx", "current_device_index", "current_stream", "device_count",
    "device_index",
    "empty_cache", "empty_host_cache", "get_device_capability", "get_memory_info", "is_available",
    "max_memory_allocated", "max_memory_reserved", "memory_allocated", "memory_reserved", "memory_stats",
    "reset_accumulated_memory_stats", "reset_peak_memory_stats", "set_device_idx", "set_device_index",
    "set_stream", "synchronize",
]

_NONE_AVAILABLE = "Cannot access accelerator device when none is available."


def current_accelerator(check_available: bool = False):
    """``device('cuda')`` when device 'cuda' can run, else None.

    torch answers its build's accelerator, checked at run time only with ``check_available=True``;
    minidl has no build-time accelerator, so both spellings answer the run-time check. torch's
    device has index None; minidl's ``device('cuda')`` always reads ``cuda:0``."""
    return _Device("cuda") if _cuda.is_available() else None


def is_available() -> bool:
    return current_accelerator() is not None and _cuda.is_available()


def device_count() -> int:
    return _cuda.device_count() if current_accelerator() is not None else 0


def _require() -> None:
    if current_accelerator() is None:
        raise RuntimeError(_NONE_AVAILABLE)


def _get_device_index(device, optional: bool = False) -> int:
    """torch.accelerator._utils._get_device_index: an int as is; a device (or its string) must be
    the accelerator's type; a device without an index is the current one when ``optional``."""
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = _Device(device)
    index = None
    if isinstance(device, _Device):
        acc = current_accelerator()
        if acc is None:
            raise RuntimeError("Accelerator expected")
        if acc.type != device.type:
            raise ValueError(f"{device.type} doesn't match the current accelerator {acc}.")
        index = device.index
    if index is None:
        if not optional:
            raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{device}")
        return current_device_index()
    return index


def current_device_index() -> int:
    _require()
    return _cuda.current_device()


def set_device_index(device, /) -> None:
    """Make ``device`` (an int, or a device with an index) the current one; a negative index is a no-op."""
    index = _get_device_index(device, optional=False)
    if index < 0:
        return
    _require()
    _cuda.set_device(index)


def _deprecated(replacement: str, func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        warnings.warn(f"Use `{replacement}` instead.", FutureWarning, stacklevel=2)
        return func(*args, **kwargs)
    return wrapper


current_device_idx = _deprecated("current_device_index", current_device_index)
current_device_idx.__name__ = current_device_idx.__qualname__ = "current_device_idx"
set_device_idx = _deprecated("set_device_index", set_device_index)
set_device_idx.__name__ = set_device_idx.__qualname__ = "set_device_idx"


def synchronize(device=None, /) -> None:
    """Wait for every kernel launched so far on ``device`` (default: the current one)."""
    index = _get_device_index(device, optional=True)
    _require()
    _cuda.synchronize(index)


def _exchange(index: int) -> int:
    """Make ``index`` current and answer the previous index (-1 and nothing done for a negative one)."""
    if index < 0:
        return -1
    _require()
    previous = _cuda.current_device()
    if previous != index:
        _cuda.set_device(index)
    return previous


class device_index:
    """Context manager: make device ``device`` (an int; None: no change) current inside the block."""

    def __init__(self, device, /) -> None:
        self.idx = device
        self.prev_idx = -1

    def __enter__(self) -> None:
        if self.idx is not None:
            self.prev_idx = _exchange(self.idx)

    def __exit__(self, *exc_info) -> None:
        if self.idx is not None and self.prev_idx >= 0:
            _cuda.set_device(self.prev_idx)


# ----------------------------------------------------------------------------- streams and graphs
def current_stream(device=None, /):
    """The stream kernels launch on now, on ``device`` (default: the current one)."""
    index = _get_device_index(device, optional=True)
    _require()
    return _cuda.current_stream(index)


def set_stream(stream, /) -> None:
    """Make ``stream`` current, and its device the current one."""
    _require()
    acc = current_accelerator()
    if stream.device.type != acc.type:
        raise ValueError(f"set_stream: the stream's device type {stream.device.type} doesn't match the "
                         f"current accelerator {acc}.")
    _cuda.set_stream(stream)


class Graph(_CUDAGraph):
    """torch.accelerator.Graph: a graph captured from the *current* stream, which must not be the
    default one (``with minidl.Stream(), Graph() as g:`` or ``capture_begin()``/``capture_end()``).

    ``pool`` and ``capture_error_mode`` are kept on the object (``graph_pool``,
    ``capture_error_mode``) and used by every capture; "default" is CUDA's "global" (see
    ``minidl.cuda.graphs`` on the modes)."""

    def __init__(self, keep_graph: bool = False, *, pool=None, capture_error_mode: str = "default"):
        _require()
        super().__init__(keep_graph)
        self.graph_pool = pool
        self.capture_error_mode = capture_error_mode

    def capture_begin(self) -> None:
        mode = "global" if self.capture_error_mode == "default" else self.capture_error_mode
        super().capture_begin(self.graph_pool, capture_error_mode=mode)

    def __enter__(self) -> None:
        synchronize()
        empty_cache()
        self.capture_begin()

    def __exit__(self, *exc_info) -> None:
        self.capture_end()


# ----------------------------------------------------------------------------- memory
def empty_cache() -> None:
    """Give the memory pool's unused blocks back to the driver."""
    _require()
    _cuda.empty_cache()


def empty_host_cache() -> None:
    """Nothing to release: minidl keeps no cache of pinned host memory (``pin_memory`` pins nothing)."""
    _require()


def memory_stats(device_index=None, /) -> OrderedDict:
    """The statistics minidl keeps, under torch's keys: ``allocated_bytes.all`` and
    ``reserved_bytes.all``, each ``.current`` and ``.peak``."""
    _require()
    index = _get_device_index(device_index, optional=True)
    return OrderedDict([
        ("allocated_bytes.all.current", _cuda.memory_allocated(index)),
        ("allocated_bytes.all.peak", _cuda.max_memory_allocated(index)),
        ("reserved_bytes.all.current", _cuda.memory_reserved(index)),
        ("reserved_bytes.all.peak", _cuda.max_memory_reserved(index)),
    ])


def memory_reserved(device_index=None, /) -> int:
    """Bytes the allocator holds from the driver, in use or cached for reuse."""
    return memory_stats(device_index).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device_index=None, /) -> int:
    return memory_stats(device_index).get("reserved_bytes.all.peak", 0)


def reset_accumulated_memory_stats(device_index=None, /) -> None:
    """Nothing to reset: minidl keeps no accumulated (historical) counts, only current and peak."""
    _require()
    _get_device_index(device_index, optional=True)


def get_memory_info(device_index=None, /) -> tuple:
    """(free, total) bytes of the device."""
    _require()
    return _cuda.mem_get_info(_get_device_index(device_index, optional=True))


def get_device_capability(device=None, /) -> dict:
    """What the device supports: ``supported_dtypes``, the dtypes tensors can have there (all of minidl's)."""
    from . import _dtype
    _require()
    _get_device_index(device, optional=True)
    return {"supported_dtypes": set(_dtype.ALL)}


def memory_allocated(device_index=None, /) -> int:
    """Bytes held by live tensors on the device."""
    return memory_stats(device_index).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device_index=None, /) -> int:
    """The peak of :func:`memory_allocated` since the start or the last :func:`reset_peak_memory_stats`."""
    return memory_stats(device_index).get("allocated_bytes.all.peak", 0)


def reset_peak_memory_stats(device_index=None, /) -> None:
    _require()
    _cuda.reset_peak_memory_stats(_get_device_index(device_index, optional=True))
