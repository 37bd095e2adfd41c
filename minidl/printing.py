"""A PyTorch-like repr: ``tensor([[1., 2.], [3., 4.]], requires_grad=True)``."""
from __future__ import annotations

import numpy as np

from . import _dtype as dt


def _format_array(array: np.ndarray) -> str:
    options = dict(separator=", ", prefix="tensor(", threshold=1000, edgeitems=3, max_line_width=80)
    if array.dtype.kind == "f":
        finite = array[np.isfinite(array)]
        whole = finite.size == 0 or bool(np.all(finite == np.round(finite)))
        big = finite.size and (np.abs(finite).max() >= 1e8 or (np.abs(finite[finite != 0]).min(initial=1) < 1e-4))
        if whole and not big:
            return np.array2string(array, floatmode="unique", **options)
        if big:
            return np.array2string(array, formatter={"float_kind": lambda v: f"{v:.4e}"}, **options)
        return np.array2string(array, precision=4, floatmode="fixed", **options)
    if array.dtype == np.bool_:
        width = 5 if not array.all() else 4   # PyTorch pads True to False's width: [ True, False]
        return np.array2string(array, formatter={"bool": lambda v: ("True" if v else "False").rjust(width)},
                               **options)
    return np.array2string(array, **options)


def tensor_repr(t, in_sparse=False) -> str:
    """``in_sparse``: as the indices or values of a sparse tensor's repr, which names the dtype
    and device once itself and gives every empty part its size."""
    if t.device.type == "meta":
        return _meta_repr(t)
    array = t._host_values()
    body = _format_array(array.astype(np.float32) if array.dtype == np.float16 else array)
    if t.numel() == 0:
        body = "[]" if t.ndim == 1 else body
    extras = []
    if t.device.type != "cpu" and not in_sparse:
        extras.append(f"device='{t.device}'")
    default = {dt.get_default_dtype(), dt.int64, dt.bool_}
    if not in_sparse and (t.dtype not in default or t.numel() == 0 and t.dtype is not dt.get_default_dtype()):
        extras.append(f"dtype=minidl.{t.dtype.name}")
    if t.numel() == 0 and (t.ndim != 1 or in_sparse):
        extras.insert(0, f"size={tuple(t.shape)}")
    return "tensor(" + ", ".join([body] + extras + _autograd(t)) + ")"


def _meta_repr(t) -> str:
    """torch's: no values to show, the size and any dtype but the default one instead."""
    extras = ["device='meta'", f"size={tuple(t.shape)}"]
    if t.dtype is not dt.get_default_dtype():
        extras.append(f"dtype=minidl.{t.dtype.name}")
    return "tensor(" + ", ".join(["..."] + extras + _autograd(t)) + ")"


def _autograd(t) -> list:
    if t.grad_fn is not None:
        return [f"grad_fn=<{t.grad_fn.name()}>"]
    return ["requires_grad=True"] if t.requires_grad else []
