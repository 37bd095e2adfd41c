"""Stateful: what ``save`` and ``load`` treat as an object with a state of its own (torch's protocol)."""
from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Stateful(Protocol):
    """A top-level value of a state dict with these two methods is saved through ``state_dict()`` and, after
    loading into what ``state_dict()`` returns, given it back through ``load_state_dict()``."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state_dict: dict) -> None: ...
