"""Views that move dimensions without splitting or merging them: transpose, t, permute, unsqueeze, and cat and
stack along a whole dimension. A shard follows its dimension to where the view puts it (a partial sum stays
one: these are linear); cat and stack need the joined dimension whole and their inputs placed alike.
"""
from __future__ import annotations

from ....ops.registry import attach_rule
from ..placement_types import Replicate, Shard


def _moved(x, where, shape):
    """x's placements with each shard's dimension i moved to ``where[i]``; the output of ``shape``."""
    placements = tuple(Shard(where[p.dim]) if p.is_shard() else p for p in x.placements)
    return [x.placements], placements, tuple(shape)


def transpose_rule(args, kwargs):
    x, a, b = args[0], args[1] % args[0].ndim, args[2] % args[0].ndim
    where = list(range(x.ndim))
    where[a], where[b] = b, a
    shape = list(x.shape)
    shape[a], shape[b] = shape[b], shape[a]
    return _moved(x, where, shape)


def t_rule(args, kwargs):
    x = args[0]
    if x.ndim < 2:
        return _moved(x, list(range(x.ndim)), x.shape)
    return transpose_rule((x, 0, 1), {})


def permute_rule(args, kwargs):
    x = args[0]
    dims = tuple(args[1]) if len(args) == 2 and isinstance(args[1], (tuple, list)) else tuple(args[1:])
    dims = [d % x.ndim for d in dims]
    where = [dims.index(i) for i in range(x.ndim)]
    return _moved(x, where, [x.shape[d] for d in dims])


def unsqueeze_rule(args, kwargs):
    x = args[0]
    dim = args[1] if len(args) > 1 else kwargs["dim"]
    dim = dim % (x.ndim + 1)
    shape = list(x.shape)
    shape.insert(dim, 1)
    return _moved(x, [i if i < dim else i + 1 for i in range(x.ndim)], shape)


def _joined(stacked):
    def rule(args, kwargs):
        tensors = list(args[0])
        dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
        first = tensors[0]
        ndim = first.ndim + (1 if stacked else 0)
        dim = dim % ndim
        joined = dim if not stacked else None
        placements = tuple(Replicate() if p.is_partial() or (p.is_shard() and p.dim == joined) else
                           (Shard(p.dim + (1 if stacked and p.dim >= dim else 0)) if p.is_shard() else p)
                           for p in first.placements)
        wanted = tuple(Replicate() if p.is_partial() or (p.is_shard() and p.dim == joined) else p
                       for p in first.placements)
        shape = list(first.shape)
        if stacked:
            shape.insert(dim, len(tensors))
        else:
            shape[dim] = sum(t.shape[dim] for t in tensors)
        return [wanted] * len(tensors), placements, tuple(shape)
    return rule


attach_rule("transpose", "sharding", transpose_rule)
attach_rule("t", "sharding", t_rule)
attach_rule("permute", "sharding", permute_rule)
attach_rule("unsqueeze", "sharding", unsqueeze_rule)
attach_rule("cat", "sharding", _joined(stacked=False))
attach_rule("stack", "sharding", _joined(stacked=True))
