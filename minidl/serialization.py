"""minidl.save / minidl.load: checkpoints that load without unpickling unknown objects by default (``weights_only``).

Two formats, chosen by ``save`` from what the object holds:

* **safetensors** (the default, loaded without unpickling): for tensors,
  numbers, strings, None, bools and ``dict`` / ``list`` / ``tuple`` / ``OrderedDict`` of them.
  One safetensors file holds each distinct tensor *storage* once, named by the path of the first
  tensor over it (``model/0.weight``; stored with that tensor's shape when the tensor covers its
  storage exactly, else flat). The file's JSON metadata holds a *skeleton* of the object in which
  each tensor is ``{"$tensor": storage name, "layout": [shape, strides, offset], "dtype": ...}``,
  so tensors saved together that share storage (a view and its base, tied weights) share it again
  after loading. Loading reads JSON and raw bytes only: it never unpickles. Files of the first
  format (no ``layout``: the stored array is the tensor) and files written by the safetensors
  package itself (a flat dict of tensors) still load. A bfloat16 storage is a ``BF16`` entry of
  its raw bits, as torch writes it; the package's numpy helpers know no bfloat16, so minidl writes
  the file itself (as the package writes it, metadata keys in a fixed order) and reads it with the
  package's ``deserialize``, which hands over every dtype's raw bytes.
* **pickle archive**, for anything else (numpy arrays, whole ``nn.Module`` objects, other Python
  objects): a zip archive (as torch's own format) holding ``minidl_format`` (``pickle-1``),
  ``data.pkl`` (the pickled object structure) and ``tensors.safetensors`` (the storages of every
  tensor inside it, the same way as above). Tensors are not pickled as bytes: the pickle refers
  to them by persistent id (storage name, layout, dtype, device, requires_grad, Parameter or
  not). Unpickling can run arbitrary code, so under ``weights_only=True`` (the default, as in
  ``torch.load`` since PyTorch 2.6) ``load`` reads the pickle with ``_restricted_unpickler``, as a torch
  checkpoint's: it resolves only a few harmless builtins and the classes and functions marked safe
  (``safe_globals([...])``, ``add_safe_globals``; see ``_weights_only``), refuses any other global the
  pickle names, by name, and sets the state of nothing but OrderedDicts and instances of classes marked
  safe (Python's unpickler, restricted only in its globals, would BUILD a fake layout onto a loaded
  tensor); ``weights_only=False`` unpickles anything, with Python's unpickler or ``pickle_module``'s.

``load`` also reads **torch checkpoints**, the zip files ``torch.save`` writes (``_torch_checkpoint``), without torch:
the torch globals their pickle names (``torch._utils._rebuild_tensor_v2``, ``_rebuild_parameter``, storage classes,
dtypes, ``torch.Size``, ``torch.device``) map to functions building minidl tensors, Parameters, dtypes and sizes,
views and tied weights sharing one Storage again. Under ``weights_only`` the pickle runs in an interpreter that calls
only those and the globals of ``_weights_only`` (``_restricted_unpickler``); ``os``/``posix``/``nt``/``sys`` are
refused even when marked safe, as torch refuses them. ``weights_only=False`` imports other globals, but no torch
object beyond those (a whole torch module cannot load without torch). Dtypes minidl lacks (int8, complex, float8,
unsigned beyond uint8), quantized, sparse and nested tensors, legacy (non-zip) torch files and TorchScript archives
raise errors naming them; Python attributes set on a torch tensor are dropped with a warning. Unlike torch's
weights-only load, minidl's reads pickles of protocols 3 to 5 too, and allows frozensets by default.

Whatever the format, a layout read from a file is checked against its storage before a tensor is made over it
(``_check_bounds``), zip records are read a chunk at a time (stored or deflated only: bzip2 and lzma records, which
torch's reader refuses too, inflate a whole read at once), and a malformed pickle raises RuntimeError or
``pickle.UnpicklingError`` naming the file, never another exception from deep inside.

``mmap=True`` (a path; a torch checkpoint or a safetensors file) maps the file copy-on-write, as torch does with
MAP_PRIVATE: each storage is a view of the mapping (a torch record's data start after its local zip header), read
from disk as it is touched; writes stay in the process. Checksums are then not checked (that would read every page).

Differences from torch 2.13: numpy scalars (``np.float32(1)``) are saved as Python numbers in the
safetensors format, so they load under ``weights_only=True`` (as Python numbers); torch pickles
them and refuses them under ``weights_only=True`` without ``add_safe_globals``. A global is allowed by
its own ``{__module__}.{__qualname__}`` (``minidl.nn.linear.Linear``, whether named as
``minidl.nn.modules.linear.Linear`` or ``minidl.nn.Linear``), not by torch's name.
Subclasses of dict/list/tuple other than ``OrderedDict`` (namedtuples, defaultdict) go into the
pickle archive (torch's weights-only unpickler refuses most of them too). Two storages that alias
the same memory under different dtypes are saved as two separate storages. As in torch, a view
saves its whole storage (save ``t[:1].clone()`` to save one row of a large tensor). Tensor
subclasses other than ``nn.Parameter`` come back from the pickle archive as plain tensors.

Both formats store a CRC-32 checksum of each stored tensor's bytes in the safetensors metadata
(``minidl.crc32``: a JSON string, as the format wants every metadata value a string); ``load``
checks them and names the tensors whose bytes changed. Files without it (older minidl files, files
of the safetensors package) load unchecked; a torch checkpoint's records are checked against its zip's CRC-32s.

Both formats are written atomically (temporary file, fsync, rename), so a crash mid-write leaves
the previous file intact.
"""
from __future__ import annotations

import collections
import io
import json
import math
import mmap
import os
import pickle
import struct
import tempfile
import zipfile
import zlib

import numpy as np
import safetensors

from . import _dtype as dt
from . import _weights_only, cuda, kernels
from ._restricted_unpickler import RestrictedUnpickler, brief
from ._tensor import Tensor
from ._tensor_base import Storage, as_device, make
from ._weights_only import add_safe_globals, clear_safe_globals, get_safe_globals, safe_globals  # noqa: F401
from .layout import Layout

_SKELETON_KEY = "minidl.skeleton"
_FORMAT_KEY = "minidl.format"
_CHECKSUM_KEY = "minidl.crc32"
_FORMAT = "2"
_PICKLE_FORMAT = b"pickle-1"
_ZIP_MAGIC = b"PK\x03\x04"
# what zipfile raises on a damaged archive (bad names raise UnicodeDecodeError, unknown compressions
# NotImplementedError, encrypted records RuntimeError, a header offset past 2**63 OverflowError)
_ZIP_ERRORS = (zipfile.BadZipFile, EOFError, OSError, ValueError, NotImplementedError, RuntimeError, struct.error,
              zlib.error, OverflowError)
# the compressions torch's zip reader (miniz) reads; zipfile decompresses a bzip2 or lzma record a whole read's worth
# at a time, which a small record can make gigabytes
_COMPRESSIONS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
_INT64 = 1 << 63
_CHUNK = 1 << 24   # bytes read from a zip record at a time (each read inflates at most that many)
# torch's legacy (non-zip) checkpoints start with a pickle of this number (torch/serialization.py, MAGIC_NUMBER)
_TORCH_LEGACY_MAGIC = (0x1950A86A20F9469CFC6C).to_bytes(10, "little")
# safetensors dtype codes, in the order the safetensors package stores tensors: widest first (then
# by name), so each tensor's data is aligned
_CODES = {dt.int64: "I64", dt.float64: "F64", dt.float32: "F32", dt.int32: "I32", dt.bfloat16: "BF16",
          dt.float16: "F16", dt.int16: "I16", dt.uint8: "U8", dt.bool_: "BOOL"}
_DTYPES = {code: d for d, code in _CODES.items()}
_ORDER = {d: i for i, d in enumerate(_CODES)}


class _NeedsPickle(TypeError):
    """A value the safetensors format cannot hold (save then writes the pickle archive)."""


# ----------------------------------------------------------------------------- storages
class _Storages:
    """The distinct storages of the tensors being saved, each once, named by its first tensor's path."""

    def __init__(self):
        self.entries: dict = {}  # name -> (dtype, host array)
        self._names: dict = {}   # id(storage) -> name
        self._keep: list = []    # the storages, so their ids stay unique while saving

    def add(self, t, path: str) -> dict:
        """The description of tensor ``t`` (storage name, layout, dtype, device); stores its storage."""
        storage, layout = t._storage, t._layout
        name = self._names.get(id(storage))
        if name is None:
            name = path or "tensor"
            while name in self.entries or name == "__metadata__":  # the header's own key
                name += "'"
            host = np.ascontiguousarray(kernels.get("to_host", storage.device.type)(storage.buf)).reshape(-1)
            if layout.offset == 0 and layout.is_contiguous and layout.numel == host.size:
                host = host.reshape(tuple(layout.shape))  # readable as that tensor by the safetensors package
            self.entries[name] = (t.dtype, host)
            self._names[id(storage)] = name
            self._keep.append(storage)
        node = {"$tensor": name, "layout": [list(layout.shape), list(layout.strides), layout.offset],
                "dtype": t.dtype.name}
        if storage.device.type != "cpu":
            node["device"] = str(storage.device)
        return node


def _safetensors(entries: dict, metadata: dict) -> bytes:
    """A safetensors file of ``entries`` (name -> (dtype, contiguous host array)) as the safetensors
    package writes it (its numpy helpers know no bfloat16), but with the metadata keys in their given
    order (the package's come in hash order), and a CRC-32 of each tensor's bytes among them."""
    names, chunks = _file_order(entries)
    checksums = {name: _crc32(chunk) for name, chunk in zip(names, chunks)}
    head, _ = _safetensors_header(entries, names, {**metadata, _CHECKSUM_KEY: json.dumps(checksums)})
    return b"".join([head, *chunks])


def _file_order(entries: dict):
    """(names, their little-endian bytes) in the order a safetensors file holds them: widest dtype first
    (then by name), so that each tensor's data is aligned."""
    names = sorted(entries, key=lambda name: (_ORDER[entries[name][0]], name))
    chunks = [memoryview(np.ascontiguousarray(entries[n][1], entries[n][0].np.newbyteorder("<")).reshape(-1)
                         .view(np.uint8)) for n in names]
    return names, chunks


def _safetensors_header(entries: dict, names: list, metadata: dict):
    """(the file's head: an 8-byte little-endian length, then the JSON header padded with spaces to a
    multiple of 8; name -> where its data starts in the file) for ``entries`` stored in ``names``' order."""
    header, starts, end = {"__metadata__": metadata}, {}, 0   # (the metadata comes first)
    for name in names:
        dtype, array = entries[name]
        header[name] = {"dtype": _CODES[dtype], "shape": list(array.shape), "data_offsets": [end, end + array.nbytes]}
        starts[name], end = end, end + array.nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    head = struct.pack("<Q", len(text)) + text
    return head, {name: len(head) + start for name, start in starts.items()}


def _crc32(data) -> str:
    """The CRC-32 of a tensor's bytes, as 8 hex digits: it catches overwritten or flipped bytes at
    about 2 GB/s (50 ms on a 100 MB checkpoint); sha256 takes twice that, blake2b four times."""
    return f"{zlib.crc32(data):08x}"


def _verify(tensors: list, metadata: dict, name: str) -> None:
    """Each tensor's bytes against the checksum ``save`` wrote beside them; files without checksums
    (older minidl files, files written by torch or the safetensors package) are taken as they are."""
    if _CHECKSUM_KEY not in metadata:
        return
    try:
        checksums = json.loads(metadata[_CHECKSUM_KEY])
        changed = [key for key, tensor in tensors if checksums[key] != _crc32(tensor["data"])]
    except (KeyError, TypeError, ValueError, RecursionError) as e:  # (RecursionError: JSON nested too deep)
        raise RuntimeError(f"minidl.load: {name} has damaged checksums ({e!r})") from None
    if changed:
        raise RuntimeError(f"minidl.load: {name} is corrupted: the bytes of tensor(s) "
                           f"{', '.join(map(repr, changed))} differ from what was saved (CRC-32 checksum mismatch)")


def _read(data: bytes, name: str, metadata: dict) -> dict:
    """The tensors of a safetensors file whose ``__metadata__`` is ``metadata``, checked against its
    checksums: name -> (dtype, shape, flat writable CPU buffer)."""
    try:
        tensors = safetensors.deserialize(data)
    except Exception as e:  # the package reports corruption with its own exception types
        raise RuntimeError(f"minidl.load: {name} is corrupted or not a safetensors file ({e})") from None
    _verify(tensors, metadata, name)
    out = {}
    for key, tensor in tensors:
        dtype = _DTYPES.get(tensor["dtype"])
        if dtype is None:
            raise RuntimeError(f"minidl.load: {name} holds tensor {key!r} of safetensors dtype {tensor['dtype']}, "
                               f"which minidl lacks (it has {', '.join(_DTYPES)})")
        flat = np.frombuffer(tensor["data"], dtype.np.newbyteorder("<")).astype(dtype.np, copy=False)
        out[key] = (dtype, tuple(tensor["shape"]), flat if flat.flags.writeable else flat.copy())
    return out


def _whole(dtype, shape, buf):
    """The CPU tensor of a stored array (a plain safetensors file's tensors, format 1's)."""
    return make(Storage(buf, as_device("cpu")), Layout(shape), dtype)


def _rebuild_tensor(node: dict, buffers: dict, storages: dict):
    """The CPU tensor a node describes; tensors over one saved storage share one Storage."""
    name = node["$tensor"]
    stored, stored_shape, buf = buffers[name]
    if "layout" not in node:  # format 1: the stored array is the tensor
        return _whole(stored, stored_shape, buf)
    storage = storages.get(name)
    if storage is None:
        storage = storages[name] = Storage(buf, as_device("cpu"))
    shape, strides, offset = node["layout"]
    dtype = dt.from_name(node["dtype"])
    if dtype is not stored:
        raise ValueError(f"dtype {dtype.name} does not match its storage's {stored.name}")
    _check_bounds(shape, strides, offset, storage.buf.size, name)
    return make(storage, Layout(tuple(shape), tuple(strides), offset), dtype)


def _check_bounds(shape, strides, offset, size: int, name: str, negative_strides: bool = True) -> None:
    """A layout read from a file must stay inside its storage (kernels index the raw buffer unchecked): sizes, strides
    and offset int64s, none negative but the strides of minidl's own files (``negative_strides``: minidl slices with
    negative steps; torch refuses them from a file), the offset within the storage even for an empty tensor, at most
    2**63 - 1 elements (as torch checks) and none outside the storage."""
    lowest = -_INT64 if negative_strides else 0
    if not (isinstance(shape, (list, tuple)) and isinstance(strides, (list, tuple)) and len(shape) == len(strides)
            and all(type(n) is int for n in (*shape, *strides, offset))
            and all(0 <= n < _INT64 for n in (*shape, offset)) and all(lowest <= n < _INT64 for n in strides)):
        raise ValueError(f"the layout of storage {name!r} is malformed (sizes {brief(shape)}, strides "
                         f"{brief(strides)}, offset {brief(offset)}): it needs as many strides as sizes, each number "
                         f"an int64, none negative{' but strides' if negative_strides else ''}")
    if offset > size:
        raise ValueError(f"a tensor starts at element {offset} of storage {name!r}, which has {size}")
    if 0 in shape:
        return
    numel = 1
    for n in shape:
        numel *= n
        if numel >= _INT64:
            raise ValueError(f"a tensor over storage {name!r} has sizes {brief(shape)}: over 2**63 - 1 elements")
    low, high = Layout(tuple(shape), tuple(strides), offset).span()
    if low < 0 or high >= size:
        raise ValueError(f"a tensor reaches elements {low}..{high} of storage {name!r}, which has {size}")


# ----------------------------------------------------------------------------- encoding
def _encode(obj, path: str, store: _Storages):
    """JSON-able skeleton of ``obj``; tensors' storages are collected into ``store``."""
    if isinstance(obj, Tensor):
        from .nn.parameter import Parameter
        if type(obj) not in (Tensor, Parameter):
            raise _NeedsPickle(f"a {type(obj).__name__} tensor subclass at '{path or '/'}'")
        node = store.add(obj, path)
        if type(obj) is Parameter:
            node["parameter"] = bool(obj.requires_grad)
        return node
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        value = float(obj)
        return value if math.isfinite(value) else {"$float": repr(value)}
    if type(obj) in (list, tuple):
        items = [_encode(v, f"{path}/{i}" if path else str(i), store) for i, v in enumerate(obj)]
        return items if type(obj) is list else {"$tuple": items}
    if type(obj) in (dict, collections.OrderedDict):
        pairs = []
        for key, value in obj.items():
            if not (key is None or isinstance(key, (bool, int, float, str))):
                raise _NeedsPickle(f"dict key {key!r} at '{path or '/'}' is a {type(key).__name__}")
            pairs.append([_encode(key, path, _Storages()),
                          _encode(value, f"{path}/{key}" if path else str(key), store)])
        return {"$dict": pairs} if type(obj) is dict else {"$odict": pairs}
    raise _NeedsPickle(f"the value at '{path or '/'}' is a {type(obj).__name__}")


class _Placer:
    """Puts loaded CPU tensors on the device PyTorch's ``map_location`` rules pick: the saved device
    by default; a device (or its name) for all; a dict from saved to target device names; or a
    callable (tensor, saved location) -> tensor, None meaning the default. Tensors over one storage
    going to one device are moved together, so they still share storage there. Errors name the file ``name``."""

    def __init__(self, map_location, name: str):
        self.map_location, self.name = map_location, name
        self._moved: dict = {}  # (id of CPU storage, target) -> (moved storage, CPU storage)

    def __call__(self, t, saved: str, parameter=None):
        placed = self._place(t, saved)
        if parameter is not None:
            from .nn.parameter import Parameter
            placed = Parameter(placed, requires_grad=parameter)
        return placed

    def _place(self, t, saved: str):
        target, map_location = saved, self.map_location
        if callable(map_location):
            moved = map_location(t, saved)
            if moved is not None:
                return moved
        elif isinstance(map_location, dict):
            target = map_location.get(saved, saved)
        elif map_location is not None:
            target = map_location
        try:
            target = as_device(target)
        except (RuntimeError, ValueError):
            raise RuntimeError(f"minidl.load: {self.name}: a tensor was saved on {brief(saved)}, a device minidl "
                               f"lacks; pass map_location (a device such as 'cpu', or a dict from saved to target "
                               f"devices) to minidl.load") from None
        if target.type == "cpu":
            return t
        if target.type == "cuda" and not cuda.is_available():
            raise RuntimeError(f"minidl.load: {self.name}: a tensor was saved on {brief(saved)} but CUDA is not "
                               f"available; on a machine without a GPU pass map_location='cpu' (or a device) to "
                               f"minidl.load")
        key = (id(t._storage), str(target))
        if key not in self._moved:  # the CPU storage is kept with it, so its id stays unique
            buf = kernels.get("from_host", target.type)(t._storage.buf)
            self._moved[key] = (Storage(buf, target), t._storage)
        return make(self._moved[key][0], t._layout, t.dtype)


def _decode(node, buffers: dict, storages: dict, place):
    if isinstance(node, list):
        return [_decode(v, buffers, storages, place) for v in node]
    if isinstance(node, dict):
        if "$tensor" in node:
            t = _rebuild_tensor(node, buffers, storages)
            return place(t, node.get("device", "cpu"), node.get("parameter"))
        if "$float" in node:
            return float(node["$float"])
        if "$tuple" in node:
            return tuple(_decode(v, buffers, storages, place) for v in node["$tuple"])
        pairs = ((_decode(k, buffers, storages, place), _decode(v, buffers, storages, place))
                 for k, v in node["$dict" if "$dict" in node else "$odict"])
        return dict(pairs) if "$dict" in node else collections.OrderedDict(pairs)
    return node


# ----------------------------------------------------------------------------- pickle archive
class _Pickler(pickle.Pickler):
    def __init__(self, file, store: _Storages):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.store = store
        self._count = 0

    def persistent_id(self, obj):
        if isinstance(obj, Tensor):
            if obj.grad_fn is not None and obj.requires_grad:
                raise RuntimeError("minidl.save: can't save a non-leaf tensor that requires grad "
                                   "(it has autograd history); save .detach() instead")
            self._count += 1
            node = self.store.add(obj, f"pickled/{self._count}")
            node["requires_grad"] = bool(obj.requires_grad)
            node["class"] = f"{type(obj).__module__}:{type(obj).__qualname__}"
            return json.dumps(node)
        return None


class _PersistentTensors:
    """A minidl pickle archive's tensors, from the persistent ids ``_Pickler`` wrote (JSON of the storage's name, the
    layout, dtype, device, requires_grad and class); tensors over one storage share one Storage."""

    def __init__(self, buffers: dict, place, name: str):
        self.buffers, self.place, self.name, self.storages = buffers, place, name, {}

    def __call__(self, pid):
        try:
            node = json.loads(pid) if type(pid) is str else None
            if not (type(node) is dict and type(node.get("device", "cpu")) is str
                    and type(node.get("class", "")) is str and type(node.get("requires_grad", False)) is bool):
                raise TypeError("not a JSON object of a tensor's storage, layout, dtype, device and class")
            t = _rebuild_tensor(node, self.buffers, self.storages)
        except (KeyError, TypeError, ValueError, RecursionError) as e:
            raise pickle.UnpicklingError(f"minidl.load: the pickle of {self.name} names a tensor by a malformed "
                                         f"persistent id {brief(pid)} ({e!s:.300})") from None
        t = self.place(t, node.get("device", "cpu"))
        module, _, qualname = node.get("class", "").partition(":")
        if qualname == "Parameter" and module.startswith("minidl"):
            from .nn.parameter import Parameter
            return Parameter(t, requires_grad=node.get("requires_grad", True))
        if node.get("requires_grad"):
            t.requires_grad_(True)
        return t


class _Unpickling:
    """How ``load`` unpickles the data.pkl of a minidl pickle archive or a torch checkpoint: under ``weights_only`` in
    ``_restricted_unpickler`` (which never BUILDs a tensor's attributes, as Python's unpickler would), else with
    ``pickle_module``'s Unpickler (Python's by default) given ``pickle_load_args``, as torch.load does."""

    def __init__(self, weights_only: bool, pickle_module, pickle_load_args: dict):
        self.weights_only, self.pickle_module = weights_only, pickle_module or pickle
        self.args = {"encoding": "utf-8", **pickle_load_args}  # torch.load's encoding of Python 2's strings

    def load(self, data: bytes, name: str, persistent_load, resolve):
        """The object ``data`` pickles. ``resolve(module, name, allowed)`` is the object of a global: ``allowed`` (full
        name -> object) are the other globals a weights-only load may resolve; for a trusted load it is None, and
        None back imports the global."""
        if self.weights_only:
            allowed = _weights_only.allowed()
            return RestrictedUnpickler(data, name, lambda module, qualname: resolve(module, qualname, allowed),
                                       persistent_load, _weights_only.buildable(), self.args["encoding"]).load()

        class Unpickler(self.pickle_module.Unpickler):  # a subclass, as torch.load makes one
            def find_class(self, module, qualname):
                value = resolve(module, qualname, None)
                return super().find_class(module, qualname) if value is None else value

            def persistent_load(self, pid):
                return persistent_load(pid)
        return Unpickler(io.BytesIO(data), **self.args).load()


def _pickle_archive(obj) -> bytes:
    store = _Storages()
    structure = io.BytesIO()
    _Pickler(structure, store).dump(obj)
    tensors = _safetensors(store.entries, {_FORMAT_KEY: _FORMAT})
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        z.writestr("minidl_format", _PICKLE_FORMAT)
        z.writestr("data.pkl", structure.getvalue())
        z.writestr("tensors.safetensors", tensors)
    return out.getvalue()


def _read_record(archive: zipfile.ZipFile, record) -> bytes:
    """A zip record's bytes, read a chunk at a time: ``ZipFile.read`` inflates a deflated record's whole stream in one
    go, whatever size the central directory declares (300 KB of zeros inflate to 300 MB)."""
    with archive.open(record) as source:
        return b"".join(iter(lambda: source.read(_CHUNK), b""))


def _load_archive(archive: zipfile.ZipFile, name: str, place, unpickling: _Unpickling):
    try:
        fmt = _read_record(archive, "minidl_format")
        structure, tensors = _read_record(archive, "data.pkl"), _read_record(archive, "tensors.safetensors")
    except (*_ZIP_ERRORS, KeyError) as e:
        raise RuntimeError(f"minidl.load: {name} is a corrupted minidl pickle archive ({e})") from None
    if fmt != _PICKLE_FORMAT:
        raise RuntimeError(f"minidl.load: {name} is a minidl archive of an unknown format")
    part = f"the tensor part of {name}"
    buffers = _read(tensors, part, _metadata(tensors, part))

    def resolve(module, qualname, allowed):  # minidl's own classes too only when allowed
        full = f"{module}.{qualname}"
        if allowed is not None and full not in allowed:
            raise _weights_only.refusal(full, name)
        return None if allowed is None else allowed[full]
    return unpickling.load(structure, name, _PersistentTensors(buffers, place, name), resolve)


# ----------------------------------------------------------------------------- files
def _write(data: bytes, f, midway=None) -> None:
    """Write ``data`` to a file object, or atomically to a path (a temp file beside it, fsync, rename, fsync
    the folder). ``midway``, when given, is called once half of the temp file is written and flushed: the
    parameter server's fault injection kills the process there to leave a torn temp file behind."""
    if hasattr(f, "write"):
        f.write(data)
        return
    path = os.fspath(f)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".minidl-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as out:
            half = len(data) // 2 if midway is not None else len(data)
            out.write(memoryview(data)[:half])
            if midway is not None:
                out.flush()
                midway()
            out.write(memoryview(data)[half:])
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_folder(folder)  # make the rename itself durable


def _fsync_folder(folder: str) -> None:
    """Make a created, renamed or removed name in ``folder`` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(obj, f) -> None:
    """Write ``obj`` to ``f`` (a path or a binary file object).

    Tensors, numbers, strings, None, bools and dict/list/tuple/OrderedDict of them go into a
    safetensors file that loads without unpickling; anything else (numpy arrays, modules, other
    objects) into a pickle archive that only ``load(..., weights_only=False)`` reads. Tensors
    saved together that share storage share it again when loaded."""
    store = _Storages()
    try:
        skeleton = _encode(obj, "", store)
    except _NeedsPickle:
        data = _pickle_archive(obj)
    else:
        metadata = {_FORMAT_KEY: _FORMAT, _SKELETON_KEY: json.dumps(skeleton, allow_nan=False)}
        data = _safetensors(store.entries, metadata)
    _write(data, f)


def _header(data, name: str):
    """(the JSON header of a safetensors file, where its data start): an 8-byte little-endian length, then JSON."""
    if len(data) < 8:
        raise RuntimeError(f"minidl.load: {name} is not a minidl checkpoint (too short: {len(data)} bytes)")
    (length,) = struct.unpack("<Q", data[:8])
    if length > len(data) - 8:
        raise RuntimeError(f"minidl.load: {name} is truncated or not a safetensors file (header of {length} "
                           f"bytes in a file of {len(data)})")
    try:
        header = json.loads(data[8:8 + length])
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise RuntimeError(f"minidl.load: {name} is not a minidl checkpoint (unreadable header: {e})") from None
    if not isinstance(header, dict):
        raise RuntimeError(f"minidl.load: {name} is not a minidl checkpoint (header is not a JSON object)")
    return header, 8 + length


def _metadata(data: bytes, name: str) -> dict:
    """The ``__metadata__`` of a safetensors header."""
    return _header(data, name)[0].get("__metadata__") or {}


def _read_mapped(mapping, name: str):
    """(metadata, the tensors as ``_read`` gives them) of a safetensors file mapped into memory, each tensor a view of
    the mapping. The checksums are not checked: that would read every page of the file."""
    header, start = _header(mapping, name)
    size, out = len(mapping) - start, {}
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        code = entry.get("dtype") if isinstance(entry, dict) else None
        if _DTYPES.get(code if isinstance(code, str) else None) is None:
            raise RuntimeError(f"minidl.load: {name} holds tensor {key!r} of safetensors dtype {code!r:.50}, "
                               f"which minidl lacks (it has {', '.join(_DTYPES)})")
        dtype, shape, offsets = _DTYPES[code], entry.get("shape"), entry.get("data_offsets")
        numbers = [*shape, *offsets] if isinstance(shape, list) and isinstance(offsets, list) else [None]
        if not (all(type(n) is int and n >= 0 for n in numbers) and len(offsets) == 2
                and offsets[0] <= offsets[1] <= size and offsets[1] - offsets[0] == math.prod(shape) * dtype.itemsize):
            raise RuntimeError(f"minidl.load: {name} is corrupted or truncated: the header entry of tensor {key!r} "
                               f"({entry!r:.200}) does not fit its {size} bytes of data")
        count = math.prod(shape)
        flat = np.frombuffer(mapping, dtype.np.newbyteorder("<"), count, start + offsets[0]) if count else \
            np.empty(0, dtype.np)
        out[key] = (dtype, tuple(shape), flat.astype(dtype.np, copy=False))
    return header.get("__metadata__") or {}, out


def _map(fh, name: str):
    """A copy-on-write mapping of an open file (torch's MAP_PRIVATE): tensors over it are writable, and what is
    written to them stays in this process, never reaching the file."""
    try:
        return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
    except ValueError as e:  # an empty file
        raise RuntimeError(f"minidl.load: {name} cannot be mapped ({e})") from None


def load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None, **pickle_load_args):
    """Read what ``save`` wrote, or a checkpoint ``torch.save`` wrote. Tensors go back to the device they were saved
    from, unless ``map_location`` (as in ``torch.load``: a device, a dict of device names, or a callable) says
    otherwise.

    ``weights_only`` (None is True, the default as in torch 2.13, unless a ``pickle_module`` is given) unpickles
    nothing from the safetensors format and, from a pickle archive (numpy arrays, modules, other objects) or a torch
    checkpoint, only tensors, containers, a few harmless builtins and the globals marked safe
    (``minidl.serialization.safe_globals([...])`` / ``add_safe_globals``): any other is refused by name.
    ``weights_only=False`` loads anything: unpickling can run arbitrary code, so pass it only for files from a trusted
    source. As in torch.load, ``pickle_module`` (its ``Unpickler``) and ``pickle_load_args`` (``encoding='latin1'``
    for Python 2's strings...) go to the unpickler of a ``weights_only=False`` load; under ``weights_only`` a
    ``pickle_module`` is refused and only ``encoding`` applies. A safetensors file needs neither.

    ``mmap=True`` (``f`` a path; a torch checkpoint or a safetensors file) maps the file copy-on-write instead of
    reading it: tensors are views of the mapping, read from disk as they are touched, writable, and what is written
    to them never reaches the file.
    """
    mapped = bool(mmap)
    if mapped and not isinstance(f, (str, os.PathLike)):
        raise ValueError("minidl.load: f must be a file path in order to use the mmap argument")
    unpickling = _unpickling(pickle_module, weights_only, pickle_load_args)
    if hasattr(f, "read"):
        data = f.read()
        return _load_from(io.BytesIO(data), getattr(f, "name", "<file object>"), map_location, unpickling, False)
    name = os.fspath(f)
    with open(name, "rb") as fh:
        return _load_from(fh, name, map_location, unpickling, mapped)


def _unpickling(pickle_module, weights_only, pickle_load_args: dict) -> _Unpickling:
    """``load``'s pickle arguments, checked as torch.load checks them: ``weights_only`` None is True unless a
    ``pickle_module`` is given, which ``weights_only`` refuses; of ``pickle_load_args``, only ``encoding`` applies to
    a weights-only load (the others are the options of Python's or ``pickle_module``'s Unpickler)."""
    if weights_only is None:
        weights_only = pickle_module is None
    if weights_only and pickle_module is not None:
        raise RuntimeError("minidl.load: Can not safely load weights when explicit pickle_module is specified (as "
                           "torch.load says): pass weights_only=False to unpickle a file you trust with it")
    if pickle_module is not None and not isinstance(getattr(pickle_module, "Unpickler", None), type):
        raise TypeError(f"minidl.load: pickle_module must have an Unpickler class, as the pickle module has; got "
                        f"{pickle_module!r:.100}")
    if weights_only and (set(pickle_load_args) - {"encoding"} or type(pickle_load_args.get("encoding", "")) is not str):
        raise TypeError(f"minidl.load: under weights_only, of pickle_load_args only encoding (a str) applies, as in "
                        f"torch.load's weights-only unpickler; got {', '.join(map(repr, pickle_load_args))}; the "
                        f"others need weights_only=False")
    return _Unpickling(bool(weights_only), pickle_module, pickle_load_args)


def _load_from(fh, name: str, map_location, unpickling: _Unpickling, mapped: bool):
    """``load`` from an open binary file: a zip (a torch checkpoint or a minidl pickle archive), a legacy torch file,
    or a safetensors file."""
    head = fh.read(32)
    fh.seek(0)
    if head[:4] == _ZIP_MAGIC:
        try:
            archive = zipfile.ZipFile(fh)
        except _ZIP_ERRORS as e:
            raise RuntimeError(f"minidl.load: {name} is a truncated or corrupted zip archive ({e})") from None
        for info in archive.infolist():
            if info.compress_type not in _COMPRESSIONS:
                method = zipfile.compressor_names.get(info.compress_type, f"method {info.compress_type}")
                raise RuntimeError(f"minidl.load: {name}: record {info.filename} is compressed with {method}; minidl "
                                   f"reads stored and deflated records only, as torch's zip reader does")
        if "minidl_format" not in archive.namelist():
            from . import _torch_checkpoint
            return _torch_checkpoint.load(archive, name, _Placer(map_location, name), unpickling,
                                          _map(fh, name) if mapped else None)
        if mapped:
            raise RuntimeError(f"minidl.load: {name} is a minidl pickle archive, whose tensors cannot be mapped (only "
                               f"torch checkpoints and minidl's safetensors files can): load it without mmap=True")
        return _load_archive(archive, name, _Placer(map_location, name), unpickling)
    if _TORCH_LEGACY_MAGIC in head:
        raise RuntimeError(f"minidl.load: {name} is a pickle, as torch's legacy checkpoints are (torch before 1.6, or "
                           f"torch.save(..., _use_new_zipfile_serialization=False)); minidl reads torch's zip format "
                           f"only: load it with torch and torch.save it again")
    if mapped:
        metadata, buffers = _read_mapped(_map(fh, name), name)
    else:
        data = fh.read()
        metadata = _metadata(data, name)
        buffers = _read(data, name, metadata)
    place = _Placer(map_location, name)
    if metadata.get(_FORMAT_KEY) is None:  # a plain safetensors file: its tensors by name
        return {key: place(_whole(*entry), "cpu") for key, entry in buffers.items()}
    try:
        return _decode(json.loads(metadata[_SKELETON_KEY]), buffers, {}, place)
    except (KeyError, TypeError, ValueError, RecursionError) as e:
        raise RuntimeError(f"minidl.load: {name} has a damaged minidl skeleton ({e!r})") from None
