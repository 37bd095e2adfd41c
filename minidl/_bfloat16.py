"""bfloat16 on the host: the top half of a float32's bits.

A bfloat16 keeps float32's sign and 8-bit exponent and the top 7 bits of its mantissa, so it is
stored as a uint16 and widening is a shift. Narrowing rounds to nearest, ties to even; a NaN stays
a (quiet) NaN with its sign. Every other number reaches bfloat16 by way of float32, as in
PyTorch: float64 and integer values are rounded to float32 first. The kernels (``kernels/cpu/jit/convert.py``,
``kernels/cuda/csrc/elementwise.cu``) use the same two formulas.
"""
from __future__ import annotations

import numpy as np

BITS = np.dtype(np.uint16)  # the storage of a bfloat16 element


def to_float32(bits: np.ndarray) -> np.ndarray:
    """The float32 values of bfloat16 bits (exact)."""
    return (np.asarray(bits, BITS).astype(np.uint32) << 16).view(np.float32)


def from_values(values) -> np.ndarray:
    """bfloat16 bits of numbers (any numpy-convertible values), rounded to nearest even by way of float32."""
    with np.errstate(over="ignore", invalid="ignore"):
        u = np.asarray(values, np.float32, order="C").view(np.uint32)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = (u + (0x7FFF + ((u >> 16) & 1))) >> 16
    return np.where(nan, (u >> 16) | 0x40, rounded).astype(BITS)
