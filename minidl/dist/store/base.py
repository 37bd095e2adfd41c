"""The Store interface (torch.distributed.Store's methods) and its errors.

Subclasses provide two things: ``_run(op, *args)``, one atomic operation of ``table.OPS`` on str
keys and bytes values, and ``_wait_get(keys, seconds, read)``, which waits until every key exists
(reading them in the same step when ``read``) and raises ``timeout_error`` when time runs out.
Everything users call is checked and converted here once.
"""
from __future__ import annotations

from datetime import timedelta

from ..communicators.base import DistError

DEFAULT_TIMEOUT = timedelta(seconds=300)


class DistStoreError(DistError):
    """A store operation that can't complete: a timeout, a store whose server is gone."""


class DistNetworkError(DistStoreError):
    """A TCPStore that can't listen (port in use) or can't reach its server."""


def timeout_error(keys, missing, seconds, where="") -> DistStoreError:
    """The error of a wait that ran out of time: which keys never appeared, and for how long."""
    return DistStoreError(f"{where}timed out after {seconds:g} s waiting for key(s) {list(missing)}"
                          + (f" (of {list(keys)})" if len(missing) != len(keys) else ""))


def seconds_of(timeout) -> float:
    if not isinstance(timeout, timedelta):
        raise TypeError(f"a store timeout must be a datetime.timedelta, got {type(timeout).__name__}")
    return timeout.total_seconds()


def _key(key) -> str:
    if not isinstance(key, str):
        raise TypeError(f"a store key must be a str, got {type(key).__name__} ({key!r})")
    return key


def _keys(keys) -> list:
    if isinstance(keys, (str, bytes)):
        raise TypeError(f"store keys must be a list of str, got the single {type(keys).__name__} {keys!r}")
    return [_key(k) for k in keys]


def _value(value) -> bytes:
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"a store value must be str or bytes, got {type(value).__name__}")


class Store:
    """A key-value table shared by the ranks of a job; ``get`` and ``wait`` block until keys exist."""

    def __init__(self, timeout: timedelta = DEFAULT_TIMEOUT):
        seconds_of(timeout)
        self._timeout = timeout

    @property
    def timeout(self) -> timedelta:
        return self._timeout

    def set_timeout(self, timeout: timedelta) -> None:
        seconds_of(timeout)
        self._timeout = timeout

    def set(self, key: str, value) -> None:
        self._run("set", _key(key), _value(value))

    def get(self, key: str) -> bytes:
        """The key's value, waiting up to the store's timeout for it to be set."""
        return self._wait_get([_key(key)], seconds_of(self.timeout), True)[0]

    def multi_get(self, keys) -> list:
        return self._wait_get(_keys(keys), seconds_of(self.timeout), True)

    def wait(self, keys, timeout: timedelta | None = None) -> None:
        seconds = seconds_of(self.timeout if timeout is None else timeout)
        self._wait_get(_keys(keys), seconds, False)

    def add(self, key: str, amount: int) -> int:
        """Add ``amount`` to the integer the key holds (0 if absent), atomically; the new value."""
        if not isinstance(amount, int) or isinstance(amount, bool):
            raise TypeError(f"store.add amount must be an int, got {type(amount).__name__}")
        return self._run("add", _key(key), amount)

    def compare_set(self, key: str, expected_value, desired_value) -> bytes:
        return self._run("compare_set", _key(key), _value(expected_value), _value(desired_value))

    def delete_key(self, key: str) -> bool:
        return self._run("delete_key", _key(key))

    def num_keys(self) -> int:
        return self._run("num_keys")

    def check(self, keys) -> bool:
        """Whether every key exists now (no waiting)."""
        return self._run("check", _keys(keys))

    def append(self, key: str, value) -> None:
        self._run("append", _key(key), _value(value))

    def multi_set(self, keys, values) -> None:
        keys, values = _keys(keys), [_value(v) for v in values]
        if len(keys) != len(values):
            raise ValueError(f"store.multi_set got {len(keys)} keys but {len(values)} values")
        self._run("multi_set", keys, values)

    def list_keys(self) -> list:
        return self._run("list_keys")

    def _run(self, op: str, *args):
        raise NotImplementedError

    def _wait_get(self, keys: list, seconds: float, read: bool):
        raise NotImplementedError
