"""The Optimizer base: parameter groups, per-parameter state, state_dict in PyTorch's format."""
from __future__ import annotations

import copy
import functools
from collections import defaultdict
from itertools import chain

from .. import _tracing, ops
from .. import Tensor
from ..autograd import enable_grad, no_grad


class _RequiredParameter:
    """Marks a hyperparameter with no default (PyTorch's ``required``)."""

    def __repr__(self):
        return "<required parameter>"


required = _RequiredParameter()


def replayed(step):
    """``step`` (an optimizer's or a scheduler's) as a host step of ``minidl.compile``: a captured call
    runs it again at every replay, so step counts, learning rates and schedules advance as eagerly.
    A closure or a metric argument is Python the replay cannot see again: a graph break."""
    @functools.wraps(step)
    def run(self, *args, **kwargs):
        if any(a is not None for a in (*args, *kwargs.values())):
            _tracing.graph_break(f"{type(self).__name__}.step() is given a closure or a metric")
        return _tracing.host_step(lambda: step(self, *args, **kwargs))
    return run


class Optimizer:
    """Base class of all optimizers (``torch.optim.Optimizer``)."""

    sparse_error = None   # what a subclass that cannot take sparse gradients says to one

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "step" in cls.__dict__:
            cls.step = replayed(cls.__dict__["step"])

    def __init__(self, params, defaults: dict):
        self.defaults = defaults
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, "
                            f"but got {type(params).__name__}")
        self.state: defaultdict = defaultdict(dict)
        self.param_groups: list[dict] = []
        param_groups = list(params)
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for group in param_groups:
            self.add_param_group(group)

    def __getstate__(self):
        return {"defaults": self.defaults, "state": self.state, "param_groups": self.param_groups}

    def __setstate__(self, state):
        self.__dict__.update(state)

    def __repr__(self):
        lines = [self.__class__.__name__ + " ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for key in sorted(group):
                if key != "params":
                    lines.append(f"    {key}: {group[key]}")
        lines.append(")")
        return "\n".join(lines)

    def add_param_group(self, param_group: dict) -> None:
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            param_group["params"] = [params]
        elif isinstance(params, set):
            raise TypeError("optimizer parameters need to be organized in ordered collections, but the ordering "
                            "of tensors in sets will change between runs. Please use a list instead.")
        else:
            param_group["params"] = list(params)
        # named parameters, e.g. model.named_parameters(): (name, tensor) pairs
        names = [p[0] for p in param_group["params"] if isinstance(p, tuple)]
        if names:
            if len(names) != len(param_group["params"]):
                raise ValueError("all optimizer params should be with/without names. Some param names are missing")
            param_group["params"] = [p[1] for p in param_group["params"]]
            param_group["param_names"] = names
        if self.param_groups and ("param_names" in self.param_groups[0]) != ("param_names" in param_group):
            raise ValueError("all optimizer param groups should be with/without names.")
        for param in param_group["params"]:
            if not isinstance(param, Tensor) and not hasattr(type(param), "__minidl_function__"):   # (a DTensor)
                raise TypeError("optimizer can only optimize Tensors, but one of the params is "
                                + type(param).__name__)
            if not self.defaults.get("differentiable") and not (param.is_leaf or param.retains_grad):
                raise ValueError("can't optimize a non-leaf Tensor")
        for name, default in self.defaults.items():
            if default is required and name not in param_group:
                raise ValueError(f"parameter group didn't specify a value of required optimization parameter "
                                 f"{name}")
            param_group.setdefault(name, default)
        ids = [id(p) for p in param_group["params"]]
        if len(set(ids)) != len(ids):
            raise ValueError("optimizer contains a parameter group with duplicate parameters")
        seen = set()
        for group in self.param_groups:
            seen.update(id(p) for p in group["params"])
        if not seen.isdisjoint(ids):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:   # (None already too: minidl.compile's replay of the call then resets it)
                    p.grad = None
                elif p.grad is not None:
                    g = p.grad
                    if g.grad_fn is not None:
                        g.detach_()
                    else:
                        g.requires_grad_(False)
                    with no_grad():
                        g.zero_()

    def step(self, closure=None):
        raise NotImplementedError

    # ------------------------------------------------------------------ state_dict
    def state_dict(self) -> dict:
        """{'state': {index: {...}}, 'param_groups': [{..., 'params': [indices]}]} (indices count across
        groups). Tensors in it are the optimizer's own (not copies), as in PyTorch."""
        mapping: dict[int, int] = {}
        index = 0

        def pack_group(group):
            nonlocal index
            packed = {k: v for k, v in group.items() if k != "params"}
            for p in group["params"]:
                if id(p) not in mapping:
                    mapping[id(p)] = index
                    index += 1
            packed["params"] = [mapping[id(p)] for p in group["params"]]
            return packed

        param_groups = [pack_group(g) for g in self.param_groups]
        state = {mapping[id(p)]: v for p, v in self.state.items() if id(p) in mapping}
        return {"state": state, "param_groups": param_groups}

    # scalars kept in float32 whatever the parameter's dtype; loading keeps them so, so that a resumed run
    # retraces an uninterrupted one (PyTorch casts mu_product to the parameter's dtype, and drifts)
    _SCALAR_STATE = ("step", "mu_product")

    @staticmethod
    def _cast_state(param, value, key=None):
        if isinstance(value, Tensor) or hasattr(type(value), "__minidl_function__"):   # (a DTensor's too)
            if key in Optimizer._SCALAR_STATE:
                return value.clone()
            # state follows its parameter's device (a checkpoint saved on one device loads onto another)
            return value.to(device=param.device, dtype=param.dtype if param.is_floating_point() else None, copy=True)
        if isinstance(value, dict):
            return {k: Optimizer._cast_state(param, v, k) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(Optimizer._cast_state(param, v, key) for v in value)
        return copy.deepcopy(value)

    def load_state_dict(self, state_dict: dict) -> None:
        groups = self.param_groups
        saved_groups = state_dict["param_groups"]
        if len(groups) != len(saved_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        param_lens = [len(g["params"]) for g in groups]
        saved_lens = [len(g["params"]) for g in saved_groups]
        if any(a != b for a, b in zip(param_lens, saved_lens)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                             "optimizer's group")
        id_map = dict(zip(chain.from_iterable(g["params"] for g in saved_groups),
                          chain.from_iterable(g["params"] for g in groups)))
        state: defaultdict = defaultdict(dict)
        for k, v in state_dict["state"].items():
            if k in id_map:
                param = id_map[k]
                state[param] = self._cast_state(param, v)
            else:
                state[k] = copy.deepcopy(v)
        new_groups = []
        for group, saved in zip(groups, saved_groups):
            new = {k: copy.deepcopy(v) for k, v in saved.items() if k != "params"}
            new["params"] = group["params"]
            new_groups.append(new)
        self.state = state
        self.param_groups = new_groups


def _call_closure(closure):
    if closure is None:
        return None
    with enable_grad():
        return closure()


def _params_with_grad(optimizer, groups=None):
    """(group, param, state) for every parameter that has a gradient, the loop of every update rule.
    A sparse gradient gets the optimizer's ``sparse_error`` (torch's words), unless it has none."""
    for group in optimizer.param_groups if groups is None else groups:
        for p in group["params"]:
            if p.grad is not None:
                if p.grad.is_sparse and optimizer.sparse_error:
                    raise RuntimeError(optimizer.sparse_error)
                yield group, p, optimizer.state[p]


def _check_fused(fused, foreach, differentiable) -> None:
    """torch's refusals of a ``fused=True`` it cannot honour."""
    if fused:
        if differentiable:
            raise RuntimeError("`fused` does not support `differentiable`")
        if foreach:
            raise RuntimeError("`fused` and `foreach` cannot be `True` together.")


def _multi_tensor(group) -> bool:
    """Whether a group steps with the multi-tensor kernels (every parameter of one device and dtype in
    one launch) rather than one fused launch per parameter. ``foreach=True`` and ``fused=True`` both
    mean multi-tensor (one kernel does both jobs here); ``False`` for both, or ``differentiable``,
    means the per-parameter loop. minidl's default (both None) is multi-tensor on every device, unlike
    torch's for-loop on the CPU: minidl's per-parameter cost is Python (an op call, checks, a step
    counter op), which one launch pays once per group; the arithmetic is the same kernel's, so the
    results are the same bit for bit (README.md, "Optimizers", has the measured step times)."""
    if group.get("differentiable"):
        return False
    fused, foreach = group.get("fused"), group.get("foreach")
    return True if fused is None and foreach is None else bool(fused or foreach)


def _buckets(items):
    """items (tuples whose first entry is a parameter) split by the parameter's (device, dtype), in
    order: the multi-tensor kernels take one device and dtype per launch, as torch groups them; and by its
    type, so that global tensors (DTensor parameters, stepped by their ops' sharding rules) and plain ones
    are stepped apart in a model that mixes them, and global ones on different meshes apart (FSDP over tensor
    parallelism: the split matrices on the 2-D mesh, the rest on the data-parallel one)."""
    buckets: dict = {}
    for item in items:
        p = item[0]
        buckets.setdefault((p.device, p.dtype, type(p), getattr(p, "device_mesh", None)), []).append(item)
    return buckets.values()


def _init_state(state, p, *buffers, **scalars) -> None:
    """A parameter's state on its first step, keys in PyTorch's order: the step count, scalars, and
    zero buffers shaped like the parameter (scalars are float32 tensors on the host, as in PyTorch, whatever the
    default device)."""
    if len(state) == 0:
        state["step"] = ops.tensor(0.0, device="cpu")
        for name, value in scalars.items():
            state[name] = ops.tensor(value, device="cpu")
        for name in buffers:
            state[name] = ops.zeros_like(p)


def _update_grad(p, group, decoupled=False):
    """The gradient an update rule sees: negated under ``maximize``, with L2 weight decay added; decoupled
    decay (AdamW-style) shrinks the parameter by ``lr * weight_decay`` instead and leaves the gradient."""
    grad = -p.grad if group.get("maximize") else p.grad
    weight_decay = group["weight_decay"]
    if weight_decay != 0:
        if decoupled:
            p.mul_(1 - group["lr"] * weight_decay)
        else:
            grad = grad.add(p, alpha=weight_decay)
    return grad


def _update_moments_(exp_avg, exp_avg_sq, grad, beta1, beta2) -> None:
    """Adam's running averages of the gradient and of its square, in place."""
    exp_avg.add_(grad - exp_avg, alpha=1 - beta1)
    exp_avg_sq.mul_(beta2).add_(grad * grad, alpha=1 - beta2)


def _check_betas(betas) -> None:
    for i, beta in enumerate(betas):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {beta}")


def _check_non_negative(**values) -> None:
    """PyTorch's argument checks: lr, eps, weight_decay ... must be >= 0."""
    names = {"lr": "learning rate", "eps": "epsilon value"}
    for name, value in values.items():
        if not 0.0 <= value:
            raise ValueError(f"Invalid {names.get(name, name + ' value')}: {value}")
