"""parallelize_module: a plan of parallel styles applied to a module's submodules, found by name (torch's)."""
from __future__ import annotations

import warnings
from fnmatch import fnmatch

from .._api import DTensor, _default_mesh, _named
from .style import ParallelStyle

__all__ = ["parallelize_module"]


def parallelize_module(module, device_mesh=None, parallelize_plan=None, *, src_data_rank: int | None = 0):
    """Split ``module`` over the 1-D ``device_mesh`` by ``parallelize_plan``: one ParallelStyle for the module
    itself, or {submodule name: style}. A name's dotted parts match child names as shell patterns ("layers.*.mlp"
    is every layer's mlp; "" is the module itself); a name that matches nothing is skipped with a warning, as
    torch's. ``src_data_rank``: the mesh rank whose values the split parameters take (None: each rank's own).
    Parameters tied between submodules (an embedding and its output head) stay one parameter where the plan
    places every user alike. Returns ``module``, changed in place."""
    mesh = device_mesh or _default_mesh(None)
    if mesh.ndim != 1:
        names = f" {mesh.mesh_dim_names}" if mesh.mesh_dim_names else ""
        raise ValueError(f"parallelize_module takes a 1-D device mesh, got a {mesh.ndim}-D mesh{names}: pass its "
                         f"tensor-parallel dimension, as device_mesh[\"tp\"]")
    if parallelize_plan is None:
        warnings.warn("No parallelize_plan is provided and auto-parallel is not supported at the moment, so this "
                      "parallelize_module call will do nothing.", stacklevel=2)
        return module
    ties = _ties(module)
    _apply(module, mesh, parallelize_plan, src_data_rank, "")
    _retie(module, ties)
    return module


def _apply(module, mesh, plan, src_data_rank, where, key=None):
    """``plan`` on ``module`` (reached by the dotted name ``where``); ``key``: the plan's key that led here."""
    if isinstance(plan, ParallelStyle):
        plan.src_data_rank = src_data_rank
        try:
            return plan._apply(module, mesh)
        except NotImplementedError as e:
            raise NotImplementedError(f"parallelize_module: {type(plan).__name__} on "
                                      f"{where or 'the module itself'}: {e}") from None
    if not isinstance(plan, dict):
        raise TypeError(f"parallelize_module: expected a ParallelStyle or a dict of submodule name -> ParallelStyle "
                        f"for parallelize_plan, got {type(plan).__name__}")
    for path, style in plan.items():
        if path == "":
            _apply(module, mesh, style, src_data_rank, where, key)
            continue
        token, _, rest = path.partition(".")
        matched = [(name, child) for name, child in module.named_children() if fnmatch(name, token)]
        if not matched:
            warnings.warn(f"Parallelize plan key '{key or path}' could not be resolved: no submodule matching token "
                          f"'{token}' in {where or 'the module'} ({type(module).__name__}: children "
                          f"{[name for name, _ in module.named_children()]}), skipping this plan entry.",
                          stacklevel=3)
            continue
        for name, child in matched:
            inner = f"{where}.{name}" if where else name
            _apply(child, mesh, {rest: style} if rest else style, src_data_rank, inner, key or path)
    return module


def _ties(module) -> list:
    """The parameters held under more than one name: a list of their names, one list per parameter."""
    names = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    return [found for found in names.values() if len(found) > 1]


def _retie(module, ties) -> None:
    """Each tied parameter the plan replaced by one DTensor per user made one again (the first): the users'
    pieces are alike when the plan placed them alike; placed differently, or some left whole, they cannot be."""
    for names in ties:
        holders = [(module.get_submodule(n.rpartition(".")[0]), n.rpartition(".")[2]) for n in names]
        params = [getattr(m, key) for m, key in holders]
        if all(p is params[0] for p in params):
            continue
        placed = [p.placements if isinstance(p, DTensor) else None for p in params]
        if any(q is None or q != placed[0] for q in placed):
            shown = ", ".join(f"{n} {_named(q) if q else 'left a plain tensor'}" for n, q in zip(names, placed))
            raise ValueError(f"parallelize_module: the parameter tied between {', '.join(names)} is placed "
                             f"differently by the plan ({shown}); place every user of it alike (an Embedding "
                             f"split by RowwiseParallel and its Linear head by ColwiseParallel are both Shard(0))")
        for m, key in holders[1:]:
            m.register_parameter(key, params[0])
