"""Buffers in memory that other processes can map (``Tensor.share_memory_``, ``minidl.multiprocessing``).

A shared buffer is a numpy array over a shared mapping of a file in /dev/shm (memory, not disk);
its handle is the file's path, so a process started by spawn maps the same memory by path, and one
started by fork inherits the mapping. The mapping lasts as long as the arrays over it; the process
that created the file removes it when its own array is freed (or at exit), and mappings made before
stay valid after that.
"""
import mmap
import os
import tempfile
import weakref

import numpy as np

from ... import kernels

_DIRECTORY = "/dev/shm" if os.path.isdir("/dev/shm") else None  # elsewhere: the temporary directory


def _map(path, nbytes, dtype, numel):
    fd = os.open(path, os.O_RDWR)
    try:
        if nbytes is not None:
            os.ftruncate(fd, nbytes)
        mapping = mmap.mmap(fd, 0)
    finally:
        os.close(fd)
    return np.frombuffer(mapping, dtype, numel)  # the array keeps the mapping alive


def _remove(path, owner):
    if os.getpid() == owner:  # not a forked child, which inherits this finalizer
        os.unlink(path)


@kernels.register("share_memory")
def share_memory(buf):
    fd, path = tempfile.mkstemp(prefix="minidl-", dir=_DIRECTORY)
    os.close(fd)
    array = _map(path, max(buf.nbytes, 1), buf.dtype, buf.size)  # (an empty file cannot be mapped)
    weakref.finalize(array, _remove, path, os.getpid())
    array[...] = buf
    return array, (path, buf.dtype.str, buf.size)


@kernels.register("open_shared")
def open_shared(handle):
    path, dtype, numel = handle
    try:
        return _map(path, None, np.dtype(dtype), numel)
    except FileNotFoundError:
        raise RuntimeError(f"open_shared: the shared memory {path} no longer exists: the process that "
                           f"shared the tensor has freed it") from None
