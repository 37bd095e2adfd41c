"""DistributedDataParallel: a Module wrapping ``module`` (so its state_dict keys carry the
``module.`` prefix) that keeps the replicas identical — rank 0's parameters and buffers are
broadcast at construction, buffers again at every forward — and averages gradients across
ranks during backward (see reducer.py for how communication overlaps the backward).
"""
from __future__ import annotations

import contextlib
import os

from .. import cat, device as Device, is_grad_enabled, no_grad
from ..nn.module import Module
from ..nn.sparse import Embedding
from .collectives import broadcast
from .reducer import Reducer
from .state import resolve
from .tensor._api import DTensor


def _broadcast_coalesced(tensors, group, src):
    """Broadcast ``tensors`` from ``src``, one collective per dtype and device (not one per tensor)."""
    by_kind = {}
    for t in tensors:
        by_kind.setdefault((t.dtype, t.device), []).append(t)
    for same in by_kind.values():
        with no_grad():
            flat = cat([t.detach().reshape(-1) for t in same])
        broadcast(flat, src, group)
        start = 0
        with no_grad():
            for t in same:
                t.copy_(flat[start:start + t.numel()].reshape(tuple(t.shape)))
                start += t.numel()


def local_piece(t):
    """The tensor DDP replicates: a DTensor's local piece (tensor parallelism inside each replica; the replicas
    hold the same pieces), else the tensor."""
    return t._local_tensor if isinstance(t, DTensor) else t


def _check_device_ids(module, device_ids, output_device):
    """As in torch: a module on one device; device_ids=[that device] (an int means a GPU) or None."""
    devices = {p.device for p in module.parameters()}
    if len(devices) > 1:
        raise ValueError(f"DistributedDataParallel: the module's parameters are on several devices "
                         f"({sorted(map(str, devices))}); put it on one device per process")
    ids = [] if device_ids is None else list(device_ids) if isinstance(device_ids, (list, tuple)) else [device_ids]
    if len(ids) > 1:
        raise ValueError(f"DistributedDataParallel: device_ids={device_ids!r}: one device per process")
    for name, d in [("device_ids", i) for i in ids] + [("output_device", output_device)]:
        if d is None or not devices:
            continue
        wanted = Device(d)  # an int is a CUDA index, as in PyTorch
        if wanted not in devices:
            raise ValueError(f"DistributedDataParallel: {name} names {wanted}, but the module is on "
                             f"{next(iter(devices))}; move it there first (module.to({str(wanted)!r}))")


def _tensors_in(output):
    if hasattr(output, "grad_fn"):
        return [output]
    if isinstance(output, dict):
        output = list(output.values())
    if isinstance(output, (list, tuple)):
        return [t for o in output for t in _tensors_in(o)]
    return []


class DistributedDataParallel(Module):
    """torch.nn.parallel.DistributedDataParallel (a module on one device per process). minidl additions (keyword
    only): ``timeline=True`` (or env MINIDL_DDP_TIMELINE=1) records, per backward, when each
    bucket's all-reduce was launched and finished (``ddp.timeline``, seconds from backward's start).
    ``device_mesh``: a 1-D mesh whose group the replicas form (torch's); a module whose parameters are DTensors
    (tensor parallel inside each replica) has their local pieces replicated and their gradients averaged.
    fp16 compression is a communication hook, as in torch:
    ``ddp.register_comm_hook(None, minidl.dist.ddp_comm_hooks.fp16_compress_hook)``."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=True,
                 process_group=None, bucket_cap_mb=25, find_unused_parameters=False, gradient_as_bucket_view=False,
                 static_graph=False, *, device_mesh=None, timeline=None):
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel: module must be a minidl.nn.Module, got {type(module).__name__}")
        _check_device_ids(module, device_ids, output_device)
        if bucket_cap_mb is None or bucket_cap_mb <= 0:
            raise ValueError(f"DistributedDataParallel: bucket_cap_mb must be positive, got {bucket_cap_mb}")
        if device_mesh is not None:
            if process_group is not None or device_mesh.ndim != 1:
                raise RuntimeError("DistributedDataParallel: pass either process_group or a 1-D device_mesh, got "
                                   f"{'both' if process_group is not None else device_mesh}")
            process_group = device_mesh.get_group()
        group = resolve(process_group, "DistributedDataParallel")
        if group is None:
            raise ValueError("DistributedDataParallel: this rank is not a member of process_group")
        self.module, self.process_group, self.dim = module, group, dim
        self.broadcast_buffers, self.require_backward_grad_sync = broadcast_buffers, True
        self._src = group.ranks[0]
        named = [(n, local_piece(p)) for n, p in module.named_parameters() if p.requires_grad]
        if not named:
            raise RuntimeError("DistributedDataParallel: the module has no parameter that requires a gradient")
        _broadcast_coalesced([local_piece(p) for p in module.parameters()] + [local_piece(b) for b in module.buffers()], group,
                             self._src)
        if timeline is None:
            timeline = os.environ.get("MINIDL_DDP_TIMELINE", "0") not in ("", "0")
        sparse = {id(m.weight) for m in module.modules() if isinstance(m, Embedding) and m.sparse}  # (as torch)
        self.reducer = Reducer([p for _, p in named if id(p) not in sparse], {id(p): n for n, p in named}, group,
                               int(bucket_cap_mb * 1024 * 1024), find_unused_parameters, static_graph,
                               gradient_as_bucket_view, timeline, [p for _, p in named if id(p) in sparse])

    def forward(self, *inputs, **kwargs):
        if self.broadcast_buffers and self.training:
            buffers = [local_piece(b) for b in self.module.buffers()]
            if buffers:
                _broadcast_coalesced(buffers, self.process_group, self._src)
        output = self.module(*inputs, **kwargs)
        self.reducer.prepare(_tensors_in(output), self.require_backward_grad_sync and is_grad_enabled())
        return output

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside keep their gradients local (accumulating in ``.grad``); the first
        backward after it reduces the accumulated sum."""
        previous, self.require_backward_grad_sync = self.require_backward_grad_sync, False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous

    def register_comm_hook(self, state, hook):
        """``hook(state, bucket)`` -> a Future-like (``wait()`` returns the reduced bucket tensor)
        replaces the default averaging all-reduce; see minidl.dist.ddp_comm_hooks."""
        self.reducer.register_comm_hook(state, hook)

    @property
    def timeline(self) -> list:
        """The last synced backward: a ``backward`` entry, then one per bucket (start/end in seconds)."""
        return self.reducer.timeline
