"""Views: transpose, t, permute, unsqueeze, squeeze, reshape and view, and cat and stack along a whole
dimension. A shard follows its dimension to where the view puts it (a partial sum stays one: these are linear);
a reshape keeps it where the pieces stay chunk's pieces (see reshape_rule); cat and stack need the joined
dimension whole and their inputs placed alike. transpose, t, permute, unsqueeze and squeeze take a _StridedShard
as they lie (it follows its dimension); the others see it gathered first (``_dispatch.py``).
"""
from __future__ import annotations

from ....ops.registry import attach_rule
from ..placement_types import Replicate, Shard, _is_shard_like, _on_dim


def _moved(x, where, shape):
    """x's placements with each shard's dimension i moved to ``where[i]``; the output of ``shape``."""
    placements = tuple(_on_dim(p, where[p.dim]) if _is_shard_like(p) else p for p in x.placements)
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


def squeeze_rule(args, kwargs):
    """The size-1 dimensions named (all for dim=None) go; one split over the mesh (a piece of 1 and empty ones)
    is made whole first."""
    x = args[0]
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    named = range(x.ndim) if dim is None else [d % x.ndim for d in (dim if isinstance(dim, (tuple, list)) else
                                                                    (dim,))]
    gone = {d for d in named if x.shape[d] == 1}
    wanted = tuple(Replicate() if _is_shard_like(p) and p.dim in gone else p for p in x.placements)
    where = {i: i - sum(g < i for g in gone) for i in range(x.ndim) if i not in gone}
    placements = tuple(_on_dim(p, where[p.dim]) if _is_shard_like(p) else p for p in wanted)
    dims = tuple(sorted(gone))   # (on the pieces, only these: a piece may have other dimensions of size 1)
    return [wanted], placements, tuple(n for i, n in enumerate(x.shape) if i not in gone), \
        lambda piece, *rest, **options: piece.squeeze(dims)


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


for _rule in (transpose_rule, t_rule, permute_rule, unsqueeze_rule, squeeze_rule):
    _rule.takes_strided = True
attach_rule("transpose", "sharding", transpose_rule)
attach_rule("t", "sharding", t_rule)
attach_rule("permute", "sharding", permute_rule)
attach_rule("unsqueeze", "sharding", unsqueeze_rule)
attach_rule("squeeze", "sharding", squeeze_rule)
attach_rule("cat", "sharding", _joined(stacked=False))
attach_rule("stack", "sharding", _joined(stacked=True))


def _target(shape, sizes):
    """reshape's ``sizes`` (one -1 allowed) as a shape for ``shape``'s elements."""
    sizes = list(sizes[0]) if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)) else list(sizes)
    total = 1
    for s in shape:
        total *= s
    if -1 in sizes:
        known = 1
        for s in sizes:
            if s != -1:
                known *= s
        sizes[sizes.index(-1)] = total // known if known else 0
    return tuple(int(s) for s in sizes)


def _groups(a, b):
    """The runs of dimensions of shapes ``a`` and ``b`` with equal products: [(a's dims, b's dims)] (one run of
    all where there is an empty dimension)."""
    if 0 in a or 0 in b:
        return [(list(range(len(a))), list(range(len(b))))]
    groups, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        gi, gj, pa, pb = [i], [j], a[i], b[j]
        i, j = i + 1, j + 1
        while pa != pb:
            if pa < pb:
                pa *= a[i]
                gi.append(i)
                i += 1
            else:
                pb *= b[j]
                gj.append(j)
                j += 1
        groups.append((gi, gj))
    return groups


def reshape_rule(args, kwargs):
    """A shard survives a reshape where its dimension leads a run of dimensions that becomes a run led by a
    dimension its pieces split alike (the same length, or both divided evenly by the mesh dimension's size);
    elsewhere the dimension is gathered first. Partial sums stay (a reshape is linear)."""
    x = args[0]
    shape = _target(x.shape, args[1:])
    groups = _groups(tuple(x.shape), shape)
    lead = {gi[0]: (gi, gj) for gi, gj in groups if gi and gj}
    wanted, out = [], []
    for d, p in enumerate(x.placements):
        alone = sum(q == p for q in x.placements) == 1   # (nested shards of one dimension: gathered)
        if p.is_shard() and p.dim in lead and alone:
            gi, gj = lead[p.dim]
            n, m, k = x.shape[p.dim], shape[gj[0]], x.device_mesh.size(d)
            if n == m or (n % k == 0 and m % k == 0):
                wanted.append(p)
                out.append(Shard(gj[0]))
                continue
        if p.is_shard():
            wanted.append(Replicate())
            out.append(Replicate())
        else:
            wanted.append(p)
            out.append(p)
    from .._spec import DTensorSpec
    piece = DTensorSpec(x.device_mesh, tuple(out), shape).local_shape()
    return [tuple(wanted)], tuple(out), shape, lambda local, *rest: local.reshape(piece)


attach_rule("reshape", "sharding", reshape_rule)
attach_rule("view", "sharding", reshape_rule)


def flatten_rule(args, kwargs):
    x = args[0]
    start = (args[1] if len(args) > 1 else kwargs.get("start_dim", 0)) % max(x.ndim, 1)
    end = (args[2] if len(args) > 2 else kwargs.get("end_dim", -1)) % max(x.ndim, 1)
    merged = 1
    for s in x.shape[start:end + 1]:
        merged *= s
    return reshape_rule((x, *x.shape[:start], merged, *x.shape[end + 1:]), {})


def _pieces_rule(sizes_of):
    """split and chunk: the split dimension whole (gathered where it is sharded), the other shards kept; one
    placements and shape per piece, and the pieces cut on each rank's own tensor."""
    def rule(args, kwargs):
        x = args[0]
        dim = (args[2] if len(args) > 2 else kwargs.get("dim", 0)) % x.ndim
        sizes = sizes_of(x.shape[dim], args[1])
        wanted = tuple(Replicate() if p == Shard(dim) else p for p in x.placements)
        shapes = [tuple(n if i == dim else s for i, s in enumerate(x.shape)) for n in sizes]
        return [wanted], [wanted] * len(sizes), shapes
    return rule


def _split_sizes(n, size_or_sections):
    if isinstance(size_or_sections, int):
        return [min(size_or_sections, n - start) for start in range(0, n, size_or_sections)] or [0]
    return list(size_or_sections)


def _chunk_sizes(n, chunks):
    step = -(-n // chunks) if n else 0
    return [min(step, n - start) for start in range(0, n, step)] if step else [0]


attach_rule("flatten", "sharding", flatten_rule)
attach_rule("split", "sharding", _pieces_rule(_split_sizes))
attach_rule("chunk", "sharding", _pieces_rule(_chunk_sizes))
