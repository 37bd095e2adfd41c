"""Scalar functions behind the elementwise kernels, selected by op code.

The code of an op is its position in the matching tuple of ``minidl.kernels``.
Each function is inlined into the kernel loops; the op code is the same for
every element, so the branch costs almost nothing next to memory traffic.
"""
import math

import numpy as np
from numba import njit


@njit(inline="always")
def apply_unary(op, x):
    if op == 0:
        return -x
    elif op == 1:
        return abs(x)
    elif op == 2:
        return (x > 0) - (x < 0) if x == x else x
    elif op == 3:
        return math.exp(x)
    elif op == 4:
        return math.log(x) if x > 0 else (-math.inf if x == 0 else math.nan)
    elif op == 5:
        return math.log1p(x) if x > -1 else (-math.inf if x == -1 else math.nan)
    elif op == 6:
        return math.expm1(x)
    elif op == 7:
        return math.sqrt(x) if x >= 0 else math.nan
    elif op == 8:
        return 1 / math.sqrt(x) if x > 0 else (math.inf if x == 0 else math.nan)
    elif op == 9:
        return 1 / x if x != 0 else math.copysign(math.inf, x)
    elif op == 10:
        return math.sin(x)
    elif op == 11:
        return math.cos(x)
    elif op == 12:
        return math.tan(x)
    elif op == 13:
        return math.tanh(x)
    elif op == 14:
        if x >= 0:
            return 1 / (1 + math.exp(-x))
        e = math.exp(x)
        return e / (1 + e)
    elif op == 15:
        return x if not x < 0 else x * 0
    elif op == 16:
        return math.erf(x)
    elif op == 17:
        return np.floor(x)
    elif op == 18:
        return np.ceil(x)
    elif op == 19:
        return np.rint(x)
    elif op == 20:
        return np.trunc(x)
    else:
        return x * x


@njit(inline="always")
def apply_binary(op, x, y):
    if op == 0:
        return x + y
    elif op == 1:
        return x - y
    elif op == 2:
        return x * y
    elif op == 3:
        return x / y
    elif op == 4:
        return x // y
    elif op == 5:
        return x % y
    elif op == 6:
        return x ** y
    elif op == 7:
        return x if (x >= y or x != x) else y
    else:
        return x if (x <= y or x != x) else y


@njit(inline="always")
def apply_compare(op, x, y):
    if op == 0:
        return x == y
    elif op == 1:
        return x != y
    elif op == 2:
        return x < y
    elif op == 3:
        return x <= y
    elif op == 4:
        return x > y
    elif op == 5:
        return x >= y
    elif op == 6:
        return bool(x) and bool(y)
    elif op == 7:
        return bool(x) or bool(y)
    else:
        return bool(x) != bool(y)
