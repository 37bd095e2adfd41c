"""Moving a global tensor's local pieces from one list of placements to another.

``plan`` picks the steps, mesh dimension by mesh dimension: S->R all-gather, S(i)->S(j) all-to-all, P->R
all-reduce, P->S reduce-scatter, R->S a local slice (no message), R->P refused (as torch refuses it). Partial sums
are reduced first, while the pieces are smallest (an all-reduce before an all-gather moves k times less than
after it; all-gathers cost the same in any order: each rank receives all but its piece). The order keeps the
nesting right: shards on one tensor dimension are split in mesh-dimension order (the first mesh
dimension splits the whole, the next splits its piece), so they are undone from the last mesh dimension to the
first and done from the first to the last; a mesh dimension whose shard would come out of order is undone
first and done again. Where a _StridedShard is among the placements, ``_strided.plan`` plans on the rows each rank
holds instead (gathers and one local selection). ``Redistribute`` runs a plan as one autograd Function: its backward
is the redistribution of the gradient the other way (to the input's placements, a Partial input's gradient
Replicate, as torch's).
"""
from __future__ import annotations

import numpy as np

from ...autograd.function import Function
from ...ops.creation import empty, empty_like, tensor, zeros
from ...ops.shape_ops import cat
from .. import collectives
from ..reduce_op import ReduceOp
from . import _strided
from .placement_types import Replicate, Shard

_OPS = {"sum": ReduceOp.SUM, "avg": ReduceOp.AVG, "max": ReduceOp.MAX, "min": ReduceOp.MIN}


def steps_between(spec_src, spec_dst) -> list:
    """The steps from ``spec_src``'s placements to ``spec_dst``'s: (kind, mesh dim, arguments) in order."""
    src, dst = tuple(spec_src.placements), tuple(spec_dst.placements)
    for a, b in zip(src, dst):
        if b.is_partial() and a != b:
            raise RuntimeError(f"Can not redistribute from {a} to {b}, redistributing to Partial is for internal "
                               f"use only!")
    if _strided.strided(src + dst):
        return _strided.plan(src, dst, tuple(spec_src.shape), tuple(spec_src.mesh.shape))
    return plan(src, dst)


def plan(src: tuple, dst: tuple) -> list:
    """The steps between placements of Shard, Replicate and Partial."""
    cur, steps = list(src), []
    for d, (a, b) in enumerate(zip(cur, dst)):   # (reduce the partial sums: first, on the smallest pieces)
        if not a.is_partial() or a == b:
            continue
        if b.is_shard() and _alone(cur, dst, d, None, b.dim):
            steps.append(("reduce_scatter", d, (a.reduce_op, b.dim)))
            cur[d] = b
        else:
            steps.append(("all_reduce", d, (a.reduce_op,)))
            cur[d] = Replicate()
    redo = _out_of_order(src, dst)
    for d in reversed(range(len(cur))):   # (undo shards: the last mesh dimension first)
        a, b = cur[d], dst[d]
        if not a.is_shard() or (a == b and d not in redo):
            continue
        if b.is_shard() and d not in redo and _alone(cur, dst, d, a.dim, b.dim):
            steps.append(("all_to_all", d, (a.dim, b.dim)))
            cur[d] = b
        else:
            steps.append(("all_gather", d, (a.dim,)))
            cur[d] = Replicate()
    for d, (a, b) in enumerate(zip(cur, dst)):   # (shard: the first mesh dimension first)
        if a != b:
            steps.append(("slice", d, (b.dim,)))
            cur[d] = b
    return steps


def _out_of_order(src, dst) -> set:
    """Mesh dimensions whose shard must be undone although it stays: a mesh dimension before them changes how
    the same tensor dimension is split, and their split must come after its."""
    redo = set()
    changed = True
    while changed:
        changed = False
        for d, a in enumerate(src):
            if not a.is_shard() or d in redo:
                continue
            for e in range(d):
                moves = src[e] != dst[e] or e in redo
                touches = Shard(a.dim) in (src[e], dst[e])
                if moves and touches:
                    redo.add(d)
                    changed = True
                    break
    return redo


def _alone(cur, dst, d, i, j) -> bool:
    """Whether mesh dimension d may turn its tensor dimension ``i`` (or a partial sum, i None) into a shard of
    ``j`` in one collective: no other mesh dimension splits i or j now or at the end."""
    dims = {j} if i is None else {i, j}
    return not any(p.is_shard() and p.dim in dims for e, p in enumerate(cur) if e != d) and \
        not any(p.is_shard() and p.dim in dims for e, p in enumerate(dst) if e != d)


# -- the steps, on local tensors ----------------------------------------------------------------------
def run(local, steps, spec_src):
    """``local`` (a plain tensor, no autograd) moved through ``steps``; the spec gives the global shape and
    the mesh (each step's group and this rank's coordinate)."""
    mesh, shape = spec_src.mesh, spec_src.shape
    placements = list(spec_src.placements)
    for kind, d, args in steps:
        if kind == "select":
            local = _selected(local, shape, tuple(placements), args[0], mesh)
            placements = list(args[0])
            continue
        group, k, me = mesh.get_group(d), mesh.size(d), mesh.get_local_rank(d)
        if kind == "gather":
            (i,) = args
            after = [Replicate() if e == d else p for e, p in enumerate(placements)]
            local = _gathered(local, shape[i], i, tuple(placements), tuple(after), mesh, d, group)
            placements = after
        elif kind == "all_gather":
            (i,) = args
            local = _all_gather(local, i, _level(shape, placements, mesh, d, i), k, group)
            placements[d] = Replicate()
        elif kind == "all_to_all":
            i, j = args
            local = _all_to_all(local, i, j, _level(shape, placements, mesh, d, i),
                                _level(shape, placements, mesh, d, j), k, me, group)
            placements[d] = Shard(j)
        elif kind == "all_reduce":
            local = local.contiguous().clone()
            collectives.all_reduce(local, _OPS[args[0]], group=group)
            placements[d] = Replicate()
        elif kind == "reduce_scatter":
            op, j = args
            local = _reduce_scatter(local, j, _level(shape, placements, mesh, d, j), k, me, op, group)
            placements[d] = Shard(j)
        else:
            (j,) = args
            size, start = Shard.local_shard_size_and_offset(_level(shape, placements, mesh, d, j), k, me)
            local = local.narrow(j, start, size).contiguous()
            placements[d] = Shard(j)
    return local


def _gathered(local, n, dim, before, after, mesh, d, group):
    """An all-gather over mesh dimension d of the rows of ``dim`` (each rank's padded to the most any holds), this
    rank's rows under ``after`` picked from the joined blocks."""
    width, positions = _strided.gathered_positions(n, dim, before, after, tuple(mesh.shape), mesh.get_coordinate(), d)
    block = _padded(local, dim, width)
    out = [empty_like(block) for _ in range(mesh.size(d))]
    collectives.all_gather(out, block, group=group)
    return _taken(cat(out, dim), dim, positions)


def _selected(local, shape, before, after, mesh):
    """This rank's piece under ``after`` cut from its piece under ``before`` (which holds all its rows)."""
    for i, n in enumerate(shape):
        local = _taken(local, i, _strided.selected_positions(n, i, before, after, tuple(mesh.shape),
                                                             mesh.get_coordinate()))
    return local


def _taken(local, dim, positions):
    """The slices of ``local`` along ``dim`` at ``positions``: a narrow where they are consecutive."""
    first = int(positions[0]) if len(positions) else 0
    if np.array_equal(positions, np.arange(first, first + len(positions))):
        return local.narrow(dim, first, len(positions)).contiguous()
    return local.index_select(dim, tensor(positions, device=local.device)).contiguous()


def _level(shape, placements, mesh, d, dim) -> int:
    """The length along tensor dimension ``dim`` of the piece mesh dimension d splits: the global length split
    by the mesh dimensions before d that shard ``dim`` (this rank's chunk of each)."""
    n = shape[dim]
    for e in range(d):
        if placements[e] == Shard(dim):
            n = Shard.local_shard_size_and_offset(n, mesh.size(e), mesh.get_local_rank(e))[0]
    return n


def _boxes(n, k) -> list:
    """(rows, first row) of each of the k pieces of n rows, by chunk's rule."""
    return [Shard.local_shard_size_and_offset(n, k, r) for r in range(k)]


def _chunks(n, k) -> list:
    return [size for size, _ in _boxes(n, k)]


def _padded(t, dim, length):
    """``t`` with zeros after its end along ``dim`` up to ``length`` (equal sizes for a collective)."""
    missing = length - t.shape[dim]
    if missing == 0:
        return t.contiguous()
    shape = list(t.shape)
    shape[dim] = missing
    return cat([t, zeros(shape, dtype=t.dtype, device=t.device)], dim)


def _all_gather(local, dim, n, k, group):
    sizes = _chunks(n, k)
    block = _padded(local, dim, sizes[0])
    out = [empty_like(block) for _ in range(k)]
    collectives.all_gather(out, block, group=group)
    return cat([o.narrow(dim, 0, s) for o, s in zip(out, sizes)], dim)


def _reduce_scatter(local, dim, n, k, me, op, group):
    sizes = _chunks(n, k)
    pieces = [_padded(local.narrow(dim, start, s), dim, sizes[0]) for s, start in _boxes(n, k)]
    out = empty_like(pieces[0])
    collectives.reduce_scatter(out, pieces, _OPS[op], group=group)
    return out.narrow(dim, 0, sizes[me]).contiguous()


def _all_to_all(local, i, j, n_i, n_j, k, me, group):
    """Shard(i) -> Shard(j): chunk r of my piece along j goes to rank r; rank r's piece comes back as my
    chunk along j of its rows along i."""
    sends = [local.narrow(j, start, s).contiguous() for s, start in _boxes(n_j, k)]
    mine_j = Shard.local_shard_size_and_offset(n_j, k, me)[0]
    outs = []
    for r in range(k):
        shape = list(local.shape)
        shape[i], shape[j] = Shard.local_shard_size_and_offset(n_i, k, r)[0], mine_j
        outs.append(empty(shape, dtype=local.dtype, device=local.device))
    collectives.all_to_all(outs, sends, group=group)
    return cat(outs, i)


def replicated_partials(placements) -> tuple:
    """``placements`` with Partial ones Replicate: how a gradient lies (each part gets the whole gradient)."""
    return tuple(Replicate() if p.is_partial() else p for p in placements)


def split_into_partials(local, mesh, held, wanted):
    """torch's internal R -> P: where ``wanted`` is a Partial sum and ``held`` is not, each rank keeps 1/k of
    the whole value (a Partial avg, max or min keeps all of it)."""
    for d, (h, w) in enumerate(zip(held, wanted)):
        if w.is_partial() and w.reduce_op == "sum" and not h.is_partial():
            local = local / mesh.size(d)
    return local


class Redistribute(Function):
    """A plan run on the local tensor; backward: the gradient, which lies as the output does but Replicate where
    it is Partial (or as ``arrives`` says: a partial sum where the op that used the output made one), moved
    back to the input's placements (Partial ones Replicate too), in ``backward_dtype`` if given. A partial
    gradient going back to a shard is one reduce-scatter, not an all-reduce and a slice."""

    @staticmethod
    def forward(ctx, local, spec_src, spec_dst, backward_dtype=None, arrives=None):
        ctx.spec_src, ctx.spec_dst, ctx.backward_dtype = spec_src, spec_dst, backward_dtype
        ctx.arrives = arrives or replicated_partials(spec_dst.placements)
        return run(local, steps_between(spec_src, spec_dst), spec_src)

    @staticmethod
    def backward(ctx, grad):
        arrived = ctx.spec_dst.with_placements(ctx.arrives)
        wanted = ctx.spec_src.with_placements(replicated_partials(ctx.spec_src.placements))
        moving = grad if ctx.backward_dtype is None else grad.to(ctx.backward_dtype)
        return redistribute_local(moving, arrived, wanted).to(grad.dtype), None, None, None, None


def redistribute_local(local, spec_src, spec_dst, backward_dtype=None, arrives=None):
    """``local`` moved from ``spec_src`` to ``spec_dst``, differentiably; itself where nothing moves or where
    this rank is outside the mesh (it holds no piece and takes part in no collective). ``arrives``: how the
    gradient will lie at the output, where not as the output does (Partial ones Replicate)."""
    if tuple(spec_src.placements) == tuple(spec_dst.placements) or spec_src.mesh.get_coordinate() is None:
        return local
    return Redistribute.apply(local, spec_src, spec_dst, backward_dtype, arrives)
