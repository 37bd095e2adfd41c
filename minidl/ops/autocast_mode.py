"""Autocast's state, and the one wrapper through which ops apply its cast policies (PyTorch 2.13's).

State is thread-local, as in PyTorch: for each device type ('cpu', 'cuda') whether autocast is on
and its dtype, one cast cache and the nesting depth of ``autocast`` regions (the cache is dropped
when the outermost region exits). ``minidl.amp.autocast`` sets it; ops read it through
:func:`autocast_op`.

An op decorated ``@autocast_op(name)`` looks up its policy for the device type of its first tensor
argument, when autocast is on for that type, in ``POLICIES`` below: PyTorch's lists restricted to
the ops minidl has (the CPU lists checked op by op against torch 2.13's CPU autocast, the CUDA lists
read from its ``autocast_mode.h``). Eligible tensors are the floating ones of that device type but
float64, which every policy leaves alone, as do integer tensors and tensors of other devices
(lists and tuples of tensors, as ``cat`` takes, are looked into):

* ``lower_precision``: eligible tensors are cast to the autocast dtype;
* ``fp32``: eligible tensors are cast to float32;
* ``fp32_set_opt_dtype``: the op is called with ``dtype=float32`` when its first argument is
  eligible and no dtype was given (``sum``, ``softmax``, ...); a dtype given is kept;
* ``promote``: eligible tensors are cast to the widest of them (float32 over the autocast dtype;
  two different lower-precision dtypes raise, as PyTorch's ``prioritize`` does);
* ``banned``: raises (``binary_cross_entropy`` on CUDA);
* ``native``: no cast, for ops PyTorch runs as one kernel and minidl composes of listed ones,
  whose parts must not cast (``adaptive_avg_pool2d`` multiplies matrices, ``var`` sums and ``elu``
  calls ``expm1``, which CUDA autocast runs in float32).

The op's body then runs with autocast off for that device type, so what it calls casts nothing
(as PyTorch's wrappers exclude their autocast dispatch key). Ops on no list are untouched and
their parts follow their own policies (``einsum``'s matmul runs in the autocast dtype on the CPU,
as torch's einsum calls bmm). Casts go through ``Tensor.to`` (the ToDtype op), so gradients flow
back to float32 weights in float32, and backward runs in the dtypes the forward used.

Cache: a cast to the autocast dtype of a float32 leaf that requires grad (a weight), made while
grad mode is on, is kept until the outermost region exits (with ``cache_enabled``), so each weight
is cast once per forward. As in PyTorch the cached copy does not follow in-place updates of the
weight inside the region: regions should hold forward passes, not optimizer steps.

Not followed: torch's CUDA list runs the RNN cells (``lstm_cell``, ``gru_cell``, ...) in the
lower-precision dtype as one op; minidl's recurrent layers are made of ``linear`` and elementwise
ops, whose own policies apply. CUDA autocast does not ask whether the device supports bfloat16.
"""
from __future__ import annotations

import functools
import threading

from .. import _dtype as dt
from .._device import device as _device
from .._tensor_base import TensorBase
from .core import grad_enabled
from .conversion import to_dtype

DEVICE_TYPES = ("cpu", "cuda")

# the default lower-precision dtypes, as PyTorch's
DEFAULT_DTYPES = {"cpu": dt.bfloat16, "cuda": dt.float16}

POLICIES = {
    "cpu": {
        "lower_precision": ("conv1d", "conv2d", "conv_transpose2d", "bmm", "mm", "baddbmm", "addmm", "linear",
                            "matmul", "scaled_dot_product_attention", "conv3d", "conv_transpose1d", "conv_transpose3d",
                            "addbmm", "linalg_vecdot"),
        "fp32": ("prod", "cdist", "trace", "reflection_pad1d", "reflection_pad2d", "replication_pad1d",
                 "replication_pad2d", "replication_pad3d", "mse_loss", "nll_loss", "smooth_l1_loss", "cross_entropy",
                 "l1_loss", "huber_loss", "kl_div", "binary_cross_entropy", "binary_cross_entropy_with_logits",
                 "grid_sample"),
        "promote": ("cat", "stack", "index_copy"),
    },
    "cuda": {
        "lower_precision": ("conv1d", "conv2d", "conv_transpose2d", "addmm", "matmul", "einsum", "mm", "linear",
                            "baddbmm", "bmm", "scaled_dot_product_attention", "conv3d", "conv_transpose1d",
                            "conv_transpose3d",
                            "mv", "addmv", "addr", "addbmm", "linalg_vecdot", "chain_matmul", "linalg_multi_dot"),
        # (interpolate: torch's upsample_* kernels; its area mode, torch's adaptive pooling, which torch leaves in
        # the input's dtype, is float32 here too)
        "fp32": ("exp", "expm1", "log", "log1p", "reciprocal", "rsqrt", "tan", "pow", "softplus", "layer_norm",
                 "group_norm", "nll_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
                 "binary_cross_entropy_with_logits", "cdist", "logsumexp",
                 "cosine_similarity", "pdist", "interpolate"),
        "fp32_set_opt_dtype": ("prod", "softmax", "log_softmax", "cumprod", "cumsum", "sum", "norm",
                               "linalg_vector_norm", "linalg_matrix_norm"),
        "promote": ("addcdiv", "addcmul", "atan2", "dot", "scatter_add",
                    "cross", "vdot", "tensordot", "bilinear", "grid_sample"),
        "banned": ("binary_cross_entropy",),
    },
}
# the margin and likelihood losses of ops/losses.py that torch runs as one op (the others are compositions)
_LOSSES = ("margin_ranking_loss", "hinge_embedding_loss", "soft_margin_loss", "triplet_margin_loss",
           "cosine_embedding_loss", "multi_margin_loss", "multilabel_margin_loss", "poisson_nll_loss")
POLICIES["cpu"]["fp32"] += _LOSSES + ("ctc_loss",)
POLICIES["cuda"]["fp32"] += _LOSSES
NATIVE = ("adaptive_avg_pool2d", "avg_pool2d", "batch_norm", "dot", "elu", "logaddexp", "logsigmoid", "std",
          "std_mean", "trace", "var", "var_mean", "avg_pool1d", "avg_pool3d", "adaptive_avg_pool1d",
          "adaptive_avg_pool3d",
          "mv", "addmv", "addr", "linalg_cross", "interpolate")

BANNED_MESSAGE = (
    "minidl.nn.functional.binary_cross_entropy and minidl.nn.BCELoss are unsafe to autocast.\n"
    "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
    "In this case, combine the two layers using minidl.nn.functional.binary_cross_entropy_with_logits\n"
    "or minidl.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
    "safe to autocast.")


class _State(threading.local):
    def __init__(self):
        self.on = frozenset()                 # the device types autocast is on for
        self.dtype = dict(DEFAULT_DTYPES)
        self.cache_enabled = True
        self.cache = {}                        # id(weight) -> (weight, its cast)
        self.nesting = 0


state = _State()


def device_type(name) -> str:
    """'cpu' or 'cuda' from a device string (the device parser's error, as PyTorch's, for others)."""
    return _device(name).type


def is_autocast_enabled(device_type_name="cuda") -> bool:
    return device_type(device_type_name) in state.on


def set_autocast_enabled(device_type_name, enabled: bool) -> None:
    kind = device_type(device_type_name)
    state.on = state.on | {kind} if enabled else state.on - {kind}


def get_autocast_dtype(device_type_name):
    return state.dtype[device_type(device_type_name)]


def set_autocast_dtype(device_type_name, dtype) -> None:
    state.dtype[device_type(device_type_name)] = dtype


def is_autocast_cache_enabled() -> bool:
    return state.cache_enabled


def set_autocast_cache_enabled(enabled: bool) -> None:
    state.cache_enabled = bool(enabled)


def clear_autocast_cache() -> None:
    state.cache.clear()


def increment_nesting() -> int:
    state.nesting += 1
    return state.nesting


def decrement_nesting() -> int:
    state.nesting -= 1
    return state.nesting


# ----------------------------------------------------------------------------- casting
def _eligible(t, device) -> bool:
    return (isinstance(t, TensorBase) and t.dtype.is_floating_point and t.dtype is not dt.float64
            and t._storage.device.type == device)


def _cast_tensor(t, device, dtype):
    if not _eligible(t, device) or t.dtype is dtype:
        return t
    if (dtype is state.dtype[device] and t.dtype is dt.float32 and t.requires_grad and t.is_leaf
            and t._base is None and state.cache_enabled and grad_enabled()):
        hit = state.cache.get(id(t))
        if hit is None:
            hit = state.cache[id(t)] = (t, to_dtype(t, dtype))
        return hit[1]
    return to_dtype(t, dtype)


def cast(value, device, dtype):
    """``value`` with its eligible tensors cast to ``dtype``, looking into lists, tuples and dicts."""
    if isinstance(value, TensorBase):
        return _cast_tensor(value, device, dtype)
    if isinstance(value, (list, tuple)):
        return type(value)(cast(v, device, dtype) for v in value)
    if isinstance(value, dict):
        return {k: cast(v, device, dtype) for k, v in value.items()}
    return value


def _tensors(values):
    for v in values:
        if isinstance(v, TensorBase):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from _tensors(v)


def _widest(device, args, kwargs):
    """PyTorch's promote type: float32 if an eligible tensor is float32, else the autocast dtype."""
    lower, widest = state.dtype[device], state.dtype[device]
    for t in _tensors((*args, *kwargs.values())):
        if _eligible(t, device):
            if t.dtype is dt.float32 or widest is dt.float32:
                widest = dt.float32
            elif t.dtype is not lower:
                raise RuntimeError("Unexpected floating ScalarType in at::autocast::prioritize")
    return widest


def _cast_to(target):
    def policy(device, args, kwargs):
        dtype = target(device, args, kwargs)
        return cast(args, device, dtype), cast(kwargs, device, dtype)
    return policy


def _fp32_set_opt_dtype(device, args, kwargs):
    given = kwargs.get("dtype") is not None or any(isinstance(a, dt.dtype) for a in args)
    if args and _eligible(args[0], device) and not given:
        kwargs = {**kwargs, "dtype": dt.float32}
    return args, kwargs


def _banned(device, args, kwargs):
    raise RuntimeError(BANNED_MESSAGE)


_POLICY_FUNCTIONS = {
    "lower_precision": _cast_to(lambda device, args, kwargs: state.dtype[device]),
    "fp32": _cast_to(lambda device, args, kwargs: dt.float32),
    "fp32_set_opt_dtype": _fp32_set_opt_dtype,
    "promote": _cast_to(_widest),
    "banned": _banned,
}


def _native(device, args, kwargs):
    return args, kwargs


def _first_device_type(args, kwargs):
    for t in _tensors((*args, *kwargs.values())):
        return t._storage.device.type
    return None


def listed(name: str) -> bool:
    """Whether the op ``name`` has an autocast policy on some device type."""
    return name in NATIVE or any(name in names for lists in POLICIES.values() for names in lists.values())


def autocast_op(name: str):
    """Decorator of the op ``name``: applies its autocast policy per device type (see the module)."""
    policies = {device: _POLICY_FUNCTIONS[policy] for device, lists in POLICIES.items()
                for policy, names in lists.items() if name in names}
    if name in NATIVE:
        for device in DEVICE_TYPES:
            policies.setdefault(device, _native)
    if not policies:
        raise ValueError(f"autocast_op: {name!r} is on no autocast list")

    def wrap(fn):
        @functools.wraps(fn)
        def op(*args, **kwargs):
            on = state.on
            if not on:
                return fn(*args, **kwargs)
            device = _first_device_type(args, kwargs)
            policy = policies.get(device) if device in on else None
            if policy is None:
                return fn(*args, **kwargs)
            args, kwargs = policy(device, args, kwargs)
            state.on = on - {device}
            try:
                return fn(*args, **kwargs)
            finally:
                state.on = on
        return op
    return wrap
