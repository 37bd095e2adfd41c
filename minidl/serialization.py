"""minidl.save / minidl.load: checkpoints in the safetensors format, which never unpickles code.

A checkpoint is one safetensors file. Its tensors are the tensors of the saved object, named by
their path in it (``model/0.weight``); everything else (numbers, strings, None, bools, lists,
tuples, dicts with any such keys) goes into the file's JSON metadata as a *skeleton* of the
object in which each tensor is a reference ``{"$tensor": name}``. The file is written
atomically (temporary file, fsync, rename), so a crash mid-write leaves the previous one intact.
Files written by the safetensors package itself load as a flat dict of tensors.
"""
from __future__ import annotations

import json
import math
import os
import struct
import tempfile

import numpy as np
import safetensors.numpy

from . import cuda
from ._tensor import Tensor
from ._tensor_base import as_device
from .ops.creation import from_numpy

_SKELETON_KEY = "minidl.skeleton"
_FORMAT_KEY = "minidl.format"
_FORMAT = "1"


# ----------------------------------------------------------------------------- encoding
def _encode(obj, path: str, tensors: dict):
    """JSON-able skeleton of ``obj``; tensors are collected into ``tensors`` by path."""
    if isinstance(obj, Tensor):
        name = path or "tensor"
        while name in tensors:
            name += "'"
        tensors[name] = np.array(obj.detach().cpu().numpy(force=True), order="C")  # keeps 0-d shapes
        return {"$tensor": name} if obj.device.type == "cpu" else {"$tensor": name, "device": str(obj.device)}
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        value = float(obj)
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(obj, (list, tuple)):
        items = [_encode(v, f"{path}/{i}" if path else str(i), tensors) for i, v in enumerate(obj)]
        return items if isinstance(obj, list) else {"$tuple": items}
    if isinstance(obj, dict):
        pairs = []
        for key, value in obj.items():
            if not (key is None or isinstance(key, (bool, int, float, str))):
                raise TypeError(f"minidl.save: dict key {key!r} at '{path or '/'}' is a "
                                f"{type(key).__name__}; keys must be str, int, float, bool or None")
            pairs.append([_encode(key, path, {}), _encode(value, f"{path}/{key}" if path else str(key), tensors)])
        return {"$dict": pairs}
    raise TypeError(f"minidl.save: the value at '{path or '/'}' is a {type(obj).__name__}, which a checkpoint "
                    f"cannot hold (tensors, numbers, strings, None, lists, tuples and dicts only)")


def _place(t, saved: str, map_location):
    """The loaded CPU tensor ``t`` on the device PyTorch's ``map_location`` rules pick: the saved
    device by default; a device (or its name) for all; a dict from saved to target device names;
    or a callable (tensor, saved location) -> tensor, None meaning the default."""
    target = saved
    if callable(map_location):
        moved = map_location(t, saved)
        if moved is not None:
            return moved
    elif isinstance(map_location, dict):
        target = map_location.get(saved, saved)
    elif map_location is not None:
        target = map_location
    target = as_device(target)
    if target.type == "cuda" and not cuda.is_available():
        raise RuntimeError(f"minidl.load: a tensor was saved on {saved} but CUDA is not available; on a machine "
                           f"without a GPU pass map_location='cpu' (or a device) to minidl.load")
    return t.to(target)


def _decode(node, tensors: dict, map_location=None):
    if isinstance(node, list):
        return [_decode(v, tensors, map_location) for v in node]
    if isinstance(node, dict):
        if "$tensor" in node:
            return _place(tensors[node["$tensor"]], node.get("device", "cpu"), map_location)
        if "$float" in node:
            return float(node["$float"])
        if "$tuple" in node:
            return tuple(_decode(v, tensors, map_location) for v in node["$tuple"])
        return {_decode(k, tensors): _decode(v, tensors, map_location) for k, v in node["$dict"]}
    return node


# ----------------------------------------------------------------------------- files
def save(obj, f) -> None:
    """Write ``obj`` (a tensor, or nested dicts/lists/tuples of tensors and plain values) to ``f``."""
    tensors: dict = {}
    skeleton = _encode(obj, "", tensors)
    metadata = {_FORMAT_KEY: _FORMAT, _SKELETON_KEY: json.dumps(skeleton, allow_nan=False)}
    data = safetensors.numpy.save(tensors, metadata=metadata)
    if hasattr(f, "write"):
        f.write(data)
        return
    path = os.fspath(f)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".minidl-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def _metadata(data: bytes, name: str) -> dict:
    """The ``__metadata__`` of a safetensors header (8-byte little-endian length, then JSON)."""
    if len(data) < 8:
        raise RuntimeError(f"minidl.load: {name} is not a minidl checkpoint (too short: {len(data)} bytes)")
    (length,) = struct.unpack("<Q", data[:8])
    if length > len(data) - 8:
        raise RuntimeError(f"minidl.load: {name} is truncated or not a safetensors file (header of {length} "
                           f"bytes in a file of {len(data)})")
    try:
        header = json.loads(data[8:8 + length])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RuntimeError(f"minidl.load: {name} is not a minidl checkpoint (unreadable header: {e})") from None
    if not isinstance(header, dict):
        raise RuntimeError(f"minidl.load: {name} is not a minidl checkpoint (header is not a JSON object)")
    return header.get("__metadata__") or {}


def load(f, map_location=None, weights_only=True):
    """Read what ``save`` wrote. Tensors go back to the device they were saved from, unless
    ``map_location`` (as in ``torch.load``: a device, a dict of device names, or a callable) says otherwise.

    ``weights_only`` is accepted for PyTorch compatibility: loading never runs code anyway.
    """
    if hasattr(f, "read"):
        data, name = f.read(), getattr(f, "name", "<file object>")
    else:
        name = os.fspath(f)
        with open(name, "rb") as fh:
            data = fh.read()
    metadata = _metadata(data, name)
    try:
        arrays = safetensors.numpy.load(data)
    except Exception as e:  # the package reports corruption with its own exception types
        raise RuntimeError(f"minidl.load: {name} is corrupted or not a safetensors file ({e})") from None
    tensors = {key: from_numpy(array if array.flags.writeable else array.copy()) for key, array in arrays.items()}
    if metadata.get(_FORMAT_KEY) is None:  # a plain safetensors file: its tensors by name
        return {key: _place(t, "cpu", map_location) for key, t in tensors.items()}
    try:
        return _decode(json.loads(metadata[_SKELETON_KEY]), tensors, map_location)
    except (KeyError, TypeError, ValueError) as e:
        raise RuntimeError(f"minidl.load: {name} has a damaged minidl skeleton ({e!r})") from None
