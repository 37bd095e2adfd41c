"""Where minidl's CUDA kernels run: CuPy on a real GPU, or the simulator on the CPU.

The primitives in ``minidl/kernels/cuda/primitives`` see one small interface, whichever runs them:
``xp`` (the array module of the buffers: cupy, or numpy under the simulator), ``module(name)``
(a compiled ``csrc/<name>.cu``), ``launch`` (a 1-D grid-stride launch sized for the device),
``layout_arg`` (a Layout as the kernels' struct) and the deferred index errors. The simulator is
switched on by ``MINIDL_CUDA_SIM=1`` or :func:`minidl.cuda.sim_enable`; it is for tests and for
reading kernels on machines without a GPU, not for speed.
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import re
import struct
import weakref

import numpy as np

CSRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc")
MAX_DIMS = 8
BLOCK = 256
LAYOUT_DTYPE = np.dtype([("ndim", "<i8"), ("offset", "<i8"), ("shape", "<i8", (MAX_DIMS,)),
                         ("strides", "<i8", (MAX_DIMS,))])


class Unavailable(RuntimeError):
    pass


_INCLUDE = re.compile(r'^#include "(\w+\.cuh)".*$', re.MULTILINE)


def _self_contained(text: str) -> str:
    """common.cuh, then ``text``, each ``#include "x.cuh"`` replaced by that header's text (once: the
    first time it is named). One self-contained text, so NVRTC, nvcc and the simulator's g++ need no
    include paths, and its hash keys every cache."""
    seen = set()

    def expand(file):
        if file in seen:
            return ""
        seen.add(file)
        with open(os.path.join(CSRC, file)) as f:
            return inline(f.read())

    def inline(body):
        return _INCLUDE.sub(lambda m: expand(m.group(1)), body)
    return expand("common.cuh") + "\n" + inline(text)


@functools.lru_cache(maxsize=None)
def source(name: str) -> str:
    """The text compiled for ``csrc/<name>.cu`` (see ``_self_contained``)."""
    with open(os.path.join(CSRC, f"{name}.cu")) as f:
        return _self_contained(f.read())


def kernel_files() -> list:
    return sorted(f[:-3] for f in os.listdir(CSRC) if f.endswith(".cu"))


class CupyRuntime:
    """A real GPU through CuPy: NVRTC compiles, cuBLAS multiplies, CuPy's pool allocates."""
    name = "cupy"

    def __init__(self):
        import cupy
        self.cupy = self.xp = cupy
        self.max_blocks = 32 * cupy.cuda.Device().attributes["MultiProcessorCount"]

    def compile(self, text: str):
        module = self.cupy.RawModule(code=text, options=("--std=c++17",))
        return module.get_function

    def device_count(self) -> int:
        return self.cupy.cuda.runtime.getDeviceCount()

    def synchronize(self) -> None:
        self.cupy.cuda.Device().synchronize()

    def device_id(self) -> int:
        """CuPy's current device: where buffers are allocated and kernels launched."""
        return self.cupy.cuda.runtime.getDevice()

    def to_numpy(self, buf):
        return self.cupy.asnumpy(buf)

    def memory_allocated(self) -> int:
        return self.cupy.get_default_memory_pool().used_bytes()

    def memory_reserved(self) -> int:
        """Bytes CuPy's pool holds from the driver: in use, or cached for reuse."""
        return self.cupy.get_default_memory_pool().total_bytes()

    def memory_info(self) -> tuple:
        """(free, total) bytes of the device, as the driver reports them."""
        return self.cupy.cuda.runtime.memGetInfo()

    def empty_cache(self) -> None:
        self.cupy.get_default_memory_pool().free_all_blocks()

    # Streams, events and graphs are CuPy's own; its kernels, cuBLAS calls and pool all work on
    # CuPy's current stream, so making a stream current is all a launch needs.
    def on_device(self, index: int):
        """A context in which ``index`` is CuPy's current device (streams and events belong to one)."""
        return self.cupy.cuda.Device(index)

    def default_stream(self):
        return self.cupy.cuda.Stream.null

    def new_stream(self, priority: int):
        """A stream that does not wait for the legacy default stream, as torch's streams."""
        return self.cupy.cuda.Stream(non_blocking=True, priority=priority)

    def current_stream(self):
        return self.cupy.cuda.get_current_stream()

    def use_stream(self, stream) -> None:
        stream.use()

    def new_event(self, timing: bool, blocking: bool, interprocess: bool):
        return self.cupy.cuda.Event(block=blocking, disable_timing=not timing, interprocess=interprocess)

    def elapsed_ms(self, start, end) -> float:
        return self.cupy.cuda.get_elapsed_time(start, end)

    def enqueue(self, function, *args, **kwargs) -> None:
        """Launch device work: CuPy puts it on its current stream (recorded there while it captures)."""
        function(*args, **kwargs)

    def new_graph_pool(self):
        """A pool only graphs allocate from: a captured kernel's addresses stay its own after capture."""
        return self.cupy.cuda.MemoryPool()

    def allocating_from(self, pool):
        return self.cupy.cuda.using_allocator(pool.malloc)


class SimRuntime:
    """The simulator: buffers are numpy arrays, kernels run as fibers on the CPU."""
    name = "sim"
    xp = np
    max_blocks = 2  # a few blocks test the grid-stride logic; more only cost time

    def compile(self, text: str):
        from .sim import SimModule
        return SimModule(text).function

    def device_count(self) -> int:
        return 1

    def synchronize(self) -> None:
        pass

    def device_id(self) -> int:
        return 0

    def __init__(self):
        from .sim.streams import SimStream
        self.live_bytes = 0
        self.stream = self._default_stream = SimStream(ptr=0)

    def to_numpy(self, buf):
        return buf.copy()

    def memory_allocated(self) -> int:
        """Bytes of the device buffers still alive (each is counted until it is garbage)."""
        return self.live_bytes

    def memory_reserved(self) -> int:
        return self.live_bytes  # (no pool: nothing is cached)

    def memory_info(self) -> tuple:
        """(free, total): the simulator's device memory is the host's."""
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return total - self.live_bytes, total

    def empty_cache(self) -> None:
        pass

    def _free(self, nbytes: int) -> None:
        self.live_bytes -= nbytes

    # Streams, events and graphs: the stand-ins in sim/streams.py, with CuPy's methods.
    def on_device(self, index: int):
        return contextlib.nullcontext()  # one device

    def default_stream(self):
        return self._default_stream

    def new_stream(self, priority: int):
        from .sim.streams import SimStream
        return SimStream(priority)

    def current_stream(self):
        return self.stream

    def use_stream(self, stream) -> None:
        self.stream = stream

    def new_event(self, timing: bool, blocking: bool, interprocess: bool):
        from .sim.streams import SimEvent
        return SimEvent(block=blocking, disable_timing=not timing, interprocess=interprocess)

    def elapsed_ms(self, start, end) -> float:
        from .sim.streams import elapsed_ms
        return elapsed_ms(start, end)

    def enqueue(self, function, *args, **kwargs) -> None:
        """Run device work now, or record it while the current stream captures."""
        self.stream.run_or_record(function, args, kwargs)

    def new_graph_pool(self):
        return object()  # nothing to set apart: a recorded launch holds its numpy buffers alive

    def allocating_from(self, pool):
        return contextlib.nullcontext()


_runtime = None
_sim_requested = os.environ.get("MINIDL_CUDA_SIM", "") not in ("", "0")


def sim_enable(on: bool = True) -> None:
    """Run device 'cuda' on the simulator (for tests; a real GPU is not used while it is on)."""
    global _runtime, _sim_requested
    _sim_requested = on
    _runtime = None


def _make():
    return SimRuntime() if _sim_requested else _gpu_runtime()


def gpu_available() -> bool:
    """Whether CuPy sees a real GPU, whether or not device 'cuda' runs on the simulator now."""
    try:
        _gpu_runtime()
        return True
    except Unavailable:
        return False


def _gpu_runtime():
    if importlib.util.find_spec("cupy") is None:
        raise Unavailable("minidl's CUDA kernels need CuPy (pip install 'minidl[cuda]') and an NVIDIA GPU; "
                          "MINIDL_CUDA_SIM=1 runs its kernels on the CPU simulator instead")
    try:
        rt = CupyRuntime()
        if rt.device_count() > 0:
            return rt
    except Exception as e:  # CuPy without a driver or device: its errors vary by version
        raise Unavailable(f"CUDA is not available: CuPy found no usable GPU ({e})") from None
    raise Unavailable("CUDA is not available: CuPy found no GPU")


def get():
    """The active runtime (made on first use); raises Unavailable when there is none."""
    global _runtime
    if _runtime is None:
        _runtime = _make()
    return _runtime


def available() -> bool:
    try:
        get()
        return True
    except Unavailable:
        return False


_modules: dict = {}  # (runtime name, csrc file name or generated text) -> its getter
_kernel_names: dict = {}  # id(kernel function) -> its name, for a graph's debug dump


def module(name: str):
    """``csrc/<name>.cu`` compiled for the active runtime: a ``function(kernel_name)`` getter."""
    return _compiled(name, lambda: source(name))


def compile_text(text: str):
    """A generated source (``#include``s of csrc headers allowed) compiled for the active runtime: a
    ``function(kernel_name)`` getter, as ``module`` gives."""
    return _compiled(text, lambda: _self_contained(text))


def _compiled(key, full_text):
    rt = get()
    found = _modules.get((rt.name, key))
    if found is None:
        getter = rt.compile(full_text())

        @functools.lru_cache(maxsize=None)
        def function(kernel_name: str):
            kernel = getter(kernel_name)
            _kernel_names[id(kernel)] = kernel_name
            return kernel
        found = _modules[(rt.name, key)] = function
    return found


def launch(kernel, n: int, *args, block: int = BLOCK, shared_mem: int = 0) -> None:
    """Run a grid-stride kernel over n work items (nothing when n == 0)."""
    if n <= 0:
        return
    enqueue(kernel, (min((n + block - 1) // block, get().max_blocks),), (block,), args, shared_mem=shared_mem)


def launch_rows(kernel, rows: int, *args, block: int = BLOCK, shared_mem: int = 0) -> None:
    """Run a block-per-row kernel (rows stepped by gridDim.x) with one block per row, up to the cap."""
    if rows <= 0:
        return
    enqueue(kernel, (min(rows, get().max_blocks),), (block,), args, shared_mem=shared_mem)


capturing: list = []  # the streams capturing a graph now (see graphs.py)
capture_log = None  # while a graph in debug mode captures: the names of the work launched


def enqueue(function, *args, **kwargs) -> None:
    """Put device work (a kernel, or a function of CuPy calls) on the current stream."""
    if capture_log is not None:
        capture_log.append(_kernel_names.get(id(function)) or getattr(function, "__name__", "kernel"))
    get().enqueue(function, *args, **kwargs)


def refuse_during_capture(what: str, why: str = "it makes the host wait for the device") -> None:
    """Raise where a graph capture is in progress and ``what`` cannot be part of a graph (CUDA
    itself refuses a synchronous copy or a synchronisation then, and ends the capture)."""
    if capturing:
        raise RuntimeError(f"{what} is not permitted while a CUDA graph is being captured: {why}. "
                           f"Do it before capture_begin or after capture_end")


_PACK = struct.Struct(f"<{2 + 2 * MAX_DIMS}q")
_PAD = (0,) * MAX_DIMS


def layout_arg(shape, strides, offset: int = 0, op: str = "cuda kernel"):
    """The kernels' ``Layout`` struct for (shape, strides, offset), passed by value (packed with
    ``struct``: a few µs cheaper per operand than filling a structured array field by field)."""
    ndim = len(shape)
    if ndim > MAX_DIMS:
        raise ValueError(f"{op}: a layout of {ndim} dims that do not merge exceeds the CUDA kernels' "
                         f"limit of {MAX_DIMS} (shape {tuple(shape)}, strides {tuple(strides)})")
    if not ndim:
        shape, strides, ndim = (1,), (0,), 1
    raw = _PACK.pack(ndim, offset, *shape, *_PAD[ndim:], *strides, *_PAD[ndim:])
    return np.frombuffer(raw, LAYOUT_DTYPE)


NULL = np.uint64(0)  # a null pointer argument: 8 bytes of zero, as CuPy passes a numpy scalar by value


def i32(v):
    return np.int32(v)


def i64(v):
    return np.int64(v)


_error_buffers: dict = {}
_unchecked: set = set()  # error buffers a kernel was handed since the last check


def error_buffer():
    """The current device's int64[3] index-error record (see report_index_error in common.cuh)."""
    rt = get()
    key = (rt.name, rt.device_id())
    buf = _error_buffers.get(key)
    if buf is None:
        buf = _error_buffers[key] = rt.xp.zeros(3, dtype=np.int64)
    _unchecked.add(key)
    return buf


def raise_pending_errors() -> None:
    """Raise the IndexError a kernel recorded since the last check (called where the host waits
    for the device anyway: synchronize, copies to the host). Reading the record is one more copy,
    so it is read only when an indexing kernel ran since."""
    rt = get()
    key = (rt.name, rt.device_id())
    if key not in _unchecked:
        return
    _unchecked.discard(key)
    buf = _error_buffers[key]
    note_transfer("error check", buf.nbytes)
    code, index, size = (int(v) for v in rt.to_numpy(buf))
    if code:
        buf[...] = 0
        raise IndexError(f"index {index} is out of bounds for dimension with size {size} "
                         f"(reported by a CUDA kernel at this synchronisation)")


# ---------------------------------------------------------------------------- accounting
_peak = {"bytes": 0, "reserved": 0}
transfer_listeners: list = []  # functions (kind, nbytes) told of every host <-> device copy


def note_transfer(kind: str, nbytes: int) -> None:
    """Record a copy between host and device ("from_host", "to_host", "error check"): each one
    waits for the device or the bus, which is what a training step must avoid."""
    for listener in transfer_listeners:
        listener(kind, nbytes)


def track(buf):
    """Account a new device buffer (live bytes in the simulator, the peak on both runtimes)."""
    rt = get()
    if isinstance(rt, SimRuntime):
        rt.live_bytes += buf.nbytes
        weakref.finalize(buf, rt._free, buf.nbytes)
    _peak["bytes"] = max(_peak["bytes"], rt.memory_allocated())
    _peak["reserved"] = max(_peak["reserved"], rt.memory_reserved())
    return buf


def max_memory_allocated() -> int:
    return max(_peak["bytes"], get().memory_allocated())


def max_memory_reserved() -> int:
    return max(_peak["reserved"], get().memory_reserved())


def reset_peak_memory_stats() -> None:
    _peak["bytes"] = get().memory_allocated()
    _peak["reserved"] = get().memory_reserved()
