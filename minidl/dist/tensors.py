"""Tensors as the flat numpy buffers the algorithms work on, and back.

A contiguous CPU tensor is used in place (``t.detach().numpy()`` shares its memory); a
non-contiguous one goes through a contiguous copy that is copied back. A write bumps the
tensor's version counter, as an in-place op does, so autograd notices a changed saved tensor.
"""
from __future__ import annotations

import numpy as np

from .. import _tensor, no_grad
from ..ops.creation import from_numpy


def check_tensor(t, what: str, name: str = "tensor"):
    if not isinstance(t, _tensor.Tensor):
        raise TypeError(f"{what}: {name} must be a minidl tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise RuntimeError(f"{what}: {name} is on {t.device}; this backend handles CPU tensors")
    return t


def check_tensor_list(ts, what: str, name: str, length: int):
    if not isinstance(ts, (list, tuple)) or len(ts) != length:
        got = f"{len(ts)} entries" if isinstance(ts, (list, tuple)) else type(ts).__name__
        raise ValueError(f"{what}: {name} must be a list of {length} tensors (the group size), got {got}")
    for i, t in enumerate(ts):
        check_tensor(t, what, f"{name}[{i}]")
    return ts


def check_like(t, ref, what: str, name: str, ref_name: str):
    if tuple(t.shape) != tuple(ref.shape) or t.dtype is not ref.dtype:
        raise ValueError(f"{what}: {name} has shape {tuple(t.shape)} and dtype {t.dtype.name}, but {ref_name} "
                         f"has shape {tuple(ref.shape)} and dtype {ref.dtype.name}; they must match")


def read(t) -> np.ndarray:
    """The tensor's elements as a contiguous 1-D array (its memory when it is contiguous)."""
    return np.ascontiguousarray(t.detach().numpy()).reshape(-1)


class Writable:
    """A tensor's elements as a contiguous 1-D ``array`` a collective may write; ``commit()``
    makes the writes the tensor's."""

    __slots__ = ("tensor", "copied", "array")

    def __init__(self, t, what: str):
        layout = t._layout
        self.tensor, self.copied = t, not layout.is_contiguous
        if self.copied:
            self.array = np.ascontiguousarray(t.detach().numpy()).reshape(-1)
        else:  # the storage's own elements: a slice, not a strided view of a detached alias
            self.array = t._storage.buf[layout.offset:layout.offset + layout.numel]
        if not t._storage.writable:
            raise RuntimeError(f"{what}: the tensor's memory is read-only")

    def commit(self) -> None:
        t = self.tensor
        if self.copied:
            with no_grad():
                t.copy_(from_numpy(self.array.reshape(tuple(t.shape))))  # bumps the version itself
        else:
            t._bump_version()
