"""In-place fills of DTensors, random ones drawing what the whole tensor would draw.

A model initialised shard by shard (built on the meta device, sharded, then ``reset_parameters()``) must get the
single process's numbers under the same seed, without any rank holding a whole parameter. minidl's random
primitive is counter-based (Philox: element i of a draw from state (seed, offset) depends on offset + i only), so
each rank claims the whole tensor's count from its generator — every rank's generator moves alike — and draws
each contiguous run of its piece at that run's place in the whole tensor's row-major order.
"""
from __future__ import annotations

from ...autograd.grad_mode import no_grad
from ...ops.creation import empty
from ...ops.random import Generator, device_generator


def fill_random_(d, method: str, a: float, b: float, generator=None):
    """``d.<method>(a, b)`` (uniform_ or normal_) for a DTensor: each piece gets the whole draw's values there."""
    from ..checkpoint.slices import runs   # (the box index math; checkpoint imports DTensor, so not at the top)
    local = _checked(d, method)
    if local.is_meta or d.numel() == 0:
        return d   # (a meta tensor draws nothing and moves no generator, as a plain meta tensor)
    seed, offset = (generator or device_generator(local.device)).claim(d.numel())
    shape = tuple(d.shape)
    with no_grad():
        for global_offsets, at, sizes in d._spec.local_boxes():
            values, filled = empty(sizes, dtype=local.dtype, device=local.device).reshape(-1), 0
            for start, length in runs((0,) * len(shape), shape, global_offsets, sizes):
                run = values[filled:filled + length]
                getattr(run, method)(a, b, generator=Generator.at(local.device, seed, offset + start))
                filled += length
            local[tuple(slice(o, o + n) for o, n in zip(at, sizes))].copy_(values.reshape(sizes))
    return d


def fill_(d, value):
    """Every element ``value``: each piece filled."""
    with no_grad():
        _checked(d, "fill_").fill_(value)
    return d


def zero_(d):
    return fill_(d, 0.0)


def _checked(d, method):
    if any(p.is_partial() for p in d.placements):
        raise RuntimeError(f"DTensor.{method}: the DTensor is a partial value ({d.placements}); redistribute it to "
                           f"Shard/Replicate placements first")
    return d._local_tensor
