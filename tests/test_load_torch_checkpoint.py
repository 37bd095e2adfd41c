"""minidl.load of the checkpoints torch.save writes (its zip format), torch as the oracle: every dtype minidl has,
views and shared storages, Parameters, state dicts into minidl modules, mmap, and the refusals (globals outside the
allow-list, malicious pickles, truncated or corrupted files, torch features minidl lacks)."""
import collections
import io
import mmap
import os
import pickle
import subprocess
import zipfile

import numpy as np
import pytest

import minidl
from minidl import serialization

torch = pytest.importorskip("torch")

DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "int16": torch.int16, "int32": torch.int32, "int64": torch.int64, "uint8": torch.uint8, "bool": torch.bool}


def _values(dtype, shape, generator):
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=generator) * 100).to(dtype)
    if dtype is torch.bool:
        return torch.rand(shape, generator=generator) > 0.5
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, shape, generator=generator, dtype=dtype)


def _numpy(t):
    """The values of a torch or minidl tensor (bfloat16 as float32, which holds each exactly)."""
    if t.dtype in (torch.bfloat16, minidl.bfloat16):
        t = t.float()
    return t.detach().numpy()


def _same(ours, theirs):
    assert ours.dtype.name == str(theirs.dtype).removeprefix("torch.")
    assert tuple(ours.shape) == tuple(theirs.shape) and ours.stride() == theirs.stride()
    assert ours.storage_offset() == theirs.storage_offset()
    assert np.array_equal(_numpy(ours), _numpy(theirs), equal_nan=True)


def _mapped(t) -> bool:
    """Whether a minidl tensor's storage is a view of a memory mapping."""
    buf = t._storage.buf
    while isinstance(buf, np.ndarray):
        buf = buf.base
    return isinstance(buf, memoryview) and isinstance(buf.obj, mmap.mmap)


# ----------------------------------------------------------------------------- crafted torch-format files
class _Storage:
    """A storage of a crafted pickle, written as torch's persistent id; callable only so that a pickle can be made
    to call it."""

    def __init__(self, kind, key, numel, location="cpu"):
        self.pid = ("storage", kind, key, location, numel)

    def __call__(self):
        raise AssertionError("never called")


class _Call:
    """Pickles as ``func(*args)``, then a BUILD of ``state`` when given."""

    def __init__(self, func, *args, state=None):
        self.func, self.args, self.state = func, args, state

    def __reduce__(self):
        return (self.func, self.args) if self.state is None else (self.func, self.args, self.state)


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        return obj.pid if isinstance(obj, _Storage) else None


def _torch_zip(path, obj, storages: dict, byteorder=b"little", version=b"3\n"):
    """A checkpoint in torch's zip format, of ``obj`` pickled (protocol 2) and ``storages`` (key -> bytes)."""
    data = io.BytesIO()
    _Pickler(data, protocol=2).dump(obj)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", data.getvalue())
        z.writestr("archive/byteorder", byteorder)
        for key, raw in storages.items():
            z.writestr(f"archive/data/{key}", raw)
        z.writestr("archive/version", version)
    return path


def _floats(key, values, location="cpu", offset=0, size=None, stride=(1,)):
    """A crafted float32 tensor over storage ``key`` holding ``values``."""
    storage = _Storage(torch.FloatStorage, key, len(values), location)
    size = (len(values),) if size is None else size
    return _Call(torch._utils._rebuild_tensor_v2, storage, offset, size, stride, False, collections.OrderedDict())


# ----------------------------------------------------------------------------- values
@pytest.mark.parametrize("mapped", [False, True])
def test_every_dtype_minidl_has_loads_bit_for_bit(tmp_path, mapped):
    generator = torch.Generator().manual_seed(0)
    obj = {}
    for name, dtype in DTYPES.items():
        obj[name] = _values(dtype, (3, 5), generator)
        obj[f"{name}/scalar"] = _values(dtype, (), generator)
        obj[f"{name}/empty"] = _values(dtype, (0, 4), generator)
    obj["float32/specials"] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 1e-45])
    torch.save(obj, tmp_path / "dtypes.pt")
    back = minidl.load(tmp_path / "dtypes.pt", mmap=mapped)
    assert list(back) == list(obj)
    for key, theirs in obj.items():
        _same(back[key], theirs)
        assert _mapped(back[key]) == mapped or not theirs.numel()


@pytest.mark.parametrize("mapped", [False, True])
def test_views_keep_strides_and_offsets_and_stay_aliased_with_their_base(tmp_path, mapped):
    base = torch.arange(24.0).reshape(4, 6)
    obj = {"base": base, "rows": base[1:, 1::2], "t": base.t(), "row": base[2], "column": base[:, 3],
           "expanded": base[0, :1].expand(3, 5), "other": torch.arange(3)}
    torch.save(obj, tmp_path / "views.pt")
    back = minidl.load(tmp_path / "views.pt", mmap=mapped)
    for key, theirs in obj.items():
        _same(back[key], theirs)
    assert len({back[key].untyped_storage_id() for key in obj if key != "other"}) == 1
    assert back["other"].untyped_storage_id() != back["base"].untyped_storage_id()
    back["base"][2, 3] = -1.0
    seen = [back["rows"][1, 1], back["t"][3, 2], back["row"][3], back["column"][2]]
    assert [t.item() for t in seen] == [-1.0] * 4
    back["column"][0] = -2.0
    assert back["base"][0, 3].item() == -2.0


def test_parameters_come_back_as_minidl_parameters_with_requires_grad_and_tied_weights_stay_one(tmp_path):
    weight = torch.nn.Parameter(torch.randn(3, 2))
    obj = {"w": weight, "tied": weight, "frozen": torch.nn.Parameter(torch.ones(2), requires_grad=False),
           "leaf": torch.ones(2, requires_grad=True), "plain": torch.ones(2)}
    torch.save(obj, tmp_path / "params.pt")
    back = minidl.load(tmp_path / "params.pt")
    assert type(back["w"]) is minidl.nn.Parameter and back["w"].requires_grad and back["w"].is_leaf
    assert back["tied"] is back["w"]
    assert type(back["frozen"]) is minidl.nn.Parameter and not back["frozen"].requires_grad
    assert type(back["leaf"]) is minidl.Tensor and back["leaf"].requires_grad and back["leaf"].is_leaf
    assert not back["plain"].requires_grad
    _same(back["w"], weight)


def test_python_attributes_on_a_parameter_or_tensor_are_dropped_with_a_warning(tmp_path):
    p, t = torch.nn.Parameter(torch.ones(2)), torch.zeros(2)
    p.note, t.tag = "kept by torch", 3
    torch.save({"p": p, "t": t}, tmp_path / "attrs.pt")
    with pytest.warns(UserWarning) as caught:
        back = minidl.load(tmp_path / "attrs.pt")
    messages = sorted(str(w.message) for w in caught)
    assert len(messages) == 2 and all("attrs.pt" in m for m in messages)
    assert "a Parameter carries Python attributes ('note')" in messages[0]
    assert "a tensor carries Python attributes ('tag')" in messages[1]
    assert type(back["p"]) is minidl.nn.Parameter and back["t"].tolist() == [0.0, 0.0]


def _models(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


def test_a_torch_state_dict_loads_strictly_into_the_equivalent_minidl_module(tmp_path):
    torch.manual_seed(0)
    theirs = _models(torch)
    theirs(torch.randn(16, 4))  # moves BatchNorm's running statistics
    theirs.eval()
    torch.save(theirs.state_dict(), tmp_path / "sd.pt")
    state = minidl.load(tmp_path / "sd.pt")
    assert type(state) is collections.OrderedDict and list(state) == list(theirs.state_dict())
    assert state._metadata == theirs.state_dict()._metadata
    assert state["1.num_batches_tracked"].dtype is minidl.int64 and state["1.num_batches_tracked"].item() == 1
    ours = _models(minidl)
    assert not ours.load_state_dict(state, strict=True).missing_keys
    ours.eval()
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    want = theirs(torch.from_numpy(x)).detach().numpy()
    assert np.allclose(ours(minidl.tensor(x)).detach().numpy(), want, atol=1e-6)


def test_load_state_dict_names_every_missing_unexpected_and_mismatched_key_as_torch_does():
    def message(lib, state):
        try:
            _models(lib).load_state_dict(state, strict=True)
        except RuntimeError as e:
            return str(e).replace(f"{lib.__name__}.Size", "Size")
        raise AssertionError("loaded")

    shapes = {"0.weight": (8, 5), "1.bias": (7,), "1.running_mean": (8,), "extra.weight": (1,), "3.bias": (3,)}
    for versions in (None, {"": {"version": 1}, "1": {"version": 2}}):  # a plain dict, and one with torch's versions
        texts = []
        for lib in (torch, minidl):
            state = collections.OrderedDict((key, lib.zeros(shape)) for key, shape in shapes.items())
            if versions is not None:
                state._metadata = versions
            texts.append(message(lib, state))
        assert texts[0] == texts[1]
        for key in ("0.bias", "1.weight", "1.running_var", "3.weight", "extra.weight", "0.weight", "1.bias"):
            assert f'"{key}"' in texts[1] or f"for {key}:" in texts[1]
        assert ('"1.num_batches_tracked"' in texts[1]) == (versions is not None)  # BatchNorm's version rule


def test_nested_containers_numbers_strings_and_torch_values(tmp_path):
    obj = {"list": [1, -2**70, 2.5, float("inf"), None, True, "text", b"\x00\xffbytes"],
           "tuple": (1, ("nested", [3, {"deep": (4,)}])), "set": {1, 2}, "frozenset": frozenset({"a"}),
           "ordered": collections.OrderedDict([("b", 1), ("a", 2)]), "counter": collections.Counter("aab"),
           "complex": 1 + 2j, "bytearray": bytearray(b"ab"), 3: "int key", (1, 2): "tuple key",
           "size": torch.Size([2, 3]), "dtype": torch.bfloat16, "device": torch.device("cpu"),
           "tensors": [torch.ones(1), {"x": torch.zeros(2)}]}
    for protocol in (2, 4, 5):
        torch.save(obj, tmp_path / "nested.pt", pickle_protocol=protocol)
        back = minidl.load(tmp_path / "nested.pt")
        assert {k: v for k, v in back.items() if k != "tensors"} == {
            **{k: v for k, v in obj.items() if k not in ("tensors", "size", "dtype", "device")},
            "size": minidl.Size([2, 3]), "dtype": minidl.bfloat16, "device": minidl.device("cpu")}
        assert type(back["ordered"]) is collections.OrderedDict and type(back["counter"]) is collections.Counter
        assert back["tensors"][0].tolist() == [1.0] and back["tensors"][1]["x"].tolist() == [0.0, 0.0]


def test_a_meta_tensor_loads_on_the_meta_device(tmp_path):
    torch.save({"m": torch.empty(2, 3, device="meta").t()}, tmp_path / "meta.pt")
    back = minidl.load(tmp_path / "meta.pt")["m"]
    assert back.is_meta and tuple(back.shape) == (3, 2) and back.stride() == (1, 3)


# ----------------------------------------------------------------------------- where tensors go
def test_map_location_as_a_device_a_dict_or_a_callable(tmp_path):
    base = [1.0, 2.0, 3.0, 4.0]
    view = _floats("0", base, "cuda:0", offset=1, size=(2,))
    _torch_zip(tmp_path / "gpu.pt", {"a": _floats("0", base, "cuda:0"), "b": view}, {"0": np.float32(base).tobytes()})
    if not minidl.cuda.is_available():
        with pytest.raises(RuntimeError, match="cuda:0.*map_location"):
            minidl.load(tmp_path / "gpu.pt")
    for location in ("cpu", minidl.device("cpu"), {"cuda:0": "cpu"}):
        back = minidl.load(tmp_path / "gpu.pt", map_location=location)
        assert back["a"].device.type == "cpu" and back["b"].tolist() == [2.0, 3.0]
        back["a"][1] = 9.0
        assert back["b"][0].item() == 9.0
    seen = []
    back = minidl.load(tmp_path / "gpu.pt", map_location=lambda t, where: seen.append(where) or t.clone())
    assert seen == ["cuda:0", "cuda:0"] and back["b"].tolist() == [2.0, 3.0]


def test_storages_saved_on_a_gpu_go_back_to_it_and_views_share_them_there(tmp_path):
    from tests.cuda_support import cuda_device
    cuda_device()  # a GPU, or the simulator
    base = [1.0, 2.0, 3.0, 4.0]
    _torch_zip(tmp_path / "gpu.pt", [_floats("0", base, "cuda:0"), _floats("0", base, "cuda:0", offset=2, size=(2,))],
               {"0": np.float32(base).tobytes()})
    whole, tail = minidl.load(tmp_path / "gpu.pt")
    assert whole.is_cuda and tail.is_cuda and whole.untyped_storage_id() == tail.untyped_storage_id()
    whole[3] = 9.0
    assert tail.cpu().tolist() == [3.0, 9.0]


def test_a_big_endian_checkpoint_is_read_in_this_machines_byte_order(tmp_path):
    values = np.float32([1.5, -2.0, 3.25])
    tensor = _floats("0", values)
    _torch_zip(tmp_path / "big.pt", tensor, {"0": values.astype(">f4").tobytes()}, byteorder=b"big")
    for mapped in (False, True):
        assert minidl.load(tmp_path / "big.pt", mmap=mapped).tolist() == values.tolist()


# ----------------------------------------------------------------------------- mmap
def test_mmap_makes_storages_copy_on_write_views_of_the_file(tmp_path):
    weights = {"w": torch.randn(64, 64), "b": torch.randn(64).to(torch.bfloat16), "n": torch.arange(10)}
    weights["view"] = weights["w"][3:, 5]
    torch.save(weights, tmp_path / "w.pt")
    before = (tmp_path / "w.pt").read_bytes()
    back = minidl.load(tmp_path / "w.pt", mmap=True)
    for key, theirs in weights.items():
        _same(back[key], theirs)
        assert _mapped(back[key])
    assert back["view"].untyped_storage_id() == back["w"].untyped_storage_id()
    back["w"][10, 5] = 1234.0  # writable, shared with the view, never written to the file
    assert back["view"][7].item() == 1234.0
    assert (tmp_path / "w.pt").read_bytes() == before
    assert minidl.load(tmp_path / "w.pt", mmap=True)["w"][10, 5].item() == weights["w"][10, 5].item()


def test_mmap_maps_minidl_safetensors_files_and_refuses_what_it_cannot_map(tmp_path):
    state = {"w": minidl.randn(8, 8), "h": minidl.ones(3, dtype=minidl.bfloat16), "e": minidl.zeros(0), "k": 5}
    state["v"] = state["w"][2:, 1]
    minidl.save(state, tmp_path / "ours")
    back = minidl.load(tmp_path / "ours", mmap=True)
    assert back["k"] == 5 and back["v"].untyped_storage_id() == back["w"].untyped_storage_id()
    for key in ("w", "h", "v"):
        assert _mapped(back[key]) and np.array_equal(_numpy(back[key]), _numpy(state[key]))
    torch.save({"x": torch.ones(2)}, tmp_path / "t.pt")
    with open(tmp_path / "t.pt", "rb") as f, pytest.raises(ValueError, match="file path.*mmap"):
        minidl.load(f, mmap=True)
    minidl.save({"a": np.ones(2)}, tmp_path / "archive")  # minidl's pickle archive
    with pytest.raises(RuntimeError, match="archive.*cannot be mapped"):
        minidl.load(tmp_path / "archive", mmap=True, weights_only=False)


# ----------------------------------------------------------------------------- refusals
class _RunsCommand:
    """An object whose unpickling runs a command, as a malicious checkpoint's would."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


@pytest.mark.parametrize("how", ["os.system", "subprocess.call"])
def test_a_malicious_pickle_is_refused_naming_the_global_and_runs_nothing(tmp_path, how):
    marker = tmp_path / "pwned"
    evil = (_RunsCommand(os.system, f"touch {marker}") if how == "os.system" else
            _RunsCommand(subprocess.call, ["touch", str(marker)]))
    torch.save({"w": torch.ones(2), "payload": evil}, tmp_path / "evil.pt")
    name = "posix.system" if how == "os.system" else "subprocess.call"
    for marked in ([], [evil.func]):  # os's functions stay refused even when marked safe, as in torch
        with serialization.safe_globals(marked), pytest.raises(pickle.UnpicklingError) as caught:
            minidl.load(tmp_path / "evil.pt")
        assert name in str(caught.value) and "evil.pt" in str(caught.value)
        if how == "subprocess.call":
            break
    assert not marker.exists()
    with pytest.raises(pickle.UnpicklingError, match=name.replace("subprocess", "commands")):
        torch.load(tmp_path / "evil.pt")  # torch refuses it too (naming Python 2's module, as protocol 2 does)
    assert not marker.exists()


def test_the_pickle_may_call_only_allowed_globals_and_build_only_ordered_dicts(tmp_path):
    other = _Storage(torch.FloatStorage, "1", 1)
    attack = _Call(torch._utils._rebuild_tensor_v2, _Storage(torch.FloatStorage, "0", 4), 0, (4,), (1,), False,
                   collections.OrderedDict(), state=(None, {"_storage": other}))  # a bigger layout over storage 1
    storages = {"0": bytes(16), "1": bytes(4)}
    _torch_zip(tmp_path / "build.pt", [other, attack], storages)
    with pytest.raises(pickle.UnpicklingError, match=r"build\.pt.*BUILD.*Tensor"):
        minidl.load(tmp_path / "build.pt")
    _torch_zip(tmp_path / "call.pt", _Call(other), storages)  # a REDUCE of an object no global named
    with pytest.raises(pickle.UnpicklingError, match=r"call\.pt.*no allowed global"):
        minidl.load(tmp_path / "call.pt")
    _torch_zip(tmp_path / "hide.pt", _Call(collections.OrderedDict, state={"items": 0}), {})  # hides a method
    with pytest.raises(pickle.UnpicklingError, match=r"hide\.pt.*OrderedDict"):
        minidl.load(tmp_path / "hide.pt")


def test_a_layout_outside_its_storage_or_a_missing_storage_record_names_the_file_and_record(tmp_path):
    values = bytes(16)
    for size, stride, offset in (((5,), (1,), 0), ((2,), (1,), 3), ((2, 2), (-1, 1), 0), ((2,), (1,), -1)):
        _torch_zip(tmp_path / "oob.pt", _floats("0", [0.0] * 4, offset=offset, size=size, stride=stride),
                   {"0": values})
        with pytest.raises(pickle.UnpicklingError, match=r"oob\.pt.*archive/data/0"):
            minidl.load(tmp_path / "oob.pt")
    _torch_zip(tmp_path / "missing.pt", [_floats("0", [0.0] * 4), _floats("1", [0.0])], {"0": values})
    with pytest.raises(RuntimeError, match=r"missing\.pt has no record archive/data/1.*storage '1'"):
        minidl.load(tmp_path / "missing.pt")
    _torch_zip(tmp_path / "short.pt", _floats("0", [0.0] * 5), {"0": values})
    with pytest.raises(RuntimeError, match=r"short\.pt.*archive/data/0 holds 16 bytes.*20"):
        minidl.load(tmp_path / "short.pt")


class Point:
    """A plain class a checkpoint may hold: loaded under weights_only only once marked safe."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return type(other) is Point and (self.x, self.y) == (other.x, other.y)


def test_globals_outside_the_allow_list_are_refused_unless_marked_safe(tmp_path):
    torch.save({"point": Point(1, torch.ones(2)), "epoch": 3}, tmp_path / "point.pt")
    with pytest.raises(pickle.UnpicklingError, match=r"point\.pt.*names .*Point.*safe_globals"):
        minidl.load(tmp_path / "point.pt")
    with serialization.safe_globals([Point]):
        back = minidl.load(tmp_path / "point.pt")
    assert type(back["point"]) is Point and back["point"].x == 1 and back["point"].y.tolist() == [1.0, 1.0]
    torch.save({"a": np.arange(3)}, tmp_path / "np.pt")
    with pytest.raises(pickle.UnpicklingError, match=r"np\.pt.*names numpy"):
        minidl.load(tmp_path / "np.pt")
    back = minidl.load(tmp_path / "np.pt", weights_only=False)  # trusted: other globals are imported
    assert np.array_equal(back["a"], np.arange(3))


def test_a_whole_torch_module_cannot_load_without_torch(tmp_path):
    torch.save(torch.nn.Linear(2, 2), tmp_path / "module.pt")
    for weights_only in (True, False):
        with pytest.raises(pickle.UnpicklingError, match=r"module\.pt.*torch.nn.modules.linear.Linear.*state_dict"):
            minidl.load(tmp_path / "module.pt", weights_only=weights_only)


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
@pytest.mark.parametrize("make, named", [
    (lambda: torch.ones(2, dtype=torch.int8), "torch.int8"),
    (lambda: torch.ones(2, dtype=torch.complex64), "torch.complex64"),
    (lambda: torch.ones(2, dtype=torch.uint16), "torch.uint16"),
    (lambda: torch.ones(2, dtype=torch.float8_e4m3fn), "torch.float8_e4m3fn"),
    (lambda: torch.ones(2).to_sparse(), "sparse"),
    (lambda: torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.quint8), "quantized"),
])
def test_a_torch_feature_minidl_lacks_is_named(tmp_path, make, named):
    torch.save({"x": make()}, tmp_path / "lacks.pt")
    with pytest.raises(RuntimeError, match=rf"lacks\.pt holds .*{named}"):
        minidl.load(tmp_path / "lacks.pt")


def test_every_dtype_torch_may_pickle_is_known_to_be_minidls_or_lacking():
    from torch._weights_only_unpickler import _get_allowed_globals

    from minidl import _torch_checkpoint
    names = {name for name, value in _get_allowed_globals().items() if isinstance(value, torch.dtype)
             or (name.startswith("torch.") and name.endswith("Storage") and name.count(".") == 1)}
    assert names <= set(_torch_checkpoint._STATIC)


# ----------------------------------------------------------------------------- damaged or foreign files
@pytest.mark.parametrize("mapped", [False, True])
def test_a_truncated_checkpoint_raises_naming_the_file(tmp_path, mapped):
    torch.save({"w": torch.randn(100), "b": torch.randn(10)}, tmp_path / "whole.pt")
    data = (tmp_path / "whole.pt").read_bytes()
    for cut in (0, 3, 100, len(data) // 4, len(data) // 2, len(data) - 30, len(data) - 1):
        (tmp_path / "cut.pt").write_bytes(data[:cut])
        with pytest.raises(RuntimeError, match=r"cut\.pt"):
            minidl.load(tmp_path / "cut.pt", mmap=mapped)


def test_changed_bytes_in_a_record_are_caught_by_the_zips_crc_naming_the_record(tmp_path):
    torch.save({"w": torch.randn(100)}, tmp_path / "ok.pt")
    data = bytearray((tmp_path / "ok.pt").read_bytes())
    for record in ("data/0", "data.pkl"):
        changed = bytearray(data)
        at = data.index(b"ok/" + record.encode()) + 200 if record == "data/0" else data.index(b"\x80\x02") + 5
        changed[at] ^= 0xFF
        (tmp_path / "bad.pt").write_bytes(changed)
        with pytest.raises(RuntimeError, match=rf"bad\.pt is corrupted: record ok/{record} .*CRC"):
            minidl.load(tmp_path / "bad.pt")


@pytest.mark.filterwarnings("ignore:`torch.jit")
def test_legacy_torchscript_and_foreign_files_are_named_for_what_they_are(tmp_path):
    torch.save({"w": torch.ones(2)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    with pytest.raises(RuntimeError, match=r"legacy\.pt.*legacy.*_use_new_zipfile_serialization=False"):
        minidl.load(tmp_path / "legacy.pt")
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), tmp_path / "scripted.pt")
    with pytest.raises(RuntimeError, match=r"scripted\.pt is a TorchScript archive"):
        minidl.load(tmp_path / "scripted.pt")
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as z:
        z.writestr("notes/readme.txt", "hello")
    with pytest.raises(RuntimeError, match=r"other\.zip is a zip archive but neither"):
        minidl.load(tmp_path / "other.zip")
    _torch_zip(tmp_path / "future.pt", 1, {}, version=b"99\n")
    with pytest.raises(RuntimeError, match=r"future\.pt .*version '99'"):
        minidl.load(tmp_path / "future.pt")
    (tmp_path / "text.txt").write_text("not a checkpoint at all")
    with pytest.raises(RuntimeError, match=r"text\.txt"):
        minidl.load(tmp_path / "text.txt")


def test_a_file_object_loads_as_the_path_does(tmp_path):
    x = torch.arange(6.0).reshape(2, 3)
    buffer = io.BytesIO()
    torch.save({"x": x, "col": x[:, 1]}, buffer)
    buffer.seek(0)
    back = minidl.load(buffer)
    _same(back["col"], x[:, 1])
    assert back["col"].untyped_storage_id() == back["x"].untyped_storage_id()
