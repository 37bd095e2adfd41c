"""``minidl.finfo`` / ``minidl.iinfo``: the numeric limits of a dtype, as PyTorch names them
(numpy knows the numbers)."""
import numpy as np

from . import _dtype as dt
from ._bfloat16 import to_float32


class _BFloat16Limits:
    """numpy's finfo fields for bfloat16, which numpy lacks: float32's exponent, 8 significant bits."""
    bits, precision = 16, 2
    eps = 2.0 ** -7
    max = float(to_float32(0x7F7F))  # the largest finite: exponent 254, all 7 mantissa bits set
    min = -max
    smallest_normal = 2.0 ** -126


_BFLOAT16 = _BFloat16Limits


class finfo:
    """Limits of a floating dtype (the default dtype when none is given): bits, eps, max, min, tiny
    (= smallest_normal), resolution; ``dtype`` is the dtype's name, as in PyTorch."""

    def __init__(self, type=None):
        d = dt.get_default_dtype() if type is None else dt.to_dtype(type)
        if not d.is_floating_point:
            raise TypeError(f"finfo: {d} is not a floating point dtype (use iinfo)")
        info = _BFLOAT16 if d is dt.bfloat16 else np.finfo(d.np)
        self.bits, self.dtype = info.bits, d.name
        self.eps, self.max, self.min = float(info.eps), float(info.max), float(info.min)
        self.tiny = self.smallest_normal = float(info.smallest_normal)
        self.resolution = 10.0 ** -info.precision

    def __repr__(self):
        return (f"finfo(resolution={self.resolution}, min={self.min}, max={self.max}, eps={self.eps}, "
                f"smallest_normal={self.smallest_normal}, tiny={self.tiny}, dtype={self.dtype})")


class iinfo:
    """Limits of an integer dtype: bits, max, min; ``dtype`` is the dtype's name."""

    def __init__(self, type):
        d = dt.to_dtype(type)
        if d.category != 1:
            raise TypeError(f"iinfo: {d} is not an integer dtype" + (" (use finfo)" if d.is_floating_point else ""))
        info = np.iinfo(d.np)
        self.bits, self.dtype = info.bits, d.name
        self.max, self.min = int(info.max), int(info.min)

    def __repr__(self):
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"
