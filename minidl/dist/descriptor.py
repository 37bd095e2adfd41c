"""What a rank says a collective is before any data moves: its kind, the algorithm it takes, the
element count, dtype, reduce op and root, packed into two int64 so that the ranks can agree on it
in one tiny exchange (algorithms/agree.py). Without that check, a rank that reduced 10 floats
against its peer's 20 read half a message of garbage, or one rank raised MPI's truncation error
while the other went on with NaN.

A descriptor is ``[count, packed]``; ``describe`` makes one, ``explain`` turns the descriptors of
every rank into the error all of them raise.
"""
from __future__ import annotations

import functools

import numpy as np

from .communicators.base import DistError

KINDS = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "gather", "scatter", "all_to_all",
         "barrier", "all_gather_object", "broadcast_object_list", "all_gather_into_tensor",
         "reduce_scatter_tensor")
# "ours": the collective's one algorithm of our own (tree broadcast and reduce, ring all-gather ...)
PATHS = ("ours", "native", "recursive_doubling", "ring", "hierarchical")
# the buffers' dtypes (bfloat16 travels as its uint16 bits; minidl has no uint16 tensors)
DTYPES = {np.dtype(t): i for i, t in enumerate((np.bool_, np.int8, np.uint8, np.int16, np.uint16, np.int32,
                                                 np.int64, np.float16, np.float32, np.float64, np.complex64,
                                                 np.complex128))}
DTYPE_NAMES = ("bool", "int8", "uint8", "int16", "bfloat16", "int32", "int64", "float16", "float32", "float64",
               "complex64", "complex128")
OPS = (None, "sum", "avg", "product", "max", "min")
NO_DTYPE = 15
# packed: kind (4 bits) | path (3) | dtype (4) | op (3) | root + 1 (the rest)

_KIND_CODE = {k: i for i, k in enumerate(KINDS)}
_PATH_CODE = {p: i for i, p in enumerate(PATHS)}
_OP_CODE = {op: i for i, op in enumerate(OPS)}


@functools.lru_cache(maxsize=1024)
def describe(kind: str, path: str = "ours", count: int = 0, dtype=None, op=None, root=None):
    """The descriptor of a collective (read-only: it is cached, for the small all-reduces): ``op``
    a ReduceOp or None, ``root`` the group rank of the root or None, ``dtype`` the numpy dtype of
    the buffers or None."""
    packed = (_KIND_CODE[kind] | _PATH_CODE[path] << 4 | (NO_DTYPE if dtype is None else DTYPES[dtype]) << 7
              | _OP_CODE[None if op is None else op.value] << 11 | (0 if root is None else root + 1) << 14)
    descriptor = np.array([count, packed], np.int64)
    descriptor.flags.writeable = False
    return descriptor


def fields(descriptor) -> dict:
    """The descriptor as named fields (for the error message)."""
    count, packed = (int(v) for v in descriptor)
    kind, path, dtype, op, root = packed & 15, packed >> 4 & 7, packed >> 7 & 15, packed >> 11 & 7, packed >> 14
    return {"collective": KINDS[kind] if kind < len(KINDS) else f"#{kind}",
            "algorithm": PATHS[path] if path < len(PATHS) else f"#{path}",
            "count": count, "dtype": DTYPE_NAMES[dtype] if dtype < len(DTYPE_NAMES) else None,
            "op": OPS[op] if op < len(OPS) else f"#{op}", "root": root - 1 if root else None}


def explain(what: str, descriptors, global_ranks) -> DistError:
    """The error every rank raises when the ranks' descriptors differ: each rank's call, and which
    fields differ."""
    described = [fields(d) for d in descriptors]
    differ = [k for k in described[0] if any(d[k] != described[0][k] for d in described)]

    def call(d):
        args = [f"{d['count']} elements" if d["collective"] not in ("all_to_all", "barrier") else None, d["dtype"],
                f"op={d['op']}" if d["op"] else None,
                f"root=rank {global_ranks[d['root']]}" if d["root"] is not None else None,
                f"algorithm={d['algorithm']}"]
        return f"{d['collective']}(" + ", ".join(a for a in args if a) + ")"
    lines = [f"  rank {r}: {call(d)}" for r, d in zip(global_ranks, described)]
    return DistError(f"{what}: the ranks called mismatched collectives (they differ in "
                     f"{', '.join(differ)}):\n" + "\n".join(lines))
