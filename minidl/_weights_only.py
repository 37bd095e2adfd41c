"""What ``minidl.load(..., weights_only=True)`` may unpickle from a pickle archive, as torch's weights-only
unpickler decides it: a few harmless builtins by default, plus the globals a user marks safe with
``add_safe_globals`` or, for a block of code, the ``safe_globals`` context manager.

A global is matched by its full name as the pickle stores it (``{__module__}.{__qualname__}``), so
``minidl.nn.modules.linear.Linear`` and ``minidl.nn.Linear`` (the same class) both allow ``minidl.nn.linear.Linear``;
an entry ``(obj, "full.name")`` allows ``obj`` under that name. Only names that match are resolved: nothing is
imported by a name read from the file. The default builtins take only the arguments Python's pickler gives them.
"""
from __future__ import annotations

import collections
import functools
import pickle


def _as_pickled(func, *signatures):
    """``func`` called only with arguments of the types of one of ``signatures``, as Python's pickler writes its calls:
    never ``bytearray(10**15)``, which allocates that much whatever the file's length, nor ``set(tensor)``, whose
    iteration a layout expanded over 2**62 rows makes endless."""
    @functools.wraps(func)
    def call(*args):
        if tuple(type(arg) for arg in args) not in signatures:
            raise TypeError(f"called with ({', '.join(type(arg).__name__ for arg in args)}), which is not how a "
                            f"pickle calls it")
        return func(*args)
    return call


_DEFAULT = {"collections.OrderedDict": _as_pickled(collections.OrderedDict, (), (list,)),  # (list,): Python 2's
            "collections.Counter": _as_pickled(collections.Counter, (), (dict,)),
            "builtins.set": _as_pickled(set, (), (list,)), "builtins.frozenset": _as_pickled(frozenset, (), (list,)),
            "builtins.complex": _as_pickled(complex, (float, float)),
            "builtins.bytearray": _as_pickled(bytearray, (), (bytes,), (str, str))}  # (str, str): text, encoding
_marked: list = []  # what the user added, in order, each once


def _full_name(entry) -> tuple:
    """(full name, object) of an ``add_safe_globals`` entry: an object, or a tuple (object, full name)."""
    if isinstance(entry, tuple):
        if len(entry) != 2 or not isinstance(entry[1], str):
            raise TypeError(f"safe globals: a tuple entry must be (object, 'module.qualname'), got {entry!r}")
        return entry[1], entry[0]
    module, qualname = getattr(entry, "__module__", None), getattr(entry, "__qualname__", None)
    if not (module and qualname):
        raise TypeError(f"safe globals: {entry!r} has no __module__/__qualname__; pass (object, 'module.qualname')")
    return f"{module}.{qualname}", entry


def add_safe_globals(safe_globals: list) -> None:
    """Mark classes/functions (or ``(object, 'module.qualname')`` tuples) safe for ``weights_only`` loads."""
    for entry in safe_globals:
        _full_name(entry)  # refuse a bad entry now, not at load time
        if entry not in _marked:
            _marked.append(entry)


def get_safe_globals() -> list:
    """The globals the user marked safe (the defaults are not listed, as in torch)."""
    return list(_marked)


def clear_safe_globals() -> None:
    """Forget every global the user marked safe."""
    _marked.clear()


class safe_globals:
    """Context manager: the given globals are safe for ``weights_only`` loads inside the ``with`` block only."""

    def __init__(self, safe_globals: list):
        self.safe_globals = list(safe_globals)

    def __enter__(self):
        self._added = [entry for entry in self.safe_globals if entry not in _marked]
        add_safe_globals(self._added)

    def __exit__(self, *exc_info):
        for entry in self._added:
            if entry in _marked:
                _marked.remove(entry)


def marked() -> dict:
    """Full name -> object of the globals the user marked safe."""
    return dict(_full_name(entry) for entry in _marked)


def allowed() -> dict:
    """Full name -> object of every global a ``weights_only`` load may resolve now."""
    return {**_DEFAULT, **marked()}


def buildable():
    """Whether a ``weights_only`` load may set the state (BUILD) of an instance of a class: of one marked safe only."""
    ids = {id(obj) for obj in marked().values()}
    return lambda cls: id(cls) in ids


def refusal(full_name: str, file_name: str, kind: str = "a minidl pickle archive") -> pickle.UnpicklingError:
    return pickle.UnpicklingError(
        f"minidl.load: weights only load failed: {file_name} is {kind} that names {full_name}, "
        f"which is not allowed by default. Unpickling an object can run arbitrary code, so minidl.load "
        f"(weights_only=True by default, as torch.load since PyTorch 2.6) unpickles only tensors, containers and "
        f"the globals you mark safe. If you trust this file, allow it with "
        f"minidl.serialization.safe_globals([{full_name}]) (or add_safe_globals), or re-run minidl.load with "
        f"weights_only=False.")
