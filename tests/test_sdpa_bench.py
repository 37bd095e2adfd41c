"""benchmarks/sdpa.py stays runnable and honest: its three columns (minidl fused, minidl unfused, torch) compute the
same attention and gradients, the fused column runs the fused kernel and the unfused one does not, and a quick run
on a tiny length prints its tables."""
import importlib
import json
import pathlib

import pytest

import minidl
from test_sdpa_fused import count_calls

torch = pytest.importorskip("torch")
BENCH = pathlib.Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))          # the scripts import their shared module as a top-level one
    threads = minidl.get_num_threads(), torch.get_num_threads()
    yield importlib.import_module("sdpa")
    minidl.set_num_threads(threads[0])               # (the script sets both libraries' threads)
    torch.set_num_threads(threads[1])


@pytest.mark.parametrize("causal", [False, True])
def test_the_columns_agree_with_torch(bench, causal):
    worst = bench.check({"minidl": minidl, "torch": torch}, 37, causal)
    assert set(worst) == {"fused", "unfused", "torch"}
    assert worst["fused"] <= 1e-5 and worst["unfused"] <= 1e-5


def test_each_minidl_column_runs_its_path(bench, monkeypatch):
    calls = count_calls(monkeypatch, "cpu")
    bench.build("unfused", minidl, 16, False, batch=1)[0]()
    assert calls == {"attention": 0, "attention_backward": 0}
    bench.build("fused", minidl, 16, False, batch=1)[0]()
    assert calls == {"attention": 1, "attention_backward": 1}


@pytest.mark.parametrize("column", ["fused", "torch"])
def test_the_memory_child_reports_its_peak(bench, monkeypatch, capsys, column):
    monkeypatch.setattr(bench, "BATCH", 1)
    bench.main(["--mem-child", column, "32", "1", "1"])
    peak = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert peak["working"] >= 0 and peak["rss_built"] > 0


def test_a_quick_run_prints_the_tables(bench, monkeypatch, capsys):
    monkeypatch.setattr(bench, "BATCH", 1)
    bench.main(["--quick", "--lengths", "16", "--threads", "1", "--no-memory"])
    out = capsys.readouterr().out
    assert "| T | steps/round | fused ms | unfused ms | torch ms | fused / torch | fused / unfused |" in out
    assert "\n| 16 | 1 | " in out and "CPU: " in out and "torch 2." in out
