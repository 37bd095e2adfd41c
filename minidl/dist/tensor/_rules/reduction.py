"""Reductions and normalizations along dimensions.

sum over a sharded dimension leaves each rank its piece's sum: a partial sum, reduced only when asked; mean
there is each piece's sum over the whole count, a partial sum too (so its gradient, 1 / count, is the whole's,
and uneven pieces need no gather). softmax and log_softmax need their dimension whole (it is gathered where it is
split); other dimensions keep their shards. A partial sum is reduced first, except under sum and mean, which are
linear. A _StridedShard is a shard like the others: its pieces' rows are disjoint too, and a dimension it splits
keeps its split through a reduction of others.
"""
from __future__ import annotations

from ....ops.registry import OPS, attach_rule
from ..placement_types import Partial, Replicate, _is_shard_like, _on_dim
from ._whole import reduced


def _dims(dim, ndim):
    if dim is None:
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return tuple(sorted(d % ndim for d in dims)) if ndim else ()


def _reduction(kind):
    def rule(args, kwargs):
        x = args[0]
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
        dims = _dims(dim, x.ndim)
        wanted, out = [], []
        split = False
        for d, p in enumerate(x.placements):
            if _is_shard_like(p) and p.dim in dims:
                wanted.append(p)
                out.append(Partial("sum"))
                split = True
            elif _is_shard_like(p):
                wanted.append(p)
                out.append(_on_dim(p, p.dim if keepdim else p.dim - sum(1 for r in dims if r < p.dim)))
            elif p.is_partial() and p.reduce_op not in Partial.LINEAR_REDUCE_OPS:
                wanted.append(Replicate())
                out.append(Replicate())
            else:
                wanted.append(p)
                out.append(p)
        shape = tuple(1 if i in dims else s for i, s in enumerate(x.shape) if keepdim or i not in dims)
        if kind == "mean" and split:
            count = 1
            for i in dims:
                count *= x.shape[i]
            return [tuple(wanted)], tuple(out), shape, lambda piece, *a, **k: sum_(piece, *a, **k) / count
        return [tuple(wanted)], tuple(out), shape
    rule.takes_strided = True
    return rule


def _along_whole_dim(args, kwargs):
    """softmax(x, dim): that dimension whole on every rank, the others' shards kept, partial sums reduced."""
    x = args[0]
    dim = (args[1] if len(args) > 1 else kwargs["dim"]) % x.ndim
    wanted = tuple(Replicate() if p.is_partial() or (_is_shard_like(p) and p.dim == dim) else p for p in x.placements)
    return [wanted], wanted, tuple(x.shape)


_along_whole_dim.takes_strided = True


sum_ = OPS["sum"].function
attach_rule("sum", "sharding", _reduction("sum"))
attach_rule("mean", "sharding", _reduction("mean"))
attach_rule("softmax", "sharding", _along_whole_dim)
attach_rule("log_softmax", "sharding", _along_whole_dim)


def norm_rule(args, kwargs):
    """The whole tensor's norm (dim=None): each rank's piece measured — the sum of |x|^p — summed over the mesh
    dimensions that split it, then rooted: whole on every rank (clip_grad_norm_ over split gradients). A partial
    sum is reduced first (a norm is not linear); for p = ±inf the tensor is gathered."""
    x = args[0]
    defaults = {"p": "fro", "dim": None, "keepdim": False, "dtype": None}
    p, dim, keepdim, dtype = (*args[1:], *(kwargs.get(k, d) for k, d in list(defaults.items())[len(args) - 1:]))
    if dim is not None or keepdim or p == "nuc" or (not isinstance(p, str) and p < 0 and p != float("-inf")):
        raise NotImplementedError("minidl.norm's sharding rule takes the whole tensor's norm (dim=None, p >= 0 or "
                                  "±inf, not 'nuc') so far")
    whole = (Replicate(),) * x.device_mesh.ndim
    if p in (float("inf"), float("-inf")):   # (the extreme's gradient goes to its element alone: taken whole)
        return [whole], whole, ()
    wanted = tuple(Replicate() if q.is_partial() else q for q in x.placements)
    split = tuple(d for d, q in enumerate(wanted) if _is_shard_like(q))
    mesh = x.device_mesh
    return [wanted], whole, (), lambda piece, *_, **__: _whole_norm(piece, p, dtype, mesh, split)


def _whole_norm(piece, p, dtype, mesh, split):
    piece = piece if dtype is None else piece.to(dtype)
    if p == 0:
        return reduced(((piece != 0).to(piece.dtype) + piece.sign() * 0).sum(), mesh, split)
    power = 2.0 if p == "fro" else float(p)
    return reduced(piece.abs().pow(power).sum(), mesh, split) ** (1.0 / power)


norm_rule.takes_strided = True
attach_rule("norm", "sharding", norm_rule)
