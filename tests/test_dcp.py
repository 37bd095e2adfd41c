"""minidl.dist.checkpoint in one process (no_dist) and on sim ranks (threads): round trips of every kind of
value, resharding between 4, 3, 2 and 1 ranks, replicas written once, the planner's and the loader's errors
(a CheckpointException naming the rank, also alone and also when a rank fails before the first step),
damaged checkpoints and metadata, the atomic commit, the writer's options, async_save, format_utils and DDP.
The oracles are numpy arrays of the values saved, the files read back by the ``safetensors`` package, and
torch 2.13's DCP for the key names and for what load does with extra and missing keys."""
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import warnings
import zlib

import numpy as np
import pytest
from safetensors.numpy import load_file

import minidl
import minidl.dist.checkpoint as dcp
from minidl import nn, optim
from minidl.dist import faults, sim
from minidl.dist.checkpoint.format_utils import dcp_to_torch_save, torch_save_to_dcp
from minidl.dist.checkpoint.metadata import BLOCK_BYTES

MiB = 1 << 20
# a save into a folder holding a checkpoint warns: each test that does so expects it (``replacing``)
pytestmark = pytest.mark.filterwarnings("error:.*this save replaces it:UserWarning")
_FILE = re.compile(r"^__(\d+)_(\d+)\.([0-9a-f]+)\.safetensors$")
_BOX = re.compile(r"^(.*)\[(.*)\]$")


def T(a) -> minidl.Tensor:
    """A minidl tensor holding a copy of the numpy array ``a``."""
    return minidl.from_numpy(np.array(a))


def as_np(t) -> np.ndarray:
    """A tensor's values as numpy (bfloat16 widened to float32, which is exact)."""
    return (t.float() if t.dtype is minidl.bfloat16 else t).numpy()


def box(a, offsets, sizes):
    return a[tuple(slice(o, o + s) for o, s in zip(offsets, sizes))]


def local(a, offsets, sizes):
    """This rank's LocalSlice of the global array ``a``: the box's values."""
    return dcp.LocalSlice(T(box(a, offsets, sizes)), offsets, a.shape)


def local_zeros(a, offsets, sizes):
    """A LocalSlice to load the box into: zeros of ``a``'s dtype."""
    return dcp.LocalSlice(T(np.zeros(sizes, a.dtype)), offsets, a.shape)


def on_ranks(n: int, fn, *args) -> list:
    """``fn(rank, *args)`` on ``n`` sim ranks: each rank's result, or the exception it raised (every rank's
    error is looked at, not only the first)."""
    def caught(rank, *a):
        try:
            return fn(rank, *a)
        except Exception as e:  # noqa: BLE001 -- the test inspects it
            return e
    return sim.run(n, caught, *args)


def shard_files(path) -> list:
    return sorted(n for n in os.listdir(path) if _FILE.match(n))


def stored_boxes(path) -> dict:
    """file name -> {box name: array}, as the safetensors package reads the files."""
    return {name: load_file(os.path.join(path, name)) for name in shard_files(path)}


def parse_box(name: str):
    """``"fc.weight[0:4,2:6]"`` -> ("fc.weight", (0, 2), (4, 4))."""
    fqn, spans = _BOX.match(name).groups()
    bounds = [tuple(map(int, s.split(":"))) for s in spans.split(",")] if spans else []
    return fqn, tuple(lo for lo, _ in bounds), tuple(hi - lo for lo, hi in bounds)


@pytest.fixture
def fault(monkeypatch):
    """Set MINIDL_FAULT for this test (the parsed plan is cached per text, so it is cleared too)."""
    monkeypatch.setattr(faults, "_plan", {})

    def arm(text):
        faults._plan.clear()
        monkeypatch.setenv("MINIDL_FAULT", text)
    return arm


# ----------------------------------------------------------------------------------------------- round trips
def values():
    return {"int": 2**53 + 1, "neg": -7, "float": 0.1, "inf": math.inf, "-inf": -math.inf, "nan": math.nan,
            "str": "héllo\n", "empty": "", "none": None, "true": True, "nested": [1, [2.5, "x", None], {"k": [3]}]}


def assert_values_equal(got, want):
    assert type(got) is type(want), (got, want)
    if isinstance(want, dict):
        assert list(got) == list(want)
        for k in want:
            assert_values_equal(got[k], want[k])
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_values_equal(g, w)
    elif isinstance(want, float) and math.isnan(want):
        assert math.isnan(got)
    else:
        assert got == want


def test_round_trip_of_tensors_and_values(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.standard_normal((4, 6))
    arrays = {
        "f32": base.astype(np.float32), "f64": base, "i64": rng.integers(-2**62, 2**62, (3, 5)),
        "bool": rng.random(9) > 0.5, "f16": base.astype(np.float16), "scalar": np.array(-3.25),
        "int0d": np.array(12345678901, np.int64),
        "noncontig": base.T[1:5:2],
    }
    bf16 = base.astype(np.float32)
    sd = {**{k: T(a) for k, a in arrays.items()},
          "noncontig": T(base).t()[1:5:2],                                  # a strided view, saved as its values
          "bf16": T(bf16).to(minidl.bfloat16),
          "nested": {"list": [T(arrays["f32"][0]), 7, "s"], "tuple": (T(arrays["i64"]), T(arrays["bool"])),
                     "deep": {"a": {"b": T(arrays["f64"][1:3])}}},
          "values": values()}
    assert not sd["noncontig"].is_contiguous()
    dcp.save(sd, checkpoint_id=tmp_path / "ckpt", no_dist=True)

    into_base = minidl.zeros(4, 6, dtype=minidl.float64)
    out = {**{k: T(np.zeros_like(a)) for k, a in arrays.items()},
           "noncontig": into_base.t()[1:5:2],                                # loaded in place, through the view
           "bf16": minidl.zeros(4, 6, dtype=minidl.bfloat16),
           "nested": {"list": [minidl.zeros(6), 0, ""], "tuple": (minidl.zeros(3, 5, dtype=minidl.int64),
                                                                  minidl.zeros(9, dtype=minidl.bool)),
                      "deep": {"a": {"b": minidl.zeros(2, 6, dtype=minidl.float64)}}},
           "values": {**{k: 0 for k in values()}, "nested": [0, 0, {"k": 0}]}}   # (a list holding a dict is walked)
    kept = {k: out[k] for k in arrays}
    dcp.load(out, checkpoint_id=tmp_path / "ckpt", no_dist=True)
    for k, a in arrays.items():
        assert out[k] is kept[k]                                            # filled in place
        assert out[k].dtype is minidl.from_numpy(a).dtype and tuple(out[k].shape) == a.shape
        np.testing.assert_array_equal(as_np(out[k]), a)
    np.testing.assert_array_equal(into_base.numpy().T[1:5:2], base.T[1:5:2])
    np.testing.assert_array_equal(into_base.numpy().T[[0, 2, 4, 5]], 0)     # the rest of the base untouched
    assert out["bf16"].dtype is minidl.bfloat16
    np.testing.assert_array_equal(as_np(out["bf16"]), as_np(T(bf16).to(minidl.bfloat16)))
    nested = out["nested"]
    np.testing.assert_array_equal(nested["list"][0].numpy(), arrays["f32"][0])
    assert nested["list"][1:] == [7, "s"]
    assert isinstance(nested["tuple"], tuple)
    np.testing.assert_array_equal(nested["tuple"][0].numpy(), arrays["i64"])
    np.testing.assert_array_equal(nested["tuple"][1].numpy(), arrays["bool"])
    np.testing.assert_array_equal(nested["deep"]["a"]["b"].numpy(), arrays["f64"][1:3])
    assert_values_equal(out["values"], values())


def test_round_trip_of_empty_tensors(tmp_path):
    sd = {"e": minidl.zeros(0, 3), "e1": minidl.zeros(0, dtype=minidl.int64), "x": T([1.0])}
    dcp.save(sd, checkpoint_id=tmp_path, no_dist=True)
    out = {"e": minidl.ones(0, 3), "e1": minidl.ones(0, dtype=minidl.int64), "x": minidl.zeros(1)}
    dcp.load(out, checkpoint_id=tmp_path, no_dist=True)
    assert tuple(out["e"].shape) == (0, 3) and out["e1"].dtype is minidl.int64
    np.testing.assert_array_equal(out["x"].numpy(), [1.0])
    assert dcp.format_utils.whole_state_dict(tmp_path)["e"].shape == (0, 3)


def test_load_casts_into_the_targets_dtype(tmp_path):
    """As copy_ does (and torch's DCP): the target keeps its dtype."""
    a = np.arange(6, dtype=np.float64).reshape(2, 3) / 4
    dcp.save({"a": T(a)}, checkpoint_id=tmp_path, no_dist=True)
    out = {"a": minidl.zeros(2, 3, dtype=minidl.float32)}
    dcp.load(out, checkpoint_id=tmp_path, no_dist=True)
    assert out["a"].dtype is minidl.float32
    np.testing.assert_array_equal(out["a"].numpy(), a.astype(np.float32))


def _trained(seed, lr):
    minidl.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 5), nn.ReLU(), nn.Linear(5, 2))
    opt = optim.Adam(model.parameters(), lr=lr, betas=(0.8, 0.99))
    return model, opt


def _step(model, opt, x):
    opt.zero_grad()
    model(x).pow(2).sum().backward()
    opt.step()


def test_module_and_optimizer_as_stateful(tmp_path):
    """Top-level values with state_dict/load_state_dict are saved through them and given their loaded state
    back; the optimizer's integer state ids stay integers. A fresh model and optimizer (one step taken, so its
    state exists, as torch's get_optimizer_state_dict arranges) then step exactly as the saved ones."""
    x = T(np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32))
    model, opt = _trained(0, 0.01)
    _step(model, opt, x)
    _step(model, opt, x)
    dcp.save({"model": model, "optim": opt, "epoch": 2}, checkpoint_id=tmp_path, no_dist=True)

    model2, opt2 = _trained(1, 0.5)
    _step(model2, opt2, x)
    sd = {"model": model2, "optim": opt2, "epoch": 0}
    dcp.load(sd, checkpoint_id=tmp_path, no_dist=True)
    assert sd["epoch"] == 2 and sd["model"] is model2 and sd["optim"] is opt2
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(model2.state_dict()[k].numpy(), v.numpy())
    want, got = opt.state_dict(), opt2.state_dict()
    assert sorted(got["state"]) == [0, 1, 2, 3]
    for i, state in want["state"].items():
        for k, v in state.items():
            np.testing.assert_array_equal(got["state"][i][k].numpy(), v.numpy())
    assert_values_equal(got["param_groups"], want["param_groups"])
    _step(model, opt, x)
    _step(model2, opt2, x)
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(model2.state_dict()[k].numpy(), v.numpy())


def test_a_fresh_optimizer_loads_like_torch(tmp_path):
    """torch 2.13 (no_dist): a trained Adam's checkpoint loads into a fresh Adam's state_dict(): param_groups
    come back (lr 0.01), the empty state stays empty (torch's get_optimizer_state_dict is what fills it)."""
    model, opt = _trained(0, 0.01)
    _step(model, opt, T(np.ones((2, 3), np.float32)))
    dcp.save({"optim": opt.state_dict()}, checkpoint_id=tmp_path, no_dist=True)
    sd = {"optim": optim.Adam(model.parameters(), lr=0.5).state_dict()}
    dcp.load(sd, checkpoint_id=tmp_path, no_dist=True)
    assert sd["optim"]["state"] == {} and sd["optim"]["param_groups"][0]["lr"] == 0.01


def test_integer_keys_stay_integers_and_clashing_names_are_refused(tmp_path):
    ids = {0: T([1.0]), 1: T([2.0]), "x": T([3.0])}
    dcp.save({"ids": ids}, checkpoint_id=tmp_path / "a", no_dist=True)
    back = dcp.format_utils.whole_state_dict(tmp_path / "a")
    assert list(back["ids"]) == [0, 1, "x"]
    np.testing.assert_array_equal(back["ids"][1].numpy(), [2.0])
    with pytest.raises(dcp.CheckpointException, match=r"rank 0: ValueError: .*both named 'ids.0'") as info:
        dcp.save({"ids": {0: T([1.0]), "0": T([2.0])}}, checkpoint_id=tmp_path / "b", no_dist=True)
    assert isinstance(info.value.failures[0], ValueError) and info.value.__cause__ is info.value.failures[0]


# ------------------------------------------------------------------------------------------------ resharding
def model_arrays():
    """The global tensors of a model-like state; the same on every rank (seeded)."""
    rng = np.random.default_rng(51)
    return {"emb.weight": rng.standard_normal((16, 8)).astype(np.float32),
            "proj.weight": rng.standard_normal((6, 12)),
            "blocks": rng.standard_normal((8, 8)).astype(np.float32),
            "half": rng.standard_normal((6, 10)).astype(np.float16),
            "norm.bias": rng.standard_normal(5).astype(np.float32),
            "count": rng.integers(0, 100, (4, 3))}


def save_on_4(rank, path):
    """Rows of emb, columns of proj, uneven columns of half, a 2x2 grid of blocks; norm.bias and count
    replicated on every rank."""
    a = model_arrays()
    i, j = divmod(rank, 2)
    cols = [0, 3, 5, 8, 10]
    sd = {"model": {"emb.weight": local(a["emb.weight"], (4 * rank, 0), (4, 8)),
                    "proj.weight": local(a["proj.weight"], (0, 3 * rank), (6, 3)),
                    "blocks": local(a["blocks"], (4 * i, 4 * j), (4, 4)),
                    "half": local(a["half"], (0, cols[rank]), (6, cols[rank + 1] - cols[rank])),
                    "norm.bias": T(a["norm.bias"]),
                    "count": T(a["count"])},
          "step": 7}
    return dcp.save(sd, checkpoint_id=path).save_id


def load_on_2(rank, path):
    """Columns of emb, uneven rows of proj and blocks: boxes that cut across the saved ones."""
    a = model_arrays()
    boxes = {"emb.weight": ((0, 4 * rank), (16, 4)),
             "proj.weight": ((0, 0), (2, 12)) if rank == 0 else ((2, 0), (4, 12)),
             "blocks": ((0, 0), (5, 8)) if rank == 0 else ((5, 0), (3, 8)),
             "half": ((0, 0), (4, 10)) if rank == 0 else ((4, 0), (2, 10))}
    model = {k: local_zeros(a[k], *b) for k, b in boxes.items()}
    model.update({"norm.bias": T(np.zeros(5, np.float32)), "count": T(np.zeros((4, 3), np.int64))})
    sd = {"model": model, "step": 0}
    dcp.load(sd, checkpoint_id=path)
    got = {k: (v.tensor if isinstance(v, dcp.LocalSlice) else v).numpy() for k, v in model.items()}
    return boxes, got, sd["step"]


def test_reshard_4_ranks_to_2_and_to_1(tmp_path):
    ids = sim.run(4, save_on_4, tmp_path)
    assert len(set(ids)) == 1
    a = model_arrays()
    for boxes, got, step in sim.run(2, load_on_2, tmp_path):
        assert step == 7
        for k, b in boxes.items():
            np.testing.assert_array_equal(got[k], box(a[k], *b))
        np.testing.assert_array_equal(got["norm.bias"], a["norm.bias"])
        np.testing.assert_array_equal(got["count"], a["count"])
    whole = {"model": {k: T(np.zeros_like(v)) for k, v in a.items()}, "step": None}
    dcp.load(whole, checkpoint_id=tmp_path, no_dist=True)
    assert whole["step"] == 7
    for k, v in a.items():
        np.testing.assert_array_equal(whole["model"][k].numpy(), v)


def big_array():
    return np.random.default_rng(7).standard_normal((8192, 256)).astype(np.float32)   # 8 MiB


LOAD_ROWS = [(0, 3000), (3000, 5192)]   # cuts through the 4 saved row boxes of 2048 rows


def test_bytes_read_when_resharding_rows(tmp_path):
    """A rank reads the blocks of the boxes it needs, not the checkpoint: its bytes are at least the rows
    it loads and at most those plus one block of rounding at each end of each run it reads (a row split
    reads one run per saved box it overlaps), and fewer than the whole checkpoint's."""
    sim.run(4, lambda rank: dcp.save({"big": local(big_array(), (2048 * rank, 0), (2048, 256))},
                                     checkpoint_id=tmp_path))
    whole = sum(os.path.getsize(tmp_path / n) for n in shard_files(tmp_path))

    def load(rank):
        start, rows = LOAD_ROWS[rank]
        reader = dcp.FileSystemReader(tmp_path)
        target = local_zeros(big_array(), (start, 0), (rows, 256))
        dcp.load({"big": target}, storage_reader=reader)
        np.testing.assert_array_equal(target.tensor.numpy(), big_array()[start:start + rows])
        return reader.bytes_read

    row_bytes = 256 * 4
    for (start, rows), read in zip(LOAD_ROWS, sim.run(2, load)):
        saved_boxes_met = (start + rows - 1) // 2048 - start // 2048 + 1
        need = rows * row_bytes
        assert need <= read <= need + 2 * BLOCK_BYTES * saved_boxes_met
        assert read < whole


# ------------------------------------------------------------------------------------------ replicas, once
def replicated_arrays():
    rng = np.random.default_rng(3)
    return {"a": rng.standard_normal((3, 4)).astype(np.float32), "b": rng.standard_normal(10),
            "c": rng.integers(-9, 9, 7), "big": rng.standard_normal((1024, 300)).astype(np.float32)}   # 1.17 MiB


def save_replicas(rank, path, planner_options):
    planner = dcp.DefaultSavePlanner(**planner_options) if planner_options is not None else None
    dcp.save({k: T(v) for k, v in replicated_arrays().items()}, checkpoint_id=path, planner=planner)


def boxes_by_key(path):
    """fqn -> [(offsets, sizes, writing rank, array)] over every shard file."""
    found = {}
    for name, tensors in stored_boxes(path).items():
        rank = int(_FILE.match(name).group(1))
        for key, arr in tensors.items():
            fqn, offsets, sizes = parse_box(key)
            found.setdefault(fqn, []).append((offsets, sizes, rank, arr))
    return found


def test_replicas_are_written_once_and_big_ones_in_pieces(tmp_path):
    sim.run(4, save_replicas, tmp_path, None)
    arrays, found = replicated_arrays(), boxes_by_key(tmp_path)
    assert sorted(found) == sorted(arrays)
    for fqn, a in arrays.items():
        filled = np.zeros(a.shape, int)
        for offsets, sizes, _, arr in found[fqn]:
            np.testing.assert_array_equal(arr, box(a, offsets, sizes))
            box(filled, offsets, sizes)[...] += 1
        assert (filled == 1).all(), fqn                     # every element in exactly one file
    assert sorted(rank for _, _, rank, _ in found["big"]) == [0, 1, 2, 3]
    assert all(a.nbytes < MiB for k, a in arrays.items() if k != "big")
    assert all(len(found[k]) == 1 for k in "abc")
    whole = {k: T(np.zeros_like(v)) for k, v in arrays.items()}
    dcp.load(whole, checkpoint_id=tmp_path, no_dist=True)
    for k, v in arrays.items():
        np.testing.assert_array_equal(whole[k].numpy(), v)


def test_dedup_to_lowest_rank_puts_every_replica_on_rank_0(tmp_path):
    sim.run(4, save_replicas, tmp_path, {"dedup_save_to_lowest_rank": True})
    found = boxes_by_key(tmp_path)
    assert {int(_FILE.match(n).group(1)) for n in shard_files(tmp_path)} == {0}
    for fqn, a in replicated_arrays().items():
        (offsets, sizes, rank, arr), = found[fqn]
        assert sizes == a.shape and rank == 0
        np.testing.assert_array_equal(arr, a)


def test_no_dedup_writes_every_holders_copy(tmp_path):
    sim.run(2, save_replicas, tmp_path, {"dedup_replicated_tensors": False})
    found = boxes_by_key(tmp_path)
    for fqn, a in replicated_arrays().items():
        assert sorted(rank for *_, rank, _ in found[fqn]) == [0, 1]
    out = {k: T(np.zeros_like(v)) for k, v in replicated_arrays().items()}
    dcp.load(out, checkpoint_id=tmp_path, no_dist=True)
    for k, v in replicated_arrays().items():
        np.testing.assert_array_equal(out[k].numpy(), v)


# ---------------------------------------------------------------------------------------- planner's errors
def _ones(n, dtype=minidl.float32):
    return minidl.ones(n, dtype=dtype)


PLAN_ERRORS = {
    "tensor_vs_value": (lambda r: {"x": _ones(2) if r == 0 else 3, "ok": _ones(1)},
                        ["'x'", "plain value on rank 1", "tensor on rank 0"]),
    "value_vs_tensor": (lambda r: {"x": 3 if r == 0 else _ones(2)}, ["'x'", "tensor on rank 1", "value on rank 0"]),
    "sizes": (lambda r: {"x": _ones(3 + r)}, ["'x'", "size [4] on rank 1", "size [3] on rank 0"]),
    "dtypes": (lambda r: {"x": _ones(3, minidl.float64 if r else minidl.float32)},
               ["'x'", "float64", "rank 1", "float32", "rank 0"]),
    "overlap": (lambda r: {"x": dcp.LocalSlice(minidl.ones(3, 2), (2 * r, 0), (5, 2))},
                ["'x'", "rank 0", "rank 1", "overlap"]),
    "uncovered": (lambda r: {"x": dcp.LocalSlice(minidl.ones(1, 2), (2 * r, 0), (4, 2))},
                  ["'x'", "cover 4 of its 8 elements"]),
}


@pytest.mark.parametrize("case", sorted(PLAN_ERRORS))
def test_planner_errors_on_every_rank(tmp_path, case):
    make, words = PLAN_ERRORS[case]
    errors = on_ranks(2, lambda rank: dcp.save(make(rank), checkpoint_id=tmp_path))
    for e in errors:
        assert isinstance(e, dcp.CheckpointException) and sorted(e.failures) == [0, 1], e   # (each rank plans)
        for w in words:
            assert w in str(e), (w, str(e))
    assert not os.path.exists(tmp_path / ".metadata") and not shard_files(tmp_path)


def test_planner_error_on_4_ranks_names_the_ranks(tmp_path):
    def fn(rank):
        offsets = (0, 0) if rank < 2 else (rank, 0)     # ranks 0 and 1 equal (a replica), 2 and 3 overlap it
        return dcp.save({"x": dcp.LocalSlice(minidl.ones(3, 2), offsets, (6, 2))}, checkpoint_id=tmp_path)
    errors = on_ranks(4, fn)
    for e in errors:
        assert isinstance(e, dcp.CheckpointException) and sorted(e.failures) == [0, 1, 2, 3], e
        assert "rank 0: ValueError: " in str(e) and "'x'" in str(e)
        assert "rank 0 (at [0, 0]) and rank 2 (at [2, 0]) overlap" in str(e)
        assert "rank 2 (at [2, 0]) and rank 3 (at [3, 0]) overlap" in str(e)


# --------------------------------------------------------------------------------------- load mismatches
@pytest.fixture
def small_ckpt(tmp_path):
    path = tmp_path / "ckpt"
    dcp.save({"a": T(np.arange(6.0).reshape(2, 3)), "b": T(np.arange(4)), "v": 5, "extra": T([1.0])},
             checkpoint_id=path, no_dist=True)
    return path


def test_load_names_every_mismatch_at_once(small_ckpt):
    sd = {"a": minidl.zeros(3, 3), "b": 7, "v": minidl.zeros(1), "gone": minidl.zeros(2), "gone2": 1}
    with pytest.raises(dcp.CheckpointException, match="rank 0: ValueError: ") as info:
        dcp.load(sd, checkpoint_id=small_ckpt, no_dist=True)
    text = str(info.value)
    for w in ["missing from the checkpoint: ['gone', 'gone2']", "'a' has size [2, 3] in the checkpoint but [3, 3]",
              "'b' is a tensor in the checkpoint but a int here", "'v' is a tensor here but a plain value",
              str(small_ckpt)]:
        assert w in text, (w, text)
    np.testing.assert_array_equal(sd["a"].numpy(), 0)   # nothing loaded
    assert sd["b"] == 7


def test_partial_load_skips_missing_keys_and_extra_keys_are_ignored(small_ckpt):
    """As torch 2.13: keys of the checkpoint that the state dict lacks are not read; allow_partial_load skips
    keys that the checkpoint lacks."""
    sd = {"a": minidl.zeros(2, 3), "gone": minidl.full((2,), 9.0)}
    dcp.load(sd, checkpoint_id=small_ckpt, no_dist=True, planner=dcp.DefaultLoadPlanner(allow_partial_load=True))
    np.testing.assert_array_equal(sd["a"].numpy(), np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(sd["gone"].numpy(), [9.0, 9.0])
    sd = {"v": 0}
    dcp.load(sd, checkpoint_id=small_ckpt, no_dist=True)
    assert sd == {"v": 5}


def test_a_mismatch_on_one_rank_fails_every_rank(small_ckpt):
    def fn(rank):
        sd = {"a": minidl.zeros(2, 3)}
        if rank == 1:
            sd["gone"] = minidl.zeros(1)
        dcp.load(sd, checkpoint_id=small_ckpt)
    for e in on_ranks(2, fn):
        assert isinstance(e, dcp.CheckpointException) and sorted(e.failures) == [1]
        assert "'gone'" in str(e) and "rank 1" in str(e)


# -------------------------------------------------------------------------------------------- corruption
def corruption_state():
    rng = np.random.default_rng(11)
    return {"w": rng.standard_normal((600, 600)).astype(np.float32), "b": rng.standard_normal(10)}   # 1.4 MiB


def save_corruption_state(path, scale=1.0):
    return dcp.save({k: T(v * scale) for k, v in corruption_state().items()}, checkpoint_id=path, no_dist=True)


def _truncate(path, other):
    f = path / shard_files(path)[0]
    os.truncate(f, os.path.getsize(f) - 10)


def _flip(path, other):
    f = path / shard_files(path)[0]
    with open(f, "r+b") as fh:
        fh.seek(os.path.getsize(f) - 1000)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0x40]))


def _remove(path, other):
    os.unlink(path / shard_files(path)[0])


def _swap_file(path, other):
    shutil.copyfile(other / shard_files(other)[0], path / shard_files(path)[0])


def _swap_metadata(path, other):
    shutil.copyfile(other / ".metadata", path / ".metadata")


def _drop_metadata(path, other):
    os.unlink(path / ".metadata")


def _empty(path, other):
    for n in os.listdir(path):
        os.unlink(path / n)


CORRUPTIONS = {
    "truncated": (_truncate, RuntimeError, r"__0_0\.\w+\.safetensors has \d+ bytes but .* says \d+: truncated"),
    "flipped_byte": (_flip, RuntimeError, r"__0_0\.\w+\.safetensors is corrupted: bytes 1048576\.\.\.\d+ fail "
                                          r"their CRC-32"),
    "missing_file": (_remove, RuntimeError, r"missing the file __0_0\.\w+\.safetensors"),
    "file_of_another_checkpoint": (_swap_file, RuntimeError, r"corrupted: .*the file was written by save \w+, not "
                                                             r"by this checkpoint's"),
    "metadata_of_another_checkpoint": (_swap_metadata, RuntimeError, r"missing the file __0_0\.\w+\.safetensors"),
    "no_metadata": (_drop_metadata, RuntimeError, r"incomplete checkpoint: the files of save \w+ from rank\(s\) "
                                                  r"\[0\] but no \.metadata"),
    "empty_folder": (_empty, FileNotFoundError, r"no checkpoint at .*\(no \.metadata\)"),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_damaged_checkpoints_are_named_never_loaded(tmp_path, case):
    damage, error, pattern = CORRUPTIONS[case]
    path, other = tmp_path / "ckpt", tmp_path / "other"
    save_corruption_state(other, scale=2.0)
    save_corruption_state(path)
    damage(path, other)
    sd = {k: T(np.zeros_like(v)) for k, v in corruption_state().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # (a swapped .metadata leaves this checkpoint's files uncommitted)
        with pytest.raises(dcp.CheckpointException, match=pattern) as info:
            dcp.load(sd, checkpoint_id=path, no_dist=True)
    assert type(info.value.failures[0]) is error and f"rank 0: {error.__name__}: " in str(info.value)
    for v in sd.values():
        np.testing.assert_array_equal(v.numpy(), 0)


def test_a_damaged_metadata_is_named(tmp_path):
    save_corruption_state(tmp_path)
    with open(tmp_path / ".metadata", "r+b") as fh:
        fh.truncate(50)
    with pytest.raises(dcp.CheckpointException,
                       match=r"rank 0: ValueError: .*\.metadata is not a minidl checkpoint's metadata, or is damaged"):
        dcp.load({"b": minidl.zeros(10, dtype=minidl.float64)}, checkpoint_id=tmp_path, no_dist=True)


def test_crc_is_checked_on_partial_reads(tmp_path):
    """A reader of one key reads only the blocks it touches: damage outside them goes unread, damage inside
    is named."""
    save_corruption_state(tmp_path)
    meta = dcp.FileSystemReader(tmp_path).read_metadata()
    where = meta.storage_data[dcp.MetadataIndex("b", (0,))]
    f = tmp_path / where.relative_path
    assert where.offset + where.length < BLOCK_BYTES < os.path.getsize(f) - 100
    far = BLOCK_BYTES + 50                            # in the second block, which "b" does not touch
    with open(f, "r+b") as fh:
        fh.seek(far)
        fh.write(b"\xff\xff")
    sd = {"b": minidl.zeros(10, dtype=minidl.float64)}
    dcp.load(sd, checkpoint_id=tmp_path, no_dist=True)
    np.testing.assert_array_equal(sd["b"].numpy(), corruption_state()["b"])
    with pytest.raises(dcp.CheckpointException, match="rank 0: RuntimeError: .*fail their CRC-32 check"):
        dcp.load({"w": minidl.zeros(600, 600)}, checkpoint_id=tmp_path, no_dist=True)


# ----------------------------------------------------------------------------------------- atomic commits
def replacing():
    """Expects the warning of a save into a folder that holds a checkpoint already (torch 2.13 warns too)."""
    return pytest.warns(UserWarning, match="holds a checkpoint; this save replaces it")


def _loads_exactly(path, scale):
    sd = {k: T(np.zeros_like(v)) for k, v in corruption_state().items()}
    dcp.load(sd, checkpoint_id=path, no_dist=True)
    for k, v in corruption_state().items():
        np.testing.assert_array_equal(sd[k].numpy(), v * scale)


def test_saving_twice_leaves_only_the_second_save(tmp_path):
    save_corruption_state(tmp_path)
    with replacing():
        second = save_corruption_state(tmp_path, scale=3.0)
    names = os.listdir(tmp_path)
    assert sorted(names) == [".metadata", *shard_files(tmp_path)]
    assert {_FILE.match(n).group(3) for n in shard_files(tmp_path)} == {second.save_id}
    _loads_exactly(tmp_path, 3.0)


def _interrupted(tmp_path):
    """The save id of the shard files that no .metadata names."""
    committed = dcp.FileSystemReader(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        committed = committed.read_metadata().save_id
    (other,) = {_FILE.match(n).group(3) for n in shard_files(tmp_path)} - {committed}
    return other


def test_a_save_stopped_before_its_commit_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    first = save_corruption_state(tmp_path)

    def no_commit(self, metadata, rank):
        raise OSError("disk full")
    with monkeypatch.context() as m:
        m.setattr(dcp.FileSystemWriter, "finish", no_commit)
        with replacing(), pytest.raises(dcp.CheckpointException, match="rank 0: OSError: disk full"):
            save_corruption_state(tmp_path, scale=5.0)
    lost = _interrupted(tmp_path)
    with pytest.warns(UserWarning, match=rf"files of save {lost} from rank\(s\) \[0\] that never committed.*"
                                         rf"loading the committed one, save {first.save_id}"):
        _loads_exactly(tmp_path, 1.0)


def test_a_commit_fault_leaves_the_previous_checkpoint_and_the_next_save_cleans_up(tmp_path, fault):
    first = save_corruption_state(tmp_path)
    fault("rank=0 at=dcp_commit:1 do=raise")
    with replacing(), pytest.raises(dcp.CheckpointException, match="rank 0: .*InjectedFault: .*at dcp_commit"):
        save_corruption_state(tmp_path, scale=5.0)
    lost = _interrupted(tmp_path)
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".minidl-")]   # the torn temp .metadata is gone
    with pytest.warns(UserWarning, match=rf"save {lost} .* never committed.*save {first.save_id}"):
        _loads_exactly(tmp_path, 1.0)
    with replacing():
        third = save_corruption_state(tmp_path, scale=6.0)
    assert {_FILE.match(n).group(3) for n in shard_files(tmp_path)} == {third.save_id}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _loads_exactly(tmp_path, 6.0)


def test_a_cleanup_fault_after_the_commit_loads_the_new_checkpoint(tmp_path, fault):
    first = save_corruption_state(tmp_path)
    fault("rank=0 at=dcp_cleanup:1 do=raise")
    with replacing(), pytest.raises(dcp.CheckpointException, match="rank 0: .*InjectedFault: .*at dcp_cleanup"):
        save_corruption_state(tmp_path, scale=5.0)
    assert {_FILE.match(n).group(3) for n in shard_files(tmp_path)} > {first.save_id}   # the old files linger
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # older files are no interrupted save
        _loads_exactly(tmp_path, 5.0)


def test_a_write_fault_on_one_rank_fails_the_save_on_every_rank(tmp_path, fault):
    sim.run(2, lambda rank: dcp.save({"x": T(np.arange(4.0))}, checkpoint_id=tmp_path))
    fault("rank=1 at=dcp_write:1 do=raise")
    with replacing():   # (warned by the coordinator, rank 0)
        errors = on_ranks(2, lambda rank: dcp.save({"x": dcp.LocalSlice(T(np.full(2, 9.0)), (2 * rank,), (4,))},
                                                   checkpoint_id=tmp_path))
    for e in errors:
        assert isinstance(e, dcp.CheckpointException) and sorted(e.failures) == [1]
        assert "fails on purpose at dcp_write" in str(e)
    sd = {"x": minidl.zeros(4)}
    with pytest.warns(UserWarning, match="never committed"):
        dcp.load(sd, checkpoint_id=tmp_path, no_dist=True)
    np.testing.assert_array_equal(sd["x"].numpy(), np.arange(4.0))


# --------------------------------------------------------------------------------------- writer options
def writer_state():
    rng = np.random.default_rng(5)
    return {f"t{i}": rng.standard_normal((50 + 10 * i, 7)).astype(np.float32 if i % 2 else np.float64)
            for i in range(6)} | {"i": np.arange(5, dtype=np.int64), "flag": np.array([True, False])}


@pytest.mark.parametrize("options, files", [
    ({"thread_count": 3}, 3),
    ({"single_file_per_rank": False}, 8),
    ({"sync_files": False}, 1),
])
def test_writer_options_files_readable_by_safetensors(tmp_path, options, files):
    state = writer_state()
    dcp.save({k: T(v) for k, v in state.items()}, storage_writer=dcp.FileSystemWriter(tmp_path, **options),
             no_dist=True)
    found = stored_boxes(tmp_path)
    assert len(found) == files
    seen = {}
    for name, tensors in found.items():
        for key, arr in tensors.items():
            fqn, offsets, sizes = parse_box(key)
            assert offsets == (0,) * arr.ndim and sizes == arr.shape
            seen[fqn] = arr
    assert sorted(seen) == sorted(state)
    for k, v in state.items():
        assert seen[k].dtype == v.dtype
        np.testing.assert_array_equal(seen[k], v)
    out = {k: T(np.zeros_like(v)) for k, v in state.items()}
    dcp.load(out, storage_reader=dcp.FileSystemReader(tmp_path), no_dist=True)
    for k, v in state.items():
        np.testing.assert_array_equal(out[k].numpy(), v)


def test_overwrite_false_refuses_an_existing_checkpoint(tmp_path):
    dcp.save({"a": T([1.0])}, checkpoint_id=tmp_path, no_dist=True)
    with pytest.raises(dcp.CheckpointException, match="rank 0: RuntimeError: .*already holds a checkpoint and "
                                                      "overwrite=False"):
        dcp.save({"a": T([2.0])}, storage_writer=dcp.FileSystemWriter(tmp_path, overwrite=False), no_dist=True)
    sd = {"a": minidl.zeros(1)}
    dcp.load(sd, checkpoint_id=tmp_path, no_dist=True)
    np.testing.assert_array_equal(sd["a"].numpy(), [1.0])
    dcp.save({"a": T([3.0])}, storage_writer=dcp.FileSystemWriter(tmp_path / "new", overwrite=False), no_dist=True)


def test_box_names_of_sliced_and_0d_tensors(tmp_path):
    def fn(rank):
        dcp.save({"w": local(np.arange(24.0).reshape(4, 6), (0, 3 * rank), (4, 3)), "s": T(np.array(2.5))},
                 checkpoint_id=tmp_path)
    sim.run(2, fn)
    keys = sorted(k for tensors in stored_boxes(tmp_path).values() for k in tensors)
    assert keys == ["s[]", "w[0:4,0:3]", "w[0:4,3:6]"]


def test_without_a_process_group_save_and_load_warn_and_run_alone(tmp_path):
    with pytest.warns(UserWarning, match=r"save: minidl.dist is not initialized; assuming .*no_dist=True"):
        dcp.save({"a": T([4.0])}, checkpoint_id=tmp_path)
    sd = {"a": minidl.zeros(1)}
    with pytest.warns(UserWarning, match=r"load: minidl.dist is not initialized"):
        dcp.load(sd, checkpoint_id=tmp_path)
    np.testing.assert_array_equal(sd["a"].numpy(), [4.0])


def test_refused_arguments(tmp_path):
    with pytest.raises(RuntimeError, match="give checkpoint_id") as info:   # (torch: RuntimeError, before any step)
        dcp.save({"a": T([1.0])}, no_dist=True)
    assert not isinstance(info.value, dcp.CheckpointException)
    with pytest.raises(ValueError, match="minidl always flattens"):
        dcp.DefaultSavePlanner(flatten_state_dict=False)
    with pytest.raises(NotImplementedError, match="AsyncCheckpointerType.THREAD"):
        dcp.async_save({"a": T([1.0])}, checkpoint_id=tmp_path, no_dist=True,
                       async_checkpointer_type=dcp.AsyncCheckpointerType.PROCESS)
    with pytest.raises(dcp.CheckpointException, match="rank 0: TypeError: .*'obj' is not a tensor or a plain value"):
        dcp.save({"obj": object()}, checkpoint_id=tmp_path, no_dist=True)
    errors = on_ranks(2, lambda rank: dcp.save({"a": T([1.0])}, checkpoint_id=tmp_path, use_collectives=False))
    assert all(isinstance(e, ValueError) and "use_collectives=False is not supported on 2 ranks" in str(e)
               for e in errors)
    assert not os.path.exists(tmp_path / ".metadata")


# ------------------------------------------------------------------------------------------------ async_save
def test_async_save_snapshots_the_state_and_returns_the_metadata(tmp_path):
    a = np.arange(40.0).reshape(8, 5)

    def fn(rank):
        mine = T(box(a, (4 * rank, 0), (4, 5)))
        shared = T(np.arange(3.0))
        future = dcp.async_save({"w": dcp.LocalSlice(mine, (4 * rank, 0), a.shape), "r": shared, "n": 1},
                                checkpoint_id=tmp_path)
        mine.mul_(-1)            # training goes on at once
        shared.add_(100)
        meta = future.result(timeout=60)
        return meta
    metas = sim.run(2, fn)
    assert all(isinstance(m, dcp.Metadata) for m in metas)
    assert metas[0].save_id == metas[1].save_id
    assert sorted(metas[0].state_dict_metadata) == ["n", "r", "w"]
    sd = {"w": minidl.zeros(8, 5, dtype=minidl.float64), "r": minidl.zeros(3, dtype=minidl.float64), "n": 0}
    dcp.load(sd, checkpoint_id=tmp_path, no_dist=True)
    np.testing.assert_array_equal(sd["w"].numpy(), a)
    np.testing.assert_array_equal(sd["r"].numpy(), np.arange(3.0))
    assert sd["n"] == 1


def test_async_save_write_error_comes_out_of_every_ranks_future(tmp_path, fault):
    fault("rank=0 at=dcp_write:1 do=raise")

    def fn(rank):
        future = dcp.async_save({"x": dcp.LocalSlice(T(np.ones(2)), (2 * rank,), (4,))}, checkpoint_id=tmp_path)
        try:
            future.result(timeout=60)
        except Exception as e:  # noqa: BLE001
            return e
    for e in sim.run(2, fn):
        assert isinstance(e, dcp.CheckpointException) and sorted(e.failures) == [0]
        assert "fails on purpose at dcp_write" in str(e)
    assert not os.path.exists(tmp_path / ".metadata")


def test_async_save_unmakeable_folder_fails_in_every_ranks_future(tmp_path):
    """A folder that cannot be made (a file is in the way) fails on the coordinator; every rank's future says so."""
    (tmp_path / "file").write_text("x")

    def fn(rank):
        future = dcp.async_save({"x": T(np.ones(2))}, checkpoint_id=tmp_path / "file" / "ckpt")
        with pytest.raises(dcp.CheckpointException, match="file") as info:
            future.result(timeout=60)
        return sorted(info.value.failures)
    assert sim.run(2, fn) == [[0], [0]]


def test_async_saves_in_a_row_each_commit(tmp_path):
    """A second async_save waits for the first; both checkpoints are whole."""
    def fn(rank):
        x = T(np.arange(4.0))
        first = dcp.async_save({"x": x}, checkpoint_id=tmp_path / "1")
        x.add_(10)
        second = dcp.async_save({"x": x}, checkpoint_id=tmp_path / "2")
        return first.result(timeout=60).save_id != second.result(timeout=60).save_id
    assert sim.run(2, fn) == [True, True]
    for name, want in (("1", np.arange(4.0)), ("2", np.arange(4.0) + 10)):
        sd = {"x": minidl.zeros(4, dtype=minidl.float64)}
        dcp.load(sd, checkpoint_id=tmp_path / name, no_dist=True)
        np.testing.assert_array_equal(sd["x"].numpy(), want)


# ---------------------------------------------------------------------------------------------- format_utils
def test_dcp_to_torch_save_and_back(tmp_path):
    rng = np.random.default_rng(9)
    w, b, s = rng.standard_normal((3, 4)), rng.standard_normal(4).astype(np.float32), np.array(3.0)
    sd = {"model": {"w": T(w), "b": T(b)}, "optim": {"state": {0: {"step": T(s)}},
                                                     "param_groups": [{"lr": 0.1, "params": [0]}]},
          "pair": (T(b), T(w)), "n": 4}
    dcp.save(sd, checkpoint_id=tmp_path / "dcp", no_dist=True)
    dcp_to_torch_save(tmp_path / "dcp", tmp_path / "one.pt")
    back = minidl.load(tmp_path / "one.pt")
    assert sorted(back) == ["model", "n", "optim", "pair"] and back["n"] == 4
    np.testing.assert_array_equal(back["model"]["w"].numpy(), w)
    np.testing.assert_array_equal(back["model"]["b"].numpy(), b)
    assert list(back["optim"]["state"]) == [0]
    np.testing.assert_array_equal(back["optim"]["state"][0]["step"].numpy(), s)
    assert back["optim"]["param_groups"] == [{"lr": 0.1, "params": [0]}]
    assert isinstance(back["pair"], list)       # tuples of tensors come back as lists
    np.testing.assert_array_equal(back["pair"][1].numpy(), w)

    torch_save_to_dcp(tmp_path / "one.pt", tmp_path / "dcp2")
    out = {"model": {"w": minidl.zeros(3, 4, dtype=minidl.float64), "b": minidl.zeros(4)},
           "optim": {"state": {0: {"step": minidl.zeros(())}}, "param_groups": [{"lr": None, "params": None}]},
           "pair": [minidl.zeros(4), minidl.zeros(3, 4, dtype=minidl.float64)], "n": 0}
    dcp.load(out, checkpoint_id=tmp_path / "dcp2", no_dist=True)
    np.testing.assert_array_equal(out["model"]["w"].numpy(), w)
    np.testing.assert_array_equal(out["pair"][0].numpy(), b)
    np.testing.assert_array_equal(out["optim"]["state"][0]["step"].numpy(), s)
    assert out["optim"]["param_groups"] == [{"lr": 0.1, "params": [0]}] and out["n"] == 4


# ------------------------------------------------------------------------------------------------------ DDP
def ddp_train_and_save(rank, path):
    from minidl.nn.parallel import DistributedDataParallel
    minidl.manual_seed(0)
    model = nn.Linear(4, 3)
    ddp = DistributedDataParallel(model)
    opt = optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    x = T(np.random.default_rng(rank).standard_normal((5, 4)).astype(np.float32))
    for _ in range(2):
        opt.zero_grad()
        ddp(x).pow(2).sum().backward()
        opt.step()
    dcp.save({"model": ddp.module.state_dict(), "optim": opt.state_dict()}, checkpoint_id=path / "plain")
    dcp.save({"model": ddp}, checkpoint_id=path / "wrapped")
    return {k: v.numpy() for k, v in model.state_dict().items()}


def test_ddp_state_saved_on_2_ranks_loads_into_a_plain_model(tmp_path):
    trained = sim.run(2, ddp_train_and_save, tmp_path)
    for k in trained[0]:
        np.testing.assert_array_equal(trained[0][k], trained[1][k])   # DDP keeps the replicas equal
    minidl.manual_seed(123)
    plain = nn.Linear(4, 3)
    dcp.load({"model": plain}, checkpoint_id=tmp_path / "plain", no_dist=True)
    for k, v in plain.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), trained[0][k])
    with pytest.raises(dcp.CheckpointException, match=r"rank 0: ValueError: .*"
                                                      r"missing from the checkpoint: \['model.weight', 'model.bias'\] "
                                         r"\(it has instead: \['model.module.bias', 'model.module.weight'\]\)"):
        dcp.load({"model": nn.Linear(4, 3)}, checkpoint_id=tmp_path / "wrapped", no_dist=True)


# -------------------------------------------------------------------------------------------- torch's keys
def _as_torch(value, torch):
    """The same nesting with each minidl tensor as a torch tensor of its values."""
    if isinstance(value, minidl.Tensor):
        return torch.from_numpy(value.numpy().copy())
    if isinstance(value, dict):
        return {k: _as_torch(v, torch) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_as_torch(v, torch) for v in value)
    return value


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")   # (torch's no_dist note)
def test_keys_are_torchs_for_an_optimizer_and_nested_lists(tmp_path):
    """torch 2.13's DCP (no_dist) names the keys of the same nesting: lists holding dicts, tensors or such
    lists are walked into (``optim.param_groups.0.lr``), other lists and tuples of plain values are leaves,
    empty dicts are no key."""
    torch = pytest.importorskip("torch")
    tdcp = pytest.importorskip("torch.distributed.checkpoint")
    model, opt = _trained(0, 0.01)
    _step(model, opt, T(np.ones((2, 3), np.float32)))
    sd = {"optim": opt.state_dict(), "lod": [{"a": 1}, {"b": 2}], "nl": [[1, 2], 3], "tup": (1, 2), "el": [],
          "empty": {}, "half_empty": {"x": {}, "y": 1}, "mixed": [minidl.ones(1), 1],
          "lol": [[minidl.ones(2)], [{"c": 3}]], "deep": [[{"d": 1}]], "le": [{}]}
    theirs = tdcp.save(_as_torch(sd, torch), checkpoint_id=tmp_path / "torch", no_dist=True)
    ours = dcp.save(sd, checkpoint_id=tmp_path / "minidl", no_dist=True)
    assert "optim.param_groups.0.lr" in theirs.state_dict_metadata
    assert sorted(ours.state_dict_metadata) == sorted(theirs.state_dict_metadata)


def test_a_tuple_of_a_tensor_and_a_value_round_trips(tmp_path):
    """A tuple holding a tensor is walked into (its tensor saved as one); its plain values are put back by
    rebuilding the tuple in its parent, at any depth; the tensor is filled in place."""
    sd = {"tup": (T([1.0, 2.0]), 2.5), "deep": [(T([3]), "a", (4, T([5.0]))), {"k": (6, T([7.0]))}]}
    dcp.save(sd, checkpoint_id=tmp_path, no_dist=True)
    first, second = minidl.zeros(2, dtype=minidl.float64), minidl.zeros(1, dtype=minidl.float64)
    out = {"tup": (first, 0.0), "deep": [(minidl.zeros(1, dtype=minidl.int64), "", (0, second)),
                                         {"k": (0, minidl.zeros(1, dtype=minidl.float64))}]}
    dcp.load(out, checkpoint_id=tmp_path, no_dist=True)
    assert type(out["tup"]) is tuple and out["tup"][0] is first and out["tup"][1] == 2.5
    np.testing.assert_array_equal(first.numpy(), [1.0, 2.0])
    inner = out["deep"][0]
    assert type(inner) is tuple and inner[1] == "a" and type(inner[2]) is tuple and inner[2][0] == 4
    assert inner[2][1] is second
    np.testing.assert_array_equal(inner[0].numpy(), [3])
    np.testing.assert_array_equal(second.numpy(), [5.0])
    assert out["deep"][1]["k"][0] == 6
    np.testing.assert_array_equal(out["deep"][1]["k"][1].numpy(), [7.0])


# ------------------------------------------------------------------------------------------ empty boxes
def test_an_empty_box_where_another_box_starts_is_neither_written_nor_recorded(tmp_path):
    """Rows [(0,2), (2,2), (2,5)]: rank 1 holds none of w, and its empty box starts at (2, 0) as rank 2's
    does. Had it been recorded, its place (rank 1's file, where z lies) would have been read for rank 2's
    rows. It holds no bytes, so it is not there at all; the split loads back on the same three ranks."""
    a = np.arange(20, dtype=np.float32).reshape(5, 4)
    z = -np.arange(36, dtype=np.float32).reshape(3, 12) - 1
    rows = [(0, 2), (2, 2), (2, 5)]

    def save(rank):
        lo, hi = rows[rank]
        return dcp.save({"w": local(a, (lo, 0), (hi - lo, 4)), "z": local(z, (rank, 0), (1, 12))},
                        checkpoint_id=tmp_path)
    meta = sim.run(3, save)[0]
    assert sorted(c.offsets + c.sizes for c in meta.state_dict_metadata["w"].chunks) == [(0, 0, 2, 4), (2, 0, 3, 4)]
    assert sorted(k for tensors in stored_boxes(tmp_path).values() for k in tensors if k.startswith("w")) == \
        ["w[0:2,0:4]", "w[2:5,0:4]"]
    whole = {"w": minidl.zeros(5, 4), "z": minidl.zeros(3, 12)}
    dcp.load(whole, checkpoint_id=tmp_path, no_dist=True)
    np.testing.assert_array_equal(whole["w"].numpy(), a)
    np.testing.assert_array_equal(whole["z"].numpy(), z)

    def load(rank):
        lo, hi = rows[rank]
        target = local_zeros(a, (lo, 0), (hi - lo, 4))
        dcp.load({"w": target}, checkpoint_id=tmp_path)
        return target.tensor.numpy()
    for (lo, hi), got in zip(rows, sim.run(3, load)):
        np.testing.assert_array_equal(got, a[lo:hi])


# ----------------------------------------------------------------------------------- resharding: spans
def test_3d_saved_along_dim_1_loads_along_dim_2(tmp_path):
    """A split along the last dimension meets each saved box in one run per row: 80 here, more than the
    loader reads run by run, so it reads one span and cuts the box out by strides. 2 ranks save halves of
    dim 1; 3 ranks load uneven parts of dim 2, and 1 rank a box that cuts all three dims."""
    from minidl.dist.checkpoint.planner import MAX_RUNS
    a = np.random.default_rng(12).standard_normal((10, 16, 12)).astype(np.float32)
    assert 10 * 8 > MAX_RUNS
    sim.run(2, lambda rank: dcp.save({"t": local(a, (0, 8 * rank, 0), (10, 8, 12))}, checkpoint_id=tmp_path))
    cuts = [(0, 5), (5, 7), (7, 12)]

    def load(rank):
        lo, hi = cuts[rank]
        target = local_zeros(a, (0, 0, lo), (10, 16, hi - lo))
        dcp.load({"t": target}, checkpoint_id=tmp_path)
        return target.tensor.numpy()
    for (lo, hi), got in zip(cuts, sim.run(3, load)):
        np.testing.assert_array_equal(got, a[:, :, lo:hi])
    inner = {"t": local_zeros(a, (1, 3, 2), (8, 11, 9))}
    dcp.load(inner, checkpoint_id=tmp_path, no_dist=True)
    np.testing.assert_array_equal(inner["t"].tensor.numpy(), a[1:9, 3:14, 2:11])


# ----------------------------------------------------------------------------------- metadata integrity
def test_one_changed_character_of_the_metadata_is_refused(tmp_path):
    """Moving a's chunk by a few bytes in .metadata reads b's bytes with every file's CRC intact: the
    metadata's own CRC-32 refuses it, naming the file."""
    meta = dcp.save({"a": minidl.arange(8.0), "b": minidl.arange(8.0) + 100}, checkpoint_id=tmp_path, no_dist=True)
    offset = meta.storage_data[dcp.MetadataIndex("a", (0,))].offset
    text = (tmp_path / ".metadata").read_text()
    old, new = f'"offset": {offset},', f'"offset": {offset // 10}{(offset % 10 + 4) % 10},'
    assert text.count(old) == 1 and len(old) == len(new)
    (tmp_path / ".metadata").write_text(text.replace(old, new))
    sd = {"a": minidl.zeros(8), "b": minidl.zeros(8)}
    with pytest.raises(dcp.CheckpointException, match=r"rank 0: ValueError: .*\.metadata .*CRC-32 does not match"):
        dcp.load(sd, checkpoint_id=tmp_path, no_dist=True)
    np.testing.assert_array_equal(sd["a"].numpy(), 0)


def _resealed(path, change):
    """``.metadata`` with ``change(body)`` applied and its CRC-32 made to match (what a forger would do)."""
    doc = json.loads((path / ".metadata").read_text())
    change(doc["body"])
    doc["crc32"] = f"{zlib.crc32(json.dumps(doc['body'], indent=1, allow_nan=False).encode()):08x}"
    (path / ".metadata").write_text(json.dumps(doc))


def _past_the_end(body):
    body["keys"]["a"]["chunks"][0]["offset"] = 10**6


def _no_block_crcs(body):
    next(iter(body["files"].values()))["crc32"] = []


@pytest.mark.parametrize("change, pattern", [
    (_past_the_end, r"rank 0: RuntimeError: .*\.metadata places bytes 1000000\.\.\.1000032 in __0_0\.\w+\.safetensors, "
                    r"which has \d+"),
    (_no_block_crcs, r"rank 0: ValueError: .*\.metadata .*file __0_0\.\w+\.safetensors of \d+ bytes has 0 block "
                     r"checksums"),
])
def test_metadata_that_does_not_fit_its_files_is_refused(tmp_path, change, pattern):
    """Past the CRC-32: byte ranges outside a file and checksum lists of the wrong length are named."""
    dcp.save({"a": minidl.arange(8.0), "b": minidl.arange(8.0) + 100}, checkpoint_id=tmp_path, no_dist=True)
    _resealed(tmp_path, change)
    with pytest.raises(dcp.CheckpointException, match=pattern):
        dcp.load({"a": minidl.zeros(8), "b": minidl.zeros(8)}, checkpoint_id=tmp_path, no_dist=True)


# ---------------------------------------------------------------------------- async_save and save, in order
def test_async_save_then_save_into_one_folder_commit_in_order(tmp_path, monkeypatch):
    """save waits for the async_save still writing into the folder: both commit, in order, and the folder
    holds the second. (The async writer is held back a little, so a save that did not wait would write
    first; with the wait the hold only delays it.)"""
    rank_threads, order, saving = set(), [], threading.Event()
    write = dcp.FileSystemWriter.write_data

    def held(self, pieces, save_id, rank):
        mine = threading.get_ident() in rank_threads   # (the async save writes on a thread of its own)
        if mine:
            saving.set()
        else:
            saving.wait(0.5)
        order.append((rank, "save" if mine else "async"))
        return write(self, pieces, save_id, rank)
    monkeypatch.setattr(dcp.FileSystemWriter, "write_data", held)

    def fn(rank):
        rank_threads.add(threading.get_ident())
        x = dcp.LocalSlice(T(np.full(2, 1.0)), (2 * rank,), (4,))
        future = dcp.async_save({"x": x}, checkpoint_id=tmp_path)
        x.tensor.fill_(2.0)
        second = dcp.save({"x": x}, checkpoint_id=tmp_path)
        return future.result(timeout=60).save_id, second.save_id
    with replacing():   # (the save finds the async one's checkpoint committed)
        ids = sim.run(2, fn)
    assert ids[0] == ids[1] and ids[0][0] != ids[0][1]
    assert [what for _, what in order] == ["async", "async", "save", "save"]
    assert {_FILE.match(n).group(3) for n in shard_files(tmp_path)} == {ids[0][1]}
    sd = {"x": minidl.zeros(4, dtype=minidl.float64)}
    dcp.load(sd, checkpoint_id=tmp_path, no_dist=True)
    np.testing.assert_array_equal(sd["x"].numpy(), 2.0)


_EXITS_AT_ONCE = """
import sys, time
import numpy as np
import minidl, minidl.dist.checkpoint as dcp
write = dcp.FileSystemWriter.write_data
def slow(self, *args):   # a slow disk: the script has ended by the time the files are written
    time.sleep(0.3)
    return write(self, *args)
dcp.FileSystemWriter.write_data = slow
dcp.async_save({"x": minidl.from_numpy(np.arange(6.0))}, checkpoint_id=sys.argv[1], no_dist=True)
"""


def test_a_script_ending_without_waiting_on_async_save_still_commits(tmp_path):
    """As torch's (its executor's threads are joined at exit): the writer thread is no daemon."""
    script = tmp_path / "script.py"
    script.write_text(_EXITS_AT_ONCE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(
        os.path.abspath(minidl.__file__))), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "ckpt")], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    sd = {"x": minidl.zeros(6, dtype=minidl.float64)}
    dcp.load(sd, checkpoint_id=tmp_path / "ckpt", no_dist=True)
    np.testing.assert_array_equal(sd["x"].numpy(), np.arange(6.0))


def test_async_save_no_dist_error_is_in_the_future(tmp_path):
    """As torch's (and as on N ranks): an unmakeable folder fails the future with a CheckpointException."""
    (tmp_path / "file").write_text("x")
    future = dcp.async_save({"x": T(np.ones(2))}, checkpoint_id=tmp_path / "file" / "ckpt", no_dist=True)
    error = future.exception(timeout=60)
    assert isinstance(error, dcp.CheckpointException) and sorted(error.failures) == [0]
    assert isinstance(error.failures[0], OSError)


# ------------------------------------------------------------------------------ a rank failing early
class _Broken:
    """A Stateful whose state_dict() fails on rank 1."""

    def __init__(self, rank):
        self.rank = rank

    def state_dict(self):
        if self.rank == 1:
            raise RuntimeError("state_dict() failed here")
        return {"w": minidl.ones(4)}

    def load_state_dict(self, sd):
        pass


def _early_failure(rank, op, path):
    if op == "clash":   # two values flattened to one key, on rank 1 only
        sd = {"w": minidl.ones(4), "a": {"b": 1}, **({"a.b": 2} if rank == 1 else {})}
        return dcp.save(sd, checkpoint_id=path)
    sd = {"m": _Broken(rank)}
    if op == "save":
        return dcp.save(sd, checkpoint_id=path)
    if op == "load":
        return dcp.load(sd, checkpoint_id=path)
    return dcp.async_save(sd, checkpoint_id=path).result(timeout=60)


@pytest.mark.parametrize("op, words", [("save", "RuntimeError: state_dict() failed here"),
                                       ("load", "RuntimeError: state_dict() failed here"),
                                       ("async_save", "RuntimeError: state_dict() failed here"),
                                       ("clash", "ValueError: minidl.dist.checkpoint.save: two values of the "
                                                 "state dict are both named 'a.b'")])
def test_a_rank_failing_before_the_first_step_fails_every_rank(tmp_path, op, words):
    """Rank 1 fails in state_dict() or flattening, before any collective of its own, and stays alive (it
    waits for rank 0 to be done). Rank 0 hears of it in the first step: a CheckpointException naming rank 1,
    on both ranks, not a time-out of the collective rank 1 never joined (kept short here)."""
    if op == "load":
        dcp.save({"m": {"w": minidl.ones(4)}}, checkpoint_id=tmp_path, no_dist=True)
    rank_0_done = threading.Event()

    def fn(rank):
        try:
            return _early_failure(rank, op, tmp_path)
        except Exception as e:  # noqa: BLE001 -- the test inspects it
            return e
        finally:
            if rank == 0:
                rank_0_done.set()
            else:
                rank_0_done.wait(60)
    for e in sim.run(2, fn, timeout=5):
        assert isinstance(e, dcp.CheckpointException), repr(e)
        assert sorted(e.failures) == [1] and f"rank 1: {words}" in str(e)


# ---------------------------------------------------------------------------------------- torch's API
def test_local_slice_takes_numpy_integers(tmp_path):
    """Offsets and sizes computed with numpy are taken as ints (they go into the JSON metadata)."""
    a = np.arange(24.0).reshape(8, 3)
    size = np.array(a.shape)
    piece = dcp.LocalSlice(T(a[4:]), (np.int64(4), np.int32(0)), size)
    assert piece.offsets == (4, 0) and piece.global_size == (8, 3)
    assert all(type(n) is int for n in piece.offsets + piece.global_size)
    starts = np.array([0, 4])
    sim.run(2, lambda rank: dcp.save({"w": dcp.LocalSlice(T(a[starts[rank]:starts[rank] + 4]), (starts[rank], 0),
                                                         size)}, checkpoint_id=tmp_path))
    sd = {"w": minidl.zeros(8, 3, dtype=minidl.float64)}
    dcp.load(sd, checkpoint_id=tmp_path, no_dist=True)
    np.testing.assert_array_equal(sd["w"].numpy(), a)


def test_overwrite_warns_only_when_a_checkpoint_is_replaced(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dcp.save({"a": T([1.0])}, checkpoint_id=tmp_path, no_dist=True)
    with replacing():
        dcp.save({"a": T([2.0])}, storage_writer=dcp.FileSystemWriter(tmp_path, serialization_format=None),
                 no_dist=True)
    sd = {"a": minidl.zeros(1)}
    dcp.load(sd, checkpoint_id=tmp_path, no_dist=True)
    np.testing.assert_array_equal(sd["a"].numpy(), [2.0])


def test_a_file_left_by_an_earlier_save_that_cannot_be_removed_warns(tmp_path, monkeypatch):
    """The commit is done by then: the save succeeds, warning; the new checkpoint loads."""
    first = save_corruption_state(tmp_path)
    unlink = os.unlink

    def refused(name, *args, **kwargs):
        if first.save_id in os.fspath(name):
            raise PermissionError(13, "Permission denied", os.fspath(name))
        return unlink(name, *args, **kwargs)
    with monkeypatch.context() as m:
        m.setattr(os, "unlink", refused)
        with pytest.warns(UserWarning) as seen:
            second = save_corruption_state(tmp_path, scale=4.0)
    texts = [str(w.message) for w in seen]
    assert any("holds a checkpoint; this save replaces it" in t for t in texts)
    assert any(re.search(rf"could not remove __0_0\.{first.save_id}\.safetensors, left by an earlier save", t)
               for t in texts), texts
    assert {_FILE.match(n).group(3) for n in shard_files(tmp_path)} == {first.save_id, second.save_id}
    _loads_exactly(tmp_path, 4.0)


def test_metadata_index_is_torchs(tmp_path):
    """``MetadataIndex(fqn, offset=None, index=None)``; the index is a hint, not part of its identity."""
    assert dcp.MetadataIndex("a") == dcp.MetadataIndex("a", None, None)
    assert dcp.MetadataIndex("a").offset is None and dcp.MetadataIndex("a").index is None
    meta = dcp.save({"b": T(np.arange(3.0))}, checkpoint_id=tmp_path, no_dist=True)
    assert meta.storage_data[dcp.MetadataIndex("b", (0,), index=5)] == meta.storage_data[dcp.MetadataIndex("b", (0,))]
