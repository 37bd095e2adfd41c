"""get_/set_ model and optimizer state dicts keyed by parameter names (torch.distributed.checkpoint.state_dict).

Keys are canonical FQNs: a parameter's name in the plain model, without the ``module.`` of a
DistributedDataParallel wrapper or the ``_orig_mod.`` of ``minidl.compile``, so that a checkpoint of a wrapped
model loads into a plain one and back. An optimizer's state is keyed by those names instead of positions, so that
several optimizers merge into one dict and each finds its own part again when loading.

Sharded parameters and optimizer states are DTensors (``fully_shard``, tensor parallelism): a state dict holds
them as they lie, which ``minidl.dist.checkpoint.save`` writes as boxes of the whole; ``full_state_dict=True``
gathers each into a plain whole tensor, and a whole tensor loaded into a DTensor's place is cut to the
DTensor's layout (every rank has it whole: each keeps its piece, no message).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

from ... import Tensor, device as Device, empty, no_grad, tensor, zeros_like
from ...compiler import OptimizedModule
from ...nn.module import _IncompatibleKeys
from ...optim.optimizer import Optimizer
from ..collectives import broadcast
from ..ddp import DistributedDataParallel
from ..objects import broadcast_object_list
from ..state import get_rank, is_initialized
from ..tensor._api import DTensor, distribute_tensor

__all__ = ["StateDictOptions", "get_model_state_dict", "get_optimizer_state_dict", "get_state_dict",
           "set_model_state_dict", "set_optimizer_state_dict", "set_state_dict"]

_STATE, _PG, _PARAMS = "state", "param_groups", "params"


@dataclass
class StateDictOptions:
    """How get_*/set_* build and load state dicts (torch's fields and defaults).

    ``full_state_dict``: gather sharded tensors (none exist in minidl yet: the same tensors come back);
    with ``cpu_offload`` too, under a process group, only rank 0 gets the dict, the others ``{}``.
    ``cpu_offload``: returned tensors moved to the CPU. ``ignore_frozen_params``: the model dict leaves out
    parameters with ``requires_grad=False``. ``keep_submodule_prefixes``: with ``submodules`` (deprecated),
    whether keys keep the submodule's name. ``strict``: passed to ``load_state_dict``; also whether a missing
    or unknown name in an optimizer dict is an error. ``broadcast_from_rank0``: on set_*, only rank 0's dict
    is read and reaches every rank (needs ``full_state_dict``). ``flatten_optimizer_state_dict``: optimizer
    dicts as one level, ``"state.<fqn>.<name>"`` and ``"param_groups.<fqn>.<key>"``, both ways.
    ``dsd_fqn_modifiers``: the method a module may have that maps a child's name in its state-dict keys to the
    attribute actually holding that child (torch's hook for modules whose keys skip an attribute).
    """

    full_state_dict: bool = False
    cpu_offload: bool = False
    ignore_frozen_params: bool = False
    keep_submodule_prefixes: bool = True
    strict: bool = True
    broadcast_from_rank0: bool = False
    flatten_optimizer_state_dict: bool = False
    dsd_fqn_modifiers: str = "_fqn_modifiers"


# ---------------------------------------------------------------------------------------------- names
def _fqn(model, key: str, modifiers: str = "_fqn_modifiers") -> str:
    """The canonical name of ``model``'s state-dict key ``key``: wrappers' own segments dropped."""
    names, obj = [], model
    for part in key.split("."):
        if (isinstance(obj, DistributedDataParallel) and part == "module"
                or isinstance(obj, OptimizedModule) and part == "_orig_mod"):
            obj = obj._modules[part]
            continue
        hidden = getattr(obj, modifiers, None)
        holder = hidden().get(part) if callable(hidden) else None
        if holder is not None and hasattr(obj, holder):   # the child lives under another attribute
            obj = getattr(obj, holder)
        names.append(part)
        obj = getattr(obj, "_modules", {}).get(part)
    return ".".join(names)


def _fqns_by_param(model, modifiers: str = "_fqn_modifiers") -> dict:
    """id(parameter) -> its canonical FQNs in model order (a shared parameter has several; the first is
    the one a saved optimizer state is filed under)."""
    fqns: dict = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        fqns.setdefault(id(p), []).append(_fqn(model, name, modifiers))
    return fqns


def _param_names(model, optim, i, fqns, what) -> list:
    """The FQNs of every parameter of ``optim`` (the i-th optimizer), in its order; a parameter the model
    does not have is an error (its state could be filed under no name)."""
    names = []
    for group in optim.param_groups:
        for p in group[_PARAMS]:
            if id(p) not in fqns:
                raise KeyError(f"{what}: optimizer {i} ({type(optim).__name__}) holds a parameter of shape "
                               f"{tuple(p.shape)} that is not a parameter of the model ({type(model).__name__}); "
                               f"pass the model whose parameters the optimizers step")
            names.append(fqns[id(p)])
    return names


# ---------------------------------------------------------------------------------------------- checks
def _as_tuple(optimizers) -> tuple:
    return (optimizers,) if isinstance(optimizers, Optimizer) else tuple(optimizers)


def _options(options, submodules=None, *, optimizers=None, what="") -> StateDictOptions:
    if submodules:
        warnings.warn(f"{what}: `submodules` is deprecated (torch too will remove it); filter the returned "
                      f"state dict by key instead", FutureWarning, stacklevel=3)
    if optimizers is not None and not optimizers:
        raise RuntimeError(f"{what}: no optimizers were passed")
    options = options or StateDictOptions()
    if options.broadcast_from_rank0 and not options.full_state_dict:
        raise ValueError(f"{what}: StateDictOptions(broadcast_from_rank0=True) needs full_state_dict=True "
                         f"(rank 0 holds the full state dict)")
    return options


def _rank_note() -> str:
    return f" (rank {get_rank()})" if is_initialized() else ""


def _check_model_dict(sd, options, model, what, submodules=None) -> None:
    """An empty model dict is an error unless the options explain it (as in torch)."""
    if (not sd and not submodules and not options.ignore_frozen_params and options.strict
            and not (options.cpu_offload and options.full_state_dict) and not options.broadcast_from_rank0):
        raise RuntimeError(f"{what}: the model state dict of {type(model).__name__} is empty{_rank_note()}, "
                           f"but StateDictOptions(strict=True) asks for one")


def _check_optim_dict(osd, options, what) -> None:
    if not osd and not (options.cpu_offload and options.full_state_dict) and not options.broadcast_from_rank0:
        raise RuntimeError(f"{what}: the optimizer state dict is empty{_rank_note()}")


# ---------------------------------------------------------------------------------------------- get
def _returned(tree, options):
    """full_state_dict / cpu_offload applied to a returned dict: fresh containers, tensors on the CPU
    if asked; with both options under a process group only rank 0 keeps it (as torch, to spare memory)."""
    if not (options.full_state_dict or options.cpu_offload):
        return tree

    def copy(x):
        if isinstance(x, DTensor) and options.full_state_dict:
            x = x.full_tensor()   # (a collective: before rank 0 alone keeps the dict)
        if isinstance(x, (Tensor, DTensor)):
            return x.to("cpu") if options.cpu_offload else x
        if isinstance(x, dict):
            return {k: copy(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(copy(v) for v in x)
        if x is None or isinstance(x, (int, float, str, bytes)):
            return x
        raise ValueError(f"a state dict value of type {type(x).__name__} cannot be returned with "
                         f"full_state_dict or cpu_offload (tensors, numbers, strings, lists and dicts can)")
    tree = copy(tree)
    if options.full_state_dict and options.cpu_offload and is_initialized() and get_rank() != 0:
        return {}
    return tree


def _laid_like(value, like):
    """A whole tensor loaded where a DTensor lies: this rank's piece of it, laid out as ``like``."""
    if isinstance(like, DTensor) and isinstance(value, Tensor) and tuple(value.shape) == tuple(like.shape):
        return distribute_tensor(value.to(like.dtype), like.device_mesh, like.placements, src_data_rank=None)
    return value


def _model_state_dict(model, options, submodules=None):
    with no_grad():
        raw = model.state_dict()
    sd = type(raw)((_fqn(model, k, options.dsd_fqn_modifiers), v) for k, v in raw.items())
    if submodules:
        wanted = set(map(id, submodules))
        prefixes = [_fqn(model, name, options.dsd_fqn_modifiers) + "." for name, m in model.named_modules()
                    if id(m) in wanted]
        sd = {(k if options.keep_submodule_prefixes else k[len(p):]): v
              for k, v in sd.items() for p in prefixes if k.startswith(p)}
    if options.ignore_frozen_params:
        for name, p in model.named_parameters():
            if not p.requires_grad:
                sd.pop(_fqn(model, name, options.dsd_fqn_modifiers), None)
    return _returned(sd, options)


def _init_optim_state(optim) -> None:
    """Give a fresh optimizer its state, as torch does: one step with zero gradients and learning rate 0,
    so that its state dict holds every state tensor (what lets dcp.load fill it in place). An optimizer with
    state, or with any gradient (a stateless one mid-step), is left alone."""
    if optim.state:
        return
    params = [p for group in optim.param_groups for p in group[_PARAMS]]
    if any(p.grad is not None for p in params):
        return
    for p in params:
        if p.requires_grad:
            p.grad = zeros_like(p)
    lrs = [group.get("lr") for group in optim.param_groups]
    for group in optim.param_groups:
        if "lr" in group:
            group["lr"] = tensor(0.0) if isinstance(group["lr"], Tensor) else 0.0
    try:
        optim.step()
    finally:
        for group, lr in zip(optim.param_groups, lrs):
            if "lr" in group:
                group["lr"] = lr
        optim.zero_grad(set_to_none=True)


def _fqn_keyed(model, optimizers, fqns, what) -> dict:
    """The optimizers' state dicts merged into one, positions replaced by FQNs (their tensors are the
    optimizers' own, not copies)."""
    merged = {_STATE: {}, _PG: []}
    for i, optim in enumerate(optimizers):
        _init_optim_state(optim)
        names = [n[0] for n in _param_names(model, optim, i, fqns, what)]
        osd = optim.state_dict()
        merged[_STATE].update((names[pid], s) for pid, s in osd[_STATE].items())
        for group in osd[_PG]:
            group[_PARAMS] = [names[pid] for pid in group[_PARAMS]]
            merged[_PG].append(group)
    return merged


def _flatten(osd) -> dict:
    """torch's flat optimizer dict: ``state.<fqn>.<name>`` (nested state dicts go deeper) and every
    group's hyperparameters repeated per parameter as ``param_groups.<fqn>.<key>``."""
    flat = {}

    def put(key, value):
        if isinstance(value, dict):
            for k, v in value.items():
                put(f"{key}.{k}", v)
        elif isinstance(value, (Tensor, int, float)):
            flat[key] = value
        else:
            raise NotImplementedError(f"flatten_optimizer_state_dict: the state value at {key!r} is a "
                                      f"{type(value).__name__}; only tensors, numbers and dicts flatten")
    for fqn, state in osd[_STATE].items():
        put(f"{_STATE}.{fqn}", state)
    for group in osd[_PG]:
        for fqn in group[_PARAMS]:
            flat.update((f"{_PG}.{fqn}.{k}", v) for k, v in group.items() if k != _PARAMS)
    return flat


def _optim_state_dict(model, optimizers, options, what):
    osd = _fqn_keyed(model, optimizers, _fqns_by_param(model, options.dsd_fqn_modifiers), what)
    return _returned(_flatten(osd) if options.flatten_optimizer_state_dict else osd, options)


def get_model_state_dict(model, *, submodules=None, options=None) -> dict:
    """``model``'s state dict keyed by canonical FQNs."""
    what = "get_model_state_dict"
    options = _options(options, submodules, what=what)
    sd = _model_state_dict(model, options, submodules)
    _check_model_dict(sd, options, model, what, submodules)
    return sd


def get_optimizer_state_dict(model, optimizers, *, submodules=None, options=None) -> dict:
    """The optimizers' state merged into one dict keyed by the FQNs of ``model``'s parameters
    (``submodules`` does not filter it, as in torch). A fresh optimizer gets its state first."""
    what = "get_optimizer_state_dict"
    optimizers = _as_tuple(optimizers)
    options = _options(options, submodules, optimizers=optimizers, what=what)
    osd = _optim_state_dict(model, optimizers, options, what)
    _check_optim_dict(osd, options, what)
    return osd


def get_state_dict(model, optimizers, *, submodules=None, options=None) -> tuple:
    """(get_model_state_dict, get_optimizer_state_dict) in one call; no optimizers give ``{}``."""
    what = "get_state_dict"
    optimizers = _as_tuple(optimizers)
    options = _options(options, submodules, what=what)
    sd = _model_state_dict(model, options, submodules)
    osd = _optim_state_dict(model, optimizers, options, what) if optimizers else {}
    _check_model_dict(sd, options, model, what, submodules)
    if optimizers:
        _check_optim_dict(osd, options, what)
    return sd, osd


# ---------------------------------------------------------------------------------------------- set
@dataclass(frozen=True)
class _TensorSpec:
    """A tensor's place in a broadcast structure: what the receivers allocate."""
    shape: tuple
    dtype: object


def _device(model):
    """Where received tensors go: the device of the model's tensors (one only, as torch requires)."""
    with no_grad():
        devices = {t.device for t in model.state_dict().values() if isinstance(t, Tensor) and t.dim() > 0}
    if len(devices) > 1:
        raise ValueError(f"broadcast_from_rank0: the model ({type(model).__name__}) has tensors on several "
                         f"devices ({sorted(map(str, devices))}); it must be on one")
    return devices.pop() if devices else Device("cpu")


def _from_rank0(tree, device):
    """Rank 0's ``tree`` on every rank: its structure, numbers and 0-d tensors in one broadcast_object_list,
    then each other tensor by a broadcast of its own into a buffer on ``device`` (so no rank builds a
    second, pickled copy of the tensors). What other ranks pass is not read."""
    root = get_rank() == 0
    tensors = []

    def strip(x):
        if isinstance(x, Tensor):
            if x.dim() == 0:
                return x.detach().cpu()
            tensors.append(x)
            return _TensorSpec(tuple(x.shape), x.dtype)
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(strip(v) for v in x)
        return x
    box = [strip(tree) if root else None]
    broadcast_object_list(box, src=0)
    sent = iter(tensors)

    def fill(x):
        if isinstance(x, _TensorSpec):
            t = next(sent).detach().to(device) if root else empty(x.shape, dtype=x.dtype, device=device)
            broadcast(t, src=0)
            return t
        if isinstance(x, dict):
            return {k: fill(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return type(x)(fill(v) for v in x)
        return x
    return fill(box[0])


def _by_module(model, state_dict, what):
    """A model dict keyed by submodules (deprecated, as in torch) as one keyed by FQNs."""
    if not state_dict or not all(hasattr(k, "named_parameters") for k in state_dict):
        return state_dict
    warnings.warn(f"{what}: a model_state_dict keyed by submodules is deprecated (torch too will remove it); "
                  f"key it by FQNs", FutureWarning, stacklevel=3)
    out = {}
    for submodule, sub in state_dict.items():
        for name, m in model.named_modules():
            if m is submodule:
                out.update((f"{_fqn(model, name)}.{k}", v) for k, v in sub.items())
    return out


def _load_model(model, state_dict, options) -> _IncompatibleKeys:
    """Canonical FQNs back to the model's own keys (a wrapper's prefix put back), then load_state_dict.
    With full_state_dict, a key the dict lacks keeps the model's value instead of being missing (torch's
    behaviour), except with broadcast_from_rank0 and strict."""
    if options.broadcast_from_rank0:
        state_dict = _from_rank0(state_dict, _device(model))
    if not state_dict:
        return _IncompatibleKeys([], [])
    state_dict = dict(state_dict)
    with no_grad():
        own = model.state_dict(keep_vars=True)
    for key in own:
        fqn = _fqn(model, key, options.dsd_fqn_modifiers)
        if fqn == key:
            continue
        if fqn in state_dict:
            state_dict[key] = state_dict.pop(fqn)
        elif options.strict:
            raise RuntimeError(f"set_model_state_dict: model_state_dict has no key {fqn!r} (the parameter or "
                               f"buffer {key!r} of {type(model).__name__}); StateDictOptions(strict=False) "
                               f"loads without it")
    if options.full_state_dict and not (options.broadcast_from_rank0 and options.strict):
        for key, value in own.items():
            state_dict.setdefault(key, value)
    state_dict = {k: _laid_like(v, own[k]) if k in own else v for k, v in state_dict.items()}
    return model.load_state_dict(state_dict, strict=options.strict)


def _nested(flat, prefix) -> dict:
    """The nested dict the flat keys under ``prefix.`` stand for."""
    out: dict = {}
    for key, value in flat.items():
        if key.startswith(prefix + "."):
            *path, last = key[len(prefix) + 1:].split(".")
            node = out
            for part in path:
                node = node.setdefault(part, {})
            node[last] = value
    return out


def _unflatten(model, optim, i, flat, fqns, options) -> dict:
    """``optim``'s part of a flat dict, nested and keyed by FQNs. Its state names are those the optimizer
    has now (it was given state first)."""
    what = "set_optimizer_state_dict (flatten_optimizer_state_dict)"
    state, groups = {}, []
    for gi, group in enumerate(optim.param_groups):
        keys = [k for k in group if k != _PARAMS]
        names = []
        for p in group[_PARAMS]:
            candidates = fqns[id(p)]
            for fqn in candidates:
                if len(candidates) > 1 and not any(f"{_PG}.{fqn}.{k}" in flat for k in keys):
                    continue  # a shared parameter is saved under one of its names
                names.append(fqn)
                if not p.requires_grad:
                    continue
                state[fqn] = {}
                for name in optim.state.get(p, {}):
                    key = f"{_STATE}.{fqn}.{name}"
                    if key in flat:
                        state[fqn][name] = flat[key]
                    elif nested := _nested(flat, key):
                        state[fqn][name] = nested
                    elif options.strict:
                        raise KeyError(f"{what}: optim_state_dict has no {key!r} (a state of parameter {fqn!r} "
                                       f"of {type(model).__name__}); StateDictOptions(strict=False) loads "
                                       f"without it")
        if not names:
            raise ValueError(f"{what}: group {gi} of optimizer {i} has no parameter in optim_state_dict, so "
                             f"its hyperparameters cannot be found")
        saved = {}
        for k in keys:
            key = f"{_PG}.{names[0]}.{k}"
            if key not in flat:
                raise KeyError(f"{what}: optim_state_dict has no {key!r} (hyperparameter {k!r} of the group of "
                               f"parameter {names[0]!r} of {type(model).__name__})")
            saved[k] = flat[key]
        groups.append({**saved, _PARAMS: names})
    return {_STATE: state, _PG: groups}


def _split(model, optim, i, osd, fqns, options) -> dict:
    """``optim``'s part of a merged FQN-keyed dict: its parameters' states and, for each of its groups,
    the hyperparameters of the saved group that holds the group's parameters."""
    saved_groups = osd[_PG]
    if all(isinstance(n, int) for g in saved_groups for n in g[_PARAMS]):
        return osd  # a plain optimizer.state_dict(): loaded as it is
    owner = {fqn: si for si, g in enumerate(saved_groups) for fqn in g[_PARAMS]}
    state, groups = {}, []
    for gi, group in enumerate(optim.param_groups):
        names, source = [], None
        for p in group[_PARAMS]:
            candidates = fqns[id(p)]
            for fqn in candidates if len(candidates) == 1 else [n for n in candidates if n in owner]:
                names.append(fqn)
                source = owner.get(fqn, source)
                if not p.requires_grad:
                    continue
                if fqn in osd[_STATE]:
                    state[fqn] = osd[_STATE][fqn]
                elif options.strict:
                    raise RuntimeError(f"set_optimizer_state_dict: optim_state_dict['state'] has no entry for "
                                       f"parameter {fqn!r} of {type(model).__name__}, which requires grad; "
                                       f"StateDictOptions(strict=False) loads without it")
        if not group[_PARAMS]:
            empties = [si for si, g in enumerate(saved_groups) if not g[_PARAMS]]
            if len(empties) != 1 or len(saved_groups) != len(optim.param_groups):
                raise ValueError("set_optimizer_state_dict: a param group without parameters is matched only to "
                                 "the one saved group without parameters, of a single optimizer")
            source = empties[0]
        if source is None:
            raise ValueError(f"set_optimizer_state_dict: no group of optim_state_dict['param_groups'] holds a "
                             f"parameter of group {gi} of optimizer {i} ({type(optim).__name__}) of "
                             f"{type(model).__name__}, so its hyperparameters cannot be found")
        groups.append({**{k: v for k, v in saved_groups[source].items() if k != _PARAMS}, _PARAMS: names})
    return {_STATE: state, _PG: groups}


def _names_a_param(key, known) -> bool:
    """Whether flat key ``key`` is ``state.<fqn>...`` or ``param_groups.<fqn>...`` of a known FQN."""
    parts = key.split(".")
    return parts[0] in (_STATE, _PG) and any(".".join(parts[1:j]) in known for j in range(2, len(parts)))


def _check_names(model, osd, fqns, options) -> None:
    """Under strict, every name in the dict must be a parameter of the model (torch ignores others: a
    misspelt or foreign name would silently load nothing)."""
    if not options.strict:
        return
    known = {n for names in fqns.values() for n in names}
    if _STATE in osd:
        names = dict.fromkeys([*osd[_STATE], *(n for g in osd.get(_PG, ()) for n in g[_PARAMS])])
        unknown = [n for n in names if not isinstance(n, int) and n not in known]
    else:
        unknown = [k for k in osd if not _names_a_param(k, known)]
    if unknown:
        raise KeyError(f"set_optimizer_state_dict: optim_state_dict names {unknown[:5]}"
                       f"{' ...' if len(unknown) > 5 else ''}, which are no parameters of {type(model).__name__}; "
                       f"StateDictOptions(strict=False) skips them")


def _merged(local, full):
    """``full`` laid over ``local`` leaf by leaf (what torch's full_state_dict load does): what the loaded
    dict lacks keeps the optimizer's current value."""
    if isinstance(full, dict) and isinstance(local, dict):
        return {**local, **{k: _merged(local[k], v) if k in local else v for k, v in full.items()}}
    if isinstance(full, (list, tuple)) and isinstance(local, (list, tuple)):
        return type(full)([*(_merged(a, b) for a, b in zip(local, full)), *full[len(local):], *local[len(full):]])
    return full


def _load_optim(model, optimizers, osd, options) -> None:
    if options.broadcast_from_rank0:
        osd = _from_rank0(osd, _device(model))
    fqns = _fqns_by_param(model, options.dsd_fqn_modifiers)
    if osd:
        _check_names(model, osd, fqns, options)
    for i, optim in enumerate(optimizers):
        _init_optim_state(optim)
        _param_names(model, optim, i, fqns, "set_optimizer_state_dict")
        if not osd:
            mine = {}
        elif _STATE in osd:
            mine = _split(model, optim, i, osd, fqns, options)
        else:
            mine = _unflatten(model, optim, i, osd, fqns, options)
        if options.full_state_dict:
            mine = _merged(_fqn_keyed(model, (optim,), fqns, "set_optimizer_state_dict"), mine)
        if mine:
            params = {fqn: p for group in optim.param_groups for p in group[_PARAMS] for fqn in fqns[id(p)]}
            mine[_STATE] = {fqn: {k: _laid_like(v, params.get(fqn)) for k, v in state.items()}
                            for fqn, state in mine[_STATE].items()}
        optim.load_state_dict(mine)


def set_model_state_dict(model, model_state_dict, *, options=None) -> _IncompatibleKeys:
    """Load an FQN-keyed dict into ``model`` (wrapped or not); load_state_dict's missing/unexpected keys."""
    what = "set_model_state_dict"
    model_state_dict = _by_module(model, model_state_dict, what)
    options = _options(options, what=what)
    _check_model_dict(model_state_dict, options, model, what)
    with no_grad():
        return _load_model(model, model_state_dict, options)


def set_optimizer_state_dict(model, optimizers, optim_state_dict, *, options=None) -> None:
    """Load an FQN-keyed (or flat) optimizer dict into the optimizers, each taking its parameters' part.
    Call it before backward() or after step(), as in torch (a fresh optimizer is stepped once with zero
    gradients to get its state)."""
    what = "set_optimizer_state_dict"
    optimizers = _as_tuple(optimizers)
    options = _options(options, optimizers=optimizers, what=what)
    _check_optim_dict(optim_state_dict, options, what)
    with no_grad():
        _load_optim(model, optimizers, optim_state_dict, options)


def set_state_dict(model, optimizers, *, model_state_dict, optim_state_dict, options=None) -> _IncompatibleKeys:
    """set_optimizer_state_dict then set_model_state_dict; an empty model dict loads only the optimizers.
    With broadcast_from_rank0 every rank takes part in the model's load (torch's ranks other than 0 skip
    it when they pass ``{}``, leaving rank 0's broadcast unanswered)."""
    what = "set_state_dict"
    model_state_dict = _by_module(model, model_state_dict, what)
    optimizers = _as_tuple(optimizers)
    options = _options(options, optimizers=optimizers if not model_state_dict else None, what=what)
    if optimizers:
        _check_optim_dict(optim_state_dict, options, what)
    with no_grad():
        if optimizers:
            _load_optim(model, optimizers, optim_state_dict, options)
        if model_state_dict or options.broadcast_from_rank0:
            return _load_model(model, model_state_dict, options)
    return _IncompatibleKeys([], [])
