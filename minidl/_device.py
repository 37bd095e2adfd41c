"""Devices name where a tensor's buffer lives: ``cpu``, ``cuda:N``, or ``meta`` (a shape, dtype and strides, no data).

A device is also a context manager, as torch's: ``with minidl.device("meta"):`` makes it this thread's default
device, the one the factories (``zeros``, ``empty``, ``tensor``, ...) use when given none; ``set_default_device``
sets it until changed. A model built under ``meta`` costs no memory (``nn.Module.to_empty`` materialises it).
"""
from __future__ import annotations

import threading

TYPES = ("cpu", "cuda", "meta")


class device:
    __slots__ = ("type", "index")

    def __init__(self, spec="cpu", index=None):
        if isinstance(spec, device):
            self.type, self.index = spec.type, spec.index
            return
        if isinstance(spec, int) and not isinstance(spec, bool):
            spec = f"cuda:{spec}"  # a bare ordinal names a GPU, as in PyTorch
        spec = str(spec)
        kind, _, num = spec.partition(":")
        if kind not in TYPES:
            raise RuntimeError(f"Expected one of {', '.join(TYPES)} device type at start of device string: {spec}")
        self.type = kind
        self.index = int(num) if num else index
        if kind == "cuda" and self.index is None:
            self.index = 0

    def __eq__(self, other):
        try:
            other = device(other)
        except (RuntimeError, ValueError, TypeError):
            return NotImplemented
        return self.type == other.type and self.index == other.index

    def __hash__(self):
        return hash((self.type, self.index))

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        return f"device(type='{self.type}'" + ("" if self.index is None else f", index={self.index}") + ")"

    def __enter__(self):
        _default.saved.append(_default.device)
        _set_default(as_device(self))
        return self

    def __exit__(self, *exc):
        _default.device = _default.saved.pop()


class _Default(threading.local):
    """This thread's default device (None: none was set, the factories use the CPU), and the ones ``with`` blocks
    replaced. Thread-local, as torch's: another thread starts without one."""
    device = None

    def __init__(self):
        self.saved = []


_default = _Default()
_ever_set = False   # (until some thread sets a default device, the factories need not look: their hot path)


def _set_default(d) -> None:
    global _ever_set
    _ever_set = True
    _default.device = d


_devices: dict = {}


def as_device(d) -> device:
    """The one shared device object for ``d`` (so ops can compare devices with ``is``); None is the CPU. ('meta:1'
    is 'meta': as in torch, a meta tensor's device has no index.)"""
    key = "cpu" if d is None else f"cuda:{d}" if isinstance(d, int) and not isinstance(d, bool) else str(d)
    found = _devices.get(key)
    if found is None:
        found = device(key)
        if found.type == "meta":
            found.index = None
        found = _devices.setdefault(str(found), found)
        _devices[key] = found
    return found


_CPU = as_device("cpu")


def factory_device(d) -> device:
    """The device a factory makes its tensor on: ``d``, or when None this thread's default device."""
    if d is not None:
        return as_device(d)
    return (_default.device or _CPU) if _ever_set else _CPU


def set_default_device(d) -> None:
    """``torch.set_default_device``: the device the factories use when given none, on this thread (None: the CPU
    again). A ``with device`` block inside sets its own for its duration."""
    _set_default(None if d is None else as_device(d))


def get_default_device() -> device:
    """``torch.get_default_device``: the device the factories use when given none."""
    return _default.device or _CPU


def explicit_default() -> device | None:
    """The default device if one was set, else None (``tensor(t)`` keeps ``t``'s device only when none was)."""
    return _default.device
