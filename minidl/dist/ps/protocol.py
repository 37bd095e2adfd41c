"""The parameter server's messages, whatever carries them (transports.py).

A request (worker -> server) is a header of ``HEADER`` int64 words and up to ``MAX_PARTS``
payload parts, whose byte sizes the header gives; it arrives whole or not at all. A reply
(server -> worker) is [status, byte count] and a body: the values, or, when status is ERROR, a
message. A server answers each worker's requests in the order it got them, so a worker matches
replies to its requests by order alone.

Each request carries the worker's sequence number for that server (1, 2, ...): a worker whose
connection broke sends its unanswered requests again on a new one, and the server, which keeps
the last number it took from each worker, answers a repeated push without applying it again.
"""
from __future__ import annotations

import numpy as np

import minidl

HEADER = 20
MAX_PARTS = 4
REQUEST, PAYLOAD, REPLY, REPLY_DATA = 7101, 7102, 7103, 7104   # (tags over the process group)
(REGISTER, PUSH, PULL, CLOCK, SHUTDOWN, STATS, EXITED, JOIN, WHERE, BARRIER) = range(1, 11)
LOST = 99   # (not a request: a lost worker, as a server's write-ahead log records it)
CHANGES_STATE = (REGISTER, PUSH, CLOCK, SHUTDOWN, JOIN, BARRIER)   # (what a server logs ahead, recovery.py)
KIND_NAMES = {REGISTER: "register", PUSH: "push", PULL: "pull", CLOCK: "clock", SHUTDOWN: "shutdown",
              STATS: "stats", EXITED: "exited", JOIN: "join", WHERE: "where", BARRIER: "barrier"}
OK, ERROR = 0, 1
DTYPES = (minidl.float32, minidl.float64, minidl.int64, minidl.uint8)

# request header words
# (PARTS and BYTES0..3: how many payload parts follow and their byte sizes, so any transport can take
# a request whole before a handler reads it)
(KIND, KEY, WORKER_CLOCK, ROWS, NUMEL, DTYPE, NAME_LEN, NDIM, OPTIMIZER, SPARSE, EMBEDDING, SEED, PARTS, SEQ,
 BYTES0, BYTES1, BYTES2, BYTES3, EPOCH, SPARE) = range(HEADER)


def header(kind, key=0, clock=0, rows=-1, numel=0, dtype=minidl.float32, **words) -> minidl.Tensor:
    h = [0] * HEADER
    h[KIND], h[KEY], h[WORKER_CLOCK], h[ROWS], h[NUMEL], h[DTYPE] = kind, key, clock, rows, numel, DTYPES.index(dtype)
    for name, value in words.items():
        h[globals()[name.upper()]] = int(value)
    return minidl.tensor(h, dtype=minidl.int64)


def as_bytes(t: minidl.Tensor) -> np.ndarray:
    """A tensor's values as a flat uint8 array (no copy for a contiguous CPU tensor)."""
    return np.ascontiguousarray(t.detach().contiguous().numpy()).reshape(-1).view(np.uint8)


def seal(header_words: minidl.Tensor, payload) -> list:
    """A request as the parts a transport sends: the header (with PARTS and BYTES filled) first."""
    parts = [as_bytes(t) for t in payload]
    if len(parts) > MAX_PARTS:
        raise ValueError(f"a parameter-server request has at most {MAX_PARTS} payload parts, got {len(parts)}")
    header_words[PARTS] = len(parts)
    for i, part in enumerate(parts):
        header_words[BYTES0 + i] = part.nbytes
    return [as_bytes(header_words)] + parts


def view(part, numel, dtype, what) -> minidl.Tensor:
    """A received part as ``numel`` values of ``dtype`` (a refused request when the size is wrong)."""
    array = np.frombuffer(part, dtype=np.uint8)
    if array.nbytes != numel * dtype.itemsize:
        raise ValueError(f"{what}: a payload of {array.nbytes} bytes where {numel} {dtype.name} values were due")
    if not array.flags.writeable:   # (a transport's own buffer is taken as it is)
        array = array.copy()
    return minidl.from_numpy(array.view(dtype.np))


def text(message: str) -> minidl.Tensor:
    return minidl.tensor(list(message.encode()), dtype=minidl.uint8)


def read_text(data) -> str:
    if isinstance(data, minidl.Tensor):
        data = bytes(data.tolist())
    return bytes(data).decode(errors="replace")
