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

    def gradients(self) -> list:
        """Each parameter's gradient: a view of ``buffer()`` in the parameter's shape."""
        return _views(self.flat, self._params)


def _views(flat, params) -> list:
    views, start = [], 0
    for p in params:
        views.append(flat[start:start + p.numel()].view(tuple(p.shape)))
        start += p.numel()
    return views


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


def hook_with_zero_step(hook, ddp, zero, shard_buckets: bool = False):
    """``hook`` (the reduction: allreduce_hook, say) followed, as each bucket's reduced gradients are collected,
    by ``zero``'s step of that bucket on the rank that owns it; after the last bucket every rank's share is
    broadcast (torch's ddp_zero_hook). ``zero``: a ZeroRedundancyOptimizer(..., overlap_with_ddp=True) over
    ``ddp``'s parameters. ``shard_buckets=True`` (a bucket split over ranks) is not supported."""
    if shard_buckets:
        raise NotImplementedError("hook_with_zero_step: shard_buckets=True is not supported (each bucket is "
                                  "stepped whole by one rank)")
    if not getattr(zero, "_overlap_with_ddp", False):
        raise ValueError("hook_with_zero_step: needs a ZeroRedundancyOptimizer built with overlap_with_ddp=True")
    buckets = [b.params for b in ddp.reducer.buckets]
    zero._assign_buckets(buckets)

    def with_zero_step(state, bucket: GradBucket) -> Future:
        def step(reduced):
            flat = reduced.value()
            zero._step_bucket(bucket.index(), bucket.parameters(), _views(flat.reshape(-1), bucket.parameters()))
            if bucket.index() == len(buckets) - 1:
                zero._send_shares()
            return flat
        return hook(state, bucket).then(step)
    return with_zero_step
