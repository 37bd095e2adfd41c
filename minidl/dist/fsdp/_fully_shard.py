"""``fully_shard`` (torch's FSDP2): a module's parameters sharded over the data-parallel ranks, whole only while
its forward or backward runs.

Call it bottom-up: on each block, then on the root, which takes the parameters no block took. Each call makes
one communication group (``_param_group.py``): its parameters become ``Shard(0)`` DTensors, the module's class
becomes ``FSDP<Name>`` (an ``FSDPModule``), and forward hooks gather the parameters before its forward and free
them after (``reshard_after_forward``; None: True for every module but the root, whose parameters backward
needs first). Optimizers step on the shards; the optimizer state is sharded with them.
"""
from __future__ import annotations

from ...nn.module import Module
from ..device_mesh import init_device_mesh
from ..state import get_world_size
from ._param_group import FSDPParam, ParamGroup, _map_tensors, _named
from ._policy import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy

__all__ = ["FSDPModule", "UnshardHandle", "fully_shard", "register_fsdp_forward_method"]


def fully_shard(module, *, mesh=None, reshard_after_forward=None, shard_placement_fn=None,
                mp_policy=MixedPrecisionPolicy(), offload_policy=OffloadPolicy(), ignored_params=None,
                dp_mesh_dims=None):
    """Shard ``module``'s parameters (those no earlier ``fully_shard`` call on a submodule took, nor in
    ``ignored_params``) over ``mesh``: 1-D, fully sharded; 2-D, replicated over dim 0 and sharded over dim 1
    (HSDP); default: every rank. Returns the module, now an ``FSDPModule``."""
    _check_arguments(module, reshard_after_forward, shard_placement_fn, mp_policy, offload_policy, dp_mesh_dims)
    if mesh is None:
        mesh = init_device_mesh("cpu", (get_world_size(),))
    if mesh.ndim not in (1, 2):
        raise ValueError(f"fully_shard: the mesh must be 1-D (FSDP) or 2-D (HSDP: replicate, shard), got {mesh}")
    inner = [p for m in module.modules() if isinstance(m, FSDPModule) and m is not module
             for p in m._fsdp_group.params]
    taken = {id(p.sharded) for p in inner}
    originals = {id(p.original()): p for p in inner if p.original() is not None}   # (the ones still held)
    ignored = {id(p) for p in ignored_params or ()}
    locations = {}
    for sub in module.modules():
        for name, p in sub._parameters.items():
            if p is not None and id(p) in originals:
                raise ValueError(f"fully_shard: {type(sub).__name__}.{name} is a parameter tied to one that "
                                 f"fully_shard already sharded with a submodule ({_named(originals[id(p)])}); "
                                 f"tied parameters must be in one group: apply fully_shard to a module holding "
                                 f"all their users")
            if p is not None and id(p) not in taken and id(p) not in ignored:
                locations.setdefault(id(p), (p, []))[1].append((sub, name))
    offload = isinstance(offload_policy, CPUOffloadPolicy) or None
    params = [FSDPParam(p, places, mesh, offload) for p, places in locations.values()]
    for p in params:
        p.install(p.sharded)
    group = ParamGroup(params, mesh, mp_policy, offload, reshard_after_forward)
    module._fsdp_group, module._fsdp_root, module._fsdp_calls = group, None, []
    module.__class__ = _fsdp_class(type(module))
    module.register_forward_pre_hook(_before_forward, with_kwargs=True)
    module.register_forward_hook(_after_forward)
    return module


def _check_arguments(module, reshard_after_forward, shard_placement_fn, mp_policy, offload_policy, dp_mesh_dims):
    if not isinstance(module, Module):
        raise NotImplementedError(f"fully_shard: expected an nn.Module, got {type(module).__name__} (grouping a "
                                  f"list of modules is not supported in minidl)")
    if isinstance(module, FSDPModule):
        raise RuntimeError(f"fully_shard: {type(module).__name__} is already sharded (over "
                           f"{module._fsdp_group.mesh}); call fully_shard once per module")
    if reshard_after_forward is not None and not isinstance(reshard_after_forward, bool):
        raise NotImplementedError(f"fully_shard: reshard_after_forward={reshard_after_forward!r}: resharding to "
                                  f"a smaller world size is not supported; pass True, False or None")
    if shard_placement_fn is not None or dp_mesh_dims is not None:
        raise NotImplementedError("fully_shard: shard_placement_fn and dp_mesh_dims are not supported (minidl "
                                  "shards dim 0 over the given mesh)")
    if not isinstance(mp_policy, MixedPrecisionPolicy):
        raise TypeError(f"fully_shard: mp_policy must be a MixedPrecisionPolicy, got {type(mp_policy).__name__}")
    if not isinstance(offload_policy, OffloadPolicy):
        raise TypeError(f"fully_shard: offload_policy must be an OffloadPolicy, got "
                        f"{type(offload_policy).__name__}")


_CLASSES = {}


def _fsdp_class(cls):
    """``FSDP<Name>``: the module's class with FSDPModule's methods first (one class per original class)."""
    if cls not in _CLASSES:
        _CLASSES[cls] = type(f"FSDP{cls.__name__}", (FSDPModule, cls), {"__module__": cls.__module__})
    return _CLASSES[cls]


def _before_forward(module, args, kwargs):
    group = module._fsdp_group
    if module._fsdp_root is None:
        _lazy_init(module)
    mp = group.mp
    if mp.param_dtype is not None and mp.cast_forward_inputs:
        cast = _caster(mp.param_dtype)
        args, kwargs = _map_tensors(args, cast), _map_tensors(kwargs, cast)
    module._fsdp_calls.append(group.unshard_for_forward())   # (a stack: a forward method may call forward)
    return args, kwargs


def _after_forward(module, args, output):
    group = module._fsdp_group
    output = group.reshard_after(module._fsdp_calls.pop(), output)
    if group.mp.output_dtype is not None:
        output = _map_tensors(output, _caster(group.mp.output_dtype))
    return output


def register_fsdp_forward_method(module, method_name: str) -> None:
    """``module.<method_name>`` (a ``generate`` that does not go through ``__call__``) gathers the parameters
    before it and frees them after, as forward does. Nothing for a module fully_shard was not applied to."""
    if not isinstance(module, FSDPModule):
        return
    method = getattr(module, method_name)

    def around(*args, **kwargs):
        args, kwargs = _before_forward(module, args, kwargs)
        return _after_forward(module, args, method(*args, **kwargs))
    object.__setattr__(module, method_name, around)


def _caster(dtype):
    return lambda t: t.to(dtype) if t.is_floating_point() else t


def _lazy_init(root) -> None:
    """The first FSDP module to run forward is a root: the FSDP modules under it are not, and an unset
    ``reshard_after_forward`` resolves (True below the root, False for it). A root's forward must come first (a
    submodule run first would have become a root for good, keeping its parameters from forward to backward)."""
    ran = [m for m in root.modules() if isinstance(m, FSDPModule) and m is not root and m._fsdp_root is not None]
    if ran:
        raise RuntimeError(f"FSDP requires running forward through the root module first: {type(ran[0]).__name__} "
                           f"under {type(root).__name__} ran forward before it")
    for m in root.modules():
        if isinstance(m, FSDPModule) and m._fsdp_root is None:
            m._fsdp_root = m is root
            if m._fsdp_group.reshard_after_forward is None:
                m._fsdp_group.reshard_after_forward = m is not root


class UnshardHandle:
    """An all-gather ``unshard(async_op=True)`` started; ``wait()`` puts the full parameters on the module."""

    def __init__(self, module):
        self._module = module

    def wait(self) -> None:
        if self._module is not None:
            group = self._module._fsdp_group
            for p, full in zip(group.params, group.take_gathered()):
                p.install(full)
            self._module = None


class FSDPModule:
    """What ``fully_shard`` adds to a module's class (torch.distributed.fsdp.FSDPModule's methods)."""

    def unshard(self, async_op: bool = False):
        """Gather the parameters now (the next forward uses them); with ``async_op``, a handle to wait on."""
        self._fsdp_group.start_gather()
        handle = UnshardHandle(self)
        if async_op:
            return handle
        handle.wait()
        return None

    def reshard(self) -> None:
        """Free the full parameters; the shards back on the module."""
        self._fsdp_group.reshard()

    def set_modules_to_forward_prefetch(self, modules) -> None:
        """The FSDP modules whose all-gathers start when this module's forward starts."""
        self._fsdp_group.forward_prefetch = _fsdp_modules(modules, "set_modules_to_forward_prefetch")

    def set_modules_to_backward_prefetch(self, modules) -> None:
        """The FSDP modules whose all-gathers start when this module's backward starts."""
        self._fsdp_group.backward_prefetch = _fsdp_modules(modules, "set_modules_to_backward_prefetch")

    def set_requires_gradient_sync(self, requires_gradient_sync: bool, *, recurse: bool = True) -> None:
        """False: backward sums the full gradients here, unreduced (gradient accumulation); the next backward
        with True reduce-scatters the sum."""
        for m in self._fsdp_modules(recurse):
            m._fsdp_group.requires_gradient_sync = requires_gradient_sync

    def set_reshard_after_forward(self, reshard_after_forward: bool, recurse: bool = True) -> None:
        if not isinstance(reshard_after_forward, bool):
            raise ValueError(f"set_reshard_after_forward: expects a bool, got {type(reshard_after_forward)}")
        for m in self._fsdp_modules(recurse):
            m._fsdp_group.reshard_after_forward = reshard_after_forward

    def set_gradient_divide_factor(self, factor: float) -> None:
        """Divide the summed gradients by ``factor`` rather than by the number of data-parallel ranks."""
        self._fsdp_group.divide_factor = float(factor)

    def _fsdp_modules(self, recurse: bool) -> list:
        return [m for m in self.modules() if isinstance(m, FSDPModule)] if recurse else [self]


def _fsdp_modules(modules, what) -> list:
    modules = list(modules)
    for m in modules:
        if not isinstance(m, FSDPModule):
            raise ValueError(f"{what}: expects FSDPModules (modules fully_shard was applied to), got "
                             f"{type(m).__name__}")
    return modules

