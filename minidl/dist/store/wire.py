"""TCPStore's wire format: length-prefixed frames carrying a tiny typed encoding of None, bools, ints,
floats, str, bytes and lists (the arguments and results of store operations) — no pickle, so a
stranger's bytes can't run code in the server."""
from __future__ import annotations

import struct

_LEN = struct.Struct("<I")
_FLOAT = struct.Struct("<d")


def encode(obj) -> bytes:
    if obj is None:
        return b"N"
    if obj is True or obj is False:
        return b"T" if obj else b"F"
    if isinstance(obj, int):
        return _sized(b"i", str(obj).encode())
    if isinstance(obj, float):
        return b"f" + _FLOAT.pack(obj)
    if isinstance(obj, str):
        return _sized(b"s", obj.encode())
    if isinstance(obj, bytes):
        return _sized(b"b", obj)
    if isinstance(obj, (list, tuple)):
        return b"l" + _LEN.pack(len(obj)) + b"".join(encode(x) for x in obj)
    raise TypeError(f"TCPStore can't send a {type(obj).__name__}")


def _sized(tag, data):
    return tag + _LEN.pack(len(data)) + data


def decode(data: bytes):
    obj, end = _decode(data, 0)
    if end != len(data):
        raise ValueError(f"TCPStore frame has {len(data) - end} trailing bytes")
    return obj


def _decode(data, pos):
    tag, pos = data[pos:pos + 1], pos + 1
    if tag in (b"N", b"T", b"F"):
        return {b"N": None, b"T": True, b"F": False}[tag], pos
    if tag == b"f":
        return _FLOAT.unpack_from(data, pos)[0], pos + _FLOAT.size
    (n,) = _LEN.unpack_from(data, pos)
    pos += _LEN.size
    if tag == b"l":
        items = []
        for _ in range(n):
            item, pos = _decode(data, pos)
            items.append(item)
        return items, pos
    raw, pos = data[pos:pos + n], pos + n
    if len(raw) != n:
        raise ValueError("TCPStore frame ends inside a value")
    if tag == b"i":
        return int(raw), pos
    if tag == b"s":
        return raw.decode(), pos
    if tag == b"b":
        return raw, pos
    raise ValueError(f"TCPStore frame has an unknown tag {tag!r}")


def send_frame(sock, obj) -> None:
    body = encode(obj)
    sock.sendall(_LEN.pack(len(body)) + body)


def recv_frame(sock):
    """The next frame's object, or None when the peer closed the connection between frames."""
    head = _recv_exact(sock, _LEN.size, allow_eof=True)
    if head is None:
        return None
    return decode(_recv_exact(sock, _LEN.unpack(head)[0]))


def _recv_exact(sock, n, allow_eof=False):
    parts, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            if allow_eof and left == n:
                return None
            raise ConnectionError("connection closed inside a frame")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)
