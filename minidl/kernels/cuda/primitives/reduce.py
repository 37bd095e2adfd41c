"""Reductions, arg reductions and scans on the GPU (csrc/reduce.cu), and argsort (csrc/sort.cu).

A reduction is (outputs x reduced extent) after ``layout.reduction_plan``. The threads of a block
run along whichever of the two is the fastest in memory, so that warps read consecutive elements;
when the outputs are too few to fill the GPU, each one's extent is split over several blocks whose
partials (in 64 bits) a second launch of the same kernel reduces. argsort sorts rows of up to
TILE elements in shared memory and merges sorted tiles of longer rows through scratch buffers.
"""
import math

import numpy as np

from .... import kernels
from ....layout import Layout, collapse, contiguous_strides, reduction_plan
from .. import runtime
from .common import FLOATS, kernel, require_dtype, suffix
from .elementwise import copy

REDUCIBLE = (*FLOATS, np.dtype(np.int64))  # the dtypes reduce.cu and sort.cu are compiled for
FILE = "reduce"
THREADS = 256           # REDUCE_THREADS in reduce.cu
MIN_PER_LANE = 16       # a split leaves each thread at least this many elements of its chunk
WARP_SCAN_MAX = 512     # scan rows up to this long get a warp each, longer ones a block
TILE = 2048             # argsort rows up to this long sort in shared memory, longer ones merge tiles
REDUCE_CODE, ARG_CODE, SCAN_CODE = (kernels.OP_CODES[f] for f in ("reduce", "arg_reduce", "scan"))
WIDE = {np.dtype(np.float32): np.dtype(np.float64)}  # partials of float32 sums and products


def _pow2(n: int) -> int:
    """The smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(int(n) - 1, 0).bit_length()


def _tiling(o_shape, o_strides, i_shape, i_strides):
    """(outputs, extent, chunks, chunk, outputs per block, columns) for the kernels' Tiling."""
    outputs, extent = math.prod(o_shape), math.prod(i_shape)
    columns = outputs > 1 and abs(o_strides[-1]) < abs(i_strides[-1])
    if columns:  # a warp's threads on up to 32 adjacent outputs; the rest of the block splits the extent
        lanes = min(THREADS // min(32, _pow2(outputs)), _pow2(extent))
    else:
        lanes = min(THREADS, _pow2(extent))
    per_block = THREADS // lanes
    tiles = -(-outputs // per_block)
    room = runtime.get().max_blocks // tiles
    chunks, chunk = 1, extent
    if room >= 2 and extent >= 2 * MIN_PER_LANE * lanes:
        chunk = -(-extent // min(room, extent // (MIN_PER_LANE * lanes)))
        chunk = -(-chunk // lanes) * lanes
        chunks = -(-extent // chunk)
    return outputs, extent, chunks, chunk, per_block, columns


def _launch(name, x, op_code, first, outer, inner, tiling, *last):
    outputs, extent, chunks, chunk, per_block, columns = tiling
    runtime.launch_rows(kernel(FILE, name), -(-outputs // per_block) * chunks, runtime.i32(op_code), x,
                        *first, runtime.layout_arg(*outer), runtime.layout_arg(*inner), runtime.i64(outputs),
                        runtime.i64(extent), runtime.i64(chunks), runtime.i64(chunk), runtime.i32(per_block),
                        runtime.i32(columns), *last, block=THREADS)


def _packed(outputs, chunks):
    """outer and inner (shape, strides, offset) of a packed (outputs, chunks) partials buffer."""
    return ((outputs,), (chunks,), 0), ((chunks,), (1,), 0)


def _reduce(op, x, outer, inner, out):
    tiling = _tiling(outer[0], outer[1], inner[0], inner[1])
    outputs, chunks = tiling[0], tiling[2]
    if chunks == 1:
        name = f"reduce_{suffix(x.dtype, 'reduce')}_{suffix(out.dtype, 'reduce')}"
        _launch(name, x, REDUCE_CODE[op], (), outer, inner, tiling, out)
        return
    partial = runtime.get().xp.empty(outputs * chunks, WIDE.get(x.dtype, x.dtype))
    name = f"reduce_{suffix(x.dtype, 'reduce')}_{suffix(partial.dtype, 'reduce')}"
    _launch(name, x, REDUCE_CODE[op], (), outer, inner, tiling, partial)
    _reduce(op, partial, *_packed(outputs, chunks), out)


@kernels.register("reduce", "cuda")
def reduce(op, x, xl, dims, out):
    require_dtype(x.dtype, REDUCIBLE, "reduce")
    o_shape, o_strides, i_shape, i_strides = reduction_plan(xl, dims)
    outputs = math.prod(o_shape)
    if out.size != outputs or out.dtype != x.dtype:
        raise ValueError(f"reduce: expected a {x.dtype} output of {outputs} elements, got {out.size} {out.dtype}")
    if outputs == 0:
        return
    if xl.numel == 0:
        out[...] = 0 if op == "sum" else 1
        return
    _reduce(op, x, (o_shape, o_strides, xl.offset), (i_shape, i_strides, 0), out)


def _arg_reduce(op, x, x_indices, outer, inner, out):
    tiling = _tiling(outer[0], outer[1], inner[0], inner[1])
    outputs, chunks = tiling[0], tiling[2]
    name = f"arg_reduce_{suffix(x.dtype, 'arg_reduce')}"
    if chunks == 1:
        _launch(name, x, ARG_CODE[op], (x_indices,), outer, inner, tiling, runtime.NULL, out)
        return
    xp = runtime.get().xp
    values, indices = xp.empty(outputs * chunks, x.dtype), xp.empty(outputs * chunks, np.int64)
    _launch(name, x, ARG_CODE[op], (x_indices,), outer, inner, tiling, values, indices)
    _arg_reduce(op, values, indices, *_packed(outputs, chunks), out)


@kernels.register("arg_reduce", "cuda")
def arg_reduce(op, x, xl, dim, out):
    require_dtype(x.dtype, REDUCIBLE, "arg_reduce")
    kept = [d for d in range(xl.ndim) if d != dim]
    o_shape, (o_strides,) = collapse([xl.shape[d] for d in kept], [xl.strides[d] for d in kept])
    outputs = math.prod(o_shape)
    if out.size != outputs or out.dtype != np.int64:
        raise ValueError(f"arg_reduce: expected an int64 output of {outputs} elements, got {out.size} {out.dtype}")
    if outputs == 0:
        return
    if xl.shape[dim] == 0:
        raise ValueError(f"arg_reduce: {op} of an empty dim {dim}")
    _arg_reduce(op, x, runtime.NULL, (o_shape, o_strides, xl.offset), ((xl.shape[dim],), (xl.strides[dim],), 0), out)


@kernels.register("scan", "cuda")
def scan(op, x, xl, dim, out, ol):
    require_dtype(x.dtype, REDUCIBLE, "scan")
    if tuple(ol.shape) != tuple(xl.shape) or out.dtype != x.dtype:
        raise ValueError(f"scan: the output ({tuple(ol.shape)}, {out.dtype}) does not match the input "
                         f"({tuple(xl.shape)}, {x.dtype})")
    kept = [d for d in range(xl.ndim) if d != dim]
    o_shape, (xs, os) = collapse([xl.shape[d] for d in kept], [xl.strides[d] for d in kept],
                                 [ol.strides[d] for d in kept])
    rows, n = math.prod(o_shape), xl.shape[dim]
    if rows == 0 or n == 0:
        return
    if rows >= THREADS and abs(xs[-1]) < abs(xl.strides[dim]) and (n <= THREADS or rows >= 64 * THREADS):
        # a thread per row: neighbouring rows are adjacent (coalesced), but each thread walks its
        # row serially, so only for short rows or enough rows to fill a GPU
        mode, launch = 2, runtime.launch
    elif n <= WARP_SCAN_MAX:
        mode, launch, rows_per_block = 1, runtime.launch_rows, THREADS // 32
    else:
        mode, launch, rows_per_block = 0, runtime.launch_rows, 1
    items = rows if mode == 2 else -(-rows // rows_per_block)
    launch(kernel(FILE, "scan", x.dtype), items, runtime.i32(SCAN_CODE[op]), x,
           runtime.layout_arg(o_shape, xs, xl.offset, "scan"), runtime.i64(xl.strides[dim]), out,
           runtime.layout_arg(o_shape, os, ol.offset, "scan"), runtime.i64(ol.strides[dim]), runtime.i64(rows),
           runtime.i64(n), runtime.i32(mode), block=THREADS)


@kernels.register("argsort", "cuda")
def argsort(x, xl, dim, descending, out):
    require_dtype(x.dtype, REDUCIBLE, "argsort")
    if not 0 <= dim < xl.ndim:
        raise ValueError(f"argsort: dim {dim} is out of range for a {xl.ndim}-D layout")
    if xl.numel == 0:
        return
    if out.size != xl.numel or out.dtype != np.int64:
        raise ValueError(f"argsort: expected an int64 output of {xl.numel} elements, got {out.size} {out.dtype}")
    n, kept, o_strides = xl.shape[dim], [d for d in range(xl.ndim) if d != dim], contiguous_strides(xl.shape)
    o_shape, (xs, os) = collapse([xl.shape[d] for d in kept], [xl.strides[d] for d in kept],
                                 [o_strides[d] for d in kept])
    rows, tile = xl.numel // n, TILE
    slots = _pow2(min(n, tile))
    per_block = max(1, 2 * THREADS // slots)
    tiles_kernel = kernel("sort", "argsort_tiles", x.dtype, "argsort")
    sort_args = (x, runtime.layout_arg(o_shape, xs, xl.offset, "argsort"), runtime.i64(xl.strides[dim]),
                 runtime.i64(n), runtime.i64(tile), runtime.i32(slots), runtime.i32(bool(descending)))
    out_args = (runtime.layout_arg(o_shape, os, 0, "argsort"), runtime.i64(o_strides[dim]), runtime.i64(rows))
    segments = rows * -(-n // tile)
    launch = dict(block=THREADS, shared_mem=per_block * slots * (x.itemsize + 4))
    if n <= tile:
        runtime.launch_rows(tiles_kernel, -(-segments // per_block), *sort_args, runtime.NULL, runtime.NULL, out,
                            *out_args, **launch)
        return
    xp = runtime.get().xp
    keys = [xp.empty(xl.numel, x.dtype) for _ in range(2)]
    order = [xp.empty(xl.numel, np.int64) for _ in range(2)]
    runtime.launch_rows(tiles_kernel, -(-segments // per_block), *sort_args, keys[0], order[0], runtime.NULL, *out_args,
                        **launch)
    merge = kernel("sort", "argsort_merge", x.dtype, "argsort")
    width, now = tile, 0
    while width < n:
        runtime.launch(merge, xl.numel, keys[now], order[now], keys[1 - now], order[1 - now], runtime.i64(rows),
                       runtime.i64(n), runtime.i64(width), runtime.i32(bool(descending)))
        width, now = 2 * width, 1 - now
    shape = tuple(o_shape) + (n,)
    copy(order[now], Layout(shape), out, Layout(shape, tuple(os) + (o_strides[dim],)))
