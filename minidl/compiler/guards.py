"""Guards: what a captured graph is specialised on, checked before every replay.

Two kinds. The call's key, hashed to find its graphs: each tensor argument's shape, strides, dtype,
device and requires_grad; other arguments' values (numbers, strings, None; containers item by item;
any other object by identity); grad mode, autocast state and the default dtype. And each graph's own
checks (``Graph.stale``): the modules it ran are in the same training mode, have no forward hooks, and
their parameters and buffers are in the same memory with the same requires_grad, and each ``.grad`` the
backward added into is the one it found (and its tensor's requires_grad unchanged).
"""
from __future__ import annotations

from .. import Tensor, get_autocast_dtype, get_default_dtype, is_autocast_enabled, is_grad_enabled

_SCALARS = (bool, int, float, complex, str, bytes, type(None))


def call_key(args, kwargs):
    """(key, tensors): the key of a call and its tensor arguments in the order the key lists them."""
    tensors = []

    def describe(x):
        if isinstance(x, Tensor):
            tensors.append(x)
            return ("tensor", tuple(x.shape), x.stride(), x.dtype, x.device, x.requires_grad)
        if isinstance(x, (tuple, list)):
            return (type(x), tuple(describe(v) for v in x))
        if isinstance(x, dict):
            return (dict, tuple((k, describe(v)) for k, v in x.items()))
        if isinstance(x, _SCALARS):
            return (type(x), x)   # (1, 1.0 and True hash alike: the type keeps them apart)
        return (type(x), id(x))

    key = (describe(args), describe(kwargs), is_grad_enabled(), get_default_dtype(),
           tuple((d, is_autocast_enabled(d), get_autocast_dtype(d)) for d in ("cpu", "cuda")))
    return key, tensors


def describe_change(old, new) -> str:
    """Why ``new`` missed the graphs captured under ``old``: the first difference, in words."""
    names = ("positional arguments", "keyword arguments", "grad mode", "default dtype", "autocast state")
    for name, a, b in zip(names, old, new):
        if a != b:
            return f"{name} changed: {_first_difference(a, b)}"
    return "the key is the same"


def _first_difference(a, b) -> str:
    if isinstance(a, tuple) and isinstance(b, tuple):
        if a[:1] == b[:1] == ("tensor",):
            fields = ("shape", "stride", "dtype", "device", "requires_grad")
            return "; ".join(f"tensor {f} {x} -> {y}" for f, x, y in zip(fields, a[1:], b[1:]) if x != y)
        if len(a) == len(b):
            for x, y in zip(a, b):
                if x != y:
                    return _first_difference(x, y)
    return f"{a!r} -> {b!r}"
