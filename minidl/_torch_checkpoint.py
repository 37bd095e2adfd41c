"""PyTorch's own checkpoints (the zip files ``torch.save`` writes) read into minidl objects, without torch and without
running code from the file.

The format (torch/serialization.py, ``_save`` and ``_load``): a zip archive whose records share one top folder (the
saved file's stem, or ``archive``). ``data.pkl`` pickles the object, each tensor as a call of a rebuild function of
``torch._utils`` (``_rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks)``) over a storage the
pickle names by the persistent id ``('storage', storage class, key, location, numel)``; ``data/<key>`` holds that
storage's bytes (stored, not compressed, 64-byte aligned), ``byteorder`` their byte order (little when absent),
``version`` the format's version. A TorchScript archive (``torch.jit.save``) also holds ``constants.pkl``.

Each torch global such a pickle names maps to a minidl function or value (``_Loader.globals``, ``_STATIC``): the
rebuild functions make minidl tensors over one minidl Storage per key, so views and tied weights share memory again;
Parameters come back as ``minidl.nn.Parameter``, dtypes as minidl dtypes, ``torch.Size`` as ``minidl.Size``,
``torch.device`` as a minidl device, a storage pickled bare as a CPU minidl Storage. A torch feature minidl lacks (a
dtype such as int8, complex64 or float8, quantized, sparse or nested tensors) is an error naming it; Python attributes
set on a tensor or Parameter are dropped with a warning (minidl tensors take none).

Under ``weights_only`` nothing is imported by a name read from the file: the pickle runs in
``_restricted_unpickler``, whose other globals are those ``_weights_only.allowed()`` lists, with ``_codecs.encode``
for bytes as torch allows it; the modules ``os``, ``posix``, ``nt`` and ``sys`` are refused even when marked safe, as
torch refuses them. With ``weights_only=False`` (files you trust) Python's unpickler (or ``load``'s ``pickle_module``'s)
imports any other global, except names under ``torch``, which cannot be rebuilt without torch. Values the pickle hands
to these functions are checked by type before use (never compared: a tensor's ``==`` computes), and shown in errors
through ``_restricted_unpickler.brief``.

With a mapping of the file (``minidl.load(..., mmap=True)``) each storage is a numpy view of its record's bytes
(found from the record's local zip header); else each is read into memory of its own, no more bytes than its
persistent id says, and checked against the zip's CRC-32.
"""
from __future__ import annotations

import struct
import sys
import warnings
import zipfile
from pickle import UnpicklingError

import numpy as np

from . import _dtype as dt
from . import _weights_only, kernels
from ._device import as_device
from ._restricted_unpickler import brief
from ._tensor import Tensor
from ._tensor_base import Storage, make
from .layout import Layout, Size
from .serialization import _CHUNK, _INT64, _ZIP_ERRORS, _check_bounds, _read_record

_BLOCKED = ("os", "posix", "nt", "sys")  # refused even when marked safe, as torch refuses them
_VERSIONS = range(1, 11)                 # the format versions torch 2.13 reads
_DTYPES = {"float64": dt.float64, "float32": dt.float32, "float16": dt.float16, "bfloat16": dt.bfloat16,
           "int64": dt.int64, "int32": dt.int32, "int16": dt.int16, "uint8": dt.uint8, "bool": dt.bool_}
_LACKING_DTYPES = ("int8", "uint16", "uint32", "uint64", "complex32", "complex64", "complex128", "qint8", "quint8",
                   "qint32", "quint4x2", "quint2x4", "float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz",
                   "float8_e4m3fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2", "bits8", "bits16", "bits1x8", "bits2x4",
                   "bits4x2", *(f"int{n}" for n in range(1, 8)), *(f"uint{n}" for n in range(1, 8)))
_STORAGE_DTYPES = {"DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16",
                   "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32",
                   "ShortStorage": "int16", "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool",
                   "ComplexDoubleStorage": "complex128", "ComplexFloatStorage": "complex64", "QInt8Storage": "qint8",
                   "QInt32Storage": "qint32", "QUInt8Storage": "quint8", "QUInt4x2Storage": "quint4x2",
                   "QUInt2x4Storage": "quint2x4"}
_LACKING_REBUILDS = {"_rebuild_qtensor": "a quantized tensor", "_rebuild_sparse_tensor": "a sparse tensor",
                     "_rebuild_nested_tensor": "a nested tensor",
                     "_rebuild_wrapper_subclass": "a tensor subclass without storage",
                     "_rebuild_device_tensor_from_cpu_tensor": "a tensor of a device without storage (xla, mtia)",
                     "_rebuild_device_tensor_from_numpy": "a tensor of a device without storage (xla, mtia)"}


class _Lacks:
    """A torch global that names a feature minidl lacks: resolving it is an error saying which."""
    __slots__ = ("what",)

    def __init__(self, what: str):
        self.what = what


class _StorageType:
    """A torch storage class, as a persistent id names it: the dtype of its elements (UntypedStorage: bytes)."""
    __slots__ = ("dtype", "untyped")

    def __init__(self, dtype, untyped=False):
        self.dtype, self.untyped = dtype, untyped


class _Marker:
    """A torch class that the pickle names only to compare with (``torch.Tensor``): not callable."""
    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self):
        return self.name


_TENSOR = _Marker("torch.Tensor")


def _lacking_dtype(name: str) -> _Lacks:
    return _Lacks(f"a tensor of dtype torch.{name}, a dtype minidl lacks (it has "
                  f"{', '.join(d.name for d in dt.ALL)})")


_STATIC = {
    "torch.Tensor": _TENSOR,
    "torch.storage.UntypedStorage": _StorageType(dt.uint8, untyped=True),
    **{f"torch.{name}": d for name, d in _DTYPES.items()},
    **{f"torch.{name}": _lacking_dtype(name) for name in _LACKING_DTYPES},
    **{f"torch.{cls}": (_StorageType(_DTYPES[name]) if name in _DTYPES else _lacking_dtype(name))
       for cls, name in _STORAGE_DTYPES.items()},
    **{f"torch._utils.{name}": _Lacks(what) for name, what in _LACKING_REBUILDS.items()},
    "torch.serialization._get_layout": _Lacks("a sparse tensor"),
    **{f"torch.{scheme}": _Lacks("a quantized tensor") for scheme in (
        "per_tensor_affine", "per_tensor_symmetric", "per_channel_affine", "per_channel_symmetric",
        "per_channel_affine_float_qparams")},
}


class _Stored(Storage):
    """A storage read from the checkpoint, with what its persistent id says of it, and the Storages over its bytes
    that tensors of another dtype read (an UntypedStorage's, under ``_rebuild_tensor_v3``)."""
    __slots__ = ("dtype", "untyped", "key", "location", "views")

    def __init__(self, buf, kind: _StorageType, key: str, location: str):
        super().__init__(buf, as_device("cpu"))
        self.dtype, self.untyped, self.key, self.location, self.views = kind.dtype, kind.untyped, key, location, {}


def _ascii(value):
    """A persistent id's string (Python 2's pickles give bytes); None for anything else."""
    return value.decode("ascii", "replace") if type(value) is bytes else value if type(value) is str else None


# ----------------------------------------------------------------------------- the zip's records
class _Records:
    """The records of a torch checkpoint's zip, named below its top folder. A storage's bytes are read into memory of
    their own (checked against the zip's CRC-32) or, given a mapping of the file, are a view of it."""

    def __init__(self, archive: zipfile.ZipFile, name: str, mapping):
        self.archive, self.name, self.mapping = archive, name, mapping
        names = archive.namelist()
        self.prefix = names[0].partition("/")[0] if names else ""
        self.names = set(names)

    def path(self, record: str) -> str:
        return f"{self.prefix}/{record}"

    def has(self, record: str) -> bool:
        return self.path(record) in self.names

    def read(self, record: str) -> bytes:
        try:
            return _read_record(self.archive, self.path(record))
        except KeyError:
            raise RuntimeError(f"minidl.load: {self.name} has no record {self.path(record)}: it is not a complete "
                               f"torch checkpoint") from None
        except _ZIP_ERRORS as e:
            raise RuntimeError(f"minidl.load: {self.name} is corrupted: record {self.path(record)} cannot be read "
                               f"({e})") from None

    def storage(self, key: str, nbytes: int) -> np.ndarray:
        """The bytes of storage ``key`` (of ``nbytes``, as the pickle says), a writable uint8 array."""
        path = self.path(f"data/{key}")
        if path not in self.names:
            raise RuntimeError(f"minidl.load: {self.name} has no record {path}, which its data.pkl names as "
                               f"storage {key!r}")
        info = self.archive.getinfo(path)
        if info.file_size != nbytes:  # before allocating what the persistent id says; zipfile reads no more than this
            raise RuntimeError(f"minidl.load: {self.name} is corrupted: record {path} holds {info.file_size} bytes, "
                               f"but its data.pkl says storage {key!r} has {nbytes}")
        if self.mapping is not None:
            return self._mapped(info, path)
        out = np.empty(nbytes, np.uint8)
        view, got = memoryview(out), 0
        try:
            with self.archive.open(info) as source:  # zipfile checks the CRC-32 as the last byte is read
                while got < nbytes:
                    n = source.readinto(view[got:got + _CHUNK])  # inflates at most _CHUNK bytes
                    if not n:
                        break
                    got += n
        except _ZIP_ERRORS as e:
            raise RuntimeError(f"minidl.load: {self.name} is corrupted: record {path} cannot be read ({e})") from None
        if got != nbytes:
            raise RuntimeError(f"minidl.load: {self.name} is truncated: record {path} ends after {got} of its "
                               f"{nbytes} bytes")
        return out

    def _mapped(self, info: zipfile.ZipInfo, path: str) -> np.ndarray:
        """A record's bytes as a view of the mapping: they start after its local header (whose extra field, which
        torch pads to align the data, differs from the central directory's)."""
        if info.compress_type != zipfile.ZIP_STORED:
            raise RuntimeError(f"minidl.load: {self.name}: record {path} is compressed, so it cannot be mapped "
                               f"(torch.save stores records uncompressed); load it without mmap=True")
        at, size = info.header_offset, len(self.mapping)
        head = self.mapping[at:at + 30]
        if len(head) < 30 or head[:4] != b"PK\x03\x04":
            raise RuntimeError(f"minidl.load: {self.name} is corrupted: record {path} has no local header at "
                               f"byte {at}")
        name_length, extra_length = struct.unpack("<HH", head[26:30])
        if self.mapping[at + 30:at + 30 + name_length] != info.filename.encode():
            raise RuntimeError(f"minidl.load: {self.name} is corrupted: the local header at byte {at} names "
                               f"another record than {path}")
        start = at + 30 + name_length + extra_length
        if start + info.file_size > size:
            raise RuntimeError(f"minidl.load: {self.name} is truncated: record {path} ends at byte "
                               f"{start + info.file_size}, past the file's {size}")
        return np.frombuffer(self.mapping, np.uint8, info.file_size, start)

    def check_version(self) -> None:
        record = ".data/version" if self.has(".data/version") else "version"
        text = self.read(record).strip().decode("ascii", "replace")
        if not (text.isdigit() and len(text) < 5 and int(text) in _VERSIONS):
            raise RuntimeError(f"minidl.load: {self.name} is a torch checkpoint of format version {text[:20]!r}; "
                               f"minidl reads versions {_VERSIONS[0]} to {_VERSIONS[-1]}, as torch 2.13 does")

    def byteorder(self) -> str:
        if not self.has("byteorder"):
            return "little"  # torch's default for checkpoints without the record
        order = self.read("byteorder")
        if order not in (b"little", b"big"):
            raise RuntimeError(f"minidl.load: {self.name} names an unknown byte order {order[:20]!r}")
        return order.decode()


# ----------------------------------------------------------------------------- torch's globals, minidl's objects
class _Loader:
    """One load: the storages read so far (one minidl Storage per key) and torch's globals bound to them."""

    def __init__(self, records: _Records, name: str, place):
        self.records, self.name, self.place = records, name, place
        self.swap = records.byteorder() != sys.byteorder
        self.storages: dict = {}
        self.rebuilds = {"torch._utils._rebuild_tensor_v2": self.tensor_v2,  # the very objects the pickle gets
                         "torch._utils._rebuild_tensor_v3": self.tensor_v3,
                         "torch._utils._rebuild_tensor": self.tensor_v1}
        self.globals = {**_STATIC, **self.rebuilds,
                        "torch._utils._rebuild_parameter": self.parameter,
                        "torch._utils._rebuild_parameter_with_state": self.parameter,
                        "torch._utils._rebuild_meta_tensor_no_storage": self.meta_tensor,
                        "torch._tensor._rebuild_from_type_v2": self.from_type,
                        "torch.nn.parameter.Parameter": self.new_parameter,
                        "torch.Size": self.size,
                        "torch.device": self.device,
                        "_codecs.encode": self.encode}

    def malformed(self, detail: str) -> UnpicklingError:
        return UnpicklingError(f"minidl.load: the pickle of {self.name} is malformed: {detail}")

    def resolve(self, module: str, name: str, allowed):
        """The object for global ``module.name``; ``allowed`` (full name -> object) are the other globals a weights-only
        load may use, None for a trusted load (None back: import it)."""
        full = f"{module}.{name}"
        if allowed is not None and module.partition(".")[0] in _BLOCKED:
            raise UnpicklingError(f"minidl.load: weights only load failed: {self.name} is a torch checkpoint that "
                                  f"names {full}; minidl.load never resolves a global of module {module} under "
                                  f"weights_only, not even one marked safe (unpickling it would run code)")
        value = self.globals.get(full)
        if isinstance(value, _Lacks):
            raise RuntimeError(f"minidl.load: {self.name} holds {value.what} ({full}), which minidl cannot load")
        if value is not None:
            return value
        if allowed is not None and full in allowed:
            return allowed[full]
        if module == "torch" or module.startswith("torch."):
            raise UnpicklingError(
                f"minidl.load: {self.name} is a torch checkpoint that names {full}, which minidl cannot rebuild: from "
                f"torch's objects it rebuilds tensors, Parameters, storages, dtypes, devices and sizes (a whole torch "
                f"module or optimizer cannot load without torch: torch.save its state_dict() instead)")
        if allowed is not None:
            raise _weights_only.refusal(full, self.name, "a torch checkpoint")
        return None

    # -- storages ------------------------------------------------------------------------------------------------
    def persistent_load(self, pid):
        if type(pid) is not tuple or len(pid) != 5 or _ascii(pid[0]) != "storage":
            raise self.malformed(f"persistent id {brief(pid)} is not a storage's")
        _, kind, key, location, numel = pid
        key, location = _ascii(key), _ascii(location)
        if not (isinstance(kind, _StorageType) and type(key) is str and type(location) is str
                and type(numel) is int and numel >= 0):
            raise self.malformed(f"storage id {brief(pid)}")
        stored = self.storages.get(key)
        if stored is None:
            raw = self.records.storage(key, numel * kind.dtype.itemsize)
            stored = self.storages[key] = _Stored(self._typed(raw, kind.dtype), kind, key, location)
        elif (stored.dtype, stored.untyped, stored.buf.size) != (kind.dtype, kind.untyped, numel):
            raise self.malformed(f"it names storage {key!r} twice, as two different storages")
        return stored

    def _typed(self, raw: np.ndarray, dtype) -> np.ndarray:
        """Bytes as elements of ``dtype`` in this machine's byte order, over the same memory where it is aligned."""
        buf = raw.view(dtype.np)
        if not buf.flags.aligned:  # a record another zip writer left unaligned (torch aligns them)
            buf = buf.copy()
        if self.swap and dtype.itemsize > 1:
            buf.byteswap(inplace=True)
        return buf

    def _storage_as(self, stored: _Stored, dtype) -> Storage:
        """The Storage a tensor of ``dtype`` over ``stored`` reads: itself, or a view of an UntypedStorage's bytes."""
        if dtype is stored.dtype:
            return stored
        if not stored.untyped:
            raise self.malformed(f"storage {stored.key!r} holds {stored.dtype.name}, but a tensor reads it as "
                                 f"{dtype.name}")
        if dtype not in stored.views:
            if stored.buf.size % dtype.itemsize:
                raise self.malformed(f"storage {stored.key!r} holds {stored.buf.size} bytes, not a whole number of "
                                     f"{dtype.name} elements")
            stored.views[dtype] = Storage(self._typed(stored.buf, dtype), stored.device)
        return stored.views[dtype]

    # -- tensors ---------------------------------------------------------------------------------------------
    def tensor_v2(self, storage, offset, size, stride, requires_grad, hooks, metadata=None):
        """torch._utils._rebuild_tensor_v2: a tensor of its storage's dtype."""
        return self._tensor(storage, offset, size, stride, getattr(storage, "dtype", None), requires_grad, metadata)

    def tensor_v3(self, storage, offset, size, stride, requires_grad, hooks, dtype, metadata=None):
        """torch._utils._rebuild_tensor_v3: a tensor of ``dtype`` over an UntypedStorage."""
        return self._tensor(storage, offset, size, stride, dtype, requires_grad, metadata)

    def tensor_v1(self, storage, offset, size, stride):
        """torch._utils._rebuild_tensor (the first format's)."""
        return self._tensor(storage, offset, size, stride, getattr(storage, "dtype", None), False, None)

    def _tensor(self, stored, offset, size, stride, dtype, requires_grad, metadata):
        if not isinstance(stored, _Stored) or not isinstance(dtype, dt.dtype) or type(requires_grad) is not bool:
            raise self.malformed(f"a tensor over a {type(stored).__name__} of dtype {brief(dtype)}, requires_grad "
                                 f"{brief(requires_grad)}")
        if metadata is not None and (type(metadata) is not dict or metadata):
            raise RuntimeError(f"minidl.load: {self.name} holds a tensor with torch metadata {brief(metadata)} (a "
                               f"lazily conjugated or negated view), which minidl cannot apply")
        storage = self._storage_as(stored, dtype)
        try:
            _check_bounds(size, stride, offset, storage.buf.size, self.records.path(f"data/{stored.key}"),
                          negative_strides=False)
        except ValueError as e:
            raise self.malformed(str(e)) from None
        t = self.place(make(storage, Layout(tuple(size), tuple(stride), offset), dtype), stored.location)
        return t.requires_grad_(True) if requires_grad else t

    def meta_tensor(self, dtype, size, stride, requires_grad):
        """torch._utils._rebuild_meta_tensor_no_storage: a meta tensor (shape, strides, dtype, no data)."""
        if not isinstance(dtype, dt.dtype) or type(requires_grad) is not bool:
            raise self.malformed(f"a meta tensor of dtype {brief(dtype)}, requires_grad {brief(requires_grad)}")
        try:
            _check_bounds(size, stride, 0, sys.maxsize, "a meta tensor's", negative_strides=False)
        except ValueError as e:
            raise self.malformed(str(e)) from None
        layout = Layout(tuple(size), tuple(stride), 0)
        buf = kernels.get("alloc", "meta")(layout.span()[1] + 1, dtype)
        t = make(Storage(buf, as_device("meta")), layout, dtype)
        return t.requires_grad_(True) if requires_grad else t

    def from_type(self, func, new_type, args, state):
        """torch._tensor._rebuild_from_type_v2: a tensor that carried Python attributes (they are dropped)."""
        if not any(func is rebuild for rebuild in self.rebuilds.values()) or type(args) is not tuple:
            raise self.malformed(f"_rebuild_from_type_v2 of {brief(func)}")
        if new_type is not _TENSOR:
            raise RuntimeError(f"minidl.load: {self.name} holds a tensor of subclass {brief(new_type)}, which minidl "
                               f"cannot rebuild")
        tensor = func(*args)
        self._drop(state, "a tensor")
        return tensor

    def parameter(self, data, requires_grad, hooks, state=None):
        """torch._utils._rebuild_parameter(_with_state): a minidl Parameter over ``data``'s storage."""
        from .nn.parameter import Parameter
        if not isinstance(data, Tensor) or type(requires_grad) is not bool:
            raise self.malformed(f"a Parameter of a {type(data).__name__}, requires_grad {brief(requires_grad)}")
        self._drop(state, "a Parameter")
        return Parameter(data, requires_grad)

    def new_parameter(self, data, requires_grad=True):
        """torch.nn.parameter.Parameter(data, requires_grad), called by the pickle."""
        return self.parameter(data, requires_grad, None)

    def _drop(self, state, what: str) -> None:
        """Python attributes torch kept on a tensor (its ``__dict__``, and slots): minidl tensors take none."""
        names = []
        for part in state if type(state) is tuple else (state,):
            if part is not None and type(part) is not dict:
                raise self.malformed(f"the state of {what} is a {type(part).__name__}")
            names += list(part or ())
        if names:
            warnings.warn(f"minidl.load: {self.name}: {what} carries Python attributes ({brief(names)[1:-1]}), which "
                          f"minidl does not restore", stacklevel=2)

    # -- small values --------------------------------------------------------------------------------------------
    def size(self, dims):
        if type(dims) not in (list, tuple) or not all(type(n) is int for n in dims):
            raise self.malformed(f"torch.Size of {brief(dims)}")
        return Size(dims)

    def device(self, kind, index=None):
        if type(kind) is not str or not (index is None or type(index) is int and 0 <= index < _INT64):
            raise self.malformed(f"torch.device of {brief(kind)}, {brief(index)}")
        spec = kind if index is None else f"{kind}:{index}"
        try:
            return as_device(spec)
        except (RuntimeError, ValueError):
            raise RuntimeError(f"minidl.load: {self.name} names device {brief(spec)}, which minidl lacks (it has cpu, "
                               f"cuda and meta)") from None

    def encode(self, text, encoding):
        """_codecs.encode, as protocol 2 pickles bytes: only a str to latin-1."""
        if type(text) is not str or type(encoding) is not str or encoding not in ("latin1", "latin-1"):
            raise self.malformed(f"_codecs.encode of a {type(text).__name__} to {brief(encoding)}")
        return text.encode("latin-1")


def load(archive: zipfile.ZipFile, name: str, place, unpickling, mapping=None):
    """The object a torch checkpoint holds. ``place`` puts each CPU tensor where ``map_location`` says (see
    ``serialization._Placer``), ``unpickling`` runs data.pkl (``serialization._Unpickling``); ``mapping``, a
    copy-on-write mapping of the file, makes storages views of it."""
    records = _Records(archive, name, mapping)
    if records.has("constants.pkl"):
        raise RuntimeError(f"minidl.load: {name} is a TorchScript archive (torch.jit.save), which minidl cannot run; "
                           f"load it with torch.jit.load and torch.save its state_dict()")
    if not records.has("data.pkl"):
        raise RuntimeError(f"minidl.load: {name} is a zip archive but neither a torch checkpoint nor a minidl archive "
                           f"(it has no {records.path('data.pkl')})")
    records.check_version()
    loader = _Loader(records, name, place)
    return unpickling.load(records.read("data.pkl"), name, loader.persistent_load, loader.resolve)
