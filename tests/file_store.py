"""A stand-in for torch's Store API (set / get / add / check / wait) in a directory, usable by the
threads of one process and by processes alike: the tests' rendezvous until minidl's TCPStore lands.
A key is a file named by its hex; a write lands by rename, so a reader sees all of it or nothing."""
import fcntl
import os
import time


class FileStore:
    def __init__(self, path, timeout=60.0):
        self.path, self.timeout = str(path), timeout
        os.makedirs(self.path, exist_ok=True)

    def _file(self, key):
        return os.path.join(self.path, key.encode().hex())

    def set(self, key, value):
        value = value.encode() if isinstance(value, str) else bytes(value)
        tmp = f"{self._file(key)}.{os.getpid()}.{time.monotonic_ns()}.tmp"
        with open(tmp, "wb") as f:
            f.write(value)
        os.replace(tmp, self._file(key))

    def get(self, key):
        self.wait([key])
        with open(self._file(key), "rb") as f:
            return f.read()

    def add(self, key, amount):
        with open(os.path.join(self.path, "lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            value = int(self.get(key)) + amount if self.check([key]) else amount
            self.set(key, str(value))
        return value

    def check(self, keys):
        return all(os.path.exists(self._file(k)) for k in keys)

    def wait(self, keys, timeout=None):
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self.check(keys):
            if time.monotonic() > deadline:
                raise TimeoutError(f"FileStore: keys {keys} not set within the timeout")
            time.sleep(0.005)
