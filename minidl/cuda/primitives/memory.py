"""Buffers on the GPU are 1-D arrays of the runtime's array module (cupy; numpy in the simulator)."""
import numpy as np

from ... import kernels
from .. import runtime


@kernels.register("alloc", "cuda")
def alloc(numel, dtype):
    return runtime.track(runtime.get().xp.empty(numel, dtype.np))


@kernels.register("from_host", "cuda")
def from_host(array):
    array = np.ascontiguousarray(array).reshape(-1)
    runtime.note_transfer("from_host", array.nbytes)
    return runtime.track(runtime.get().xp.array(array))


@kernels.register("to_host", "cuda")
def to_host(buf):
    """The host copy waits for the device, so deferred kernel errors surface here."""
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
