"""Gather/scatter primitives on the GPU (csrc/indexing.cu): take, put, check_index, nonzero.

take and put check their indices inside the kernel; a bad one surfaces as IndexError at the next
synchronisation (runtime.raise_pending_errors), so launching them never waits for the device.
"""
import numpy as np

from .... import kernels
from .. import runtime
from .common import kernel

FILE = "indexing"


def _check_index(index, op):
    if index.dtype != np.int64 or index.ndim != 1:
        raise TypeError(f"{op}: expected a 1-D int64 index buffer, got a {index.ndim}-D {index.dtype} one")


@kernels.register("take", "cuda")
def take(src, sl, index, out):
    n = index.size
    _check_index(index, "take")
    if out.size < n or out.dtype != src.dtype:
        raise ValueError(f"take: output buffer of {out.size} {out.dtype} elements cannot hold {n} {src.dtype}")
    runtime.launch(kernel(FILE, "take", src.dtype), n, src, runtime.layout_arg(sl.shape, sl.strides, sl.offset, "take"),
                   index, out, runtime.i64(n), runtime.i64(sl.numel), runtime.error_buffer())


@kernels.register("put", "cuda")
def put(dst, dl, index, values, accumulate):
    n = index.size
    _check_index(index, "put")
    if values.size < n or values.dtype != dst.dtype:
        raise ValueError(f"put: values buffer of {values.size} {values.dtype} elements cannot give {n} "
                         f"{dst.dtype}")
    runtime.launch(kernel(FILE, "put", dst.dtype), n, dst, runtime.layout_arg(dl.shape, dl.strides, dl.offset, "put"),
                   index, values, runtime.i32(bool(accumulate)), runtime.i64(n), runtime.i64(dl.numel),
                   runtime.error_buffer())


@kernels.register("check_index", "cuda")
def check_index(index, size, stride, wrap, out):
    n = index.size
    _check_index(index, "check_index")
    if out.size < n or out.dtype != np.int64:
        raise ValueError(f"check_index: output buffer of {out.size} {out.dtype} elements cannot hold {n} int64")
    runtime.launch(kernel(FILE, "check_index"), n, index, runtime.i64(size), runtime.i64(stride),
                   runtime.i32(bool(wrap)), out,
                   runtime.i64(n), runtime.error_buffer())


@kernels.register("nonzero", "cuda")
def nonzero(x, xl):
    """Count, scan, write; the total's copy to the host is the one wait (the output's size
    depends on the data)."""
    rt = runtime.get()
    runtime.refuse_during_capture("nonzero", "its output's size depends on the data, read by the host")
    n = xl.numel
    if n == 0:
        return rt.xp.empty(0, np.int64)
    layout = runtime.layout_arg(xl.shape, xl.strides, xl.offset, "nonzero")
    tiles = (n + runtime.BLOCK - 1) // runtime.BLOCK
    counts = rt.xp.empty(tiles, np.int64)
    offsets = rt.xp.empty(tiles + 1, np.int64)
    runtime.launch_rows(kernel(FILE, "nonzero_count", x.dtype, "nonzero"), tiles, x, layout, runtime.i64(n), counts)
    runtime.launch_rows(kernel(FILE, "exclusive_scan_i64"), 1, counts, runtime.i64(tiles), offsets, block=1024)
    total = int(rt.to_numpy(offsets[tiles:])[0])
    out = rt.xp.empty(total, np.int64)
    if total:
        runtime.launch_rows(kernel(FILE, "nonzero_write", x.dtype, "nonzero"), tiles, x, layout, runtime.i64(n),
                            offsets, out)
    return out
