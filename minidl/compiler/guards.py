"""Guards: what a captured graph is specialised on, checked before every replay.

Two kinds. The call's key, hashed to find its graphs:
- each tensor argument's shape, strides, dtype, device and requires_grad;
- other arguments' values (numbers by their bits, strings, None, slices; containers item by item; any other
  object by identity, while it lives); numpy arrays, and containers other than tuples, lists and dicts that
  hold tensors, make the call run eagerly;
- grad mode, autocast state and the default dtype.
And each graph's own checks (``Graph.stale``): the modules it ran are in the training mode they had when the
call first met them, without forward hooks, with the same submodules, parameters and buffers (by name, in
the same memory, with the same requires_grad); each ``.grad`` the backward added into is the one it found,
its tensor still without gradient hooks.
"""
from __future__ import annotations

import weakref

import numpy as np

from .. import Tensor, get_autocast_dtype, get_default_dtype, is_autocast_enabled, is_grad_enabled

_SCALARS = (bool, int, float, complex, str, bytes, type(None))


def call_key(args, kwargs):
    """(key, tensors, refusal): the key of a call, its tensor arguments in the order the key lists them,
    and why the call cannot be captured (None when it can)."""
    tensors = []
    refusals = []

    def describe(x):
        if isinstance(x, Tensor):
            tensors.append(x)
            return ("tensor", tuple(x.shape), x.stride(), x.dtype, x.device, x.requires_grad)
        if type(x) in (tuple, list) or (isinstance(x, tuple) and hasattr(x, "_fields")):
            return (type(x), tuple(describe(v) for v in x))
        if type(x) is dict:
            return (dict, tuple((k, describe(v)) for k, v in x.items()))
        if isinstance(x, float):   # (its bits: 0.0 and -0.0 are equal, and every NaN unequal)
            return (type(x), float.hex(x))
        if isinstance(x, complex):
            return (type(x), float.hex(x.real), float.hex(x.imag))
        if isinstance(x, _SCALARS):
            return (type(x), x)   # (1, 1.0 and True hash alike: the type keeps them apart)
        if isinstance(x, (slice, range)):   # (by value: a new one per call is common, x[s])
            return (type(x), describe((x.start, x.stop, x.step)))
        if isinstance(x, np.generic):
            return (type(x), describe(x.item()))
        if isinstance(x, np.ndarray):
            # (its values are not in the key, and a capture keeps what it read of them, or reads the memory
            # of the array it was given, not of the one a replay is given)
            refusals.append("a numpy array argument: its values are not guarded; pass a tensor "
                            "(minidl.from_numpy(a))")
        elif isinstance(x, (tuple, list, dict)):
            # (a replay swaps the graph's own copies of the tensor arguments only into exact tuples, lists,
            # named tuples and dicts; in any other container the capture would read the caller's tensors)
            held = len(tensors)
            items = tuple(x.items()) if isinstance(x, dict) else tuple(x)
            described = describe(items)
            if len(tensors) > held:
                refusals.append(f"an argument of type {type(x).__name__} holds tensors; pass them in a "
                                f"tuple, list or dict")
            return (type(x), described)
        return (type(x), _Identity(x))

    key = (describe(args), describe(kwargs), is_grad_enabled(), get_default_dtype(),
           tuple((d, is_autocast_enabled(d), get_autocast_dtype(d)) for d in ("cpu", "cuda")))
    return key, tensors, (refusals[0] if refusals else None)


class _Identity:
    """An argument that is none of the above, keyed by identity: equal only to the same object while it
    lives (a bare id() would match a new object that reuses a freed one's address)."""
    __slots__ = ("id", "ref", "name")

    def __init__(self, obj):
        self.id, self.name = id(obj), type(obj).__name__
        try:
            self.ref = weakref.ref(obj)
        except TypeError:   # (no weak references to it: hold it)
            self.ref = lambda obj=obj: obj

    def __hash__(self):
        return self.id

    def __eq__(self, other):
        if not isinstance(other, _Identity):
            return NotImplemented
        obj = self.ref()
        return obj is not None and obj is other.ref()

    def __repr__(self):
        return f"<{self.name} object at {self.id:#x}>"


class GraphGuards:
    """A graph's own checks, taken from its recorder: what the call found, which a replay must find too."""

    def __init__(self, recorder):
        self.entry_grads = recorder.entry_grads
        self.leaves = list(recorder.leaves.values())
        self.modules = [(m, training) for m, training in recorder.entry_modes.values() if training is not None]
        self.hooked = list(recorder.modules.values())   # (a capture with forward hooks is a graph break)
        self.structure = [(m, list(m._modules.items())) for m in recorder.modules.values()]
        # (each module's parameters and buffers by name: the same tensors, in the same memory)
        self.memory = [(store, [(name, t, t.data_ptr() if t is not None else None) for name, t in store.items()])
                       for m in recorder.modules.values() for store in (m._parameters, m._buffers)]
        leaves = {id(t): t for _, held in self.memory for _, t, _ in held if t is not None}
        leaves.update((id(leaf), leaf) for leaf, _ in recorder.entry_grads)
        # (as the call found them: a flag the call set is set again by a step, its value before guarded)
        entry = recorder.entry_requires_grad
        leaves.update((i, t) for i, (t, _) in entry.items())
        self.requires_grad = [(t, entry[i][1] if i in entry else t.requires_grad) for i, t in leaves.items()]

    def stale(self):
        """Why the graph does not fit the call's state (a guard that fails), or None."""
        for module, training in self.modules:
            if module.training is not training:
                return f"{type(module).__name__}.training changed to {module.training}"
        for store, held in self.memory:
            if len(store) != len(held):
                return "a parameter or buffer was added or removed"
            for name, t, address in held:
                now = store.get(name, store)
                if now is not t or (t is not None and t.data_ptr() != address):
                    return f"the parameter or buffer '{name}' was replaced"
        for t, requires_grad in self.requires_grad:
            if t.requires_grad is not requires_grad:
                return f"requires_grad of a tensor of shape {list(t.shape)} changed to {t.requires_grad}"
        for module, children in self.structure:
            now = module._modules
            if len(now) != len(children) or any(now.get(name, now) is not child for name, child in children):
                return f"a submodule of {type(module).__name__} was replaced, added or removed"
        for module in self.hooked:
            if module._forward_pre_hooks or module._forward_hooks:
                return f"a forward hook was registered on {type(module).__name__}"
        for leaf in self.leaves:
            if leaf._hooks or leaf._post_acc_hooks:   # (none at the capture: a hook there is a graph break)
                return f"a gradient hook was registered on a tensor of shape {list(leaf.shape)}"
        for leaf, grad in self.entry_grads:
            if leaf.grad is not grad:
                return f"the .grad of a tensor of shape {list(leaf.shape)} is not the one the capture added into"
        return None

    def restore(self):
        """Put back the training modes and requires_grad flags the call found (a replay that stopped part
        way may have set them: the call is then captured again from the state it found)."""
        for module, training in self.modules:
            object.__setattr__(module, "training", training)
        for t, requires_grad in self.requires_grad:
            t._requires_grad = requires_grad


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
