"""CUDA graphs, as ``torch.cuda.CUDAGraph`` and ``torch.cuda.graph``: capture a sequence of kernel
launches once, then replay it with one call.

While a stream captures, the kernels launched on it are recorded, not run. Replaying runs the
recorded kernels on the very buffers they were captured with: a graph's inputs are tensors filled
*before* a replay (``static_input.copy_(batch)``), its outputs tensors read *after* one. Nothing
that makes the host wait for the device can be captured (a copy to or from the host, ``.item()``,
a synchronisation, ``nonzero``), and neither can random numbers drawn with the generator's state as
kernel arguments (what minidl's generators pass), since a replay would repeat the captured numbers.
These raise at once. A draw kernel reading its state from a device buffer (the kernel contract's
Philox state buffer) can be captured: ``minidl.compile(mode="reduce-overhead")`` replays so.

The memory allocated during a capture comes from the graph's own pool (on a GPU: a CuPy memory
pool that only graphs share), so no later allocation can reuse an address a replay writes to.
Capture always runs in CUDA's relaxed mode, whatever ``capture_error_mode`` says: the pool grows
by ``cudaMalloc`` during capture, which the stricter modes forbid.
"""
from __future__ import annotations

import gc
import itertools
import warnings

from ..kernels.cuda import runtime
from .devices import empty_cache, synchronize
from .streams import CudaStream, StreamContext

MODES = ("global", "thread_local", "relaxed")
_pool_ids = itertools.count(1)


class PoolHandle(tuple):
    """A graph memory pool's id, torch's ``(int, int)``; it keeps the pool alive while held."""

    def __new__(cls, pool=None):
        handle = super().__new__(cls, (next(_pool_ids), 0))
        handle.pool = runtime.get().new_graph_pool() if pool is None else pool
        return handle


def graph_pool_handle() -> PoolHandle:
    """A new memory pool for graphs to share: pass it as ``pool=`` to several captures."""
    return PoolHandle()


def is_current_stream_capturing() -> bool:
    current = runtime.get().current_stream().ptr
    return any(stream.ptr == current for stream in runtime.capturing)


class CUDAGraph:
    """One captured graph: ``capture_begin()`` … ``capture_end()``, then ``replay()`` as often as needed."""

    def __init__(self, keep_graph: bool = False):
        self.keep_graph = keep_graph
        self._graph = self._stream = self._pool = None
        self._instantiated = False
        self._debug = False
        self._launched = None  # the names of the captured work, in debug mode

    def capture_begin(self, pool=None, capture_error_mode: str = "global") -> None:
        """Start recording the work launched on the current stream (which must not be the default one)."""
        if capture_error_mode not in MODES:
            raise ValueError(f"capture_begin: capture_error_mode must be one of {', '.join(MODES)}, "
                             f"got {capture_error_mode!r}")
        if self._graph is not None or self._stream is not None:
            raise RuntimeError("capture_begin: this CUDAGraph already holds a capture; call reset() to capture anew")
        rt = runtime.get()
        stream = rt.current_stream()
        if stream.ptr == 0:
            raise RuntimeError("capture_begin: CUDA graphs cannot be captured on the default stream; capture "
                               "inside `with minidl.cuda.stream(minidl.cuda.Stream()):` (replaying on the "
                               "default stream is fine)")
        if runtime.capturing:
            raise RuntimeError("capture_begin: another graph is being captured; end that capture first")
        self._pool = pool if isinstance(pool, PoolHandle) else PoolHandle()
        self._allocation = rt.allocating_from(self._pool.pool)
        self._allocation.__enter__()
        stream.begin_capture()
        self._stream = stream
        runtime.capturing.append(stream)
        if self._debug:
            self._launched = runtime.capture_log = []

    def capture_end(self) -> None:
        """Stop recording; unless ``keep_graph``, the graph is ready to replay at once."""
        if self._stream is None:
            raise RuntimeError("capture_end: no capture is in progress on this CUDAGraph")
        try:
            self._graph = self._stream.end_capture()
        finally:
            runtime.capturing.remove(self._stream)
            runtime.capture_log = None
            self._allocation.__exit__(None, None, None)
            self._stream = None
        if not self.keep_graph:
            self.instantiate()

    def instantiate(self) -> None:
        """Make the captured graph executable (CuPy does so when capture ends; this marks it done)."""
        if self._graph is None:
            raise RuntimeError("instantiate: there is no captured graph; capture one first")
        self._instantiated = True

    def replay(self) -> None:
        """Run the captured work again, on the current stream."""
        if self._graph is None:
            raise RuntimeError("replay: there is no captured graph; capture one first")
        if not self._instantiated:
            self.instantiate()
        self._graph.launch(runtime.get().current_stream())

    def reset(self) -> None:
        """Drop the captured graph and its pool, so this object can capture again."""
        if self._stream is not None:
            raise RuntimeError("reset: a capture is in progress; call capture_end first")
        self._graph = self._pool = self._launched = None
        self._instantiated = False

    def pool(self) -> PoolHandle:
        """This graph's memory pool, to share with another capture."""
        if self._pool is None:
            raise RuntimeError("pool: this CUDAGraph has no pool before its capture begins")
        return self._pool

    def enable_debug_mode(self) -> None:
        """Keep the names of the captured work, for :meth:`debug_dump`."""
        self._debug = True

    def debug_dump(self, debug_path: str) -> None:
        """Write the captured work as a Graphviz DOT chain (it ran on one stream, in this order)."""
        if self._launched is None:
            warnings.warn("debug_dump: enable_debug_mode() was not called before the capture; nothing to dump",
                          stacklevel=2)
            return
        lines = ["digraph minidl_cuda_graph {"]
        lines += [f'  n{i} [label="{name}"];' for i, name in enumerate(self._launched)]
        lines += [f"  n{i} -> n{i + 1};" for i in range(len(self._launched) - 1)]
        with open(debug_path, "w") as f:
            f.write("\n".join(lines + ["}"]) + "\n")


class graph:
    """``with minidl.cuda.graph(g):`` captures the block into ``g`` on a side stream (``stream``, or
    one shared by all such blocks), after waiting for the device and emptying the allocator's cache."""

    default_capture_stream = None

    def __init__(self, cuda_graph: CUDAGraph, pool=None, stream=None, capture_error_mode: str = "global"):
        if stream is None:
            if graph.default_capture_stream is None:
                graph.default_capture_stream = CudaStream()
            stream = graph.default_capture_stream
        self.cuda_graph, self.pool, self.capture_error_mode = cuda_graph, pool, capture_error_mode
        self.stream_ctx = StreamContext(stream)

    def __enter__(self) -> None:
        synchronize()
        gc.collect()
        empty_cache()
        self.stream_ctx.__enter__()
        try:
            self.cuda_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode)
        except BaseException:
            self.stream_ctx.__exit__(None, None, None)
            raise

    def __exit__(self, *exc_info) -> None:
        try:
            self.cuda_graph.capture_end()
            if exc_info[0] is not None:
                self.cuda_graph.reset()  # a capture cut short by an error is not a graph to replay
        except Exception:
            if exc_info[0] is None:
                raise  # else the block's own error is the one to see
        finally:
            self.stream_ctx.__exit__(*exc_info)

