"""Reduction, scan and sort primitives on the CPU (kernels in ``jit/reduce.py`` and ``jit/sort.py``).

``layout.reduction_plan`` splits the input into kept (outer) dims and reduced
(inner) dims; each outer element is one independent reduction, spread over
threads with ``prange``. Sums and products accumulate in 64 bits.
"""
import numpy as np

from ... import kernels
from ...layout import collapse, contiguous_strides, reduction_plan
from .elementwise import flat_shape
from .jit.reduce import (arg_reduce_kernel, reduce_parallel, reduce_serial, scan_kernel, sum_columns_parallel,
                         sum_columns_serial)
from .jit.sort import argsort_parallel, argsort_serial
from .strided import i64, launch, work_items

REDUCE_CODE, ARG_CODE, SCAN_CODE = (kernels.OP_CODES[f] for f in ("reduce", "arg_reduce", "scan"))


_UNIT = i64([1])


def _outer(shape, strides):
    """Outer dims as arrays, plus a trailing size-1 dim so that ``row_position`` (which skips
    the last dim) walks every outer dim."""
    return i64(tuple(shape) + (1,)), i64(tuple(strides) + (0,))


_WHOLE = _outer((1,), (0,))


@kernels.register("reduce")
def reduce(op, x, xl, dims, out):
    if out.size == 0:
        return
    if xl.numel == 0:
        out[:] = 0 if op == "sum" else 1
        return
    # sums and products accumulate in 64 bits of the input's kind
    init = (np.int64 if x.dtype == np.int64 else np.float64)(0 if op == "sum" else 1)
    if len(dims) == xl.ndim and xl.is_contiguous:
        ishape, istrides = flat_shape(xl.numel)[0], _UNIT
        oshape, ostrides = _WHOLE
    else:
        o_shape, o_strides, i_shape, i_strides = reduction_plan(xl, dims)
        if op == "sum" and o_strides == (1,):  # kept elements packed: add whole rows
            ishape, istrides = _outer(i_shape, i_strides)
            launch(sum_columns_serial, sum_columns_parallel, xl.numel, x, xl.offset, ishape, istrides, init,
                   out, work_items((out.size,)))
            return
        oshape, ostrides = _outer(o_shape, o_strides)
        ishape, istrides = i64(i_shape), i64(i_strides)
    # one output element is one thread's work: a full reduction runs serially
    launch(reduce_serial, reduce_parallel, xl.numel if out.size > 1 else 0, REDUCE_CODE[op], x, xl.offset,
           oshape, ostrides, ishape, istrides, init, out)


@kernels.register("arg_reduce")
def arg_reduce(op, x, xl, dim, out):
    kept = [d for d in range(xl.ndim) if d != dim]
    o_shape, (o_strides,) = collapse([xl.shape[d] for d in kept], [xl.strides[d] for d in kept])
    if out.size == 0:
        return
    oshape, ostrides = _outer(o_shape, o_strides)
    arg_reduce_kernel(ARG_CODE[op], x, xl.offset, oshape, ostrides, xl.shape[dim], xl.strides[dim], out)


@kernels.register("scan")
def scan(op, x, xl, dim, out, ol):
    kept = [d for d in range(xl.ndim) if d != dim]
    o_shape, (xs, os) = collapse([xl.shape[d] for d in kept], [xl.strides[d] for d in kept],
                                 [ol.strides[d] for d in kept])
    if ol.numel == 0:
        return
    oshape, xstrides = _outer(o_shape, xs)
    _, ostrides = _outer(o_shape, os)
    scan_kernel(SCAN_CODE[op], x, xl.offset, xstrides, out, ol.offset, ostrides, oshape, xl.shape[dim],
                xl.strides[dim], ol.strides[dim])


@kernels.register("argsort")
def argsort(x, xl, dim, descending, out):
    if not 0 <= dim < xl.ndim:
        raise ValueError(f"argsort: dim {dim} is out of range for a {xl.ndim}-D layout")
    n = xl.shape[dim]
    if xl.numel == 0:
        return
    if out.size != xl.numel or out.dtype != np.int64:
        raise ValueError(f"argsort: expected an int64 output of {xl.numel} elements, got {out.size} {out.dtype}")
    kept = [d for d in range(xl.ndim) if d != dim]
    o_strides = contiguous_strides(xl.shape)
    o_shape, (xs, os) = collapse([xl.shape[d] for d in kept], [xl.strides[d] for d in kept],
                                 [o_strides[d] for d in kept])
    oshape, xstrides = _outer(o_shape, xs)
    _, ostrides = _outer(o_shape, os)
    launch(argsort_serial, argsort_parallel, xl.numel if xl.numel > n else 0, x, xl.offset, oshape, xstrides,
           out, ostrides, n, xl.strides[dim], o_strides[dim], bool(descending))
