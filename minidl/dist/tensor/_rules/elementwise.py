"""The sharding of every elementwise op of the formula table (minidl/formulas/table.py: a new formula gets its
rule here for free), with broadcasting.

The output takes, mesh dimension by mesh dimension, a shard some input already has on a dimension it does not
broadcast (the first such input's), so that nothing moves where the inputs line up; each input then holds that
dimension's shard (a local slice if it was whole), or stays whole where it is broadcast along it. A partial sum
stays one only where the op is linear in it: a sum of partial sums (add, sub), a partial sum times or over a
whole value (mul, div); otherwise it is reduced first. A _StridedShard is a shard like the others here: every operand
is moved to the output's placements, so a rank holds the same rows of each.
"""
from __future__ import annotations

from ....formulas import BINARY, COMPARE, UNARY
from ....layout import broadcast_shapes
from ....ops.registry import OPS, attach_rule
from ..placement_types import Partial, Replicate, _is_shard_like, _on_dim

LINEAR_IN_BOTH = ("add", "sub")   # (partial sums of one kind, added)
LINEAR_IN_FIRST = ("mul", "div")  # (a partial sum scaled by a whole value; mul either way round)
LINEAR_ALONE = ("neg",)


def _placement_of(p, ndim, out_ndim, shape):
    """``p`` (an input's placement) as the output's: a shard of dimension i is one of i + (out_ndim - ndim)."""
    if _is_shard_like(p) and shape[p.dim] != 1:
        return _on_dim(p, p.dim + out_ndim - ndim)
    return p


def _wanted(out, ndim, out_ndim, shape):
    """The placement an input of ``shape`` must have for an output placed ``out`` on one mesh dimension."""
    if _is_shard_like(out):
        i = out.dim - (out_ndim - ndim)
        return _on_dim(out, i) if i >= 0 and shape[i] != 1 else Replicate()
    return out


def elementwise_rule(name):
    def rule(args, kwargs):
        from .._api import DTensor
        tensors = [a for a in args if isinstance(a, DTensor)]
        shapes = [tuple(a.shape) for a in tensors]
        out_shape = tuple(broadcast_shapes(*shapes, op=name)) if len(shapes) > 1 else shapes[0]
        out_ndim, mesh_ndim = len(out_shape), tensors[0].device_mesh.ndim
        out = []
        for d in range(mesh_ndim):
            found = [_placement_of(t.placements[d], t.ndim, out_ndim, t.shape) for t in tensors]
            shard = next((p for p in found if _is_shard_like(p)), None)
            partial = [p for p in found if p.is_partial()]
            if shard is not None:
                out.append(shard)
            elif partial and _linear(name, args, kwargs, found):
                out.append(partial[0])
            else:
                out.append(Replicate())
        wanted = [tuple(_wanted(out[d], t.ndim, out_ndim, t.shape) if not out[d].is_partial() else
                        (t.placements[d] if t.placements[d].is_partial() else Replicate())
                        for d in range(mesh_ndim)) for t in tensors]
        return wanted, tuple(out), out_shape
    rule.takes_strided = True
    return rule


def _linear(name, args, kwargs, found) -> bool:
    """Whether the op may run on partial sums on this mesh dimension (``found``: the DTensor inputs' placements
    there, in argument order; non-DTensor arguments are numbers or 0-d tensors, whole on every rank). A division
    that rounds (``rounding_mode``) is not linear."""
    partial = [p for p in found if p.is_partial()]
    if any(p.reduce_op not in Partial.LINEAR_REDUCE_OPS for p in partial) or len({p for p in partial}) > 1:
        return False
    if name in LINEAR_ALONE:
        return True
    if name in LINEAR_IN_BOTH:
        return len(found) == len(args) and all(p.is_partial() for p in found)
    rounding = args[2] if name == "div" and len(args) > 2 else kwargs.get("rounding_mode")
    if name in LINEAR_IN_FIRST and rounding is None:
        from .._api import DTensor
        sides = [a.placements if isinstance(a, DTensor) else None for a in args[:2]]
        partial_sides = [i for i, s in enumerate(sides) if s is not None and any(p.is_partial() for p in s)]
        return len(partial_sides) == 1 and (name == "mul" or partial_sides == [0])
    return False


for _formula in (*UNARY, *BINARY, *COMPARE):
    for _name in (_formula.name, "_" + _formula.name):   # (activations are public through nn.functional: _gelu)
        if _name in OPS:
            attach_rule(_name, "sharding", elementwise_rule(_formula.name))
            break
for _name in ("clamp", "clamp_min", "clamp_max", "where"):   # (elementwise ops beside the formula table's)
    attach_rule(_name, "sharding", elementwise_rule(_name))
