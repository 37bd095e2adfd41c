"""DDP communication hooks (torch's ddp_comm_hooks.default_hooks): ``hook(state, bucket)``
starts reducing ``bucket.buffer()`` and returns a Future whose value is the averaged buffer.
``state`` is the process group to use (None: the default group), as in torch."""
from __future__ import annotations

from .. import float16, no_grad
from .collectives import all_reduce_buffer
from .reduce_op import ReduceOp
from .state import get_world_size
from .tensors import read
from .work import Future


class GradBucket:
    """One bucket of gradients as a communication hook sees it: ``buffer()`` is the flat tensor
    (sharing the bucket's memory), ``parameters()`` the parameters in it, ``index()`` its number
    (bucket 0 holds the last parameters, whose gradients are ready first)."""

    def __init__(self, index, flat, params):
        self._index, self.flat, self._params = index, flat, params

    def index(self) -> int:
        return self._index

    def buffer(self):
        return self.flat

    @property
    def array(self):
        """The flat buffer of the tensor's device (numpy on the CPU): what the collectives reduce."""
        return read(self.flat)

    def parameters(self) -> list:
        return list(self._params)


def allreduce_hook(process_group, bucket: GradBucket) -> Future:
    """The default: average the bucket across ranks (ReduceOp.AVG on the communication thread)."""
    work = all_reduce_buffer(bucket.array, ReduceOp.AVG, process_group, async_op=True)
    return Future(work, bucket.buffer)


def fp16_compress_hook(process_group, bucket: GradBucket) -> Future:
    """Halve the bytes sent: divide by the world size, all-reduce in float16, cast back."""
    size = get_world_size(process_group)
    with no_grad():
        half = (bucket.buffer() / size).to(float16)  # a fresh packed tensor: read() is its memory
    work = all_reduce_buffer(read(half), ReduceOp.SUM, process_group, async_op=True)

    def decompress():
        with no_grad():
            bucket.buffer().copy_(half)
        return bucket.buffer()
    return Future(work, decompress)
