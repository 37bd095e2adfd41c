"""A device mesh: the ranks laid out as an n-dimensional array, with a process group along each dimension.

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))   # ranks [[0, 1], [2, 3]]
    mesh["tp"].get_group()    # this rank's row: the ranks that differ from it in the tp coordinate only

A rank's coordinate is its position in the array; the group of dimension d holds the ranks that share every
coordinate but the d-th, in the order of that coordinate (so a group rank is the coordinate: a shard's index).
Every rank of the world makes every mesh (the groups are made by one split of the world per dimension), as
torch's, which also allows a mesh smaller than the world: the ranks outside it have no coordinate.
"""
from __future__ import annotations

import numpy as np

from . import state as dist_state

__all__ = ["DeviceMesh", "init_device_mesh"]


class DeviceMesh:
    """``mesh``: the ranks' array (nested lists, a numpy array or a tensor of ints)."""

    def __init__(self, device_type: str, mesh, *, mesh_dim_names=None, _groups=None):
        ranks = np.array(mesh.tolist() if hasattr(mesh, "tolist") else mesh, dtype=np.int64)
        world = dist_state.get_world_size()
        if ranks.size > world:
            raise RuntimeError(f"Mesh should not be bigger than default world size {world}, but found "
                               f"{ranks.size} ranks!")
        flat = ranks.ravel().tolist()
        if len(set(flat)) != len(flat) or any(not 0 <= r < world for r in flat):
            raise ValueError(f"DeviceMesh: the mesh must hold distinct ranks of the world (0..{world - 1}), "
                             f"got {ranks.tolist()}")
        names = None if mesh_dim_names is None else tuple(mesh_dim_names)
        if names is not None and len(names) != ranks.ndim:
            raise RuntimeError(f"mesh_shape and mesh_dim_names should have same length! Found "
                               f"len(mesh_dim_names): {len(names)} and len(mesh_shape):{ranks.ndim}.")
        if names is not None and len(set(names)) != len(names):
            raise RuntimeError(f"Each mesh_dim_name must be unique. Found repeated mesh_dim_name in "
                               f"mesh_dim_names {names}")
        self.device_type, self.mesh_dim_names, self._ranks = device_type, names, ranks
        me = dist_state.get_rank()
        found = np.argwhere(ranks == me)
        self._coordinate = tuple(int(c) for c in found[0]) if len(found) else None
        self._groups = _groups if _groups is not None else [self._make_group(d) for d in range(ranks.ndim)]
        self._root, self._root_dims = self, tuple(range(ranks.ndim))   # (a sub-mesh: the mesh it was cut from)

    def _make_group(self, dim: int):
        """The group along ``dim`` holding this rank (every rank of the world takes part in its split)."""
        if self._coordinate is None:
            row = None
        else:
            index = list(self._coordinate)
            index[dim] = slice(None)
            row = self._ranks[tuple(index)].tolist()
        return dist_state._subgroup(dist_state.resolve(None, "DeviceMesh"), row)

    # -- what torch's DeviceMesh answers ----------------------------------------------------------
    @property
    def mesh(self):
        """The ranks' array, as a tensor."""
        from ..ops.creation import tensor
        return tensor(self._ranks.tolist())

    @property
    def ndim(self) -> int:
        return self._ranks.ndim

    @property
    def shape(self) -> tuple:
        return tuple(self._ranks.shape)

    def size(self, mesh_dim=None) -> int:
        return int(self._ranks.size) if mesh_dim is None else self.shape[self._dim(mesh_dim)]

    def get_rank(self) -> int:
        """This process's rank in the world."""
        return dist_state.get_rank()

    def get_coordinate(self):
        """This rank's index along each dimension, or None where it is outside the mesh."""
        return self._coordinate

    def get_local_rank(self, mesh_dim=None) -> int:
        """This rank's coordinate along ``mesh_dim`` (its rank in that dimension's group)."""
        dim = self._dim(mesh_dim, "get_local_rank")
        if self._coordinate is None:
            raise RuntimeError(f"DeviceMesh.get_local_rank: rank {self.get_rank()} is not in the mesh "
                               f"{self._ranks.tolist()}")
        return self._coordinate[dim]

    def get_group(self, mesh_dim=None):
        """The process group along ``mesh_dim`` (a name or an index; may be left out on a 1-D mesh)."""
        return self._groups[self._dim(mesh_dim, "get_group")]

    def get_all_groups(self) -> list:
        return list(self._groups)

    def _dim(self, mesh_dim, what=None) -> int:
        if mesh_dim is None:
            if self.ndim > 1 and what is not None:
                hint = (" If you want to get the list of all the ProcessGroups in the DeviceMesh, please use "
                        "`get_all_groups()` instead." if what == "get_group" else "")
                raise RuntimeError(f"Found the DeviceMesh have {self.ndim} dimensions. Optional kwarg `mesh_dim` "
                                   f"needs to be specified when device_mesh.ndim > 1.{hint}")
            return 0
        if isinstance(mesh_dim, str):
            if self.mesh_dim_names is None or mesh_dim not in self.mesh_dim_names:
                raise KeyError(f"Mesh dimension '{mesh_dim}' does not exist. Available mesh dimensions are: "
                               f"mesh_dim_names={self.mesh_dim_names}")
            return self.mesh_dim_names.index(mesh_dim)
        if not -self.ndim <= mesh_dim < self.ndim:
            raise IndexError(f"DeviceMesh: mesh_dim {mesh_dim} is out of range for a mesh of {self.ndim} "
                             f"dimension(s)")
        return mesh_dim % self.ndim

    def __getitem__(self, names) -> "DeviceMesh":
        """The sub-mesh of this rank along the named dimensions (in the mesh's order), with their groups."""
        if self.mesh_dim_names is None:
            raise RuntimeError("Cannot slice a DeviceMesh without mesh_dim_names!")
        names = (names,) if isinstance(names, str) else tuple(names)
        if any(n not in self.mesh_dim_names for n in names):
            raise KeyError(f"Invalid mesh_dim_names {names} specified. Valid mesh_dim_names are "
                           f"{list(self.mesh_dim_names)}.")
        dims = [self.mesh_dim_names.index(n) for n in names]
        if dims != sorted(dims) or len(set(dims)) != len(dims):
            raise KeyError(f"Invalid mesh_dim_names {names} specified. Mesh dim indices should be in ascending "
                           f"order.")
        if self._coordinate is None:
            raise RuntimeError(f"DeviceMesh: rank {self.get_rank()} is not in the mesh {self._ranks.tolist()}, "
                               f"so it has no sub-mesh along {names}")
        index = tuple(slice(None) if d in dims else c for d, c in enumerate(self._coordinate))
        sub = DeviceMesh(self.device_type, self._ranks[index], mesh_dim_names=names,
                         _groups=[self._groups[d] for d in dims])
        sub._root, sub._root_dims = self._root, tuple(self._root_dims[d] for d in dims)
        return sub

    def _with_root_dims(self, dims) -> "DeviceMesh":
        """The sub-mesh of this mesh's root along the root's dimensions ``dims`` (ascending)."""
        root = self._root
        if tuple(dims) == tuple(range(root.ndim)):
            return root
        return root[tuple(root.mesh_dim_names[d] for d in dims)]   # (a root that was cut has names)

    @staticmethod
    def from_group(group, device_type: str, mesh=None, *, mesh_dim_names=None) -> "DeviceMesh":
        """A mesh over existing groups: one group (a 1-D mesh of its ranks), or a list of groups, one per
        dimension of ``mesh`` (which is then required)."""
        groups = group if isinstance(group, (list, tuple)) else [group]
        groups = [dist_state.resolve(g, "DeviceMesh.from_group") for g in groups]
        if mesh is None:
            if len(groups) != 1:
                raise ValueError("DeviceMesh.from_group: a list of groups needs the mesh (the ranks' array) too")
            mesh = groups[0].ranks
        return DeviceMesh(device_type, mesh, mesh_dim_names=mesh_dim_names, _groups=groups)

    # -- identity ---------------------------------------------------------------------------------
    def __eq__(self, other):
        return (isinstance(other, DeviceMesh) and self.device_type == other.device_type
                and self.mesh_dim_names == other.mesh_dim_names and np.array_equal(self._ranks, other._ranks))

    def __hash__(self):
        return hash((self.device_type, self.mesh_dim_names, tuple(self._ranks.ravel().tolist()), self.shape))

    def __repr__(self):
        sizes = (", ".join(f"{n}={s}" for n, s in zip(self.mesh_dim_names, self.shape)) if self.mesh_dim_names
                 else ", ".join(str(s) for s in self.shape) + ("," if self.ndim == 1 else ""))
        strides = tuple(s // self._ranks.itemsize for s in np.ascontiguousarray(self._ranks).strides)
        return f"DeviceMesh(({sizes}), '{self.device_type}', stride={strides})"


def init_device_mesh(device_type: str, mesh_shape, *, mesh_dim_names=None, backend_override=None) -> DeviceMesh:
    """The mesh of ranks 0..n-1 in ``mesh_shape`` (row-major), a group per dimension. ``backend_override``
    may name only the default group's backend (minidl runs one backend per process)."""
    if ":" in str(device_type):
        raise RuntimeError(f"Device type with index is not supported but got {device_type}. If you maintained a "
                           f"'torch.device' object, it's recommended to pass in 'device.type'.")
    shape = tuple(int(s) for s in mesh_shape)
    if mesh_dim_names is not None and len(tuple(mesh_dim_names)) != len(shape):
        raise RuntimeError(f"mesh_shape and mesh_dim_names should have same length! Found len(mesh_dim_names): "
                           f"{len(tuple(mesh_dim_names))} and len(mesh_shape):{len(shape)}.")
    backend = dist_state.get_backend()
    wrong = {k: v for k, v in (backend_override or {}).items() if v != backend}
    if wrong:
        raise ValueError(f"init_device_mesh: backend_override {wrong}: minidl runs one backend per process, here "
                         f"{backend!r}")
    return DeviceMesh(device_type, np.arange(int(np.prod(shape))).reshape(shape), mesh_dim_names=mesh_dim_names)
