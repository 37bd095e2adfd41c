"""A differentiable all-reduce of each rank's local value over some mesh dimensions, for the rules whose local
function makes a whole from the pieces itself (loss_parallel's cross-entropy, the norm of a split tensor)."""
from __future__ import annotations

from ..placement_types import Partial, Replicate


def reduced(value, mesh, dims, op="sum"):
    """``value`` (a plain tensor) combined by ``op`` ("sum", "max", "min") over the ranks of mesh dimensions
    ``dims``: the same on every rank. Its gradient reaches every rank's value whole (a partial sum's)."""
    from .._api import DTensor
    if not dims:
        return value
    placed = tuple(Partial(op) if d in dims else Replicate() for d in range(mesh.ndim))
    return DTensor.from_local(value, mesh, placed).redistribute(placements=(Replicate(),) * mesh.ndim).to_local()
