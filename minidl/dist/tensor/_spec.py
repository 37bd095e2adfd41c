"""What a DTensor is besides its local piece: the mesh, a placement per mesh dimension and the global shape."""
from __future__ import annotations

import dataclasses

from . import _strided
from .placement_types import Placement, Replicate, Shard, _is_shard_like, _on_dim


@dataclasses.dataclass(frozen=True)
class DTensorSpec:
    mesh: object            # the DeviceMesh
    placements: tuple
    shape: tuple            # the global tensor's

    def with_placements(self, placements) -> "DTensorSpec":
        return dataclasses.replace(self, placements=tuple(placements))

    def local_shape(self) -> tuple:
        return self.local_box()[0]

    def local_box(self) -> tuple:
        """(shape, offsets) of this rank's piece in the global tensor: each Shard splits, in mesh-dimension
        order, what the ones before left of its tensor dimension (``chunk``'s sizes); a rank outside the mesh
        holds nothing. With a _StridedShard: the count and first of its rows (``_strided.py``), which need not
        be consecutive (``local_boxes``)."""
        coordinate = self.mesh.get_coordinate()
        if coordinate is None:
            return (0,) * len(self.shape), (0,) * len(self.shape)
        if _strided.strided(self.placements):
            return _strided.box(self.shape, self.placements, self.mesh.shape, coordinate)
        shape, offsets = list(self.shape), [0] * len(self.shape)
        for d, p in enumerate(self.placements):
            if p.is_shard():
                size, start = Shard.local_shard_size_and_offset(shape[p.dim], self.mesh.size(d), coordinate[d])
                shape[p.dim], offsets[p.dim] = size, offsets[p.dim] + start
        return tuple(shape), tuple(offsets)

    def local_boxes(self) -> list:
        """[(global offsets, offsets in the piece, sizes)]: the boxes of the global tensor this rank's piece is
        made of — the one box, or, where a _StridedShard leaves its rows in runs, a box per run."""
        coordinate = self.mesh.get_coordinate()
        if coordinate is not None and _strided.strided(self.placements):
            return _strided.boxes(self.shape, self.placements, self.mesh.shape, coordinate)
        shape, offsets = self.local_box()
        return [(offsets, (0,) * len(shape), shape)]


def normalized(placements, mesh, ndim: int, what: str) -> tuple:
    """``placements`` checked against the mesh and the tensor (torch's messages), shard dims made positive;
    all Replicate where None."""
    if placements is None:
        return (Replicate(),) * mesh.ndim
    placements = tuple(placements)
    if len(placements) != mesh.ndim:
        raise ValueError(f"`placements` must have the same length as `device_mesh.ndim`! Found placements "
                         f"length: {len(placements)}, and device_mesh.ndim: {mesh.ndim}.")
    out = []
    for p in placements:
        if not isinstance(p, Placement):
            raise TypeError(f"{what}: placements must be Shard, Replicate or Partial, got {p!r}")
        if _is_shard_like(p):
            if not -ndim <= p.dim < max(ndim, 1) or ndim == 0:
                raise IndexError(f"Dimension out of range (expected to be in range of [{-ndim}, {ndim - 1}], but "
                                 f"got {p.dim})")
            p = _on_dim(p, p.dim % ndim)
        out.append(p)
    return tuple(out)
