"""minidl.save / minidl.load: safetensors files, exact round trips, atomic writes, clear errors."""
import io
import math
import os
import pickle

import numpy as np
import pytest

import minidl


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
        assert type(b) is dict and list(a) == list(b)
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


def test_file_objects_and_map_location():
    buffer = io.BytesIO()
    minidl.save({"x": minidl.arange(3)}, buffer)
    buffer.seek(0)
    back = minidl.load(buffer, map_location="cpu")
    assert back["x"].device == minidl.device("cpu") and back["x"].tolist() == [0, 1, 2]


def test_unsupported_values_raise_type_error_naming_their_key(tmp_path):
    with pytest.raises(TypeError, match="optimizer/extra"):
        minidl.save({"optimizer": {"extra": object()}}, tmp_path / "bad")
    with pytest.raises(TypeError, match="key"):
        minidl.save({(1, 2): 3}, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


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
