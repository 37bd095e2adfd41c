"""Devices name where a tensor's buffer lives: ``cpu`` or ``cuda:N``."""
from __future__ import annotations


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
        if kind not in ("cpu", "cuda"):
            raise RuntimeError(f"Expected one of cpu, cuda device type at start of device string: {spec}")
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


