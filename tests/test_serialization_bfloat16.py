"""bfloat16 checkpoints: safetensors BF16 entries that the safetensors package and torch read bit for bit."""
import io
import math
import zipfile

import numpy as np
import pytest

import minidl

torch = pytest.importorskip("torch")
safetensors = pytest.importorskip("safetensors")
import safetensors.torch  # noqa: E402

# ±0, ±inf, NaN, float32 and bfloat16 subnormals, bfloat16's max and a value that rounds up past it, ties
SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e-40, -9.2e-41, 3.3895313892515355e38, 3.4e38,
           1.0, 1 / 3, -2.5, 1.00390625, 1.01171875, 65504.0, -1e-45]


def _oracle_bits(values):
    """bfloat16 bits of ``values`` as torch rounds them from float32."""
    return torch.tensor(values, dtype=torch.float32).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def _torch_bits(t):
    """The bits of a torch bfloat16 tensor."""
    return t.view(torch.int16).numpy().view(np.uint16)


def _bits(t):
    """The bits of a minidl bfloat16 tensor (widening to float32 is exact: a shift)."""
    return (t.float().numpy().view(np.uint32) >> 16).astype(np.uint16)


def _same_bits(got, want):
    """Equal bits, except that a NaN only has to stay a NaN."""
    nan = lambda b: (b & 0x7FFF) > 0x7F80  # noqa: E731
    assert got.shape == want.shape
    assert np.array_equal(nan(got), nan(want)) and np.array_equal(got[~nan(got)], want[~nan(want)])


def _views():
    t = minidl.tensor(SPECIAL, dtype=minidl.bfloat16).reshape(4, 4)
    return {"t": t, "row": t[1], "column": t[:, 2], "transposed": t.t(), "scalar": minidl.tensor(-1.5).bfloat16(),
            "empty": minidl.zeros(0, 2, dtype=minidl.bfloat16), "f32": minidl.tensor([1.5, -2.0])}


def test_bfloat16_storages_are_BF16_entries_that_torch_reads_bit_exactly(tmp_path):
    minidl.save(_views(), tmp_path / "bf")
    with safetensors.safe_open(str(tmp_path / "bf"), framework="pt") as f:
        assert sorted(f.keys()) == ["empty", "f32", "scalar", "t"]  # views are stored with their base
        stored = {key: f.get_tensor(key) for key in f.keys()}
    assert {k: v.dtype for k, v in stored.items()} == {"t": torch.bfloat16, "scalar": torch.bfloat16,
                                                      "empty": torch.bfloat16, "f32": torch.float32}
    assert stored["scalar"].shape == () and stored["empty"].shape == (0, 2)
    for key, values in (("t", np.reshape(SPECIAL, (4, 4))), ("scalar", -1.5), ("empty", np.zeros((0, 2)))):
        _same_bits(_torch_bits(stored[key]), _oracle_bits(values))
    loaded = safetensors.torch.load_file(str(tmp_path / "bf"))
    assert sorted(loaded) == sorted(stored) and torch.equal(loaded["f32"], stored["f32"])
    for key in ("t", "scalar", "empty"):
        assert np.array_equal(_torch_bits(loaded[key]), _torch_bits(stored[key]))


@pytest.mark.parametrize("archive", [False, True])
def test_bfloat16_round_trips_bit_exactly_and_views_share_storage(tmp_path, archive):
    obj = _views()
    if archive:
        obj["np"] = np.arange(3)  # forces the pickle archive
        obj["parameter"] = minidl.nn.Parameter(minidl.ones(2, dtype=minidl.bfloat16))
    minidl.save(obj, tmp_path / "bf")
    back = minidl.load(tmp_path / "bf", weights_only=not archive)
    for key in ("t", "row", "column", "transposed", "scalar", "empty"):
        assert back[key].dtype is minidl.bfloat16 and back[key].shape == obj[key].shape
        assert back[key].stride() == obj[key].stride() and back[key].storage_offset() == obj[key].storage_offset()
        _same_bits(_bits(back[key]), _bits(obj[key]))
    _same_bits(_bits(back["t"]), _oracle_bits(np.reshape(SPECIAL, (4, 4))))
    assert back["f32"].dtype is minidl.float32 and back["f32"].tolist() == [1.5, -2.0]
    back["t"][1, 2] = 7.0
    assert back["row"][2].item() == back["column"][1].item() == back["transposed"][2, 1].item() == 7.0
    if archive:
        assert np.array_equal(back["np"], np.arange(3))
        assert isinstance(back["parameter"], minidl.nn.Parameter) and back["parameter"].dtype is minidl.bfloat16
        with zipfile.ZipFile(tmp_path / "bf") as z:
            part = safetensors.torch.load(z.read("tensors.safetensors"))
        assert [v.dtype for v in part.values()].count(torch.bfloat16) == 4  # t, scalar, empty, parameter


def test_a_bfloat16_safetensors_file_written_by_torch_loads_bit_exactly(tmp_path):
    tensors = {"w": torch.tensor(SPECIAL, dtype=torch.float32).to(torch.bfloat16).reshape(2, 8),
               "s": torch.tensor(0.1).to(torch.bfloat16), "e": torch.zeros(3, 0, dtype=torch.bfloat16),
               "i": torch.arange(3)}
    safetensors.torch.save_file(tensors, str(tmp_path / "torch.safetensors"))
    back = minidl.load(tmp_path / "torch.safetensors")
    assert {k: (v.dtype, v.shape) for k, v in back.items()} == {
        "w": (minidl.bfloat16, (2, 8)), "s": (minidl.bfloat16, ()), "e": (minidl.bfloat16, (3, 0)),
        "i": (minidl.int64, (3,))}
    for key in "wse":
        _same_bits(_bits(back[key]), _torch_bits(tensors[key]))
    back["w"][0, 0] = 2.0  # loaded tensors are writable
    assert back["w"][0, 0].item() == 2.0 and back["i"].tolist() == [0, 1, 2]


def test_a_bfloat16_module_state_dict_loads_into_minidl_and_torch(tmp_path):
    minidl.manual_seed(0)
    model = minidl.nn.Linear(3, 2)
    floats = {name: p.detach().numpy().copy() for name, p in model.named_parameters()}
    model.bfloat16()
    minidl.save(model.state_dict(), tmp_path / "linear.safetensors")
    fresh = minidl.nn.Linear(3, 2).bfloat16()
    fresh.load_state_dict(minidl.load(tmp_path / "linear.safetensors"))
    for name, p in fresh.named_parameters():
        assert p.dtype is minidl.bfloat16
        _same_bits(_bits(p.detach()), _bits(getattr(model, name).detach()))
    weights = safetensors.torch.load_file(str(tmp_path / "linear.safetensors"))
    for name, values in floats.items():
        want = torch.from_numpy(values).to(torch.bfloat16)
        assert weights[name].dtype is torch.bfloat16
        assert np.array_equal(_torch_bits(weights[name]), _torch_bits(want))
    reference = torch.nn.Linear(3, 2).to(torch.bfloat16)
    reference.load_state_dict(weights)
    x = [[0.5, -1.0, 2.0]]
    out = fresh(minidl.tensor(x, dtype=minidl.bfloat16))
    want = reference(torch.tensor(x, dtype=torch.bfloat16))
    assert out.dtype is minidl.bfloat16
    _same_bits(_bits(out.detach()), _torch_bits(want.detach()))


def test_file_objects_carry_bfloat16_too():
    buffer = io.BytesIO()
    minidl.save({"x": minidl.tensor([0.1, -3.0], dtype=minidl.bfloat16)}, buffer)
    assert b'"dtype":"BF16"' in buffer.getvalue()
    buffer.seek(0)
    _same_bits(_bits(minidl.load(buffer)["x"]), _oracle_bits([0.1, -3.0]))
