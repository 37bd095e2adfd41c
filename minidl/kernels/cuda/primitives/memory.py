"""Buffers on the GPU are 1-D arrays of the runtime's array module (cupy; numpy in the simulator)."""
import numpy as np

from .... import kernels
from .. import runtime
from .common import kernel

ARGUMENT_BYTES = 8  # arrays up to this size travel as a kernel argument, not as a copy


@kernels.register("alloc", "cuda")
def alloc(numel, dtype):
    return runtime.track(runtime.get().xp.empty(numel, dtype.np))


@kernels.register("from_host", "cuda")
def from_host(array):
    """A device copy of a host array. A tiny one (a Python number, mostly) is written by a kernel
    that gets its bytes as an argument: no transfer to wait for, and a graph can capture it."""
    array = np.ascontiguousarray(array).reshape(-1)
    if array.nbytes <= ARGUMENT_BYTES:
        buf = runtime.track(runtime.get().xp.empty(array.size, array.dtype))
        if array.nbytes:
            bits = np.uint64(int.from_bytes(array.tobytes(), "little"))
            runtime.launch(kernel("elementwise", "store_bytes"), 1, buf.view(np.uint8), bits,
                           runtime.i32(array.nbytes))
        return buf
    runtime.refuse_during_capture("a copy from the host to a CUDA tensor")
    runtime.note_transfer("from_host", array.nbytes)
    return runtime.track(runtime.get().xp.array(array))


@kernels.register("to_host", "cuda")
def to_host(buf):
    """The host copy waits for the device, so deferred kernel errors surface here."""
    runtime.refuse_during_capture("a copy from a CUDA tensor to the host")
    rt = runtime.get()
    runtime.note_transfer("to_host", buf.nbytes)
    host = rt.to_numpy(buf)
    runtime.raise_pending_errors()
    return host


@kernels.register("share_memory", "cuda")
def share_memory(buf):
    raise RuntimeError("share_memory_: CUDA tensors cannot be moved to shared memory; move the tensor to the "
                       "CPU first (PyTorch shares CUDA tensors through CUDA IPC, which minidl does not support)")


@kernels.register("open_shared", "cuda")
def open_shared(handle):
    raise RuntimeError("open_shared: minidl does not share CUDA memory between processes")
