"""MNIST, Fashion-MNIST (IDX files) and CIFAR-10 (python batches) read from files the user has placed
where torchvision keeps them; minidl never downloads anything.

Every reader checks what it reads and names the file and what it expected when the data is missing,
damaged or of another kind. CIFAR's pickles are read by an unpickler that looks up no class at all:
numpy arrays are rebuilt by stand-ins that accept only numeric dtypes and raw bytes, since loading a
pickle can otherwise run any code.
"""
from __future__ import annotations

import gzip
import math
import pickle
import zlib
from pathlib import Path

import numpy as np

import minidl

from ..utils.data import Dataset


__all__ = ["VisionDataset", "MNIST", "FashionMNIST", "CIFAR10", "read_idx", "load_plain_pickle"]


def _missing(path: Path, alternatives=()) -> FileNotFoundError:
    names = " or ".join(str(p) for p in (path, *alternatives))
    return FileNotFoundError(f"{names} not found. minidl never downloads datasets, even with download=True: "
                             f"place {path.name} in {path.parent}")


class VisionDataset(Dataset):
    """What the image datasets share (``torchvision.datasets.VisionDataset``): a root, transforms for the
    image and the target, and torchvision's repr. Subclasses give ``_image(index)`` and ``targets``."""

    def __init__(self, root, transform=None, target_transform=None):
        self.root = root
        self.transform = transform
        self.target_transform = target_transform

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int):
        image, target = self._image(index), int(self.targets[index])
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target

    @property
    def class_to_idx(self) -> dict:
        return {name: i for i, name in enumerate(self.classes)}

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"Dataset {type(self).__name__}", f"    Number of datapoints: {len(self)}"]
        if self.root is not None:
            lines.append(f"    Root location: {self.root}")
        lines += ["    " + line for line in self.extra_repr().splitlines()]
        for name in ("transform", "target_transform"):
            if getattr(self, name) is not None:
                lines.append(f"    {name}: {getattr(self, name)!r}")
        return "\n".join(lines)


class _TrainOrTest(VisionDataset):
    """torchvision's signature for datasets with a train and a test split, read by ``_load``."""

    def __init__(self, root, train: bool = True, transform=None, target_transform=None, download: bool = False):
        super().__init__(root, transform, target_transform)
        self.train = bool(train)
        self.download = download  # accepted for torchvision's scripts; a missing file says where to put it
        self._load()

    def extra_repr(self) -> str:
        return f"Split: {'Train' if self.train else 'Test'}"

# ---------------------------------------------------------------------- IDX
# type code -> big-endian numpy dtype (the IDX format of LeCun's MNIST page)
_IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def _read_maybe_gzipped(path: Path) -> bytes:
    raw = path.read_bytes()
    if raw[:2] != b"\x1f\x8b":
        return raw
    try:
        return gzip.decompress(raw)
    except (EOFError, OSError, zlib.error) as e:
        raise ValueError(f"{path}: damaged or truncated gzip data ({e})") from None


def read_idx(path) -> np.ndarray:
    """The array in an IDX file, gzip-compressed or not: a magic number ``0x0000TTNN`` (type code TT,
    NN dimensions), NN big-endian uint32 sizes, then the values, big-endian, in C order."""
    path = Path(path)
    if not path.is_file():
        raise _missing(path)
    raw = _read_maybe_gzipped(path)
    if len(raw) < 4:
        raise ValueError(f"{path}: {len(raw)} bytes, too short for an IDX header (4-byte magic number)")
    magic = int.from_bytes(raw[:4], "big")
    if raw[:2] != b"\0\0" or raw[2] not in _IDX_TYPES:
        raise ValueError(f"{path}: magic number 0x{magic:08x} is not an IDX one: expected 0x0000TTNN with type "
                         f"code TT in {', '.join(f'{t:02x}' for t in _IDX_TYPES)}")
    dtype, ndim = np.dtype(_IDX_TYPES[raw[2]]), raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise ValueError(f"{path}: truncated header: {ndim} dimensions need {header} bytes, the file has {len(raw)}")
    shape = tuple(int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    expected = math.prod(shape) * dtype.itemsize
    if len(raw) - header != expected:
        kind = "truncated" if len(raw) - header < expected else "has trailing bytes"
        raise ValueError(f"{path}: {kind}: shape {shape} of {dtype.name} needs {expected} bytes after the "
                         f"{header}-byte header, found {len(raw) - header}")
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


class MNIST(_TrainOrTest):
    """The MNIST digits (``torchvision.datasets.MNIST``) from the IDX files in ``root/MNIST/raw``, each
    gzip-compressed (``.gz``) or not, under torchvision's names.

    ``data`` is a uint8 tensor (N, 28, 28), ``targets`` an int64 tensor, as in torchvision. A sample is
    ``(image, label)``: the image a 28x28 uint8 numpy array (torchvision gives a PIL image; both go
    through ``transforms.ToTensor``), the label an int.
    """

    classes = ["0 - zero", "1 - one", "2 - two", "3 - three", "4 - four", "5 - five", "6 - six", "7 - seven",
               "8 - eight", "9 - nine"]
    files = {True: ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
             False: ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}

    def _load(self) -> None:
        image_file, label_file = (self._find(name) for name in self.files[self.train])
        images = self._read(image_file, ">u1", 3, "images")
        labels = self._read(label_file, ">u1", 1, "labels")
        if len(images) != len(labels):
            raise ValueError(f"{image_file} holds {len(images)} images but {label_file} holds {len(labels)} labels")
        if labels.size and labels.max() >= len(self.classes):
            raise ValueError(f"{label_file}: label {labels.max()} out of range: expected 0..{len(self.classes) - 1}")
        self.data = minidl.from_numpy(images)
        self.targets = minidl.from_numpy(labels.astype(np.int64))

    @property
    def raw_folder(self) -> Path:
        return Path(self.root) / type(self).__name__ / "raw"

    def _find(self, name: str) -> Path:
        for candidate in (self.raw_folder / name, self.raw_folder / (name + ".gz")):
            if candidate.is_file():
                return candidate
        raise _missing(self.raw_folder / name, [self.raw_folder / (name + ".gz")])

    @staticmethod
    def _read(path: Path, dtype: str, ndim: int, what: str) -> np.ndarray:
        array = read_idx(path)
        if array.dtype != np.dtype(dtype) or array.ndim != ndim:
            raise ValueError(f"{path}: an IDX file of {array.ndim}-d {array.dtype.name}; expected {what}: "
                             f"{ndim}-d unsigned bytes (magic number 0x0000080{ndim})")
        return array

    def _image(self, index: int) -> np.ndarray:
        return self.data[index].numpy()


class FashionMNIST(MNIST):
    """Fashion-MNIST (``torchvision.datasets.FashionMNIST``): MNIST's format and file names, in
    ``root/FashionMNIST/raw``, with clothing classes."""

    classes = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
               "Ankle boot"]


# ---------------------------------------------------------------------- CIFAR's pickles
class _DType:
    """Stands in for a ``numpy.dtype`` while unpickling: a plain numeric dtype, or an error."""

    def __init__(self, name):
        if not isinstance(name, str):
            raise pickle.UnpicklingError(f"dtype {name!r} is not a plain numeric dtype")
        self.name, self.order = name, "|"

    def __setstate__(self, state):
        if not isinstance(state, tuple) or len(state) < 5 or state[3] is not None or state[4] is not None:
            raise pickle.UnpicklingError("structured dtypes are not read: only plain numeric ones")
        self.order = state[1]

    def resolve(self) -> np.dtype:
        try:
            dtype = np.dtype(self.name)
        except TypeError:
            dtype = None
        if dtype is None or dtype.kind not in "biuf":
            raise pickle.UnpicklingError(f"dtype {self.name!r} is not a plain numeric dtype")
        return dtype.newbyteorder(self.order) if self.order in "<>" else dtype


def _array(data, dtype: _DType, shape, fortran: bool) -> np.ndarray:
    if not isinstance(dtype, _DType):
        raise pickle.UnpicklingError("an array without a numpy dtype")
    dtype = dtype.resolve()
    if isinstance(data, str):  # a Python 2 byte string, decoded as latin-1 by the unpickler
        data = data.encode("latin-1")
    if not isinstance(data, (bytes, bytearray)):
        raise pickle.UnpicklingError(f"array data must be raw bytes, not {type(data).__name__}")
    shape = tuple(shape)
    if len(data) != math.prod(shape) * dtype.itemsize:
        raise pickle.UnpicklingError(f"array data of {len(data)} bytes does not fill shape {shape} of {dtype.name}")
    return np.frombuffer(bytes(data), dtype=dtype).reshape(shape, order="F" if fortran else "C")


class _Array:
    """Stands in for a ``numpy.ndarray`` while unpickling (``_reconstruct`` then ``__setstate__``)."""

    array = None

    def __setstate__(self, state):
        if len(state) == 5:  # (version, shape, dtype, is_fortran, data)
            state = state[1:]
        self.array = _array(state[3], state[1], state[0], state[2])


def _ndarray(*args):
    """``numpy.ndarray`` itself: only ever an argument of ``_reconstruct``."""
    raise pickle.UnpicklingError("numpy.ndarray is only read through numpy's _reconstruct")


def _reconstruct(cls, shape, typecode):
    if cls is not _ndarray:
        raise pickle.UnpicklingError("only numpy arrays are read")
    return _Array()


def _dtype(name, align=False, copy=True):
    return _DType(name)


def _frombuffer(buffer, dtype, shape, order):
    return _array(buffer, dtype, shape, order == "F")


def _empty_bytes():
    """How protocols 0-2 pickle ``b""`` under Python 3: ``bytes()``."""
    return b""


def _encode(text, encoding):
    """How protocols 0-2 pickle bytes under Python 3: ``_codecs.encode(str, 'latin1')``."""
    if encoding not in ("latin1", "latin-1") or not isinstance(text, str):
        raise pickle.UnpicklingError(f"refusing _codecs.encode({type(text).__name__}, {encoding!r})")
    return text.encode("latin-1")


# functions only, no class: a pickle can set attributes on what find_class gives it, so no shared class
# (whose methods would then change for every later load) is ever handed out
_STAND_INS = {("numpy", "ndarray"): _ndarray, ("numpy", "dtype"): _dtype, ("_codecs", "encode"): _encode,
              ("__builtin__", "bytes"): _empty_bytes, ("builtins", "bytes"): _empty_bytes}
for _core in ("numpy.core", "numpy._core"):
    _STAND_INS[(_core + ".multiarray", "_reconstruct")] = _reconstruct
    _STAND_INS[(_core + ".numeric", "_frombuffer")] = _frombuffer


class _PlainDataUnpickler(pickle.Unpickler):
    """Dicts, lists, tuples, strings, numbers and numeric numpy arrays; any other global is refused."""

    def find_class(self, module, name):
        try:
            return _STAND_INS[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}: only plain data and numeric "
                                         f"numpy arrays are read") from None


def _plain(obj):
    """The unpickled object with the array stand-ins replaced by their arrays and bytes keys decoded
    (``encoding='bytes'`` pickles and Python 2's byte strings come out either way)."""
    if isinstance(obj, _Array):
        if obj.array is None:
            raise pickle.UnpicklingError("a numpy array without its data")
        return obj.array
    if isinstance(obj, dict):
        return {(k.decode("latin-1") if isinstance(k, bytes) else k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_plain(v) for v in obj)
    if isinstance(obj, _DType) or callable(obj):
        raise pickle.UnpicklingError(f"unexpected {type(obj).__name__} in plain data")
    return obj


def load_plain_pickle(path) -> object:
    """A pickle of plain data (as the CIFAR batches are), read without looking up any class."""
    path = Path(path)
    if not path.is_file():
        raise _missing(path)
    try:
        with path.open("rb") as f:
            return _plain(_PlainDataUnpickler(f, encoding="latin1").load())
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError) as e:
        raise ValueError(f"{path}: not a pickle of plain data ({type(e).__name__}: {e})") from None


class CIFAR10(_TrainOrTest):
    """CIFAR-10 (``torchvision.datasets.CIFAR10``) from the python batches in ``root/cifar-10-batches-py``:
    ``data_batch_1`` ... ``data_batch_5`` (train), ``test_batch`` and ``batches.meta``.

    ``data`` is a uint8 numpy array (N, 32, 32, 3) and ``targets`` a list of ints, as in torchvision; a
    sample is ``(image, label)`` with the image an HxWxC uint8 array (torchvision: a PIL image).
    """

    base_folder = "cifar-10-batches-py"
    train_list = [f"data_batch_{i}" for i in range(1, 6)]
    test_list = ["test_batch"]
    meta_file, label_key = "batches.meta", "labels"
    side = 32

    def _load(self) -> None:
        folder = Path(self.root) / self.base_folder
        meta = self._entry(folder / self.meta_file, "label_names", list)
        self.classes = [c.decode("latin-1") if isinstance(c, bytes) else str(c) for c in meta["label_names"]]
        data, self.targets = [], []
        for name in self.train_list if self.train else self.test_list:
            path = folder / name
            batch = self._entry(path, "data", np.ndarray)
            images, labels = batch["data"], self._entry(path, self.label_key, list, batch)[self.label_key]
            pixels = 3 * self.side * self.side
            if images.dtype != np.uint8 or images.ndim != 2 or images.shape[1] != pixels:
                raise ValueError(f"{path}: 'data' is {images.dtype.name} of shape {images.shape}; expected uint8 "
                                 f"of shape (N, {pixels}) (rows of R, G, B planes of {self.side}x{self.side})")
            if len(labels) != len(images) or not all(isinstance(t, int) and 0 <= t < len(self.classes)
                                                     for t in labels):
                raise ValueError(f"{path}: '{self.label_key}' must be {len(images)} ints in "
                                 f"0..{len(self.classes) - 1}, one per image")
            data.append(images)
            self.targets.extend(labels)
        self.data = np.concatenate(data).reshape(-1, 3, self.side, self.side).transpose(0, 2, 3, 1).copy()

    @staticmethod
    def _entry(path: Path, key: str, kind: type, content=None) -> dict:
        """The unpickled dict at ``path`` (or ``content``), checked to hold ``key`` of type ``kind``."""
        content = load_plain_pickle(path) if content is None else content
        if not isinstance(content, dict) or not isinstance(content.get(key), kind):
            found = sorted(content) if isinstance(content, dict) else type(content).__name__
            raise ValueError(f"{path}: expected a dict with {key!r} ({kind.__name__}); found {found}")
        return content

    def _image(self, index: int) -> np.ndarray:
        return self.data[index]
