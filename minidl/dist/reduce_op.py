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

    ufunc: np.ufunc  # what combines two buffers
    combining: "ReduceOp"  # the op the algorithms run (AVG sums)


# Plain attributes rather than properties: a property on an enum member costs ~150 ns a read,
# and small all-reduces read both.
for _op, _ufunc in ((ReduceOp.SUM, np.add), (ReduceOp.AVG, np.add), (ReduceOp.PRODUCT, np.multiply),
                    (ReduceOp.MAX, np.maximum), (ReduceOp.MIN, np.minimum)):
    _op.ufunc, _op.combining = _ufunc, ReduceOp.SUM if _op is ReduceOp.AVG else _op
del _op, _ufunc
