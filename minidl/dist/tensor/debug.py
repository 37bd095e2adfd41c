"""CommDebugMode (torch's): count the collectives a block of code calls on this rank."""
from __future__ import annotations

import threading

from .. import debug

__all__ = ["CommDebugMode"]


class CommDebugMode:
    """Inside ``with CommDebugMode() as comm:`` every collective this rank calls is counted — a DTensor's
    redistribution, forward or backward, a DDP bucket, a direct call alike; ``comm.get_comm_counts()`` keys
    them by minidl.dist's functions (``counts[dist.all_reduce]``), as torch's keys them by its functional
    collectives. Counts stay readable after the block. One object may be entered by several ranks' threads (sim):
    each counts its own."""

    def __init__(self):
        self._mine = threading.local()

    def __enter__(self) -> "CommDebugMode":
        self._mine.counter = debug.watch()
        return self

    def __exit__(self, *exc) -> None:
        debug.unwatch(self._mine.counter)

    def get_comm_counts(self) -> dict:
        from ... import dist
        return {getattr(dist, name, name): n for name, n in getattr(self._mine, "counter", {}).items()}

    def get_total_counts(self) -> int:
        return sum(getattr(self._mine, "counter", {}).values())
