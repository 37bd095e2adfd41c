"""A parameter server's storage for surviving a SIGKILL: checkpoints of its shards and a write-ahead log.

A server saves its state now and then as ``checkpoint-<n>.safetensors`` (n = 1, 2, ...), named by the manifest
``LATEST`` once it is whole, and appends every push to ``wal-<n>.log`` (the log that follows checkpoint n; n = 0
before the first) before acknowledging it. A restarted server loads the newest checkpoint and replays its log.

Log record (little-endian)::

    header  magic u32 "MWAL" | part count u32 | payload length u64 | CRC-32 u32 of the payload
            | CRC-32 u32 of the 20 header bytes before it
    payload for each part: its length u64, then its bytes

A kill while appending leaves a prefix of the last record at the end of the file (the page cache keeps what was
written): a header cut short, or a valid header whose payload runs past the end. That is a torn tail, never
acknowledged, and replay drops it. Corruption is anything else: a whole header that fails its magic or CRC with
data after it, or a whole record whose payload fails its CRC.
"""
from __future__ import annotations

import io
import json
import os
import re
import struct
import tempfile
import zlib

from ... import serialization
from .. import faults

_FIELDS = struct.Struct("<IIQI")   # magic, part count, payload length, payload CRC-32
_HEADER_SIZE = _FIELDS.size + 4    # and the CRC-32 of those fields
_MAGIC = int.from_bytes(b"MWAL", "little")
_LENGTH = struct.Struct("<Q")
_LATEST = "LATEST"
_CHECKPOINT = re.compile(r"checkpoint-(\d{8})\.safetensors")
_WAL = re.compile(r"wal-(\d{8})\.log")


class DurabilityError(RuntimeError):
    """A checkpoint or log that cannot be written or read: the message names the file and what is wrong."""


def check_writable(folder: str, what: str) -> None:
    """Fail at start-up, naming the folder, rather than at the first checkpoint or push."""
    try:
        os.makedirs(folder, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".minidl-probe-", dir=folder)
        try:
            os.write(fd, b"minidl")
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as e:
        raise ValueError(f"{what}: cannot write to {folder}: {e.strerror or e}") from None


class Checkpoints:
    """One server's checkpoints in ``folder``; see ``save`` and ``load`` for the files and their checks."""

    def __init__(self, folder: str, fault_rank: int | None = None):
        self.folder, self.fault_rank = folder, fault_rank

    def _path(self, name: str) -> str:
        return os.path.join(self.folder, name)

    def save(self, state: dict) -> int:
        """Write ``state`` as the next checkpoint and return its n. The file is whole before ``LATEST`` names it,
        so a kill at any point leaves the previous checkpoint loadable; older files go once the new one is in."""
        buffer = io.BytesIO()
        serialization.save(state, buffer)
        data = buffer.getvalue()
        if data[:4] == serialization._ZIP_MAGIC:
            raise TypeError("Checkpoints.save: the state must hold only tensors, numbers, strings, None, bools "
                            "and dicts/lists of them (anything else needs a pickle archive, which load refuses)")
        n = (self.latest() or 0) + 1
        name = f"checkpoint-{n:08d}.safetensors"
        manifest = {"n": n, "file": name, "bytes": len(data), "crc32": f"{zlib.crc32(data):08x}"}
        try:
            os.makedirs(self.folder, exist_ok=True)
            serialization._write(data, self._path(name), midway=faults.midway("ps_checkpoint", self.fault_rank))
            serialization._write(json.dumps(manifest).encode(), self._path(_LATEST))
        except OSError as e:
            raise DurabilityError(f"checkpoint {n} cannot be written to {self.folder}: {e.strerror or e}") from e
        for old in os.listdir(self.folder):
            if (old.startswith(".minidl-") and old.endswith(".tmp")) or (_CHECKPOINT.fullmatch(old) and old != name):
                os.unlink(self._path(old))
        return n

    def _manifest(self) -> dict | None:
        path = self._path(_LATEST)
        try:
            with open(path, "rb") as f:
                text = f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            raise DurabilityError(f"{path} cannot be read: {e.strerror or e}") from None
        try:
            manifest = json.loads(text)
            n = manifest["n"]
            if (type(n) is not int or manifest["file"] != f"checkpoint-{n:08d}.safetensors"
                    or type(manifest["bytes"]) is not int or not re.fullmatch(r"[0-9a-f]{8}", manifest["crc32"])):
                raise ValueError("unexpected fields")
        except (ValueError, KeyError, TypeError) as e:
            raise DurabilityError(f"{path} is damaged ({e}): expected JSON "
                                  '{"n": N, "file": "checkpoint-<N>.safetensors", "bytes": B, "crc32": "8 hex"}'
                                  ) from None
        return manifest

    def latest(self) -> int | None:
        """The n of the newest checkpoint (from LATEST), None if there is none."""
        manifest = self._manifest()
        return None if manifest is None else manifest["n"]

    def load(self) -> tuple[int, dict]:
        """(n, state) of the newest checkpoint, checked against LATEST's size and CRC-32 before it is parsed."""
        manifest = self._manifest()
        if manifest is None:
            raise DurabilityError(f"no checkpoint in {self.folder} (no {_LATEST} file)")
        path = self._path(manifest["file"])
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as e:
            raise DurabilityError(f"{path}, the checkpoint {_LATEST} names, cannot be read: {e.strerror or e}"
                                  ) from None
        if len(data) != manifest["bytes"]:
            raise DurabilityError(f"{path} is corrupted: it has {len(data)} bytes, {_LATEST} says {manifest['bytes']}")
        crc = f"{zlib.crc32(data):08x}"
        if crc != manifest["crc32"]:
            raise DurabilityError(f"{path} is corrupted: CRC-32 of its {len(data)} bytes is {crc}, "
                                  f"{_LATEST} says {manifest['crc32']}")
        try:
            state = serialization.load(io.BytesIO(data))
        except (RuntimeError, ValueError) as e:
            raise DurabilityError(f"{path} cannot be loaded: {e}") from None
        return manifest["n"], state


def _log_path(folder: str, n: int) -> str:
    return os.path.join(folder, f"wal-{n:08d}.log")


def _record(parts: list) -> bytes:
    """One log record: header, then each part's length and bytes."""
    payload = b"".join(piece for part in parts
                       for piece in (_LENGTH.pack(memoryview(part).nbytes), memoryview(part).cast("B")))
    fields = _FIELDS.pack(_MAGIC, len(parts), len(payload), zlib.crc32(payload))
    return fields + struct.pack("<I", zlib.crc32(fields)) + payload


def _write_all(fd: int, data) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Log:
    """The write-ahead log that follows checkpoint n: ``wal-<n:08d>.log`` in ``folder``, opened for appending."""

    def __init__(self, folder: str, n: int, fault_rank: int | None = None):
        self.path, self.fault_rank = _log_path(folder, n), fault_rank
        os.makedirs(folder, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.unsynced = False
        serialization._fsync_folder(folder)   # the new file's name must survive too

    def append(self, parts: list, sync: bool = True) -> None:
        """Append one record of bytes-like ``parts`` and make it durable (``sync=False``: at the next
        ``sync()``): the caller acknowledges only after. A write that fails (a full disk, an injected
        raise) is cut off again, so later records follow good data."""
        data = _record(parts)
        midway = faults.midway("ps_wal", self.fault_rank)
        half = len(data) // 2 if midway is not None else len(data)
        start = os.fstat(self._fd).st_size
        try:
            _write_all(self._fd, data[:half])   # unbuffered: what is written is in the file
            if midway is not None:
                midway()
            _write_all(self._fd, data[half:])
            if sync:
                os.fdatasync(self._fd)
            self.unsynced = not sync
        except BaseException as e:
            os.ftruncate(self._fd, start)
            if isinstance(e, OSError):
                raise DurabilityError(f"{self.path}: a record cannot be appended: {e.strerror or e}") from e
            raise

    def sync(self) -> None:
        """Make the records appended with ``sync=False`` durable: one fdatasync for all of them."""
        if self.unsynced:
            try:
                os.fdatasync(self._fd)
            except OSError as e:
                raise DurabilityError(f"{self.path}: the log cannot be synced: {e.strerror or e}") from e
            self.unsynced = False

    def close(self) -> None:
        os.close(self._fd)


def _parts(payload: bytes, count: int) -> list | None:
    """The parts of a payload, None if its lengths do not add up to it."""
    parts, at = [], 0
    for _ in range(count):
        if at + _LENGTH.size > len(payload):
            return None
        (length,) = _LENGTH.unpack_from(payload, at)
        at += _LENGTH.size
        if at + length > len(payload):
            return None
        parts.append(payload[at:at + length])
        at += length
    return parts if at == len(payload) else None


def replay(folder: str, n: int):
    """Yield the records of ``wal-<n>.log`` in order (each a list of bytes, the parts as appended). A torn tail
    ends the replay and is cut off the file, so that later appends follow good data; corruption raises."""
    path = _log_path(folder, n)
    try:
        f = open(path, "r+b")
    except FileNotFoundError:
        return
    with f:
        size, offset, index = os.fstat(f.fileno()).st_size, 0, 0
        while offset < size:
            left = size - offset
            header = f.read(_HEADER_SIZE)
            if len(header) < _HEADER_SIZE:
                break
            magic, count, length, crc = _FIELDS.unpack_from(header)
            if magic != _MAGIC or header[-4:] != struct.pack("<I", zlib.crc32(header[:-4])):
                if left == _HEADER_SIZE:
                    break
                raise DurabilityError(f"{path} is corrupted: record {index} at byte {offset} has a bad header "
                                      f"(magic or CRC-32) with {left - _HEADER_SIZE} more bytes after it")
            if _HEADER_SIZE + length > left:
                break
            payload = f.read(length)
            if zlib.crc32(payload) != crc:
                raise DurabilityError(f"{path} is corrupted: record {index} at byte {offset}: the CRC-32 of its "
                                      f"{length}-byte payload does not match its header")
            parts = _parts(payload, count)
            if parts is None:
                raise DurabilityError(f"{path} is corrupted: record {index} at byte {offset}: its part lengths "
                                      f"do not add up to its {length}-byte payload")
            yield parts
            offset += _HEADER_SIZE + length
            index += 1
        if offset < size:   # a torn tail: never acknowledged
            f.truncate(offset)
            os.fsync(f.fileno())


def start_log(folder: str, n: int) -> None:
    """After checkpoint n is durable: delete the logs before it (their records are in the checkpoint)."""
    for name in os.listdir(folder):
        match = _WAL.fullmatch(name)
        if match and int(match.group(1)) < n:
            os.unlink(os.path.join(folder, name))
