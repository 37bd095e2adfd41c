"""dtypes and PyTorch's type-promotion rules.

Promotion works on *categories* (bool < integer < floating): a tensor's dtype
wins within its category; a Python scalar only matters when it is of a higher
category (``int_tensor * 2.5`` is float32, ``float32_tensor * 2.5`` stays
float32); 0-d tensors rank below tensors with dimensions in the same way.
"""
from __future__ import annotations

import numpy as np

from . import _bfloat16


class dtype:
    """``np`` is the numpy dtype of the storage: the element type itself, except for bfloat16,
    which numpy lacks and which is stored as its bits in uint16 (see ``_bfloat16``)."""
    __slots__ = ("name", "np", "itemsize", "is_floating_point", "is_signed", "category", "rank")

    def __init__(self, name, np_dtype, category, rank):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.itemsize = self.np.itemsize
        self.is_floating_point = category == 2
        self.is_signed = name not in ("bool", "uint8")
        self.category = category  # 0 bool, 1 integer, 2 floating
        self.rank = rank          # order within the lattice

    def __repr__(self):
        return f"minidl.{self.name}"

    def __reduce__(self):
        return (from_name, (self.name,))

    def storage_of(self, values) -> np.ndarray:
        """``values`` (numbers, arrays) as a numpy array of this dtype's storage."""
        if self is bfloat16:
            return _bfloat16.from_values(values)
        with np.errstate(over="ignore"):  # beyond a float dtype's range is inf, as IEEE says
            return np.asarray(values, self.np, order="C")


bool_ = dtype("bool", np.bool_, 0, 0)
uint8 = dtype("uint8", np.uint8, 1, 1)
int16 = dtype("int16", np.int16, 1, 2)
int32 = dtype("int32", np.int32, 1, 3)
int64 = dtype("int64", np.int64, 1, 4)
float16 = dtype("float16", np.float16, 2, 5)
bfloat16 = dtype("bfloat16", _bfloat16.BITS, 2, 5)  # float16 and bfloat16 promote to float32
float32 = dtype("float32", np.float32, 2, 6)
float64 = dtype("float64", np.float64, 2, 7)
HALF = (float16, bfloat16)  # the 2-byte floats: stored narrow, computed in float32

ALL = (bool_, uint8, int16, int32, int64, float16, bfloat16, float32, float64)
_BY_NP = {d.np: d for d in ALL if d is not bfloat16}  # numpy has no bfloat16; a uint16 array is no tensor
_BY_NAME = {d.name: d for d in ALL}
_BY_NAME.update(half=float16, float=float32, double=float64, int=int32, long=int64, short=int16)

_default_float = float32


def from_name(name: str) -> dtype:
    return _BY_NAME[name]


def from_numpy(np_dtype) -> dtype:
    try:
        return _BY_NP[np.dtype(np_dtype)]
    except KeyError:
        raise TypeError(f"can't convert numpy array of dtype {np.dtype(np_dtype)}; supported: "
                        f"{', '.join(d.name for d in _BY_NP.values())}") from None


def get_default_dtype() -> dtype:
    return _default_float


def set_default_dtype(d: dtype) -> None:
    global _default_float
    if not isinstance(d, dtype) or not d.is_floating_point:
        raise TypeError(f"set_default_dtype: only floating point dtypes are allowed, got {d}")
    _default_float = d


def to_dtype(d) -> dtype:
    """Accept a minidl dtype, a numpy dtype or a Python type (float, int, bool)."""
    if isinstance(d, dtype):
        return d
    if d is float:
        return _default_float
    if d is int:
        return int64
    if d is bool:
        return bool_
    return from_numpy(d)


def promote_types(a: dtype, b: dtype) -> dtype:
    if a is b:
        return a
    if a in HALF and b in HALF:  # neither half type holds the other
        return float32
    if a.category != b.category:
        return a if a.category > b.category else b
    if {a, b} == {uint8, int16} or {a, b} == {uint8, int32} or {a, b} == {uint8, int64}:
        return a if a is not uint8 else b
    return a if a.rank > b.rank else b


def scalar_dtype(value) -> dtype:
    """The dtype a bare Python number would get as a tensor."""
    if isinstance(value, bool) or isinstance(value, np.bool_):
        return bool_
    if isinstance(value, (int, np.integer)):
        return int64
    if isinstance(value, (float, np.floating)):
        return _default_float
    raise TypeError(f"unsupported scalar type {type(value).__name__}")


def result_type(*operands) -> dtype:
    """Promote tensors (objects with .dtype and .ndim) and Python scalars together.

    Three tiers, as in PyTorch: tensors with dims, then 0-d tensors, then
    scalars; a lower tier changes the result only when its category is higher.
    """
    tiers = [None, None, None]
    for x in operands:
        if hasattr(x, "dtype") and hasattr(x, "ndim"):
            d, tier = x.dtype, (0 if x.ndim else 1)
            if getattr(x, "_wrapped_number", False):
                tier = 2
        else:
            d, tier = scalar_dtype(x), 2
        tiers[tier] = d if tiers[tier] is None else promote_types(tiers[tier], d)
    result = None
    for d in tiers:
        if d is not None and (result is None or d.category > result.category):
            result = d
    return result


def compute_dtype(d: dtype) -> dtype:
    """The dtype kernels compute in: few signatures, and no float16 or bfloat16 arithmetic on Numba's CPU."""
    if d.category == 2:
        return float32 if d in HALF else d
    if d.category == 1:
        return int64
    return bool_


def arithmetic_dtype(d: dtype) -> dtype:
    """compute_dtype for arithmetic, where bools count as integers."""
    return ARITHMETIC[d]


# arithmetic_dtype as a table, for the hot paths
ARITHMETIC = {d: (int64 if compute_dtype(d) is bool_ else compute_dtype(d)) for d in ALL}
