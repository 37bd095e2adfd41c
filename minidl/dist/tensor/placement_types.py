"""How a global tensor lies over one dimension of a device mesh (OneFlow's SBP, torch's placements):

- ``Shard(dim)``: split along tensor dimension ``dim`` as ``chunk`` splits it (ceil(n / k) rows each; the last
  ranks may hold fewer, or none);
- ``Replicate()``: every rank holds all of it;
- ``Partial(reduce_op)``: every rank holds a part, and the tensor is their reduction ("sum", "avg", "max", "min").

Placements are values: equal when of the same kind with the same argument, printed as S(0), R, P(sum).
"""
from __future__ import annotations

__all__ = ["Placement", "Shard", "Replicate", "Partial"]


class Placement:
    """The kind of a placement; ``Shard``, ``Replicate`` and ``Partial`` are its kinds."""

    __slots__ = ()

    def is_shard(self, dim=None) -> bool:
        return False

    def is_replicate(self) -> bool:
        return False

    def is_partial(self) -> bool:
        return False

    def _key(self) -> tuple:
        return (type(self).__name__,)

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

    def __setattr__(self, name, value):
        raise AttributeError(f"placements are values: {name!r} of {self!r} cannot be set")

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

    def __setattr__(self, name, value):
        raise AttributeError(f"placements are values: {name!r} of {self!r} cannot be set")

    def is_partial(self) -> bool:
        return True

    def _key(self) -> tuple:
        return ("Partial", self._reduce_op)

    def __repr__(self):
        return f"Partial({self._reduce_op})"

    def __str__(self):
        return f"P({self._reduce_op})"
