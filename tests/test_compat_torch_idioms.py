"""The idioms real PyTorch training scripts use, run against PyTorch itself: each case is written
once against the common API and must give the same value (or the same kind of error) in both."""
from __future__ import annotations

import numpy as np
import pytest

import minidl

torch = pytest.importorskip("torch")


def outcome(fn, lib):
    """What ``fn(lib)`` gives, comparable across libraries: a list, a value, or the error's type."""
    try:
        got = fn(lib)
    except Exception as e:  # noqa: BLE001 (the type is the outcome)
        return type(e).__name__
    if hasattr(got, "tolist") and not isinstance(got, np.ndarray):
        return got.tolist()
    if isinstance(got, (minidl.dtype, torch.dtype)):
        return str(got).split(".")[-1]
    if isinstance(got, (minidl.Size, torch.Size)):
        return list(got)
    return got


def same(fn):
    assert outcome(fn, minidl) == outcome(fn, torch)


def grid(lib):
    return lib.arange(12.0).reshape(3, 4)


def assigned(lib, index, value=-1.0):
    x = grid(lib)
    x[index] = value
    return x


INDICES = {
    "range": range(2),
    "range with a step": (slice(None), range(0, 4, 2)),
    "empty range": range(0),
    "range and list": (range(3), [0, 1, 2]),
    "numpy int array": np.array([0, 2]),
    "numpy bool array": np.array([True, False, True]),
    "numpy 2-d mask": np.arange(12).reshape(3, 4) > 5,
    "numpy int scalar": np.int64(1),
    "numpy scalars as a pair": (np.int32(1), np.int64(2)),
    "numpy scalars as slice bounds": slice(np.int64(1), np.int64(3)),
    "list of numpy ints": [np.int64(0), np.int64(2)],
    "list and slice": ([0, 1], slice(1, 3)),
    "numpy array and tensor": "tensor",
}


def _index(lib, name):
    if isinstance(INDICES[name], str):
        return np.array([0, 1]), lib.tensor([1, 2])
    if name == "range and tensor":
        return range(3), lib.tensor([3, 2, 1])
    return INDICES[name]


@pytest.mark.parametrize("name", [*INDICES, "range and tensor"])
def test_indexing_and_index_assignment_take_what_torch_takes(name):
    same(lambda lib: grid(lib)[_index(lib, name)])
    same(lambda lib: assigned(lib, _index(lib, name)))


LEGACY = {
    "Tensor(data)": lambda lib: lib.Tensor([1, 2, 3]),
    "Tensor(tuple) is data": lambda lib: lib.Tensor((2, 3)),
    "Tensor(numpy)": lambda lib: lib.Tensor(np.array([1, 2])),
    "Tensor(*sizes)": lambda lib: lib.Tensor(2, 3).shape,
    "Tensor(Size)": lambda lib: lib.Tensor(lib.Size([2, 3])).shape,
    "Tensor()": lambda lib: lib.Tensor().shape,
    "Tensor(number) refused": lambda lib: lib.Tensor(2.5),
    "Tensor(sizes) dtype": lambda lib: lib.Tensor(2).dtype,
    "LongTensor truncates": lambda lib: lib.LongTensor([1.7, 2]),
    "BoolTensor": lambda lib: lib.BoolTensor([0, 2]),
    "ByteTensor(n)": lambda lib: lib.ByteTensor(3).shape,
    "new(data) keeps the dtype": lambda lib: lib.tensor([1, 2]).new([1.5]),
    "new(other dtype tensor) refused": lambda lib: lib.tensor([1, 2]).new(lib.tensor([1.5])),
    "new(*sizes)": lambda lib: lib.tensor([1.0], dtype=lib.float64).new(2, 3).shape,
    "new(*sizes) dtype": lambda lib: lib.tensor([1.0], dtype=lib.float64).new(2, 3).dtype,
    "new()": lambda lib: lib.tensor([1.0]).new().shape,
    "Tensor(t) shares t": lambda lib: (lambda t: (lib.Tensor(t).add_(1), t)[1])(lib.tensor([1.0, 2.0])),
}
for _name, _dtype in (("FloatTensor", "float32"), ("DoubleTensor", "float64"), ("HalfTensor", "float16"),
                      ("BFloat16Tensor", "bfloat16"),
                      ("LongTensor", "int64"), ("IntTensor", "int32"), ("ShortTensor", "int16"),
                      ("ByteTensor", "uint8"), ("BoolTensor", "bool")):
    LEGACY[f"{_name} dtype"] = lambda lib, n=_name: getattr(lib, n)([1, 0]).dtype
    LEGACY[f"isinstance(x, {_name})"] = lambda lib, n=_name, d=_dtype: [
        isinstance(lib.zeros(2, dtype=getattr(lib, d)), getattr(lib, n)),
        isinstance(lib.zeros(2, dtype=lib.float32 if d != "float32" else lib.int64), getattr(lib, n)),
        isinstance(getattr(lib, n)([1]), lib.Tensor)]


@pytest.mark.parametrize("name", LEGACY)
def test_legacy_constructors_behave_as_in_torch(name):
    same(LEGACY[name])


def test_tensor_follows_the_default_dtype_and_float_tensor_does_not():
    for lib in (minidl, torch):
        lib.set_default_dtype(lib.float64)
    try:
        same(lambda lib: [str(lib.Tensor([1]).dtype).split(".")[-1], str(lib.FloatTensor([1]).dtype).split(".")[-1]])
    finally:
        for lib in (minidl, torch):
            lib.set_default_dtype(lib.float32)


def test_parameter_still_constructs_as_before():
    p = minidl.nn.Parameter(minidl.zeros(2))
    assert isinstance(p, minidl.nn.Parameter) and p.requires_grad


def _no_grad_bare(lib):
    @lib.no_grad
    def double(x):
        return x * 2
    return double(lib.ones(1, requires_grad=True)).requires_grad


def _inference_mode_bare(lib):
    @lib.inference_mode
    def double(x):
        return x * 2
    return double(lib.ones(1, requires_grad=True)).requires_grad


def _named(lib, text):
    """A library's own name in a type name or repr, written as 'lib' so the two compare."""
    return text.replace(lib.__name__ + ".", "lib.")


# found by reading what a typical training script touches (model, data, optimiser, schedulers,
# grad modes, nn.utils, formatting, saving); the rest of that sweep already matched
SWEEP = {
    "type() names the legacy type": lambda lib: _named(lib, lib.zeros(2).type()),
    "type(name)": lambda lib: lib.zeros(2).type("torch.LongTensor" if lib is torch else "minidl.LongTensor").dtype,
    "type(class)": lambda lib: lib.zeros(2).type(lib.IntTensor).dtype,
    "byte() and short()": lambda lib: [lib.ones(2).byte().dtype == lib.uint8, lib.ones(2).short().dtype == lib.int16],
    "nbytes and itemsize": lambda lib: [lib.zeros(2, 3).nbytes, lib.zeros(2, dtype=lib.float64).itemsize],
    "bare @no_grad": _no_grad_bare,
    "bare @inference_mode": _inference_mode_bare,
    "@no_grad()": lambda lib: lib.no_grad()(lambda x: x * 2)(lib.ones(1, requires_grad=True)).requires_grad,
    "finfo": lambda lib: [(f.bits, f.eps, f.max, f.min, f.tiny, f.smallest_normal, f.resolution, f.dtype)
                          for f in (lib.finfo(lib.float16), lib.finfo(lib.float32), lib.finfo(lib.float64), lib.finfo())],
    "iinfo": lambda lib: [(i.bits, i.max, i.min, i.dtype) for i in (lib.iinfo(d) for d in
                                                                     (lib.uint8, lib.int16, lib.int32, lib.int64))],
    "iinfo(bool) refused": lambda lib: lib.iinfo(lib.bool),
    "finfo(int) refused": lambda lib: lib.finfo(lib.int32),
    "is_floating_point and numel": lambda lib: [lib.is_floating_point(lib.ones(1)), lib.numel(lib.ones(2, 3))],
    "compile returns the model": lambda lib: lib.compile(lib.nn.Identity())(lib.ones(2)),
}


@pytest.mark.filterwarnings("ignore:.*script_method.*is deprecated:DeprecationWarning")  # torch's own, at compile
@pytest.mark.parametrize("name", SWEEP)
def test_training_script_api_behaves_as_in_torch(name):
    same(SWEEP[name])
