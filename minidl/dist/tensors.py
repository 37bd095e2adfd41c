"""Tensors as the flat buffers the algorithms work on, and back: 1-D arrays of the tensor's
device (numpy on the CPU, cupy on a GPU), which the backend of that device moves.

A contiguous tensor is used in place (a slice of its storage); a non-contiguous one goes
through a contiguous copy on its device that is copied back. A write bumps the
tensor's version counter, as an in-place op does, so autograd notices a changed saved tensor.
"""
from __future__ import annotations

from .. import _tensor, no_grad
from ..kernels.cuda import runtime
from ..ops.core import contiguous_data, packed_buffer
from .communicators import TENSOR_DEVICE


def check_tensor(t, what: str, backend: str, name: str = "tensor"):
    """``t`` is a tensor on the device ``backend`` (the group's) moves."""
    if not isinstance(t, _tensor.Tensor):
        raise TypeError(f"{what}: {name} must be a minidl tensor, got {type(t).__name__}")
    wanted = TENSOR_DEVICE.get(backend, "cpu")
    if t.device.type != wanted and not _simulated_cuda(backend, t):
        raise RuntimeError(f"{what}: {name} is on {t.device}; the {backend} backend handles {wanted} tensors "
                           f"(use backend='nccl' for CUDA tensors, 'mpi' for CPU tensors)")
    return t


def _simulated_cuda(backend, t) -> bool:
    """The sim world moves host arrays, and CUDA tensors of the CUDA simulator are host arrays: so
    DDP and the collectives run on 'cuda' tensors in tests without a GPU."""
    if backend != "sim" or t.device.type != "cuda":
        return False
    return runtime.available() and runtime.get().name == "sim"


def check_tensor_list(ts, what: str, backend: str, name: str, length: int):
    if not isinstance(ts, (list, tuple)) or len(ts) != length:
        got = f"{len(ts)} entries" if isinstance(ts, (list, tuple)) else type(ts).__name__
        raise ValueError(f"{what}: {name} must be a list of {length} tensors (the group size), got {got}")
    for i, t in enumerate(ts):
        check_tensor(t, what, backend, f"{name}[{i}]")
    return ts


def check_like(t, ref, what: str, name: str, ref_name: str):
    if tuple(t.shape) != tuple(ref.shape) or t.dtype is not ref.dtype:
        raise ValueError(f"{what}: {name} has shape {tuple(t.shape)} and dtype {t.dtype.name}, but {ref_name} "
                         f"has shape {tuple(ref.shape)} and dtype {ref.dtype.name}; they must match")


def read(t):
    """The tensor's elements as a contiguous 1-D array of its device (its memory when it is contiguous)."""
    return packed_buffer(t)


class Writable:
    """A tensor's elements as a contiguous 1-D ``array`` a collective may write; ``commit()``
    makes the writes the tensor's."""

    __slots__ = ("tensor", "staged", "array")

    def __init__(self, t, what: str):
        if not t._storage.writable:
            raise RuntimeError(f"{what}: the tensor's memory is read-only")
        self.tensor, self.staged = t, contiguous_data(t)  # t itself when contiguous
        self.array = packed_buffer(self.staged)

    def commit(self) -> None:
        t = self.tensor
        if self.staged is t:
            t._bump_version()
        else:
            with no_grad():
                t.copy_(self.staged)  # bumps the version itself
