"""benchmarks/dcp.py stays runnable and honest: its boxes tile every tensor, each library's state (whole, row- and
column-split) saves and loads back the same numbers, and a quick run on real processes prints its tables with
every load checked and the bytes read per rank set against the bytes its boxes need."""
import importlib
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

BENCH = pathlib.Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))          # the script imports _gloo_ranks as a top-level module
    return importlib.import_module("dcp")


@pytest.mark.parametrize("split, parts", [("rows", 4), ("rows", 2), ("cols", 2), ("whole", 1)])
def test_the_boxes_tile_each_tensor(bench, split, parts):
    a = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    pieces = [bench.part_of(a, *bench.box(a.shape, split, parts, i)) for i in range(parts)]
    expected = np.array_split(a, parts, axis=1 if split == "cols" else 0)
    assert all(np.array_equal(p, e) for p, e in zip(pieces, expected))
    numbers = {"w": a, "v": a[:4]}
    assert sum(bench.held_bytes(numbers, split, parts, i) for i in range(parts)) == a.nbytes + a[:4].nbytes


@pytest.mark.parametrize("lib", ["minidl", "torch"])
def test_each_state_round_trips_on_a_world_of_one(bench, lib, monkeypatch, tmp_path):
    """The benchmark's own save, load and check, on one rank of a real process group (a DTensor mesh for torch)."""
    if lib == "torch":
        pytest.importorskip("torch")
    from _gloo_ranks import free_port
    for k, v in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}.items():
        monkeypatch.setenv(k, v)
    numbers = bench.arrays((8, 4))
    ranks = bench.Lib(lib, True)
    try:
        for split in ("whole", "rows", "cols"):
            ranks.save(ranks.state(numbers, split, zeros=False), tmp_path / split)
            target = ranks.state(numbers, split, zeros=True)
            assert not bench.matches(ranks, target, numbers, split)
            read = ranks.load(target, tmp_path / split)
            assert bench.matches(ranks, target, numbers, split)
            if lib == "minidl":   # (one rank needs every byte: the data plus the file's header)
                assert read >= bench.held_bytes(numbers, split, 1, 0)
    finally:
        ranks.close()


def test_a_quick_run_prints_checked_tables(bench):
    """4 ranks as processes (minidl only: torch's import is slow on a small machine; the test above covers its
    states), then 2, then 1."""
    out = subprocess.run([sys.executable, str(BENCH / "dcp.py"), "--quick", "--no-torch"], capture_output=True,
                         text=True, timeout=300, check=True).stdout
    assert "Model name" not in out and re.search(r"machine at the start: .+, \d+ cores, 1-minute load", out)
    assert "page cache" in out and "at the end:" in out
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    throughput = [r for r in rows if r[0] in ("| replicated", "| row-split")]
    assert [(r[0][2:], r[1]) for r in throughput] == [(s, lib) for s in ("replicated", "row-split")
                                                     for lib in ("minidl", "numpy")]
    assert all(r[9] == "ok" for r in throughput)
    assert all(float(r[5]) == pytest.approx(bench.LAYERS * 3 * 512 * 512 * 4 / 4 / 1e6, abs=0.1) for r in throughput)
    reshard = {(r[1], r[2]): r for r in rows if r[0] == "| minidl"}
    assert set(reshard) == {("2 ranks", "rows"), ("2 ranks", "cols"), ("1 process (no_dist)", "whole")}
    assert all(r[7] == "ok |" for r in reshard.values())
    state_mb = bench.LAYERS * 3 * 512 * 512 * 4 / 1e6
    assert float(reshard[("2 ranks", "rows")][5]) == pytest.approx(state_mb / 2, abs=0.1)
    assert float(reshard[("1 process (no_dist)", "whole")][5]) == pytest.approx(state_mb, abs=0.1)
    # whole rows and whole tensors are read with nothing more; a column half at most the whole of each file
    assert reshard[("2 ranks", "rows")][6] == reshard[("1 process (no_dist)", "whole")][6] == "1.00-1.00"
    assert all(1.0 <= float(x) <= 2.01 for x in reshard[("2 ranks", "cols")][6].split("-"))
