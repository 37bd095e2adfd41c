"""Pieces every CUDA wrapper uses: kernel names per dtype and layouts as kernel arguments."""
import numpy as np

from ...layout import collapse
from .. import runtime

SUFFIX = {np.dtype(np.bool_): "b8", np.dtype(np.uint8): "u8", np.dtype(np.int16): "i16",
          np.dtype(np.int32): "i32", np.dtype(np.int64): "i64", np.dtype(np.float16): "f16",
          np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}


def codes(names) -> dict:
    """Op name -> the code the kernels switch on: its position in minidl.kernels' tuple."""
    return {name: i for i, name in enumerate(names)}


def suffix(dtype, op: str) -> str:
    try:
        return SUFFIX[np.dtype(dtype)]
    except KeyError:
        raise TypeError(f"{op}: no CUDA kernel for dtype {np.dtype(dtype).name}") from None


def kernel(file: str, name: str, dtype=None, op: str = None):
    """The compiled kernel ``name`` (with the dtype's suffix when a dtype is given) of csrc/<file>.cu."""
    if dtype is not None:
        name = f"{name}_{suffix(dtype, op or name)}"
    return runtime.module(file)(name)


def joint_layouts(out_layout, *layouts, op: str):
    """Layout structs for operands that share ``out_layout``'s shape, with dims merged where all
    operands allow it (fewer dims: cheaper index math in every thread)."""
    shape, strides = collapse(out_layout.shape, *(l.strides for l in layouts), out_layout.strides)
    return [runtime.layout_arg(shape, st, l.offset, op) for l, st in zip((*layouts, out_layout), strides)]
