"""HashStore: a store inside one process, shared by its threads (and the table behind TCPStore's server)."""
from __future__ import annotations

import threading
import time

from . import table
from .base import Store, timeout_error


class HashStore(Store):
    """A dict under one condition variable: writers notify, waiters sleep until their keys exist."""

    def __init__(self):
        super().__init__()
        self._data = {}
        self._changed = threading.Condition()

    def _run(self, op, *args):
        with self._changed:
            result, writes = table.OPS[op](self._data, *args)
            if writes:
                table.apply(self._data, writes)
                self._changed.notify_all()
        return result

    def _wait_get(self, keys, seconds, read):
        deadline = time.monotonic() + seconds
        with self._changed:
            while True:
                missing = [k for k in keys if k not in self._data]
                if not missing:
                    return [self._data[k] for k in keys] if read else None
                left = deadline - time.monotonic()
                if left <= 0:
                    raise timeout_error(keys, missing, seconds)
                self._changed.wait(left)
