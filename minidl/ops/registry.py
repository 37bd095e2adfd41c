"""The op registry: every public op declares itself once, beside its code, with ``@op``.

From the declarations come ``minidl``'s functions, the ``Tensor`` methods and their in-place
twins (``x.add_``), and the op test sweep (``samples``). Later work attaches its per-op rules to
an ``OpDef`` by name (``rules``: how an op shards, its sparse gradient, a backward split into input
and weight gradients), so one place knows every op.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass
class OpDef:
    name: str
    function: Callable
    method: Callable | None       # the Tensor method (self first), or None when the op is no method
    inplace: Callable | None      # the Tensor method ``name_``, or None
    aliases: tuple = ()           # other names of the same op, as function, method and in-place twin
    samples: Callable | None = None  # ``samples(t)``: test samples, built with the sweep's toolkit ``t``
    namespace: str | None = "minidl"  # where the function is public: "minidl", "nn.functional", or None
    rules: dict = field(default_factory=dict)

    @property
    def names(self) -> tuple:
        return (self.name,) + self.aliases


OPS: dict = {}


def op(name: str | None = None, *, method=True, inplace=None, aliases=(), samples=None, namespace="minidl"):
    """Declare ``fn`` as the public op ``name`` (default: its own name), returning it unchanged.

    method: True for a Tensor method that passes ``self`` first, False for none, or the method
    itself when it takes its arguments otherwise. inplace: a maker ``(fn, name) -> method`` of the
    in-place twin ``name_`` (see ``inplace.rebased``). namespace: "minidl" for ``minidl.name``,
    "nn.functional" for an op PyTorch has only there, None for one reached only through Tensor
    (``x[i]``). samples: built by the test sweep (tests/opinfo.py), see ``OpDef``."""
    def declare(fn):
        key = name or fn.__name__
        if key in OPS or any(key in d.aliases for d in OPS.values()):
            raise ValueError(f"op {key!r} is declared twice")
        as_method = _delegate(key, fn) if method is True else (method or None)
        OPS[key] = OpDef(key, fn, as_method, inplace(fn, key + "_") if inplace else None, tuple(aliases),
                         samples, namespace)
        return fn
    return declare


def _delegate(name, fn):
    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)
    method.__name__ = name
    method.__doc__ = fn.__doc__
    return method


def functions(namespace="minidl") -> dict:
    """public name -> function in ``namespace``, aliases included."""
    return {name: d.function for d in OPS.values() if d.namespace == namespace for name in d.names}


def methods() -> dict:
    """Tensor attribute -> method, for the methods and their in-place twins, aliases included."""
    found = {}
    for d in OPS.values():
        for name in d.names:
            if d.method is not None:
                found[name] = d.method
            if d.inplace is not None:
                found[name + "_"] = d.inplace
    return found
