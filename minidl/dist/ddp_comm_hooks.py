"""DDP communication hooks (torch's ddp_comm_hooks.default_hooks): ``hook(state, bucket)``
starts reducing ``bucket.buffer()`` and returns a Future whose value is the averaged buffer.
``state`` is the process group to use (None: the default group), as in torch."""
from __future__ import annotations

import numpy as np

from ..ops.creation import from_numpy
from .collectives import all_reduce_buffer
from .reduce_op import ReduceOp
from .state import get_world_size
from .work import Future


class GradBucket:
    """One bucket of gradients as a communication hook sees it: ``buffer()`` is the flat tensor
    (sharing the bucket's memory), ``parameters()`` the parameters in it, ``index()`` its number
    (bucket 0 holds the last parameters, whose gradients are ready first)."""

    def __init__(self, index, array, params):
        self._index, self.array, self._params = index, array, params

    def index(self) -> int:
        return self._index

    def buffer(self):
        return from_numpy(self.array)

    def parameters(self) -> list:
        return list(self._params)


def allreduce_hook(process_group, bucket: GradBucket) -> Future:
    """The default: average the bucket across ranks (ReduceOp.AVG on the communication thread)."""
    work = all_reduce_buffer(bucket.array, ReduceOp.AVG, process_group, async_op=True)
    return Future(work, bucket.buffer)


def fp16_compress_hook(process_group, bucket: GradBucket) -> Future:
    """Halve the bytes sent: divide by the world size, all-reduce in float16, cast back."""
    size = get_world_size(process_group)
    half = (bucket.array / size).astype(np.float16)
    work = all_reduce_buffer(half, ReduceOp.SUM, process_group, async_op=True)

    def decompress():
        bucket.array[...] = half
        return bucket.buffer()
    return Future(work, decompress)
