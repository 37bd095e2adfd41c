"""A checkpoint in a folder: each rank's boxes in safetensors files, then one ``.metadata`` that commits them.

Files. Rank r writes ``__<r>_<k>.<save id>.safetensors`` (k counts its files: one per writing thread, or one per
box with ``single_file_per_rank=False``). Each is a plain safetensors file — the ``safetensors`` package reads
it — whose tensors are named by key and box (``fc.weight[0:512,0:1024]``); its header also names the save and
the rank. The save id is new at every save, so a save never overwrites a file another checkpoint needs.

The commit. When every rank has written and synced its files, the coordinator writes ``.metadata`` (JSON,
see metadata.py) atomically — a temp file, fsync, rename, fsync of the folder — and only then removes the
files of earlier saves. So a process killed at any moment leaves either the old checkpoint or the new one
whole; files without a ``.metadata`` naming them are an interrupted save's, and ``load`` says so.

Checks. The metadata holds each file's size and the CRC-32 of each of its 1 MiB blocks: a reader checks the
size of each file it opens and the CRC of each block it reads, so a truncated, changed or swapped file is
named, never loaded, even where a rank reads only part of a file.
"""
from __future__ import annotations

import concurrent.futures
import json
import os
import re
import secrets
import struct
import warnings
import zlib

import numpy as np

from ... import serialization
from .. import faults
from .metadata import BLOCK_BYTES, FileRecord, Metadata

METADATA_NAME = ".metadata"
_SAVE_ID = "[0-9a-f]{16}"
_SHARD = re.compile(rf"^__(\d+)_(\d+)\.({_SAVE_ID})\.safetensors$")
_TEMP_PREFIX = ".minidl-"   # serialization._write's temp files


def box_name(fqn: str, offsets, sizes) -> str:
    """How a box is named inside its file: ``fc.weight[0:512,0:1024]`` (a 0-d tensor: ``step[]``)."""
    return f"{fqn}[{','.join(f'{o}:{o + s}' for o, s in zip(offsets, sizes))}]"


def shard_name(rank: int, k: int, save_id: str) -> str:
    return f"__{rank}_{k}.{save_id}.safetensors"


class FileSystemWriter:
    """Where and how ``save`` writes (``torch.distributed.checkpoint.FileSystemWriter``'s arguments).
    ``thread_count`` files per rank written by as many threads; ``sync_files=False`` skips the fsyncs (faster,
    and a power loss may then lose the checkpoint; a killed process does not); ``overwrite=False`` refuses a
    folder that already holds a checkpoint (with True, replacing one warns, as torch's does).
    ``per_thread_copy_ahead``, ``cache_staged_state_dict`` and ``serialization_format`` are accepted and change
    nothing: minidl stages by copying what this rank writes, once, and always writes safetensors."""

    def __init__(self, path, single_file_per_rank: bool = True, sync_files: bool = True, thread_count: int = 1,
                 per_thread_copy_ahead: int = 10_000_000, cache_staged_state_dict: bool = False,
                 overwrite: bool = True, serialization_format=None):
        if not isinstance(thread_count, int) or thread_count < 1:
            raise ValueError(f"FileSystemWriter: thread_count must be an int >= 1, got {thread_count!r}")
        self.path = os.fspath(path)
        self.single_file_per_rank, self.sync_files = single_file_per_rank, sync_files
        self.thread_count, self.overwrite = thread_count, overwrite
        self.per_thread_copy_ahead, self.cache_staged_state_dict = per_thread_copy_ahead, cache_staged_state_dict

    def reset(self, checkpoint_id=None) -> None:
        if checkpoint_id is not None:
            self.path = os.fspath(checkpoint_id)

    def set_up(self, is_coordinator: bool):
        """On the coordinator: make the folder; refuse an existing checkpoint under ``overwrite=False``; and
        pick the new save's id: 8 hex digits counting the saves in this folder, then 8 random ones. Counting
        (not the clock) orders the ids, so a reader can tell an interrupted newer save from leftovers."""
        if not is_coordinator:
            return None
        os.makedirs(self.path, exist_ok=True)
        committed = os.path.join(self.path, METADATA_NAME)
        if os.path.exists(committed):
            if not self.overwrite:
                raise RuntimeError(f"FileSystemWriter: {self.path} already holds a checkpoint and overwrite=False")
            warnings.warn(f"FileSystemWriter: {self.path} holds a checkpoint; this save replaces it when it commits "
                          f"(overwrite=True; pass overwrite=False to refuse)", stacklevel=2)
        ids = list(_shards(self.path))
        try:
            with open(committed, "rb") as f:
                ids.append(str(json.loads(f.read())["save_id"]))
        except (OSError, ValueError, KeyError, TypeError):
            pass   # no checkpoint yet, or a damaged one: this save replaces it
        count = max((int(i[:8], 16) for i in ids if re.fullmatch(_SAVE_ID, i)), default=0)
        return f"{count + 1:08x}{secrets.token_hex(4)}"

    def write_data(self, pieces: list, save_id: str, rank: int) -> list:
        """Write this rank's boxes (``Piece``s) into its files: [(file name, FileRecord, [(fqn, offsets, byte
        offset, length)])]."""
        if not pieces:
            return []
        groups = [[p] for p in pieces] if not self.single_file_per_rank else _balance(pieces, self.thread_count)
        jobs = [(shard_name(rank, k, save_id), group, save_id, rank, faults.midway("dcp_write", rank))
                for k, group in enumerate(groups)]   # (the faults counted here, in a fixed order)
        if self.thread_count == 1 or len(jobs) == 1:
            results = [self._write_file(*job) for job in jobs]
        else:
            with concurrent.futures.ThreadPoolExecutor(min(self.thread_count, len(jobs))) as pool:
                results = list(pool.map(lambda job: self._write_file(*job), jobs))
        if self.sync_files:
            serialization._fsync_folder(self.path)
        return results

    def _write_file(self, name: str, pieces: list, save_id: str, rank: int, midway):
        entries = {p.key: (p.dtype, p.array) for p in pieces}
        keys, chunks = serialization._file_order(entries)
        head, starts = serialization._safetensors_header(
            entries, keys, {"minidl.dcp.save_id": save_id, "minidl.dcp.rank": str(rank)})
        parts = [head, *chunks]
        blocks = _Blocks()
        with open(os.path.join(self.path, name), "wb") as out:
            for part in _halved(parts, midway, out):
                blocks.add(part)
                out.write(part)
            out.flush()
            if self.sync_files:
                os.fsync(out.fileno())
        placed = [(p.fqn, p.offsets, starts[p.key], p.array.nbytes) for p in pieces]
        return name, FileRecord(sum(len(part) for part in parts), blocks.finish()), placed

    def finish(self, metadata: Metadata, rank: int) -> None:
        """The commit (on the coordinator): ``.metadata`` written atomically, then earlier saves' files removed."""
        path = os.path.join(self.path, METADATA_NAME)
        serialization._write(metadata.to_json(), path, midway=faults.midway("dcp_commit", rank))
        cleanup = faults.armed("dcp_cleanup", rank)
        if cleanup is not None:
            faults.fire(cleanup, rank, 1)
        for name in os.listdir(self.path):
            match = _SHARD.match(name)
            if (match and match.group(3) != metadata.save_id) or name.startswith(_TEMP_PREFIX):
                try:
                    os.unlink(os.path.join(self.path, name))
                except OSError as e:   # (committed already: a leftover is no reason to fail the save)
                    warnings.warn(f"FileSystemWriter: could not remove {name}, left by an earlier save: {e}",
                                  stacklevel=2)


def _balance(pieces: list, bins: int) -> list:
    """The pieces in at most ``bins`` groups of near-equal bytes (largest first, each to the lightest group)."""
    groups = [[] for _ in range(min(bins, len(pieces)))]
    loads = [0] * len(groups)
    for p in sorted(pieces, key=lambda p: -p.array.nbytes):
        i = loads.index(min(loads))
        groups[i].append(p)
        loads[i] += p.array.nbytes
    return groups


def _halved(parts: list, midway, out):
    """The parts to write, one cut where half of all their bytes are out; at that point (when a fault is armed)
    the file is flushed and the fault fired: a torn file, as a process killed mid-write leaves."""
    if midway is None:
        yield from parts
        return
    half = sum(len(p) for p in parts) // 2
    for part in parts:
        part = memoryview(part)
        if 0 <= half < len(part):
            yield part[:half]
            out.flush()
            midway()
            part = part[half:]
        half -= len(part)
        yield part


class _Blocks:
    """The CRC-32 of each BLOCK_BYTES block of a stream written in parts of any length."""

    def __init__(self):
        self.crcs, self.crc, self.filled = [], 0, 0

    def add(self, data) -> None:
        data = memoryview(data).cast("B")
        while len(data):
            take = min(len(data), BLOCK_BYTES - self.filled)
            self.crc = zlib.crc32(data[:take], self.crc)
            self.filled += take
            data = data[take:]
            if self.filled == BLOCK_BYTES:
                self.crcs.append(f"{self.crc:08x}")
                self.crc, self.filled = 0, 0

    def finish(self) -> tuple:
        if self.filled:
            self.crcs.append(f"{self.crc:08x}")
        return tuple(self.crcs)


class FileSystemReader:
    """Where ``load`` reads (``torch.distributed.checkpoint.FileSystemReader``). ``bytes_read`` counts the file
    bytes this reader has read, so a rank's share of a resharded load can be measured."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.bytes_read = 0

    def reset(self, checkpoint_id=None) -> None:
        if checkpoint_id is not None:
            self.path = os.fspath(checkpoint_id)

    def read_metadata(self) -> Metadata:
        """The committed checkpoint's metadata; an interrupted save, or no checkpoint at all, named."""
        where = os.path.join(self.path, METADATA_NAME)
        shards = _shards(self.path)
        try:
            with open(where, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            if shards:
                raise RuntimeError(f"{self.path} holds an incomplete checkpoint: {_describe(shards)} but no "
                                   f"{METADATA_NAME}, which the coordinator writes last; the save was interrupted "
                                   f"(a rank died or failed) before it committed, and nothing in it can be loaded") from None
            raise FileNotFoundError(f"there is no checkpoint at {self.path} (no {METADATA_NAME})") from None
        meta = Metadata.from_json(data, where)
        later = {i: ranks for i, ranks in shards.items() if i > meta.save_id}
        if later:
            warnings.warn(f"{self.path} also holds {_describe(later)} that never committed (an interrupted save, "
                          f"newer than the checkpoint); loading the committed one, save {meta.save_id}", stacklevel=3)
        return meta

    def read(self, meta: Metadata, name: str, ranges: list) -> list:
        """The bytes of each (start, length) range of file ``name`` (uint8 arrays), every block they touch
        read once and checked against its CRC-32."""
        record = meta.files.get(name)
        where = os.path.join(self.path, name)
        if record is None:
            raise RuntimeError(f"{self.path}: {METADATA_NAME} does not list the file {name} it points to")
        try:
            size = os.stat(where).st_size
        except FileNotFoundError:
            others = sorted(i for i in _shards(self.path) if i != meta.save_id)
            hint = (f"; the folder holds files of save(s) {others} instead: is its {METADATA_NAME} from another "
                    f"checkpoint?" if others else "")
            raise RuntimeError(f"{self.path} is missing the file {name} of its checkpoint (save "
                               f"{meta.save_id}){hint}") from None
        if size != record.size:
            raise RuntimeError(f"{where} has {size} bytes but the checkpoint's {METADATA_NAME} says {record.size}: "
                               f"{'truncated' if size < record.size else 'changed'} since it was saved"
                               f"{self._foreign(name, meta.save_id)}")
        bad = [(s, n) for s, n in ranges if s < 0 or n < 0 or s + n > record.size]
        if bad:
            raise RuntimeError(f"{self.path}: {METADATA_NAME} places bytes {bad[0][0]}...{sum(bad[0])} in {name}, "
                               f"which has {record.size}")
        block = meta.block_bytes
        spans = _merged([(s // block * block, min(record.size, -(-(s + n) // block) * block))
                         for s, n in ranges if n])
        buffers = []
        with open(where, "rb") as f:
            for low, high in spans:
                buf = np.empty(high - low, np.uint8)
                f.seek(low)
                if f.readinto(memoryview(buf)) != high - low:
                    raise RuntimeError(f"{where} ended early while being read")
                self.bytes_read += high - low
                self._check(meta, name, buf, low, record)
                buffers.append((low, high, buf))
        out = []
        for s, n in ranges:
            low, _, buf = next(b for b in buffers if b[0] <= s and s + n <= b[1]) if n else (s, s, np.empty(0, np.uint8))
            out.append(buf[s - low:s - low + n])
        return out

    def _check(self, meta: Metadata, name: str, buf, low: int, record: FileRecord) -> None:
        block = meta.block_bytes
        for i in range(0, len(buf), block):
            k = (low + i) // block
            if f"{zlib.crc32(buf[i:i + block]):08x}" != record.crc32[k]:
                raise RuntimeError(f"{os.path.join(self.path, name)} is corrupted: bytes {low + i}..."
                                   f"{low + i + len(buf[i:i + block])} fail their CRC-32 check"
                                   f"{self._foreign(name, meta.save_id)}")

    def _foreign(self, name: str, save_id: str) -> str:
        """Where a file's own header names another save: that (a file copied from another checkpoint)."""
        try:
            with open(os.path.join(self.path, name), "rb") as f:
                (length,) = struct.unpack("<Q", f.read(8))
                found = json.loads(f.read(min(length, 1 << 24)))["__metadata__"]["minidl.dcp.save_id"]
        except (OSError, ValueError, KeyError, TypeError, struct.error):
            return ""
        return "" if found == save_id else f" (the file was written by save {found}, not by this checkpoint's {save_id})"


def _shards(folder: str) -> dict:
    """save id -> the ranks that wrote its files, for every shard file in the folder."""
    found = {}
    for name in os.listdir(folder) if os.path.isdir(folder) else ():
        match = _SHARD.match(name)
        if match:
            found.setdefault(match.group(3), set()).add(int(match.group(1)))
    return found


def _merged(spans: list) -> list:
    out = []
    for low, high in sorted(spans):
        if out and low <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], high))
        else:
            out.append((low, high))
    return out


def _describe(shards: dict) -> str:
    return "; ".join(f"the files of save {i} from rank(s) {sorted(ranks)}" for i, ranks in sorted(shards.items()))
