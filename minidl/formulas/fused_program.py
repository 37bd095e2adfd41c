"""A fused elementwise program: what a chain of elementwise launches computes, element by element.

The compiler (``minidl/compiler/fusion.py``) turns consecutive elementwise steps of a captured graph
into one ``Program``; each device's generator (``fused_numba.py``, ``fused_cuda.py``) writes it as one
kernel, every op's math rendered from its formula in ``table.py``. Values are numbered: first the
loads (operands read from memory), then one value per step. A program holds no buffer, shape or
stride, only what the generated text depends on, so one compiled kernel serves every graph with the
same chain, whatever its sizes.
"""
from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass

# Bump when the generated code must change without this package's text changing: part of every cache key.
GENERATOR_VERSION = 1


@functools.lru_cache(maxsize=None)
def _sources_digest() -> str:
    """A hash of the text of every module of ``minidl/formulas``: an edited generator or formula never
    reads a kernel generated before the edit."""
    folder = os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for name in sorted(f for f in os.listdir(folder) if f.endswith(".py")):
        with open(os.path.join(folder, name), "rb") as f:
            digest.update(name.encode() + b"\0" + f.read() + b"\0")
    return digest.hexdigest()

STRIDE_CLASSES = ("1", "0", "n")   # an operand's stride along the innermost dim: unit, broadcast, other


@dataclass(frozen=True)
class Load:
    dtype: str          # numpy's name: float32, float64, int64, bool
    stride: str         # one of STRIDE_CLASSES


@dataclass(frozen=True)
class Op:
    family: str         # unary, binary, compare, where, copy
    name: str           # the formula's name (the family's own name for where and copy)
    args: tuple         # value numbers
    dtype: str          # the result's dtype (the buffer eager wrote it to)
    path: str = "element"   # how eager's CPU kernel computed it: run, scalar (a broadcast y) or element


@dataclass(frozen=True)
class Store:
    value: int
    dtype: str
    stride: str


@dataclass(frozen=True)
class Reduction:
    """A reduction of one of the program's values over the iteration's last dims, and the epilogue:
    elementwise ops on each result. The result is numbered right after the program's ops,
    then the epilogue's loads, then its ops; the epilogue walks the results in row-major order."""
    op: str             # sum, prod, max, min
    value: int          # the value reduced
    dtype: str          # the result's dtype (eager's out buffer); sums accumulate in ``init``'s
    init: str           # float64 or int64, as eager's reduce kernels accumulate
    kept: int           # the iteration's first ``kept`` dims are the results', the others reduced
    loads: tuple = ()
    ops: tuple = ()
    stores: tuple = ()


@dataclass(frozen=True)
class Program:
    ndim: int           # of the iteration space, after merging dims (a reduction's: the kept dims, then one)
    loads: tuple
    ops: tuple
    stores: tuple
    reduction: Reduction = None

    def key(self) -> str:
        """A hash of everything the generated text depends on: the program, and the generators and formulas
        (the text of every module of this package, and ``GENERATOR_VERSION``)."""
        return hashlib.sha256(f"{GENERATOR_VERSION}:{_sources_digest()}:{self!r}".encode()).hexdigest()[:20]

    def names(self) -> list:
        if self.reduction is None:
            return [op.name for op in self.ops]
        r = self.reduction
        return [op.name for op in self.ops] + [r.op] + [op.name for op in r.ops]

    @property
    def result(self) -> int:
        """The number of a reduction's result."""
        return len(self.loads) + len(self.ops)

    def __str__(self):
        return f"fused({', '.join(self.names())})"
