"""The op registry: every public op declares itself once, beside its code, with ``@op``.

From the declarations come ``minidl``'s functions, the ``Tensor`` methods and their in-place
twins (``x.add_``), and the op test sweep (``samples``). Later work attaches per-op rules to a
declaration with ``attach_rule`` (how an op shards, its sparse gradient, how it takes a sparse
operand, its ONNX lowering), so that one place knows every op. The function a declaration
publishes lets an exporter watch it run (``minidl._tracing``). (Splitting a backward into input
and weight gradients needs no rule: the engine asks each node only for the gradients it wants,
through ``needs_input_grad``.)
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Callable

from .. import _tracing
from . import overrides

NAMESPACES = ("minidl", "nn.functional", "special", "linalg", None)
RULE_KINDS = ("sharding", "sparse_grad", "sparse_input", "onnx")


@dataclass
class OpDef:
    name: str
    function: Callable
    method: Callable | None       # the Tensor method (self first), or None when the op is no method
    twins: dict                   # Tensor attribute ``name_`` -> in-place method, one per name
    aliases: tuple = ()           # other names of the same op, as function, method and in-place twin
    samples: Callable | None = None  # ``samples(t)``: test samples, built with the sweep's toolkit ``t``
    namespace: str | None = "minidl"  # where the function is public (see NAMESPACES)
    rules: dict = field(default_factory=dict)  # kind (RULE_KINDS) -> rule, see attach_rule

    @property
    def names(self) -> tuple:
        return (self.name,) + self.aliases


OPS: dict = {}
# The ops users define with minidl.library, by 'namespace::name': kept apart from OPS, so that what is made
# from the built-in declarations (functions, methods, the op sweeps) never sees them.
USER_OPS: dict = {}


class UserNamespace:
    """``minidl.ops.<namespace>``: the user ops of that namespace as attributes."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, name):
        found = USER_OPS.get(f"{self._name}::{name}")
        if found is None:
            raise AttributeError(f"minidl.ops.{self._name} has no op {name!r}")
        return found

    def __dir__(self):
        return sorted(q.partition("::")[2] for q in USER_OPS if q.startswith(self._name + "::"))


def user_namespace(name: str) -> UserNamespace:
    if not any(q.startswith(name + "::") for q in USER_OPS):
        raise AttributeError(f"module 'minidl.ops' has no attribute {name!r} (and no custom op is defined in a "
                             f"namespace of that name)")
    return UserNamespace(name)


def op(name: str | None = None, *, method=True, inplace=None, aliases=(), samples=None, namespace="minidl"):
    """Declare ``fn`` as the public op ``name`` (default: its own name), returning it unchanged.

    method: True for a Tensor method that passes ``self`` first, False for none, or the method
    itself when it takes its arguments otherwise. inplace: a maker ``(fn, name) -> method`` of the
    in-place twin ``name_`` (``inplace.rebased``, or ``elementwise.binary_inplace(Add)`` for a
    binary op's). namespace: "minidl" for ``minidl.name``, "nn.functional" for an op PyTorch has
    only there, "special" for one it has only in torch.special (``minidl.special``), "linalg" for one of
    torch.linalg (``minidl.linalg``; declared under aten's name ``linalg_<name>``, unique beside torch.norm
    or torch.cross), None for one reached only through Tensor (``x[i]``). samples: built by the test sweep (tests/opinfo.py), see ``OpDef``."""
    if callable(name):
        raise TypeError("op is a decorator factory: write @op() or @op(name, ...)")
    if namespace not in NAMESPACES:
        raise ValueError(f"op {name!r}: namespace must be one of {NAMESPACES}, got {namespace!r}")

    def declare(fn):
        key = name or fn.__name__
        taken = {n for d in OPS.values() for n in d.names}
        for new in (key,) + tuple(aliases):
            if new in taken:
                raise ValueError(f"op {new!r} is declared twice")
        public = _watched(key, fn, in_place=False)
        if isinstance(getattr(fn, "__self__", None), type):   # (a Function's apply: named as the op, to pickle)
            public.__qualname__ = public.__name__ = _public_name(key, namespace)
            public.__module__ = {"minidl": "minidl", "nn.functional": "minidl.nn.functional",
                                 "special": "minidl.special", "linalg": "minidl.linalg"}.get(namespace, public.__module__)
        as_method = _delegate(key, public) if method is True else (method or None)
        twins = ({n + "_": _watched(key, inplace(fn, n + "_"), in_place=True) for n in (key,) + tuple(aliases)}
                 if inplace else {})
        OPS[key] = OpDef(key, public, as_method, twins, tuple(aliases), samples, namespace)
        return public
    return declare


def _watched(key, fn, in_place):
    """``fn`` as the op's public face: itself, unless an exporter is tracing (``minidl._tracing``),
    which then runs and records the call as op ``key`` (``in_place``: an in-place twin), or an argument's type
    takes the op (``overrides``: a DTensor's sharding rules)."""
    def call(*args, **kwargs):
        tracer = _tracing.active
        if tracer is None:
            if overrides.active:
                other = overrides.claimant(args, kwargs)
                if other is not None:
                    return type(other).__minidl_function__(key, fn, args, kwargs, in_place)
            return fn(*args, **kwargs)
        return tracer.call(key, fn, args, kwargs, in_place)
    return functools.update_wrapper(call, fn)


def attach_rule(name: str, kind: str, rule) -> None:
    """Attach a rule of ``kind`` (one of RULE_KINDS) to the declared op ``name``, once."""
    if kind not in RULE_KINDS:
        raise ValueError(f"attach_rule: unknown kind {kind!r}; the kinds are {', '.join(RULE_KINDS)}")
    if name not in OPS:
        raise KeyError(f"attach_rule: no op named {name!r} is declared")
    if kind in OPS[name].rules:
        raise ValueError(f"attach_rule: op {name!r} already has a {kind} rule")
    OPS[name].rules[kind] = rule


def _delegate(name, fn):
    def method(self, *args, **kwargs):
        return fn(self, *args, **kwargs)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = fn.__doc__
    return method


def _public_name(name, namespace):
    """The name an op has in its namespace: a linalg op's without aten's ``linalg_`` prefix."""
    return name.removeprefix("linalg_") if namespace == "linalg" else name


def functions(namespace="minidl") -> dict:
    """public name -> function in ``namespace``, aliases included."""
    return {_public_name(name, namespace): d.function for d in OPS.values() if d.namespace == namespace
            for name in d.names}


def methods() -> dict:
    """Tensor attribute -> method, for the methods and their in-place twins, aliases included."""
    found = {}
    for d in OPS.values():
        if d.method is not None:
            found.update((name, d.method) for name in d.names)
        found.update(d.twins)
    return found
