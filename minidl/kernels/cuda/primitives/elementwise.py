"""Elementwise primitives on the GPU: unary, binary, compare, where, copy (csrc/elementwise.cu)."""
from .... import kernels
from .. import runtime
from .common import joint_layouts, kernel, suffix

UNARY_CODE, BINARY_CODE, COMPARE_CODE = (kernels.OP_CODES[f] for f in ("unary", "binary", "compare"))

FILE = "elementwise"


def _run_stride(layout):
    """1 for a packed operand, 0 for a broadcast scalar, None otherwise: operands that are all
    runs take the packed kernels (no index math, several loads in flight per thread)."""
    if layout.is_contiguous:
        return 1
    return None if any(layout.strides) else 0


@kernels.register("unary", "cuda")
def unary(op, x, xl, out, ol):
    if ol.numel and xl.is_contiguous and ol.is_contiguous:
        runtime.launch(kernel(FILE, "unary_packed", x.dtype), ol.numel, runtime.i32(UNARY_CODE[op]), x,
                       runtime.i64(xl.offset), out, runtime.i64(ol.offset), runtime.i64(ol.numel))
    elif ol.numel:
        xs, os = joint_layouts(ol, xl, op="unary")
        runtime.launch(kernel(FILE, "unary", x.dtype), ol.numel, runtime.i32(UNARY_CODE[op]), x, xs, out, os,
                       runtime.i64(ol.numel))


@kernels.register("binary", "cuda")
def binary(op, a, al, b, bl, out, ol):
    sa, sb = _run_stride(al), _run_stride(bl)
    if ol.numel and sa is not None and sb is not None and ol.is_contiguous:
        runtime.launch(kernel(FILE, "binary_packed", a.dtype), ol.numel, runtime.i32(BINARY_CODE[op]), a,
                       runtime.i64(al.offset), runtime.i64(sa), b, runtime.i64(bl.offset), runtime.i64(sb), out,
                       runtime.i64(ol.offset), runtime.i64(ol.numel))
    elif ol.numel:
        as_, bs, os = joint_layouts(ol, al, bl, op="binary")
        runtime.launch(kernel(FILE, "binary", a.dtype), ol.numel, runtime.i32(BINARY_CODE[op]), a, as_, b, bs,
                       out, os, runtime.i64(ol.numel))


@kernels.register("compare", "cuda")
def compare(op, a, al, b, bl, out, ol):
    if ol.numel:
        as_, bs, os = joint_layouts(ol, al, bl, op="compare")
        runtime.launch(kernel(FILE, "compare", a.dtype), ol.numel, runtime.i32(COMPARE_CODE[op]), a, as_, b,
                       bs, out, os, runtime.i64(ol.numel))


@kernels.register("where", "cuda")
def where(c, cl, a, al, b, bl, out, ol):
    if ol.numel:
        cs, as_, bs, os = joint_layouts(ol, cl, al, bl, op="where")
        runtime.launch(kernel(FILE, "where", a.dtype), ol.numel, c, cs, a, as_, b, bs, out, os,
                       runtime.i64(ol.numel))


@kernels.register("copy", "cuda")
def copy(src, sl, dst, dl):
    ss = _run_stride(sl)
    if dl.numel and ss is not None and dl.is_contiguous:
        name = f"copy_packed_{suffix(src.dtype, 'copy')}_{suffix(dst.dtype, 'copy')}"
        runtime.launch(kernel(FILE, name), dl.numel, src, runtime.i64(sl.offset), runtime.i64(ss), dst,
                       runtime.i64(dl.offset), runtime.i64(dl.numel))
    elif dl.numel:
        ss, ds = joint_layouts(dl, sl, op="copy")
        name = f"copy_{suffix(src.dtype, 'copy')}_{suffix(dst.dtype, 'copy')}"
        runtime.launch(kernel(FILE, name), dl.numel, src, ss, dst, ds, runtime.i64(dl.numel))

