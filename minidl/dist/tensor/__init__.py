"""minidl.dist.tensor: global tensors over a device mesh, torch.distributed.tensor's API (part 1).

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    w = distribute_tensor(weight, mesh, [Replicate(), Shard(0)])   # rows split over tp, the same on each dp
    w.redistribute(placements=[Replicate(), Replicate()]).to_local()   # the whole weight again

Placements (``placement_types.py``), the spec of a global tensor (``_spec.py``), the collectives each
transition picks (``_redistribute.py``) and the DTensor itself (``_api.py``). Factories make each rank's piece
only (rand and randn draw the whole and distribute the first mesh rank's, so every placement shows one tensor).
"""
from __future__ import annotations

from ... import _layouts
from ...ops import creation
from ._api import DTensor, distribute_tensor
from ._module import distribute_module
from ._spec import DTensorSpec, normalized
from .placement_types import Partial, Placement, Replicate, Shard, _StridedShard  # noqa: F401  (torch's, private)
from . import _rules  # noqa: F401  (the ops' sharding rules, attached to the registry)
from ...ops import overrides

overrides.register(DTensor)

__all__ = ["DTensor", "distribute_tensor", "distribute_module", "Shard", "Replicate", "Partial", "Placement",
           "ones", "empty", "full", "rand", "randn", "zeros"]


def _shape_and_mesh(size, device_mesh) -> tuple:
    """(the shape ``size`` gives, as ``zeros(2, 3)`` or ``zeros((2, 3))``; the mesh, or the default one)."""
    from ._api import _default_mesh
    shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)
    return tuple(int(s) for s in shape), device_mesh or _default_mesh(None)


def _made(fill, size, dtype, requires_grad, device_mesh, placements, what) -> DTensor:
    shape, mesh = _shape_and_mesh(size, device_mesh)
    spec = DTensorSpec(mesh, normalized(placements, mesh, len(shape), what), shape)
    local = fill(spec.local_shape(), dtype=dtype, device=mesh.device_type)
    return DTensor(local.requires_grad_(requires_grad), spec)


def zeros(*size, requires_grad=False, dtype=None, layout=_layouts.strided, device_mesh=None, placements=None):
    return _made(creation.zeros, size, dtype, requires_grad, device_mesh, placements, "zeros")


def ones(*size, requires_grad=False, dtype=None, layout=_layouts.strided, device_mesh=None, placements=None):
    return _made(creation.ones, size, dtype, requires_grad, device_mesh, placements, "ones")


def empty(*size, requires_grad=False, dtype=None, layout=_layouts.strided, device_mesh=None, placements=None):
    return _made(creation.empty, size, dtype, requires_grad, device_mesh, placements, "empty")


def full(size, fill_value, *, dtype=None, layout=_layouts.strided, requires_grad=False, device_mesh=None,
         placements=None):
    return _made(lambda shape, dtype, device: creation.full(shape, fill_value, dtype=dtype, device=device),
                 (size,), dtype, requires_grad, device_mesh, placements, "full")


def _random(draw, size, requires_grad, dtype, device_mesh, placements, what) -> DTensor:
    shape, mesh = _shape_and_mesh(size, device_mesh)
    whole = draw(*shape, dtype=dtype, device=mesh.device_type)
    made = distribute_tensor(whole, mesh, normalized(placements, mesh, len(shape), what), src_data_rank=0)
    return made.requires_grad_(requires_grad)


def rand(*size, requires_grad=False, dtype=None, layout=_layouts.strided, device_mesh=None, placements=None):
    return _random(creation.rand, size, requires_grad, dtype, device_mesh, placements, "rand")


def randn(*size, requires_grad=False, dtype=None, layout=_layouts.strided, device_mesh=None, placements=None):
    return _random(creation.randn, size, requires_grad, dtype, device_mesh, placements, "randn")
