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
    divides: bool  # AVG: the collective divides the sum by the group size at the end


# Plain attributes rather than properties or ``op is ReduceOp.AVG``: a property on an enum member
# costs ~150 ns a read, a member lookup on the class ~50 ns, and small all-reduces are mostly such Python.
for _op, _ufunc in ((ReduceOp.SUM, np.add), (ReduceOp.AVG, np.add), (ReduceOp.PRODUCT, np.multiply),
                    (ReduceOp.MAX, np.maximum), (ReduceOp.MIN, np.minimum)):
    _op.ufunc, _op.divides = _ufunc, _op is ReduceOp.AVG
    _op.combining = ReduceOp.SUM if _op.divides else _op
del _op, _ufunc
