"""What a checkpoint's ``.metadata`` file says, with torch.distributed.checkpoint's class names.

``state_dict_metadata`` maps each key (the flattened path of a value in the state dict, ``"optim.state.fc.weight
.exp_avg"``) to a ``TensorStorageMetadata`` (dtype, global size, the boxes it is stored in) or a
``BytesStorageMetadata`` (a plain value: a number, a string, a list of them; kept in ``values``);
``storage_data`` says where each box lies: which file, at which byte; ``files`` holds each file's size and
the CRC-32 of each of its blocks, so that a reader that reads a part of a file can still check what it
read; ``planner_data`` the path of each key, to rebuild the nesting without a state dict to load into.
Unlike torch's pickled ``.metadata`` it is JSON: readable, and loadable without unpickling. Its own
CRC-32 covers it: a changed offset or dtype would read the wrong bytes with every file's checksums intact.
"""
from __future__ import annotations

import dataclasses
import json
import math
import zlib

from ... import _dtype as dt

FORMAT = "minidl-dcp-1"
BLOCK_BYTES = 1 << 20   # files are checked in blocks of this many bytes: a read checks the blocks it touches


@dataclasses.dataclass(frozen=True)
class ChunkStorageMetadata:
    """A box of a global tensor: where it starts and its extent in each dimension."""
    offsets: tuple
    sizes: tuple


@dataclasses.dataclass(frozen=True)
class TensorProperties:
    dtype: object


@dataclasses.dataclass
class TensorStorageMetadata:
    properties: TensorProperties
    size: tuple
    chunks: list


@dataclasses.dataclass
class BytesStorageMetadata:
    """A plain value (not a tensor): kept in the metadata's ``values``."""


@dataclasses.dataclass(frozen=True)
class MetadataIndex:
    """A box of the key ``fqn``, named by where it starts (``index``: a hint of its place in a list, as torch's;
    not part of its identity)."""
    fqn: str
    offset: tuple | None = None
    index: int | None = dataclasses.field(default=None, hash=False, compare=False)


@dataclasses.dataclass(frozen=True)
class StorageInfo:
    """Where a box's bytes lie: ``length`` bytes at byte ``offset`` of the file ``relative_path``."""
    relative_path: str
    offset: int
    length: int


@dataclasses.dataclass(frozen=True)
class FileRecord:
    """A file of the checkpoint: its size and the CRC-32 (8 hex digits) of each BLOCK_BYTES block."""
    size: int
    crc32: tuple


@dataclasses.dataclass
class Metadata:
    state_dict_metadata: dict
    planner_data: dict = dataclasses.field(default_factory=dict)   # key -> its path in the state dict
    storage_data: dict = dataclasses.field(default_factory=dict)   # MetadataIndex -> StorageInfo
    values: dict = dataclasses.field(default_factory=dict)         # key -> the encoded plain value
    files: dict = dataclasses.field(default_factory=dict)          # file name -> FileRecord
    save_id: str = ""
    world_size: int = 1
    block_bytes: int = BLOCK_BYTES

    def to_json(self) -> bytes:
        keys = {}
        for fqn, entry in self.state_dict_metadata.items():
            if isinstance(entry, TensorStorageMetadata):
                keys[fqn] = {"dtype": entry.properties.dtype.name, "size": list(entry.size), "chunks": [
                    _chunk_json(c, self.storage_data[MetadataIndex(fqn, c.offsets)]) for c in entry.chunks]}
            else:
                keys[fqn] = {"value": self.values[fqn]}
            keys[fqn]["path"] = self.planner_data[fqn]
        body = _body_text({"save_id": self.save_id, "world_size": self.world_size, "block_bytes": self.block_bytes,
                           "keys": keys, "files": {name: {"size": f.size, "crc32": list(f.crc32)}
                                                   for name, f in self.files.items()}})
        return f'{{"format": "{FORMAT}", "crc32": "{zlib.crc32(body.encode()):08x}",\n"body": {body}}}\n'.encode()

    @classmethod
    def from_json(cls, data: bytes, name: str) -> "Metadata":
        try:
            outer = json.loads(data)
            if outer.get("format") != FORMAT:
                raise ValueError(f"format {outer.get('format')!r}, not {FORMAT!r}")
            doc = outer["body"]
            if f"{zlib.crc32(_body_text(doc).encode()):08x}" != outer["crc32"]:
                raise ValueError("its CRC-32 does not match its contents: it was changed since it was written")
            meta = cls({}, save_id=doc["save_id"], world_size=doc["world_size"], block_bytes=doc["block_bytes"],
                       files={n: FileRecord(f["size"], tuple(f["crc32"])) for n, f in doc["files"].items()})
            for n, f in meta.files.items():
                if len(f.crc32) != -(-f.size // meta.block_bytes):
                    raise ValueError(f"file {n} of {f.size} bytes has {len(f.crc32)} block checksums")
            for fqn, entry in doc["keys"].items():
                meta.planner_data[fqn] = entry["path"]
                if "value" in entry:
                    meta.state_dict_metadata[fqn] = BytesStorageMetadata()
                    meta.values[fqn] = entry["value"]
                    continue
                chunks, dtype = [], dt.from_name(entry["dtype"])
                for c in entry["chunks"]:
                    chunk = ChunkStorageMetadata(tuple(c["offsets"]), tuple(c["sizes"]))
                    if c["length"] != math.prod(chunk.sizes) * dtype.itemsize:
                        raise ValueError(f"{fqn}'s box at {c['offsets']} takes {c['length']} bytes, not "
                                         f"{math.prod(chunk.sizes)} {dtype.name} elements")
                    chunks.append(chunk)
                    meta.storage_data[MetadataIndex(fqn, chunk.offsets)] = StorageInfo(c["file"], c["offset"],
                                                                                        c["length"])
                meta.state_dict_metadata[fqn] = TensorStorageMetadata(TensorProperties(dtype), tuple(entry["size"]),
                                                                      chunks)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{name} is not a minidl checkpoint's metadata, or is damaged ({e!r})") from None
        return meta


def _body_text(body: dict) -> str:
    """The metadata's contents as the text its CRC-32 covers (the same text from the same dict, every time)."""
    return json.dumps(body, indent=1, allow_nan=False)


def _chunk_json(chunk: ChunkStorageMetadata, where: StorageInfo) -> dict:
    return {"offsets": list(chunk.offsets), "sizes": list(chunk.sizes), "file": where.relative_path,
            "offset": where.offset, "length": where.length}
