"""Elementwise primitives on the GPU: unary, binary, compare, where, copy (csrc/elementwise.cu)."""
from ... import kernels
from .. import runtime
from .common import codes, joint_layouts, kernel, suffix

UNARY_CODE, BINARY_CODE, COMPARE_CODE = codes(kernels.UNARY_OPS), codes(kernels.BINARY_OPS), codes(kernels.COMPARE_OPS)

FILE = "elementwise"


@kernels.register("unary", "cuda")
def unary(op, x, xl, out, ol):
    if ol.numel:
        xs, os = joint_layouts(ol, xl, op="unary")
        runtime.launch(kernel(FILE, "unary", x.dtype), ol.numel, runtime.i32(UNARY_CODE[op]), x, xs, out, os,
                       runtime.i64(ol.numel))


@kernels.register("binary", "cuda")
def binary(op, a, al, b, bl, out, ol):
    if ol.numel:
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
    if dl.numel:
        ss, ds = joint_layouts(dl, sl, op="copy")
        name = f"copy_{suffix(src.dtype, 'copy')}_{suffix(dst.dtype, 'copy')}"
        runtime.launch(runtime.module(FILE)(name), dl.numel, src, ss, dst, ds, runtime.i64(dl.numel))

