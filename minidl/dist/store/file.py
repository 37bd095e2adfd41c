"""FileStore: a store shared by the processes of one machine through a file.

The file is an append-only log of writes (set or delete, with key and value), written under an
exclusive ``fcntl.flock`` and read under a shared one; each process keeps the table it has replayed so
far and reads only what was appended since. Waits poll the log with a short back-off. Besides writes,
the log records each user opening and closing the store: when ``world_size`` users have closed it and
none is left open, the last one deletes the file (torch's clean-up; ``world_size=-1`` keeps it).
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import threading
import time
import weakref

from . import table
from .base import Store, timeout_error

_HEAD = struct.Struct("<cII")  # tag, key length, value length
_SET, _DELETE, _OPENED, _CLOSED = b"S", b"D", b"O", b"C"


def _records(data: bytes):
    pos = 0
    while pos < len(data):
        tag, klen, vlen = _HEAD.unpack_from(data, pos)
        pos += _HEAD.size
        key = data[pos:pos + klen].decode()
        value = data[pos + klen:pos + klen + vlen]
        pos += klen + vlen
        yield tag, key, value


def _record(tag, key="", value=b"") -> bytes:
    k = key.encode()
    return _HEAD.pack(tag, len(k), len(value)) + k + value


def _close(fd, path, world_size):
    """A user leaves: log it, and delete the file once ``world_size`` users left and none remains."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, _record(_CLOSED))
        tags = [r[0] for r in _records(os.pread(fd, os.fstat(fd).st_size, 0))]
        closed, opened = tags.count(_CLOSED), tags.count(_OPENED)
        if world_size > 0 and closed >= world_size and closed == opened and os.path.exists(path):
            os.unlink(path)
    finally:
        os.close(fd)


class FileStore(Store):
    def __init__(self, file_name, world_size: int = -1):
        super().__init__()
        if not isinstance(file_name, (str, os.PathLike)):
            raise TypeError(f"FileStore file_name must be a path, got {type(file_name).__name__}")
        if not isinstance(world_size, int) or world_size == 0 or world_size < -1:
            raise ValueError(f"FileStore world_size must be a positive int or -1 (unknown), got {world_size!r}")
        self._path, self._world_size = os.fspath(file_name), world_size
        try:
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as e:
            raise ValueError(f"FileStore can't open {self._path}: {e.strerror}") from None
        self._data, self._offset = {}, 0
        self._lock = threading.Lock()  # flock does not exclude threads sharing one descriptor
        with self._locked(fcntl.LOCK_EX):
            os.write(self._fd, _record(_OPENED))
        weakref.finalize(self, _close, self._fd, self._path, world_size)

    @contextlib.contextmanager
    def _locked(self, how):
        with self._lock:
            fcntl.flock(self._fd, how)
            try:
                self._catch_up()
                yield
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _catch_up(self):
        size = os.fstat(self._fd).st_size
        if size > self._offset:
            data = os.pread(self._fd, size - self._offset, self._offset)
            for tag, key, value in _records(data):
                if tag in (_SET, _DELETE):
                    table.apply(self._data, [(key, value if tag == _SET else None)])
            self._offset = size

    def _run(self, op, *args):
        writes_needed = op not in ("get", "check", "num_keys", "list_keys")
        with self._locked(fcntl.LOCK_EX if writes_needed else fcntl.LOCK_SH):
            result, writes = table.OPS[op](self._data, *args)
            if writes:
                os.write(self._fd, b"".join(_record(_SET, k, v) if v is not None else _record(_DELETE, k)
                                            for k, v in writes))
                self._catch_up()
        return result

    def _wait_get(self, keys, seconds, read):
        deadline, pause = time.monotonic() + seconds, 0.001
        while True:
            with self._locked(fcntl.LOCK_SH):
                missing = [k for k in keys if k not in self._data]
                if not missing:
                    return [self._data[k] for k in keys] if read else None
            left = deadline - time.monotonic()
            if left <= 0:
                raise timeout_error(keys, missing, seconds, f"FileStore {self._path}: ")
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.05)
