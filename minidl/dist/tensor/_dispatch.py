"""DTensor's side of minidl's ops (``ops.overrides``): an op called with DTensors runs by its sharding rule, the
registry's "sharding" rule of that op. The rule says which placements the op needs of its DTensor inputs and
how its output lies; the inputs are redistributed to those (differentiably), the op runs on the pieces (where
autograd runs, so parameters' gradients lie as they should), and the output is wrapped. An op without a rule
refuses, naming the op and the placements: never a silent gather.

A rule: ``rule(args, kwargs) -> (wanted, placements, shape[, local_fn])``: the placements each DTensor argument
must have (in the order ``dtensors`` finds them), the output's placements and global shape (a list of each for an
op of several outputs; None for an op that writes its arguments in place and returns nothing), and, where the op on
the pieces is not the op itself, what to run on them instead (mean over a split dimension: the piece's sum over
the whole count). A local function may say that it makes some inputs' gradients whole itself where the
output is a partial sum (``whole_gradients``: their positions among the DTensor inputs).

A rule reads placements of Shard, Replicate and Partial: an input with a _StridedShard is first redistributed
to Replicate on those mesh dimensions (torch's ops do the same), unless the rule says it takes them as they lie
(``takes_strided``: rules whose result does not depend on which rows a rank holds, or that keep each rank's rows).
"""
from __future__ import annotations

import functools
import inspect

from ..._tensor import Tensor
from ...ops.registry import OPS
from ._redistribute import redistribute_local, replicated_partials
from ._spec import DTensorSpec
from .placement_types import Partial, Replicate, _StridedShard


def dtensors(args, kwargs) -> list:
    """The DTensor arguments, in order (one level into lists and tuples)."""
    from ._api import DTensor
    found = []
    for value in (*args, *kwargs.values()):
        for item in (value if isinstance(value, (list, tuple)) else (value,)):
            if isinstance(item, DTensor):
                found.append(item)
    return found


@functools.cache
def _signature(fn):
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):   # (a builtin without one: its arguments are taken as given)
        return None


def _positional(name, fn, args, kwargs):
    """(args, kwargs) with every argument that may be passed by position passed so: rules read positions."""
    signature = _signature(fn)
    if signature is None:
        return args, kwargs
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"minidl.{name}: {e}") from None
    return bound.args, bound.kwargs


def dispatch(name, fn, args, kwargs, in_place=False):
    """``fn`` (op ``name``, or with ``in_place`` its in-place twin, writing its first argument) on DTensors."""
    from ._api import _MIXED, DTensor, _named
    call = _positional(name, fn, args, kwargs)   # (how fn takes them; the rule reads them as the op does)
    args, kwargs = _positional(name, OPS[name].function, args, kwargs) if in_place else call
    inputs = dtensors(args, kwargs)
    meshes = {d.device_mesh for d in inputs}
    if len(meshes) > 1:
        raise RuntimeError(f"Cannot run minidl.{name} on inputs with different meshes: got "
                           f"{' and '.join(str(m) for m in meshes)}")
    rule = OPS[name].rules.get("sharding")
    plain_ok = getattr(rule, "takes_plain_tensors", None)   # (a rule that takes them, when it says so)
    if not (plain_ok and plain_ok()):
        for value in (*args, *kwargs.values()):
            for item in (value if isinstance(value, (list, tuple)) else (value,)):
                if isinstance(item, Tensor) and item.ndim > 0:
                    raise RuntimeError(f"minidl.{name} {_MIXED}")
    if rule is None:
        raise NotImplementedError(f"minidl.{name} has no sharding rule for DTensors (inputs placed "
                                  f"{', '.join(_named(d.placements) for d in inputs)}); redistribute to Replicate and "
                                  f"call it on .to_local(), or give the op a rule")
    target = args[0] if in_place else None   # (the tensor written: never a gathered copy of it, which a rule may see)
    strided = [d for d in inputs if any(isinstance(p, _StridedShard) for p in d.placements)]
    if strided and not getattr(rule, "takes_strided", False):
        unstrided = {id(d): d.redistribute(placements=[Replicate() if isinstance(p, _StridedShard) else p
                                                       for p in d.placements]) for d in strided}
        args, kwargs, call = _swapped(args, unstrided), _swapped(kwargs, unstrided), _swapped(call, unstrided)
        inputs = dtensors(args, kwargs)
    try:
        wanted, placements, shape, *instead = rule(args, kwargs)
    except NotImplementedError as e:   # (a rule refusing these arguments: named with the placements)
        raise NotImplementedError(f"{e} (inputs placed {', '.join(_named(d.placements) for d in inputs)})") from None
    fn = instead[0] if instead else fn
    if in_place:
        if (wanted[0] != target.placements or placements != target.placements or tuple(shape) != target.shape
                or instead):
            raise NotImplementedError(
                f"minidl.{name}_ on a DTensor placed {_named(target.placements)}: in place needs the result placed "
                f"and shaped as it is, but {name}'s rule places it {_named(placements)} (use {name}, not {name}_)")
    first = placements[0] if isinstance(placements, list) else placements   # (several outputs lie alike)
    first = first if first is not None else inputs[0].placements
    whole = getattr(fn, "whole_gradients", ())   # (inputs whose gradient the local fn makes whole where out is P)
    pieces = iter([_piece(d, w, replicated_partials(first) if i in whole else first)
                   for i, (d, w) in enumerate(zip(inputs, wanted))])
    out = fn(*[_local(a, pieces, DTensor) for a in call[0]],
             **{k: _local(v, pieces, DTensor) for k, v in call[1].items()})
    del pieces   # (the pieces go with the op's graph only: no reference outlives the call)
    if placements is None:   # (an op that writes its arguments' pieces and returns nothing)
        return out
    if in_place:
        return target
    mesh = inputs[0].device_mesh
    if isinstance(out, (tuple, list)):   # (several outputs: the rule gives a placements and a shape for each)
        return type(out)(DTensor(o, DTensorSpec(mesh, tuple(p), tuple(s))) for o, p, s in zip(out, placements, shape))
    return DTensor(out, DTensorSpec(mesh, tuple(placements), tuple(shape)))


def _local(value, pieces, dtensor):
    """``value`` with each DTensor (``dtensor``: the class) replaced by the next of ``pieces`` (its local piece,
    moved as the rule wants)."""
    if isinstance(value, dtensor):
        return next(pieces)
    if isinstance(value, (list, tuple)):
        return type(value)(_local(item, pieces, dtensor) for item in value)
    return value


def _swapped(value, by_id):
    """``value`` (arguments: tuples, lists and dicts of them) with each DTensor replaced by ``by_id[id(it)]``."""
    if isinstance(value, dict):
        return {k: _swapped(v, by_id) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_swapped(v, by_id) for v in value)
    return by_id.get(id(value), value)


def _piece(d, placements, out_placements):
    """DTensor ``d``'s piece at the ``placements`` the rule wanted, with its gradient made to lie as ``d`` does.
    The op's backward on pieces gives, on a mesh dimension where the input was whole (Replicate) but the output
    is split (Shard) or a partial sum, only this rank's share of the input's gradient: a partial sum (an average
    where the output is one), reduced on the way back — with the move back where the input was moved, so that
    an all-gather's backward is one reduce-scatter; elsewhere the piece's gradient is already right."""
    from ._api import _GradAs
    spec = d._spec.with_placements(placements)
    wanted = replicated_partials(placements)
    lies = tuple(Partial(q.reduce_op if q.is_partial() else "sum") if p.is_replicate() and not q.is_replicate() else w
                 for p, q, w in zip(placements, out_placements, wanted))
    if tuple(placements) != d.placements:
        return redistribute_local(d._local_tensor, d._spec, spec, arrives=lies)
    if lies == wanted or not d._local_tensor.requires_grad:
        return d._local_tensor
    return _GradAs.apply(d._local_tensor, spec.with_placements(lies), wanted)
