"""minidl.load of crafted torch checkpoints and minidl archives, torch as the oracle: layouts outside what torch
accepts, builtins called as no pickle calls them, values of the wrong type where the loader compares, values whose
repr or hash would take exponential time or crash, compressed records, fuzzed pickles (only RuntimeError or
pickle.UnpicklingError escape, naming the file), and torch.load's pickle_module and pickle_load_args."""
import codecs
import collections
import inspect
import io
import pathlib
import pickle
import pickletools
import random
import struct
import subprocess
import sys
import textwrap
import tracemalloc
import types
import warnings
import zipfile
import zlib

import numpy as np
import pytest

import minidl
from tests.test_load_torch_checkpoint import Point, _Call, _floats, _Storage, _torch_zip

torch = pytest.importorskip("torch")


def _raw_zip(path, structure: bytes, storages=None, version=b"3\n"):
    """A torch checkpoint whose data.pkl is ``structure`` as it is."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", structure)
        for key, raw in (storages or {}).items():
            z.writestr(f"archive/data/{key}", raw)
        z.writestr("archive/version", version)
    return path


def _text(value: str) -> bytes:
    data = value.encode()
    return pickle.BINUNICODE + struct.pack("<I", len(data)) + data


def _global(module: str, name: str) -> bytes:
    return pickle.GLOBAL + f"{module}\n{name}\n".encode()


# ----------------------------------------------------------------------------- minidl's pickle archive
def test_the_archive_pickle_cannot_set_a_loaded_tensors_attributes(tmp_path):
    minidl.save({"t": minidl.arange(4.0), "s": {1}}, tmp_path / "base")  # a set: minidl's pickle archive
    with zipfile.ZipFile(tmp_path / "base") as z:
        ops = list(pickletools.genops(z.read("data.pkl")))
    at = next(i for i, (op, _, _) in enumerate(ops) if op.name == "BINPERSID")
    pid = next(arg for _, arg, _ in reversed(ops[:at]) if isinstance(arg, str))  # the tensor's persistent id
    fields = [("shape", (4096,)), ("strides", (1,)), ("offset", 0), ("numel", 4096), ("_contiguous", True),
              ("is_contiguous", True), ("ndim", 1)]  # a layout reaching 4096 floats of a 4-float storage
    fake = (_global("collections", "OrderedDict") + pickle.EMPTY_TUPLE + pickle.REDUCE + pickle.EMPTY_DICT
            + pickle.MARK + b"".join(_text(k) + pickle.dumps(v, 2)[2:-1] for k, v in fields) + pickle.SETITEMS
            + pickle.BUILD)
    structure = (pickle.PROTO + b"\4" + _text(pid) + pickle.BINPERSID + pickle.NONE + pickle.EMPTY_DICT
                 + _text("_layout") + fake + pickle.SETITEM + pickle.TUPLE2 + pickle.BUILD + pickle.STOP)
    with zipfile.ZipFile(tmp_path / "base") as source, zipfile.ZipFile(tmp_path / "evil", "w") as z:
        for record in source.namelist():
            z.writestr(record, structure if record == "data.pkl" else source.read(record))
    with pytest.raises(pickle.UnpicklingError, match=r"evil.*BUILD.*Tensor"):
        minidl.load(tmp_path / "evil")  # weights_only=True by default
    assert type(minidl.load(tmp_path / "evil", weights_only=False)._layout) is collections.OrderedDict  # trusted


def test_the_archive_pickle_builds_and_fills_classes_marked_safe(tmp_path):
    minidl.save({"p": Point(1, minidl.ones(2)), "d": collections.defaultdict(list, a=[1])}, tmp_path / "marked")
    with pytest.raises(pickle.UnpicklingError, match=r"marked.*Point"):
        minidl.load(tmp_path / "marked")
    with minidl.serialization.safe_globals([Point, collections.defaultdict, list]):
        back = minidl.load(tmp_path / "marked")
    assert type(back["p"]) is Point and back["p"].x == 1 and back["p"].y.tolist() == [1.0, 1.0]
    assert type(back["d"]) is collections.defaultdict and back["d"] == {"a": [1]} and back["d"]["b"] == []


# ----------------------------------------------------------------------------- layouts
@pytest.mark.parametrize("size, stride, offset, torch_loads", [
    ((4,), (-1,), 3, False),            # inside the storage, but a negative stride
    ((1,), (2 ** 70,), 0, False),       # not an int64
    ((2 ** 40, 2 ** 40), (0, 0), 0, False),  # more than 2**63 - 1 elements
    ((2,), (1,), -1, False),
    ((2.0,), (1,), 0, False),
    ((0,), (1,), 10, True),             # empty, past its storage: torch 2.13 takes it; minidl refuses it
])
def test_a_layout_torch_refuses_or_one_past_its_storage_is_refused_naming_file_and_record(tmp_path, size, stride,
                                                                                           offset, torch_loads):
    _torch_zip(tmp_path / "layout.pt", _floats("0", [0.0] * 4, offset=offset, size=size, stride=stride),
               {"0": bytes(16)})
    with pytest.raises(pickle.UnpicklingError, match=r"layout\.pt.*archive/data/0"):
        minidl.load(tmp_path / "layout.pt")
    if torch_loads:
        torch.load(tmp_path / "layout.pt")
    else:
        with pytest.raises((RuntimeError, TypeError)):
            torch.load(tmp_path / "layout.pt")


def test_an_expanded_layout_within_int64_loads_as_in_torch(tmp_path):
    _torch_zip(tmp_path / "wide.pt", _floats("0", [1.0], size=(2 ** 31, 2 ** 31), stride=(0, 0)),
               {"0": np.float32([1.0]).tobytes()})
    ours, theirs = minidl.load(tmp_path / "wide.pt"), torch.load(tmp_path / "wide.pt")
    assert tuple(ours.shape) == tuple(theirs.shape) and ours.stride() == theirs.stride() == (0, 0)


# ----------------------------------------------------------------------------- allowed calls
@pytest.mark.parametrize("call", [
    lambda: _Call(bytearray, 10 ** 15),       # would allocate a petabyte
    lambda: _Call(set, _floats("0", [0.0] * 4)),  # iterates a tensor (endless, expanded over 2**62 rows)
    lambda: _Call(collections.Counter, "aab"),
    lambda: _Call(complex, "zz"),              # ValueError inside complex
])
def test_default_builtins_take_only_the_arguments_pickles_give_them(tmp_path, call):
    _torch_zip(tmp_path / "call.pt", call(), {"0": bytes(16)})
    with pytest.raises(pickle.UnpicklingError, match=r"call\.pt.*not how a pickle calls it"):
        minidl.load(tmp_path / "call.pt")


def test_values_of_the_wrong_type_where_the_loader_compares_raise_unpickling_errors(tmp_path):
    tensor = _floats("0", [0.0] * 4)
    storage = _Storage(torch.FloatStorage, "0", 4)
    storage.pid = (tensor, torch.FloatStorage, "0", "cpu", 4)  # a tensor where 'storage' belongs
    crafted = {"pid": [tensor, storage],
               "from_type": _Call(torch._tensor._rebuild_from_type_v2, tensor, torch.Tensor, (), {}),
               "encode": _Call(codecs.encode, "x", tensor),
               "device": _Call(torch.device, "cpu", 10 ** 5000)}
    for what, obj in crafted.items():
        _torch_zip(tmp_path / f"{what}.pt", obj, {"0": bytes(16)})
        with pytest.raises(pickle.UnpicklingError, match=rf"{what}\.pt"):
            minidl.load(tmp_path / f"{what}.pt")
    _torch_zip(tmp_path / "version.pt", 1, {}, version=b"9" * 5000)
    with pytest.raises(RuntimeError, match=r"version\.pt .*version '9999"):
        minidl.load(tmp_path / "version.pt")


def test_values_whose_repr_or_hash_is_exponential_or_crashes_are_refused_at_once(tmp_path):
    shared = pickle.EMPTY_TUPLE + (pickle.DUP + pickle.TUPLE2) * 60  # 2**60 leaves in 121 bytes
    lists = pickle.EMPTY_LIST + pickle.BINPUT + b"\0" + (pickle.MARK + (pickle.BINGET + b"\0") * 2 + pickle.LIST
                                                         + pickle.BINPUT + b"\0") * 60
    deep = pickle.EMPTY_TUPLE + pickle.TUPLE1 * 200_000  # hashing it overflows the C stack
    state = _global("collections", "OrderedDict") + pickle.EMPTY_TUPLE + pickle.REDUCE + pickle.EMPTY_DICT
    files = {"repr": state + pickle.BININT1 + b"\1" + lists + pickle.SETITEM + pickle.BUILD,  # its state in the error
             "hash": pickle.EMPTY_DICT + shared + pickle.NONE + pickle.SETITEM,
             "deep": pickle.EMPTY_DICT + deep + pickle.NONE + pickle.SETITEM,
             "pid": shared + pickle.BINPERSID}
    for what, body in files.items():
        _raw_zip(tmp_path / f"{what}.pt", pickle.PROTO + b"\2" + body + pickle.STOP)
    script = textwrap.dedent(f"""
        import pickle, sys
        import minidl
        for what in {list(files)!r}:
            try:
                minidl.load(sys.argv[1] + "/" + what + ".pt")
            except pickle.UnpicklingError as e:
                print(what, what + ".pt" in str(e) and len(str(e)) < 600)
    """)
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=60,
                          cwd=pathlib.Path(__file__).parents[1])  # (a hang or a crash of the old loader fails it)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [word for what in files for word in (what, "True")]


# ----------------------------------------------------------------------------- zip records
def test_a_bzip2_or_lzma_record_is_refused_naming_it_as_torch_refuses_it(tmp_path):
    torch.save({"w": torch.arange(4.0)}, tmp_path / "plain.pt")
    with zipfile.ZipFile(tmp_path / "plain.pt") as source:
        records = {info.filename: source.read(info) for info in source.infolist()}
    for method in (zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA):
        with zipfile.ZipFile(tmp_path / "packed.pt", "w") as z:
            for record, data in records.items():
                z.writestr(record, data, method if record == "plain/data/0" else zipfile.ZIP_STORED)
        with pytest.raises(RuntimeError, match=r"packed\.pt: record plain/data/0 is compressed with (bzip2|lzma)"):
            minidl.load(tmp_path / "packed.pt")
        with pytest.raises(RuntimeError, match="unsupported method"):
            torch.load(tmp_path / "packed.pt")


def test_a_deflated_record_inflating_past_its_declared_size_is_read_a_chunk_at_a_time(tmp_path):
    payload = bytes(200 << 20)  # 200 MB of zeros deflate to 200 KB; the zip will say the record holds 16 bytes
    with zipfile.ZipFile(tmp_path / "bomb.pt", "w") as z:
        z.writestr("archive/version", b"3\n")
        z.writestr("archive/data.pkl", payload, zipfile.ZIP_DEFLATED, compresslevel=1)
    data = bytearray((tmp_path / "bomb.pt").read_bytes())
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        local = z.getinfo("archive/data.pkl").header_offset
    central = data.rindex(b"PK\x01\x02")  # data.pkl's entry, the last
    for crc_at in (local + 14, central + 16):  # its CRC-32, then its compressed and uncompressed sizes
        struct.pack_into("<I", data, crc_at, zlib.crc32(payload[:16]))
        struct.pack_into("<I", data, crc_at + 8, 16)
    (tmp_path / "bomb.pt").write_bytes(data)
    with zipfile.ZipFile(tmp_path / "bomb.pt") as z:
        assert z.read("archive/data.pkl") == bytes(16)  # a valid zip, whose reader caps the record at 16 bytes
    tracemalloc.start()
    try:
        with pytest.raises(pickle.UnpicklingError, match=r"bomb\.pt"):  # 16 zero bytes are no pickle
            minidl.load(tmp_path / "bomb.pt")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20  # ZipFile.read inflates the whole stream at once: 400 MB


# ----------------------------------------------------------------------------- fuzzing
def _base(kind: str) -> bytes:
    buffer = io.BytesIO()
    if kind == "torch":
        w = torch.arange(12.0).reshape(3, 4)
        state = collections.OrderedDict([("w", torch.nn.Parameter(w)), ("v", w[1:, ::2]), ("n", torch.tensor(3)),
                                         ("h", torch.ones(2, dtype=torch.bfloat16))])
        state._metadata = {"": {"version": 1}}
        torch.save({"state": state, "t": (1, 2.5, "x", b"y", None, True), "s": {1, 2}, "c": 1 + 2j, "f": frozenset({3}),
                    "b": bytearray(b"ab"), "n": collections.Counter("aab"), "size": torch.Size([2]),
                    "device": torch.device("cpu")}, buffer)
    else:
        w = minidl.arange(12.0).reshape(3, 4)
        minidl.save({"w": minidl.nn.Parameter(w), "v": w[1:, ::2], "t": (1, 2.5, "x", b"y", None, True), "s": {1, 2},
                     "c": 1 + 2j, "f": frozenset({3}), "b": bytearray(b"ab"), "n": collections.Counter("aab"),
                     "o": collections.OrderedDict(a=minidl.ones(2))}, buffer)
    return buffer.getvalue()


@pytest.mark.parametrize("kind", ["torch", "minidl"])
def test_fuzzed_pickles_raise_only_load_errors(kind):
    with zipfile.ZipFile(io.BytesIO(_base(kind))) as source:
        records = {info.filename: source.read(info) for info in source.infolist()}
    pkl = next(record for record in records if record.endswith("data.pkl"))
    rng, outcomes = random.Random(0), collections.Counter()
    for _ in range(300):
        mutated = bytearray(records[pkl])
        how = rng.random()
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(mutated))
            if how < 0.6:
                mutated[at] = rng.randrange(256)
            elif how < 0.8:
                del mutated[at]
            else:
                mutated.insert(at, rng.randrange(256))
        file = io.BytesIO()
        with zipfile.ZipFile(file, "w") as z:
            for record, data in records.items():
                z.writestr(record, bytes(mutated) if record == pkl else data)
        file.seek(0)
        file.name = "fuzzed.pt"
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                minidl.load(file)
            outcomes["loaded"] += 1
        except (RuntimeError, pickle.UnpicklingError) as e:
            assert "fuzzed.pt" in str(e)
            outcomes["refused"] += 1
    assert outcomes["refused"] > 200 and outcomes["loaded"] > 0


# ----------------------------------------------------------------------------- torch.load's pickle arguments
def test_load_takes_torch_loads_parameters():
    ours, theirs = (inspect.signature(f).parameters.values() for f in (minidl.load, torch.load))
    assert [(p.name, p.kind, p.default) for p in ours] == [(p.name, p.kind, p.default) for p in theirs]


def _loaded(lib, path, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: "pickle_load_args only works if `weights_only=False`"
        return lib.load(path, **kwargs)


@pytest.mark.parametrize("kwargs", [{"encoding": "latin1"}, {"encoding": "bytes"},
                                    {"weights_only": False, "encoding": "latin1"},
                                    {"pickle_module": pickle, "encoding": "bytes"}])
def test_python_2_strings_decode_as_pickle_load_args_say_as_in_torch(tmp_path, kwargs):
    _raw_zip(tmp_path / "py2.pt", pickle.PROTO + b"\2" + pickle.EMPTY_DICT + pickle.SHORT_BINSTRING + b"\1k"
             + pickle.SHORT_BINSTRING + b"\2\xe9t" + pickle.SETITEM + pickle.STOP)
    expected = _loaded(torch, tmp_path / "py2.pt", **kwargs)
    assert _loaded(minidl, tmp_path / "py2.pt", **kwargs) == expected


def test_pickle_module_and_pickle_load_args_as_torch_load_takes_them(tmp_path):
    torch.save({"a": np.arange(3)}, tmp_path / "np.pt")
    minidl.save({"a": np.arange(3), "t": minidl.ones(2)}, tmp_path / "archive.pt")
    for lib in (torch, minidl):  # a pickle_module makes the default weights_only False
        assert np.array_equal(lib.load(tmp_path / "np.pt", pickle_module=pickle)["a"], np.arange(3))
        with pytest.raises(RuntimeError, match="Can not safely load weights when explicit pickle_module is specified"):
            lib.load(tmp_path / "np.pt", pickle_module=pickle, weights_only=True)
        with pytest.raises(TypeError, match="fix_imports"):
            _loaded(lib, tmp_path / "np.pt", fix_imports=False)  # not an option of a weights-only unpickler
    seen = []

    class Recording(pickle.Unpickler):
        def __init__(self, *args, **kwargs):
            seen.append(kwargs)
            super().__init__(*args, **kwargs)
    module = types.SimpleNamespace(__name__="recording", Unpickler=Recording)
    for lib in (torch, minidl):
        assert lib.load(tmp_path / "np.pt", pickle_module=module, fix_imports=False)["a"].tolist() == [0, 1, 2]
    assert minidl.load(tmp_path / "archive.pt", pickle_module=module)["t"].tolist() == [1.0, 1.0]
    assert seen == [{"encoding": "utf-8", "fix_imports": False}] * 2 + [{"encoding": "utf-8"}]
    with pytest.raises(TypeError, match="pickle_module must have an Unpickler"):
        minidl.load(tmp_path / "np.pt", pickle_module=types.SimpleNamespace())
