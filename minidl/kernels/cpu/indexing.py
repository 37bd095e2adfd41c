"""Gather/scatter primitives on the CPU over flat (row-major) element indices (kernels in ``jit/indexing.py``).

Every indexing op in ``minidl/ops/indexing.py`` reduces to these: the op turns
its index expression into flat indices of the source's logical shape, and the
kernel maps each flat index through the source layout to a buffer position.
The kernels check each flat index against the source's element count (Numba does not check
bounds) and the wrappers raise IndexError at once, before put writes anything.
"""
import numpy as np

from ... import kernels
from .jit.indexing import check_index_kernel, nonzero_kernel, put_kernel, take_parallel, take_serial
from .strided import i64, launch


def _raise_out_of_range(index, n):
    bad = index[(index < 0) | (index >= n)][0]
    raise IndexError(f"index {bad} is out of bounds for dimension with size {n}")


@kernels.register("take")
def take(src, sl, index, out):
    if index.size and launch(take_serial, take_parallel, index.size, src, sl.offset, i64(sl.shape), i64(sl.strides),
                             sl.numel, index, out):
        _raise_out_of_range(index, sl.numel)


@kernels.register("put")
def put(dst, dl, index, values, accumulate):
    if index.size and put_kernel(dst, dl.offset, i64(dl.shape), i64(dl.strides), dl.numel, index, values,
                                 accumulate):
        _raise_out_of_range(index, dl.numel)


@kernels.register("check_index")
def check_index(index, size, stride, wrap, out):
    bad = check_index_kernel(index, size, stride, bool(wrap), out) if index.size else -1
    if bad >= 0:
        raise IndexError(f"index {index[bad]} is out of bounds for dimension with size {size}")


@kernels.register("nonzero")
def nonzero(x, xl):
    if xl.numel == 0:
        return np.empty(0, np.int64)
    return nonzero_kernel(x, xl.offset, i64(xl.shape), i64(xl.strides), xl.numel)
