"""PrefixStore: a key space of its own inside another store (one per job, group or rendezvous round)."""
from __future__ import annotations

from .base import Store


class PrefixStore(Store):
    """Every key becomes ``prefix + "/" + key`` in ``store``. The timeout is the underlying store's;
    ``num_keys`` counts the whole underlying store and ``list_keys`` only this prefix's keys (torch's)."""

    def __init__(self, prefix: str, store: Store):
        if not isinstance(prefix, str):
            raise TypeError(f"PrefixStore prefix must be a str, got {type(prefix).__name__}")
        if not isinstance(store, Store):
            raise TypeError(f"PrefixStore needs a Store to wrap, got {type(store).__name__}")
        self._prefix, self._store = prefix + "/", store

    @property
    def underlying_store(self) -> Store:
        return self._store

    @property
    def timeout(self):
        return self._store.timeout

    def set_timeout(self, timeout):
        self._store.set_timeout(timeout)

    def _run(self, op, *args):
        if op == "list_keys":
            n = len(self._prefix)
            return [k[n:] for k in self._store._run(op) if k.startswith(self._prefix)]
        if op in ("multi_set", "check", "get"):
            args = ([self._prefix + k for k in args[0]],) + args[1:]
        elif args:
            args = (self._prefix + args[0],) + args[1:]
        return self._store._run(op, *args)

    def _wait_get(self, keys, seconds, read):
        return self._store._wait_get([self._prefix + k for k in keys], seconds, read)
