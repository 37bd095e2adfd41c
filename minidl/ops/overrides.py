"""Ops given an object of another tensor type: a type with ``__minidl_function__`` (a DTensor) takes any public
op called with one of its objects among the arguments (as torch's ``__torch_function__``).

Nothing is looked for until such a type says it exists (``register``): plain tensors pay one flag's read.
"""
from __future__ import annotations

active = False   # whether any type has registered: only then are an op's arguments looked through


def register(cls) -> None:
    """``cls`` (with a ``__minidl_function__(op_name, fn, args, kwargs, in_place)`` classmethod; ``in_place``: fn
    is the op's in-place twin, writing its first argument) takes the ops its objects are given to."""
    global active
    if not hasattr(cls, "__minidl_function__"):
        raise TypeError(f"overrides.register: {cls.__name__} has no __minidl_function__")
    active = True


def claimant(args, kwargs):
    """The first argument (or element of a list or tuple argument, as cat's) whose type overrides ops, or None."""
    for value in (*args, *kwargs.values()):
        if hasattr(type(value), "__minidl_function__"):
            return value
        if isinstance(value, (list, tuple)):
            for item in value:
                if hasattr(type(item), "__minidl_function__"):
                    return item
    return None
