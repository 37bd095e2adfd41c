"""layer_norm and embedding.

layer_norm needs its normalized dimensions whole; the others keep their shards, and the weight and bias are
whole (their gradients, summed over this rank's rows, are partial sums: reduced on the way back). embedding with
a table split by rows (vocabulary-parallel): each rank looks up the ids in its rows, zeros the others, and the
output is a partial sum; split by columns: each rank's output has its columns (S of the last dimension); whole:
the ids' own shards.
"""
from __future__ import annotations

from ....ops.registry import OPS, attach_rule
from ..placement_types import Partial, Replicate, Shard
from . import loss_parallel


def layer_norm_rule(args, kwargs):
    x = args[0]
    shape = args[1] if len(args) > 1 else kwargs["normalized_shape"]
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    first = x.ndim - len(shape)
    wanted = tuple(Replicate() if p.is_partial() or (p.is_shard() and p.dim >= first) else p for p in x.placements)
    whole = (Replicate(),) * x.device_mesh.ndim
    from .._api import DTensor
    others = [whole for a in (*args[2:], *kwargs.values()) if isinstance(a, DTensor)]
    return [wanted, *others], wanted, tuple(x.shape)


def embedding_rule(args, kwargs):
    from .._api import DTensor
    ids, weight = args[0], args[1]
    defaults = (None, None, 2.0, False, False)
    padding_idx, max_norm, _, scale_grad_by_freq, sparse = (*args[2:], *defaults[len(args) - 2:])
    if not isinstance(ids, DTensor) or max_norm is not None or scale_grad_by_freq or sparse or kwargs:
        raise NotImplementedError("minidl.embedding's sharding rule takes the ids as a DTensor, and neither "
                                  "max_norm, scale_grad_by_freq nor sparse")
    wanted_ids, wanted_w, out = [], [], []
    rows = []   # mesh dimensions that split the table's rows
    for d, (pi, pw) in enumerate(zip(ids.placements, weight.placements)):
        if pw == Shard(0):
            wanted_ids.append(Replicate())   # (every rank looks up every id in its rows)
            wanted_w.append(pw)
            out.append(Partial())
            rows.append(d)
        elif pw == Shard(1):
            wanted_ids.append(Replicate())
            wanted_w.append(pw)
            out.append(Shard(ids.ndim))
        else:
            wanted_ids.append(Replicate() if pi.is_partial() else pi)
            wanted_w.append(Replicate())
            out.append(wanted_ids[-1])
    shape = (*ids.shape, weight.shape[1])
    if not rows:
        return [tuple(wanted_ids), tuple(wanted_w)], tuple(out), shape
    spec = weight._spec.with_placements(tuple(wanted_w))
    first, count = spec.local_box()[1][0], spec.local_box()[0][0]
    padding = None if padding_idx is None else padding_idx % weight.shape[0]
    return [tuple(wanted_ids), tuple(wanted_w)], tuple(out), shape, _rows_lookup(first, count, padding)


def _rows_lookup(first, count, padding):
    """The lookup in this rank's rows [first, first + count) of the table: the others' ids give zeros (and the
    padding row, if it is here, gets no gradient)."""
    lookup = OPS["embedding"].function
    local_padding = padding - first if padding is not None and first <= padding < first + count else None

    def run(ids, table, *options):
        if count == 0:   # (no rows here: zeros, still of the table, so that its empty gradient is made)
            return (table.sum() * 0).expand(*ids.shape, table.shape[1])
        mine = (ids >= first) & (ids < first + count)
        local = (ids - first) * mine
        return lookup(local, table, local_padding) * mine.unsqueeze(-1).to(table.dtype)
    return run


attach_rule("layer_norm", "sharding", layer_norm_rule)
attach_rule("embedding", "sharding", embedding_rule)


def cross_entropy_rule(args, kwargs):
    """cross_entropy / nll_loss rows (the kernel F.cross_entropy calls): the classes whole, the rows split as the
    logits' rows (targets alike). Per-row losses keep the rows' shards; a sum is a partial sum; a mean is each
    rank's sum over the whole count of counted rows (weighted), a partial sum too. Inside loss_parallel() the
    logits are split by class instead (``loss_parallel.py``)."""
    from .._api import DTensor
    if loss_parallel.active.get():
        return loss_parallel.rule(args, kwargs)
    x, target, weight, ignore_index, smoothing, logits, reduction = args
    if not isinstance(target, DTensor) or (weight is not None and not isinstance(weight, DTensor)):
        raise NotImplementedError("cross_entropy's sharding rule takes the targets (and any class weights) as "
                                  "DTensors")
    rows = tuple(p if p == Shard(0) else Replicate() for p in x.placements)
    wanted = [rows, tuple(Shard(0) if p == Shard(0) else Replicate() for p in rows)]
    if weight is not None:
        wanted.append((Replicate(),) * len(rows))
    split = any(p.is_shard() for p in rows)
    if reduction == "none":
        return wanted, rows, (x.shape[0],)
    out = tuple(Partial() if p.is_shard() else Replicate() for p in rows)
    if not split or reduction == "sum":
        return wanted, out, ()
    every = target.full_tensor()   # (the whole count: the counted rows, weighted by their class's weight)
    counted = (every != ignore_index)
    safe = every * counted
    total = (OPS["sum"].function(counted.to(x.dtype)) if weight is None
             else OPS["sum"].function(weight.full_tensor()[safe] * counted.to(x.dtype)))
    count = float(total.item())
    rows_loss = OPS["_cross_entropy_rows"].function
    return wanted, out, (), lambda x_, t_, *w_: rows_loss(x_, t_, w_[0] if weight is not None else None,
                                                          ignore_index, smoothing, logits, "sum") / count


cross_entropy_rule.takes_plain_tensors = loss_parallel.active.get   # (the targets, inside loss_parallel())
attach_rule("_cross_entropy_rows", "sharding", cross_entropy_rule)


def dropout_rule(args, kwargs):
    """Dropout's mask is the whole tensor's, drawn alike on every rank (the generators agree: seeded alike, they
    claim the same numbers), and each rank keeps its box of it: a replicated tensor gets one mask everywhere,
    shards get distinct parts of it, and the result is the single process's. A partial sum stays one (the same
    mask scales every part)."""
    x, p = args[0], (args[1] if len(args) > 1 else kwargs["p"])
    shape, box = tuple(x.shape), x._spec.local_box()
    dropout, ones = OPS["_fused_dropout"].function, OPS["ones"].function

    def run(piece, *rest, **options):
        mask = dropout(ones(*shape, dtype=piece.dtype, device=piece.device), p)
        return piece * mask[tuple(slice(o, o + s) for s, o in zip(*box))]
    return [x.placements], x.placements, shape, run


attach_rule("_fused_dropout", "sharding", dropout_rule)


def attention_rule(args, kwargs):
    """scaled_dot_product_attention on (batch, heads, length, features) query, key and value: shards of the batch
    or the heads are kept (each rank attends within its heads: Megatron's attention), the lengths and features
    are gathered; a mask (a DTensor) split as the scores where it has those dimensions, whole elsewhere. Key and
    value heads must split as the query's (no grouped heads); dropout inside a split attention is refused (each
    rank's kernel would draw its piece's mask from the same counters: not the single process's)."""
    from .._api import DTensor
    q = args[0]
    dims = q.ndim
    keep = tuple(p if p.is_shard() and p.dim < dims - 2 else Replicate() for p in q.placements)
    mask = args[3] if len(args) > 3 else None
    split = any(p.is_shard() for p in keep)
    if len(args) > 6 and args[6] and any(p.is_shard() and p.dim == dims - 3 for p in keep):
        raise NotImplementedError("scaled_dot_product_attention's sharding rule: grouped key/value heads (enable_gqa) "
                                  "cannot be split over heads yet")
    if len(args) > 7 and args[7] and split:
        raise NotImplementedError("scaled_dot_product_attention's sharding rule: dropout_p > 0 with the batch or "
                                  "heads split is not supported yet (apply dropout outside, or replicate first)")
    wanted = [keep, keep, keep]
    if isinstance(mask, DTensor):   # (its dimensions line up with the scores' from the right)
        lead = dims - mask.ndim
        wanted.append(tuple(Shard(p.dim - lead) if p.is_shard() and p.dim >= lead and mask.shape[p.dim - lead] != 1
                            else Replicate() for p in keep))
    return wanted, keep, (*q.shape[:-1], args[2].shape[-1]), _attend


def _attend(q, k, v, mask, scale, is_causal, enable_gqa, dropout_p=0.0):
    """The fused kernel on this rank's heads, or, where its piece is empty (the kernel needs every size), the
    composition, which gives the empty answer."""
    if q.numel() and k.numel() and v.numel():
        return OPS["_fused_attention"].function(q, k, v, mask, scale, is_causal, enable_gqa, dropout_p)
    from ....nn.functional import _sdpa_unfused
    return _sdpa_unfused(q, k, v, mask, dropout_p, is_causal, scale, enable_gqa)


attach_rule("_fused_attention", "sharding", attention_rule)
