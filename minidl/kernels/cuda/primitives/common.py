"""Pieces every CUDA wrapper uses: kernel names per dtype and layouts as kernel arguments."""
import numpy as np

from ....layout import collapse
from ...checks import FLOATS  # noqa: F401 (the launch wrappers' dtype checks)
from .. import runtime

SUFFIX = {np.dtype(np.bool_): "b8", np.dtype(np.uint8): "u8", np.dtype(np.int16): "i16",
          np.dtype(np.int32): "i32", np.dtype(np.int64): "i64", np.dtype(np.float16): "f16",
          np.dtype(np.uint16): "bf16",  # bfloat16's bits (minidl/_bfloat16.py)
          np.dtype(np.float32): "f32", np.dtype(np.float64): "f64"}


def suffix(dtype, op: str) -> str:
    try:
        return SUFFIX[np.dtype(dtype)]
    except KeyError:
        raise TypeError(f"{op}: no CUDA kernel for dtype {np.dtype(dtype).name}") from None



def require_dtype(dtype, allowed, op: str) -> None:
    """For kernels compiled for some dtypes only: a clear error for the others."""
    if np.dtype(dtype) not in allowed:
        raise TypeError(f"{op}: no CUDA kernel for dtype {np.dtype(dtype).name} "
                        f"({', '.join(d.name for d in allowed)} only)")


_kernels: dict = {}
_joint: dict = {}


def kernel(file: str, name: str, dtype=None, op: str = None):
    """The compiled kernel ``name`` (with the dtype's suffix when a dtype is given) of csrc/<file>.cu.
    Memoised: every launch asks, and on a GPU the Python around a launch is most of its cost."""
    key = (runtime.get(), file, name, dtype)
    found = _kernels.get(key)
    if found is None:
        full = name if dtype is None else f"{name}_{suffix(dtype, op or name)}"
        found = _kernels[key] = runtime.module(file)(full)
    return found


def joint_layouts(out_layout, *layouts, op: str):
    """Layout structs for operands that share ``out_layout``'s shape, with dims merged where all
    operands allow it (fewer dims: cheaper index math in every thread). Memoised by the layouts
    (shapes repeat step after step); the structs are read-only, so they are shared."""
    key = (out_layout.shape, out_layout.strides, out_layout.offset, *((l.strides, l.offset) for l in layouts))
    found = _joint.get(key)
    if found is None:
        shape, strides = collapse(out_layout.shape, *(l.strides for l in layouts), out_layout.strides)
        found = [runtime.layout_arg(shape, st, l.offset, op) for l, st in zip((*layouts, out_layout), strides)]
        if len(_joint) > 4096:
            _joint.clear()
        _joint[key] = found
    return found
