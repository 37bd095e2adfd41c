"""Elementwise primitives on the CPU: unary, binary, compare, where and copy.

These wrappers turn layouts into the flat arguments of the kernels in ``jit/elementwise.py``:
operands that read as one packed (or broadcast-scalar) run take the unit-stride
fast path; everything else (offsets, negative or zero strides) is collapsed to
as few dims as possible and takes the general strided loop.
"""
import numpy as np

from ... import _bfloat16 as bfloat16
from ... import kernels
from ...layout import Layout, collapse
from .jit.elementwise import (
    binary_parallel,
    binary_serial,
    compare_parallel,
    compare_serial,
    copy_parallel,
    copy_serial,
    unary_parallel,
    unary_serial,
    where_parallel,
    where_serial,
)
from .memory import numpy_view
from . import strided
from .strided import i64, launch, work_items

UNARY_CODE, BINARY_CODE, COMPARE_CODE = (kernels.OP_CODES[f] for f in ("unary", "binary", "compare"))


# ----------------------------------------------------------------------------- registered wrappers
_UNIT = i64([1])
_ZERO = i64([0])
_flat_shapes: dict = {}


def flat_shape(n):
    """(shape array, work items) for a packed run of n elements."""
    got = _flat_shapes.get(n)
    if got is None:
        if len(_flat_shapes) > 1024:
            _flat_shapes.clear()
        got = _flat_shapes[n] = (i64([n]), work_items((n,)))
    return got


def _flat_stride(layout):
    """Stride array when the operand reads as one flat run (packed: 1, broadcast scalar: 0), else None."""
    if layout.is_contiguous:
        return _UNIT
    if not any(layout.strides):
        return _ZERO
    return None


def _plan(out_layout, *layouts):
    """Collapse operands jointly: (shape array, (offset, stride array) per operand, work items)."""
    shape, strides = collapse(out_layout.shape, *(l.strides for l in layouts), out_layout.strides)
    args = []
    for layout, st in zip((*layouts, out_layout), strides):
        args.append((layout.offset, i64(st)))
    return i64(shape), args, work_items(shape)


@kernels.register("unary")
def unary(op, x, xl, out, ol):
    n = ol.numel
    if n == 0:
        return
    if xl.is_contiguous and ol.is_contiguous:
        shape, items = flat_shape(n)
        launch(unary_serial, unary_parallel, n, UNARY_CODE[op], x, xl.offset, _UNIT, out, ol.offset, _UNIT,
               shape, items)
        return
    shape, ((xo, xs), (oo, os)), items = _plan(ol, xl)
    launch(unary_serial, unary_parallel, n, UNARY_CODE[op], x, xo, xs, out, oo, os, shape, items)


@kernels.register("binary")
def binary(op, a, al, b, bl, out, ol):
    n = ol.numel
    if n == 0:
        return
    sa = _UNIT if al.is_contiguous else _flat_stride(al)  # (the packed case first: no call)
    sb = _UNIT if bl.is_contiguous else _flat_stride(bl)
    if sa is not None and sb is not None and ol.is_contiguous:
        shape, items = flat_shape(n)
        if n < strided.PARALLEL_MIN:  # the common small case, without launch's indirection
            binary_serial(BINARY_CODE[op], a, al.offset, sa, b, bl.offset, sb, out, ol.offset, _UNIT, shape, items)
        else:
            launch(binary_serial, binary_parallel, n, BINARY_CODE[op], a, al.offset, sa, b, bl.offset, sb, out,
                   ol.offset, _UNIT, shape, items)
        return
    shape, ((ao, as_), (bo, bs), (oo, os)), items = _plan(ol, al, bl)
    launch(binary_serial, binary_parallel, n, BINARY_CODE[op], a, ao, as_, b, bo, bs, out, oo, os, shape, items)


@kernels.register("compare")
def compare(op, a, al, b, bl, out, ol):
    if ol.numel == 0:
        return
    shape, ((ao, as_), (bo, bs), (oo, os)), items = _plan(ol, al, bl)
    launch(compare_serial, compare_parallel, ol.numel, COMPARE_CODE[op], a, ao, as_, b, bo, bs, out, oo, os,
           shape, items)


@kernels.register("where")
def where(c, cl, a, al, b, bl, out, ol):
    if ol.numel == 0:
        return
    shape, ((co, cs), (ao, as_), (bo, bs), (oo, os)), items = _plan(ol, cl, al, bl)
    launch(where_serial, where_parallel, ol.numel, c, co, cs, a, ao, as_, b, bo, bs, out, oo, os, shape, items)


@kernels.register("copy")
def copy(src, sl, dst, dl):
    """Strided copy with dtype conversion (float to integer by the rule in ``jit._convert``).
    float16, unknown to Numba on the CPU, converts through numpy: to it, and from it to floats, IEEE
    rounding; from it to integers and bfloat16, by way of float32 (exact) and the kernel. bfloat16
    (uint16 bits) is the kernel's own."""
    if dl.numel == 0:
        return
    if dst.dtype == np.float16 or (src.dtype == np.float16 and dst.dtype.kind == "f"):
        values = numpy_view(src, sl)
        with np.errstate(over="ignore", invalid="ignore"):  # beyond 65504 is inf, as IEEE says
            numpy_view(dst, dl)[...] = bfloat16.to_float32(values) if src.dtype == bfloat16.BITS else values
        return
    if src.dtype == np.float16:
        src, sl = numpy_view(src, sl).astype(np.float32).reshape(-1), Layout(sl.shape)
    if dst.dtype == np.bool_ and src.dtype != np.bool_:
        src = (src & 0x7FFF) != 0 if src.dtype == bfloat16.BITS else src != 0  # -0.0 is False
    flat = _flat_stride(sl)
    if flat is not None and dl.is_contiguous:
        shape, items = flat_shape(dl.numel)
        launch(copy_serial, copy_parallel, dl.numel, src, sl.offset, flat, dst, dl.offset, _UNIT, shape, items)
        return
    shape, ((so, ss), (do, ds)), items = _plan(dl, sl)
    launch(copy_serial, copy_parallel, dl.numel, src, so, ss, dst, do, ds, shape, items)
