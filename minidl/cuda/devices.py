"""The GPUs as devices: availability, the current device, synchronisation, memory statistics."""
from __future__ import annotations

from .._device import device as Device
from ..kernels.cuda import runtime

_current = [0]


def is_available() -> bool:
    """True when device 'cuda' can run kernels: CuPy with a GPU, or the simulator when enabled."""
    return runtime.available()


def device_count() -> int:
    return runtime.get().device_count() if runtime.available() else 0


def _index(device) -> int:
    """The GPU index of ``device`` (None: the current one), checked against the device count."""
    if device is None:
        return _current[0]
    if isinstance(device, int):
        index = device
    else:
        d = Device(device)
        if d.type != "cuda":
            raise ValueError(f"Expected a cuda device, but got: {d}")
        index = d.index
    count = device_count()
    if not 0 <= index < count:
        raise RuntimeError(f"CUDA error: invalid device ordinal {index} ({count} device(s) available)")
    return index


def _require() -> None:
    if not runtime.available():
        runtime.get()  # raises runtime.Unavailable, which says why


def current_device() -> int:
    _require()
    return _current[0]


def set_device(device) -> None:
    """Make ``device`` the current GPU (CuPy allocates and launches there)."""
    _require()
    index = _index(device)
    _current[0] = index
    rt = runtime.get()
    if rt.name == "cupy":
        rt.cupy.cuda.Device(index).use()


def synchronize(device=None) -> None:
    """Wait for every kernel launched so far; raises the IndexError a kernel recorded meanwhile."""
    _require()
    _index(device)
    runtime.refuse_during_capture("minidl.cuda.synchronize")
    runtime.get().synchronize()
    runtime.raise_pending_errors()


def memory_allocated(device=None) -> int:
    """Bytes held by live CUDA buffers (CuPy's pool in use; the simulator's live arrays)."""
    _require()
    _index(device)
    return runtime.get().memory_allocated()


def max_memory_allocated(device=None) -> int:
    _require()
    _index(device)
    return runtime.max_memory_allocated()


def memory_reserved(device=None) -> int:
    """Bytes the allocator holds from the driver, in use or cached (CuPy's pool; the simulator
    caches nothing, so there it equals memory_allocated)."""
    _require()
    _index(device)
    return runtime.get().memory_reserved()


def max_memory_reserved(device=None) -> int:
    _require()
    _index(device)
    return runtime.max_memory_reserved()


def mem_get_info(device=None) -> tuple:
    """(free, total) bytes of the device."""
    _require()
    _index(device)
    return tuple(runtime.get().memory_info())


def reset_peak_memory_stats(device=None) -> None:
    _require()
    _index(device)
    runtime.reset_peak_memory_stats()


def empty_cache() -> None:
    """Give the memory pool's unused blocks back to the driver (nothing to do in the simulator)."""
    if runtime.available():
        runtime.get().empty_cache()
