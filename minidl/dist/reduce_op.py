"""ReduceOp, as in torch.distributed, and the numpy ufunc that combines two buffers for each.

On bool buffers numpy's add/multiply/maximum/minimum are or/and/or/and, as in PyTorch.
AVG is SUM followed by a division, done once at the end by the collective.
"""
from __future__ import annotations

import enum

import numpy as np


class ReduceOp(enum.Enum):
    SUM = "sum"
    AVG = "avg"
    PRODUCT = "product"
    MAX = "max"
    MIN = "min"

    def __repr__(self):
        return f"ReduceOp.{self.name}"

    @property
    def ufunc(self):
        return _UFUNCS[self]

    @property
    def combining(self) -> "ReduceOp":
        """The op the algorithms run (AVG sums)."""
        return ReduceOp.SUM if self is ReduceOp.AVG else self


_UFUNCS = {ReduceOp.SUM: np.add, ReduceOp.AVG: np.add, ReduceOp.PRODUCT: np.multiply,
           ReduceOp.MAX: np.maximum, ReduceOp.MIN: np.minimum}
