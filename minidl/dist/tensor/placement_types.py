"""How a global tensor lies over one dimension of a device mesh (OneFlow's SBP, torch's placements):

- ``Shard(dim)``: split along tensor dimension ``dim`` as ``chunk`` splits it (ceil(n / k) rows each; the last
  ranks may hold fewer, or none);
- ``Replicate()``: every rank holds all of it;
- ``Partial(reduce_op)``: every rank holds a part, and the tensor is their reduction ("sum", "avg", "max", "min");
- ``_StridedShard(dim, split_factor=f)``: torch's private placement for a dimension that later mesh dimensions split
  first (FSDP2 over tensor parallelism): each of f chunks of the dimension is split as a Shard splits it, and a
  rank holds its piece of each, joined (``_strided.py`` says how it nests with the others).

Placements are values: equal when of the same kind with the same argument, printed as S(0), R, P(sum), _S(0, 2).
"""
from __future__ import annotations

import functools

import numpy as np

__all__ = ["Placement", "Shard", "Replicate", "Partial"]


class Placement:
    """The kind of a placement; ``Shard``, ``Replicate`` and ``Partial`` are its kinds (and torch's private
    ``_StridedShard``)."""

    __slots__ = ()

    def is_shard(self, dim=None) -> bool:
        return False

    def is_replicate(self) -> bool:
        return False

    def is_partial(self) -> bool:
        return False

    def _key(self) -> tuple:
        return (type(self).__name__,)

    def __setattr__(self, name, value):
        raise AttributeError(f"placements are values: {name!r} of {self!r} cannot be set")

    def __reduce__(self):   # (pickled as its class and its key's values: __setattr__ refuses the default way)
        return type(self), self._key()[1:]

    def __eq__(self, other):
        return isinstance(other, Placement) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())


class Shard(Placement):
    __slots__ = ("_dim",)

    def __init__(self, dim: int):
        object.__setattr__(self, "_dim", int(dim))

    @property
    def dim(self) -> int:
        return self._dim

    def is_shard(self, dim=None) -> bool:
        return dim is None or dim == self._dim

    def _key(self) -> tuple:
        return ("Shard", self._dim)

    def __repr__(self):
        return f"Shard(dim={self._dim})"

    def __str__(self):
        return f"S({self._dim})"

    @staticmethod
    def local_shard_size_and_offset(curr_local_size: int, num_chunks: int, rank: int) -> tuple:
        """(rows, first row) of chunk ``rank`` of ``curr_local_size`` rows in ``num_chunks`` chunks, as
        ``chunk``: ceil(n / k) rows each, the last ones shorter or empty (offset n then)."""
        step = -(-curr_local_size // num_chunks)
        start = min(rank * step, curr_local_size)
        return min(step, curr_local_size - start), start


class Replicate(Placement):
    __slots__ = ()

    def is_replicate(self) -> bool:
        return True

    def __repr__(self):
        return "Replicate()"

    def __str__(self):
        return "R"


class Partial(Placement):
    __slots__ = ("_reduce_op",)
    ALL_REDUCE_OPS = ("sum", "avg", "min", "max")
    LINEAR_REDUCE_OPS = ("sum", "avg")

    def __init__(self, reduce_op: str = "sum"):
        if reduce_op not in self.ALL_REDUCE_OPS:
            raise ValueError(f"Partial: reduce_op must be one of {self.ALL_REDUCE_OPS}, got {reduce_op!r}")
        object.__setattr__(self, "_reduce_op", reduce_op)

    @property
    def reduce_op(self) -> str:
        return self._reduce_op

    def is_partial(self) -> bool:
        return True

    def _key(self) -> tuple:
        return ("Partial", self._reduce_op)

    def __repr__(self):
        return f"Partial({self._reduce_op})"

    def __str__(self):
        return f"P({self._reduce_op})"


class _StridedShard(Placement):
    """Not a ``Shard`` (nor ``is_shard()``), as torch 2.13's is not: code that reads a Shard's rows as one
    contiguous chunk would misread it; ``_is_shard_like`` asks for either."""

    __slots__ = ("_dim", "_split_factor")

    def __init__(self, dim: int, *, split_factor: int = 1, sf=None):
        if sf is not None:
            if split_factor != 1:
                raise TypeError("_StridedShard received both split_factor and sf")
            split_factor = sf
        if int(split_factor) < 1:
            raise ValueError(f"_StridedShard: split_factor must be at least 1, got {split_factor}")
        object.__setattr__(self, "_dim", int(dim))
        object.__setattr__(self, "_split_factor", int(split_factor))

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def split_factor(self) -> int:
        return self._split_factor

    def __reduce__(self):
        return functools.partial(type(self), split_factor=self._split_factor), (self._dim,)

    def _key(self) -> tuple:
        return ("_StridedShard", self._dim, self._split_factor)

    def __repr__(self):
        return f"_StridedShard(dim={self._dim}, sf={self._split_factor})"

    def __str__(self):
        return f"_S({self._dim}, {self._split_factor})"

    def _split(self, indices, num_chunks: int, rank: int):
        """The part of ``indices`` (an index array) that chunk ``rank`` of ``num_chunks`` keeps: its piece, by
        chunk's rule, of each of the ``split_factor`` chunks of ``indices``, joined."""
        return np.concatenate([_chunk(part, num_chunks, rank) for part in
                               (_chunk(indices, self._split_factor, j) for j in range(self._split_factor))])

    def local_shard_size_and_offset(self, curr_local_size: int, num_chunks: int, rank: int) -> tuple:
        """(rows, first row, or -1 where there is none) of chunk ``rank`` of ``curr_local_size`` rows, as torch's."""
        held = self._split(np.arange(curr_local_size), num_chunks, rank)
        return len(held), int(held[0]) if len(held) else -1


def _chunk(indices, num_chunks: int, rank: int):
    size, start = Shard.local_shard_size_and_offset(len(indices), num_chunks, rank)
    return indices[start:start + size]


def _is_shard_like(p) -> bool:
    """A Shard or a _StridedShard: a placement that splits tensor dimension ``p.dim`` (torch's name)."""
    return isinstance(p, (Shard, _StridedShard))


def _on_dim(p, dim: int):
    """Shard-like ``p`` splitting tensor dimension ``dim`` instead (a view or a reduction renumbers them)."""
    return _StridedShard(dim, split_factor=p.split_factor) if isinstance(p, _StridedShard) else Shard(dim)
