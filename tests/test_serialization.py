"""minidl.save / minidl.load: safetensors files, exact round trips, atomic writes, clear errors."""
import collections
import io
import json
import math
import os
import pickle
import struct
import zipfile

import numpy as np
import pytest

import minidl


class Point:
    """A plain Python object: savable only through the pickle archive."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return type(other) is Point and (self.x, self.y) == (other.x, other.y)


def _checkpoint():
    return {
        "model": {"0.weight": minidl.randn(3, 2), "0.bias": minidl.zeros(3),
                  "bn.num_batches_tracked": minidl.tensor(5)},
        "optimizer": {"state": {0: {"step": minidl.tensor(3.0), "momentum_buffer": None}},
                      "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "params": [0, 1], "nesterov": False}]},
        "epoch": 7, "best": float("inf"), "worst": float("-inf"), "note": "ok", "flags": [True, None, 2.5],
        "rng": minidl.get_rng_state(),
    }


def _same(a, b):
    if isinstance(a, minidl.Tensor):
        assert isinstance(b, minidl.Tensor) and a.dtype is b.dtype and a.shape == b.shape
        assert np.array_equal(a.numpy(), b.numpy())
    elif isinstance(a, dict):
        assert type(b) is type(a) and list(a) == list(b)
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    else:
        assert type(a) is type(b) and a == b


def test_nested_checkpoint_round_trips_exactly(tmp_path):
    ckpt = _checkpoint()
    ckpt["nan"] = float("nan")
    minidl.save(ckpt, tmp_path / "ck.safetensors")
    _same(ckpt, minidl.load(tmp_path / "ck.safetensors"))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64", "uint8", "bool"])
def test_every_dtype_and_odd_layouts_round_trip(tmp_path, dtype):
    base = np.arange(24).reshape(2, 3, 4) % 5
    t = minidl.tensor(base.astype(dtype))
    cases = {"full": t, "transposed": t.transpose(0, 2), "reversed": t.flip(1)[:, ::-1],
             "scalar": t[1, 2, 3], "empty": t[:, :0]}
    minidl.save(cases, tmp_path / "c")
    back = minidl.load(tmp_path / "c")
    for key, value in cases.items():
        assert back[key].dtype is value.dtype and back[key].shape == value.shape
        assert np.array_equal(back[key].numpy(), value.numpy())


def test_the_safetensors_package_reads_our_files_and_we_read_its(tmp_path):
    safetensors = pytest.importorskip("safetensors")
    minidl.save({"w": minidl.ones(2, 2), "epoch": 3}, tmp_path / "ours")
    with safetensors.safe_open(str(tmp_path / "ours"), "numpy") as f:
        assert list(f.keys()) == ["w"] and np.array_equal(f.get_tensor("w"), np.ones((2, 2), np.float32))
    import safetensors.numpy
    safetensors.numpy.save_file({"a": np.arange(3.0)}, str(tmp_path / "theirs"))
    got = minidl.load(tmp_path / "theirs")
    assert list(got) == ["a"] and got["a"].tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize("archive", [False, True])
def test_our_safetensors_bytes_are_what_the_safetensors_package_writes_for_every_dtype(tmp_path, archive):
    torch = pytest.importorskip("torch")  # the package's numpy helpers know no bfloat16
    import safetensors.torch
    base = minidl.tensor(np.arange(6) % 3)
    obj = {d: base.to(getattr(minidl, d)) for d in ("bool", "uint8", "int16", "int32", "int64", "float16",
                                                    "bfloat16", "float32", "float64")}
    obj.update(view=obj["float32"][::2], scalar=minidl.tensor(2.5), empty=minidl.zeros(0, 3, dtype=minidl.int16))
    if archive:
        obj["np"] = np.zeros(1)
    minidl.save(obj, tmp_path / "all")
    data = (tmp_path / "all").read_bytes()
    if archive:
        with zipfile.ZipFile(tmp_path / "all") as z:
            data = z.read("tensors.safetensors")
    (tmp_path / "part").write_bytes(data)
    with safetensors.safe_open(str(tmp_path / "part"), framework="pt") as f:
        tensors, metadata = {key: f.get_tensor(key) for key in f.keys()}, f.metadata()
    assert len(tensors) == 11 and [t.dtype for t in tensors.values()].count(torch.bfloat16) == 1
    assert _parts(safetensors.torch.save(tensors, metadata=metadata)) == _parts(data)


def _parts(data: bytes):
    """A safetensors file's header (entries in order; the metadata as a dict, since the package orders its keys
    at random) and data."""
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length], object_pairs_hook=list)
    metadata = dict(dict(header).pop("__metadata__"))
    return length, metadata, [pair for pair in header if pair[0] != "__metadata__"], data[8 + length:]


def test_foreign_tensors_of_a_dtype_minidl_lacks_raise_naming_the_file(tmp_path):
    import safetensors.numpy
    safetensors.numpy.save_file({"a": np.ones(2, np.float32), "b": np.zeros(2, np.int8)}, str(tmp_path / "i8"))
    with pytest.raises(RuntimeError, match="i8.*'b'.*I8"):
        minidl.load(tmp_path / "i8")


def test_a_tensor_named_like_the_header_metadata_round_trips(tmp_path):
    minidl.save({"__metadata__": minidl.ones(2), "x": 1}, tmp_path / "md")
    assert minidl.load(tmp_path / "md")["__metadata__"].tolist() == [1.0, 1.0]


def test_file_objects_and_map_location():
    buffer = io.BytesIO()
    minidl.save({"x": minidl.arange(3)}, buffer)
    buffer.seek(0)
    back = minidl.load(buffer, map_location="cpu")
    assert back["x"].device == minidl.device("cpu") and back["x"].tolist() == [0, 1, 2]


def test_other_objects_go_into_the_pickle_archive_and_unpicklable_ones_raise(tmp_path):
    minidl.save({"optimizer": {"extra": Point(1, 2)}, (1, 2): 3}, tmp_path / "obj")
    assert (tmp_path / "obj").read_bytes()[:4] == b"PK\x03\x04"  # a zip archive, not safetensors
    back = minidl.load(tmp_path / "obj", weights_only=False)
    assert back == {"optimizer": {"extra": Point(1, 2)}, (1, 2): 3}
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        minidl.save({"f": lambda: 0}, tmp_path / "bad")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["obj"]  # nothing half-written


def test_a_failed_write_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    path = tmp_path / "ck"
    minidl.save({"step": 1}, path)

    def crash(*args):
        raise OSError("disk gone")
    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        minidl.save({"step": 2}, path)
    monkeypatch.undo()
    assert minidl.load(path) == {"step": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["ck"]  # no temporary file left behind


def test_truncated_corrupted_and_foreign_files_raise_naming_the_file(tmp_path):
    path = tmp_path / "ck"
    minidl.save({"w": minidl.ones(100)}, path)
    data = path.read_bytes()
    (tmp_path / "truncated").write_bytes(data[:len(data) - 50])
    (tmp_path / "header").write_bytes(data[:20])
    (tmp_path / "garbage").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!" + data[24:])
    (tmp_path / "pickle").write_bytes(pickle.dumps({"w": [1, 2, 3]}))
    (tmp_path / "tiny").write_bytes(b"abc")
    for name in ("truncated", "header", "garbage", "pickle", "tiny"):
        with pytest.raises(RuntimeError, match=name):
            minidl.load(tmp_path / name)


# ----------------------------------------------------------------------------- weights_only
def _no_unpickling(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the default load path must not unpickle")

    class Refusing:
        def __init__(self, *args, **kwargs):
            refuse()
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "Unpickler", Refusing)
    import _pickle
    monkeypatch.setattr(_pickle, "loads", refuse)
    monkeypatch.setattr(_pickle, "load", refuse)
    monkeypatch.setattr(_pickle, "Unpickler", Refusing)


def test_the_default_path_never_unpickles(tmp_path, monkeypatch):
    ckpt = _checkpoint()
    ckpt["ordered"] = collections.OrderedDict([("b", minidl.ones(2)), ("a", (1, "x", None))])
    minidl.save(ckpt, tmp_path / "ck")
    _no_unpickling(monkeypatch)
    back = minidl.load(tmp_path / "ck")  # weights_only=True by default
    _same(ckpt, back)
    assert type(back["ordered"]) is collections.OrderedDict and list(back["ordered"]) == ["b", "a"]
    assert minidl.load(tmp_path / "ck", weights_only=False)["epoch"] == 7  # no pickle in the file at all


def test_a_pickle_archive_is_refused_by_default_naming_the_file_the_global_and_the_flag(tmp_path):
    minidl.save({"x": np.arange(3)}, tmp_path / "arr.pt")
    with pytest.raises(pickle.UnpicklingError) as info:
        minidl.load(tmp_path / "arr.pt")
    message = str(info.value)
    assert "arr.pt" in message and "weights_only=False" in message and "arbitrary code" in message
    assert "numpy" in message and "safe_globals" in message


def test_weights_only_false_loads_a_numpy_array(tmp_path):
    array = np.arange(12.0).reshape(3, 4)[:, 1:]
    minidl.save({"a": array, "t": minidl.ones(2)}, tmp_path / "a")
    back = minidl.load(tmp_path / "a", weights_only=False, map_location="cpu")
    assert isinstance(back["a"], np.ndarray) and np.array_equal(back["a"], array)
    assert back["t"].tolist() == [1.0, 1.0]


def test_weights_only_false_loads_a_whole_module_with_tensors_outside_the_pickle(tmp_path):
    minidl.manual_seed(0)
    model = minidl.nn.Sequential(minidl.nn.Linear(4, 3), minidl.nn.ReLU(), minidl.nn.Linear(3, 2))
    minidl.save(model, tmp_path / "m")
    data = (tmp_path / "m").read_bytes()
    with zipfile.ZipFile(tmp_path / "m") as z:
        assert sorted(z.namelist()) == ["data.pkl", "minidl_format", "tensors.safetensors"]
        structure = z.read("data.pkl")
    weight_bytes = model[0].weight.detach().numpy().tobytes()
    assert weight_bytes not in structure and weight_bytes in data  # tensors by persistent id
    for default in ({}, {"weights_only": True}, {"weights_only": None}):
        with pytest.raises(pickle.UnpicklingError, match="weights_only=False"):
            minidl.load(tmp_path / "m", **default)
    back = minidl.load(tmp_path / "m", weights_only=False)
    assert type(back) is type(model) and type(back[0]) is minidl.nn.Linear
    assert isinstance(back[0].weight, minidl.nn.Parameter) and back[0].weight.requires_grad
    x = minidl.randn(5, 4)
    assert np.array_equal(back(x).detach().numpy(), model(x).detach().numpy())
    assert [n for n, _ in back.named_parameters()] == [n for n, _ in model.named_parameters()]


@pytest.mark.parametrize("archive", [False, True])
def test_views_saved_together_share_storage_after_loading(tmp_path, archive):
    t = minidl.arange(12.0).reshape(3, 4)
    obj = {"a": t, "b": t[1:], "c": t.transpose(0, 1)[::2], "d": t[:, 0]}
    if archive:
        obj["np"] = np.zeros(2)  # forces the pickle archive
    minidl.save(obj, tmp_path / "v")
    back = minidl.load(tmp_path / "v", weights_only=not archive)
    for key in "abcd":
        assert back[key].shape == obj[key].shape and np.array_equal(back[key].numpy(), obj[key].numpy())
        assert back[key].stride() == obj[key].stride() and back[key].storage_offset() == obj[key].storage_offset()
    back["a"][1, 0] = 100.0
    assert back["b"][0, 0].item() == 100.0 and back["c"][0, 1].item() == 100.0 and back["d"][1].item() == 100.0
    assert len({back[k].untyped_storage_id() for k in "abcd"}) == 1
    if not archive:  # the storage is stored once
        import safetensors
        with safetensors.safe_open(str(tmp_path / "v"), "numpy") as f:
            assert list(f.keys()) == ["a"]


def test_tied_weights_in_a_state_dict_stay_tied(tmp_path):
    a = minidl.nn.Linear(3, 3)
    b = minidl.nn.Linear(3, 3)
    b.weight = a.weight
    state = {"a": a.state_dict(), "b": b.state_dict()}
    minidl.save(state, tmp_path / "sd")
    back = minidl.load(tmp_path / "sd")
    back["a"]["weight"].fill_(2.0)
    assert back["b"]["weight"].tolist() == [[2.0] * 3] * 3
    assert back["a"]["bias"].untyped_storage_id() != back["b"]["bias"].untyped_storage_id()


def test_checkpoints_of_the_first_format_still_load(tmp_path):
    import safetensors.numpy
    skeleton = {"$dict": [["w", {"$tensor": "w"}], ["v", {"$tensor": "v"}], ["n", {"$float": "nan"}],
                          ["t", {"$tuple": [1, "x", None]}]]}
    safetensors.numpy.save_file({"w": np.ones((2, 3), np.float32), "v": np.arange(3)}, str(tmp_path / "old"),
                                metadata={"minidl.format": "1", "minidl.skeleton": json.dumps(skeleton)})
    back = minidl.load(tmp_path / "old", map_location="cpu")
    assert back["w"].tolist() == [[1.0] * 3] * 2 and back["v"].tolist() == [0, 1, 2]
    assert math.isnan(back["n"]) and back["t"] == (1, "x", None)


def test_parameters_and_map_location_in_both_formats(tmp_path):
    p = minidl.nn.Parameter(minidl.ones(2))
    for obj, weights_only in ((p, True), ([p, np.ones(1)], False)):
        buffer = io.BytesIO()
        minidl.save(obj, buffer)
        buffer.seek(0)
        seen = []
        back = minidl.load(buffer, map_location=lambda t, where: seen.append(where), weights_only=weights_only)
        back = back if weights_only else back[0]
        assert seen == ["cpu"] and isinstance(back, minidl.nn.Parameter) and back.requires_grad
        for location in ("cpu", {"cpu": "cpu"}, minidl.device("cpu")):
            buffer.seek(0)
            assert minidl.load(buffer, map_location=location, weights_only=weights_only) is not None


def test_torch_refuses_a_pickled_module_under_weights_only_too(tmp_path):
    torch = pytest.importorskip("torch")
    torch.save(torch.nn.Linear(2, 2), tmp_path / "torch.pt")
    with pytest.raises(pickle.UnpicklingError, match="weights_only"):
        torch.load(tmp_path / "torch.pt")
    assert isinstance(torch.load(tmp_path / "torch.pt", weights_only=False), torch.nn.Linear)
    minidl.save(minidl.nn.Linear(2, 2), tmp_path / "minidl.pt")
    with pytest.raises(pickle.UnpicklingError, match="weights_only"):
        minidl.load(tmp_path / "minidl.pt")
    # and both load plain state dicts, with views sharing storage, by default
    t = torch.arange(6.0)
    torch.save({"a": t, "b": t[2:]}, tmp_path / "tv.pt")
    tb = torch.load(tmp_path / "tv.pt")
    tb["a"][2] = 9.0
    m = minidl.arange(6.0)
    minidl.save({"a": m, "b": m[2:]}, tmp_path / "mv")
    mb = minidl.load(tmp_path / "mv")
    mb["a"][2] = 9.0
    assert tb["b"][0].item() == mb["b"][0].item() == 9.0


@pytest.mark.parametrize("archive", [False, True])
def test_views_of_gpu_tensors_share_storage_on_either_device(tmp_path, archive):
    from tests.cuda_support import cuda_device
    cuda_device()  # a GPU, or the simulator
    t = minidl.arange(6.0, device="cuda")
    obj = {"a": t, "b": t[2:], "cpu": minidl.ones(2)}
    if archive:
        obj["np"] = np.zeros(1)
    minidl.save(obj, tmp_path / "g")
    for location, device in ((None, "cuda"), ("cpu", "cpu"), ({"cuda:0": "cpu"}, "cpu"), ("cuda", "cuda")):
        back = minidl.load(tmp_path / "g", map_location=location, weights_only=not archive)
        assert back["a"].device.type == back["b"].device.type == device
        assert back["cpu"].device.type == ("cuda" if location == "cuda" else "cpu")
        back["a"][2] = 9.0
        assert back["b"][0].item() == 9.0 and back["b"].cpu().tolist() == [9.0, 3.0, 4.0, 5.0]


def test_a_layout_outside_its_storage_or_a_broken_archive_raises_naming_the_file(tmp_path):
    import safetensors.numpy
    for layout in ([[5], [1], 0], [[2], [1], 3], [[2, 2], [-1, 1], 0], [[2], [1.5], 0], [[2], [1, 1], 0],
                   [[1], [2 ** 70], 0], [[0], [1], 5], [[2 ** 40, 2 ** 40], [0, 0], 0]):
        skeleton = {"$tensor": "s", "layout": layout, "dtype": "float32"}
        safetensors.numpy.save_file({"s": np.zeros(4, np.float32)}, str(tmp_path / "evil"),
                                    metadata={"minidl.format": "2", "minidl.skeleton": json.dumps(skeleton)})
        with pytest.raises(RuntimeError, match="evil.*damaged"):
            minidl.load(tmp_path / "evil")
    minidl.save({"a": np.ones(3), "t": minidl.ones(1000)}, tmp_path / "archive")
    data = (tmp_path / "archive").read_bytes()
    (tmp_path / "cut").write_bytes(data[:len(data) // 2])
    with pytest.raises(RuntimeError, match="cut"):
        minidl.load(tmp_path / "cut", weights_only=False)


# ----------------------------------------------------------------------------- checksums
def _overwrite_64_bytes(data: bytes, key: str) -> bytes:
    """A safetensors file with 64 bytes in the middle of tensor ``key``'s data overwritten."""
    (length,) = struct.unpack("<Q", data[:8])
    begin, end = json.loads(data[8:8 + length])[key]["data_offsets"]
    at = 8 + length + (begin + end) // 2 - 32
    assert end - begin >= 64
    return data[:at] + bytes(255 - b for b in data[at:at + 64]) + data[at + 64:]


@pytest.mark.parametrize("archive", [False, True])
def test_overwritten_tensor_bytes_raise_naming_the_file_and_the_tensor(tmp_path, archive):
    obj = {"model": {"a": minidl.randn(64), "b": minidl.randn(64)}}
    if archive:
        obj["np"] = np.zeros(1)
    # the archive names its storages in the order they are pickled
    changed, kept = ("pickled/2", "pickled/1") if archive else ("model/b", "model/a")
    minidl.save(obj, tmp_path / "ck")
    if archive:  # rewritten as a new archive: the zip's own CRC would catch the change in place
        with zipfile.ZipFile(tmp_path / "ck") as z:
            members = {name: z.read(name) for name in z.namelist()}
        members["tensors.safetensors"] = _overwrite_64_bytes(members["tensors.safetensors"], changed)
        with zipfile.ZipFile(tmp_path / "ck", "w") as z:
            for name, member in members.items():
                z.writestr(name, member)
    else:
        (tmp_path / "ck").write_bytes(_overwrite_64_bytes((tmp_path / "ck").read_bytes(), changed))
    with pytest.raises(RuntimeError, match=f"ck.*corrupted.*'{changed}'") as caught:
        minidl.load(tmp_path / "ck", weights_only=not archive)
    assert kept not in str(caught.value)


def test_the_checksums_are_crc32s_of_the_bytes_the_safetensors_package_reads(tmp_path):
    import zlib

    import safetensors
    minidl.save({"w": minidl.randn(3, 4), "i": minidl.arange(5), "t": minidl.randn(6)[::2]}, tmp_path / "ck")
    with safetensors.safe_open(str(tmp_path / "ck"), "numpy") as f:  # it refuses metadata that are not strings
        checksums = json.loads(f.metadata()["minidl.crc32"])
        want = {key: f"{zlib.crc32(f.get_tensor(key).astype(f.get_tensor(key).dtype.newbyteorder('<')).tobytes()):08x}"
                for key in f.keys()}
    assert checksums == want and sorted(want) == ["i", "t", "w"]


def test_minidl_files_from_before_checksums_still_load(tmp_path):
    import safetensors.numpy
    skeleton = {"$dict": [["w", {"$tensor": "w", "layout": [[2, 2], [2, 1], 0], "dtype": "float32"}], ["epoch", 3]]}
    safetensors.numpy.save_file({"w": np.arange(4, dtype=np.float32).reshape(2, 2)}, str(tmp_path / "old"),
                                metadata={"minidl.format": "2", "minidl.skeleton": json.dumps(skeleton)})
    back = minidl.load(tmp_path / "old")
    assert back["w"].tolist() == [[0.0, 1.0], [2.0, 3.0]] and back["epoch"] == 3
