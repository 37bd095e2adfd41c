"""The parameter server's messages, on minidl.dist's point-to-point layer.

A request (worker -> server) is a header of ``HEADER`` int64 words on tag ``REQUEST``, then its
payload tensors on tag ``PAYLOAD``, whose sizes the header gives, so a server can take requests
from any worker in the order they come. A reply (server -> worker) is a header [status, numel,
message length, 0] on tag ``REPLY``, then the values (or, when status is ERROR, the message as
bytes) on tag ``REPLY_DATA``. A server answers each worker's requests in the order it got them,
so a worker matches replies to its requests by order alone.
"""
from __future__ import annotations

import minidl

HEADER = 13
REQUEST, PAYLOAD, REPLY, REPLY_DATA = 7101, 7102, 7103, 7104
REGISTER, PUSH, PULL, CLOCK, SHUTDOWN, STATS, EXITED = range(1, 8)
KIND_NAMES = {REGISTER: "register", PUSH: "push", PULL: "pull", CLOCK: "clock", SHUTDOWN: "shutdown",
              STATS: "stats", EXITED: "exited"}
OK, ERROR = 0, 1
DTYPES = (minidl.float32, minidl.float64, minidl.int64)

# request header words
# (PARTS: how many payload tensors follow, so a server can consume those of a request it refuses)
KIND, KEY, WORKER_CLOCK, ROWS, NUMEL, DTYPE, NAME_LEN, NDIM, OPTIMIZER, SPARSE, EMBEDDING, SEED, PARTS = range(HEADER)


def header(kind, key=0, clock=0, rows=-1, numel=0, dtype=minidl.float32, **words) -> minidl.Tensor:
    h = [0] * HEADER
    h[KIND], h[KEY], h[WORKER_CLOCK], h[ROWS], h[NUMEL], h[DTYPE] = kind, key, clock, rows, numel, DTYPES.index(dtype)
    for name, value in words.items():
        h[globals()[name.upper()]] = int(value)
    return minidl.tensor(h, dtype=minidl.int64)


def text(message: str) -> minidl.Tensor:
    return minidl.tensor(list(message.encode()), dtype=minidl.uint8)


def read_text(t: minidl.Tensor) -> str:
    return bytes(t.tolist()).decode(errors="replace")
