"""benchmarks/fsdp.py stays runnable and honest: its predicted bytes count the GPT it trains, and a quick run on real
processes prints its tables with every layout training the same losses and FSDP holding 1/n of DDP's parameters,
gradients and AdamW state per rank (a property of sharding, not a speed)."""
import importlib
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))          # the script imports _gloo_ranks as a top-level module
    return importlib.import_module("fsdp")


def test_the_predictions_count_the_gpt(bench, monkeypatch):
    """DDP's prediction is 16 bytes (a float32 parameter, its gradient, two moments) per parameter of the GPT
    the benchmark builds; FSDP's 1/n of it; ZeRO's parameters and gradients whole, the moments 1/n."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    from char_gpt_tp import split_gpt
    size, vocab = bench.QUICK, 49
    model = split_gpt(vocab, size["context"], size["width"], size["heads"], size["layers"], 0.0)
    count = sum(p.numel() for p in model.parameters())   # (the tied head counted once, as parameters() does)
    ddp = bench.predicted("ddp", 2, size, vocab)
    assert ddp == (16 * count, 16 * count)
    for n in (2, 4):
        assert bench.predicted("fsdp", n, size, vocab)[0] == pytest.approx(16 * count / n)
        assert bench.predicted("torch-fsdp2", n, size, vocab) == bench.predicted("fsdp", n, size, vocab)
        assert bench.predicted("zero", n, size, vocab)[0] == pytest.approx(8 * count + 8 * count / n)
    assert bench.predicted("fsdp-tp", 4, size, vocab)[0] == pytest.approx(bench.predicted("tp", 2, size, vocab)[0] / 2)
    assert bench.predicted("dp-tp", 4, size, vocab) == bench.predicted("tp", 2, size, vocab)
    assert bench.predicted("fsdp", 2, size, vocab)[1] > bench.predicted("fsdp", 2, size, vocab)[0]


def _quick(tmp_path, *extra):
    out = subprocess.run([sys.executable, str(BENCH / "fsdp.py"), "--quick", "--json", str(tmp_path / "r.json"),
                          *extra], capture_output=True, text=True, timeout=300, check=True).stdout
    return out, json.loads((tmp_path / "r.json").read_text())


def test_a_quick_run_prints_its_tables_and_fsdp_holds_1_over_n(tmp_path):
    out, found = _quick(tmp_path, "--no-torch")
    assert out.startswith("## FSDP, ZeRO, DDP and TP") and "CPU: " in out and "ended " in out
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("| 2 |")]
    assert [r[1] for r in rows] == ["ddp", "zero", "fsdp", "tp"] * 2        # (the figures, then what else is held)
    assert all(len(r) == 13 for r in rows[:4]) and all(len(r) == 5 for r in rows[4:])
    jobs = {j["job"]: j["result"] for j in found["jobs"]}
    assert all(j["ranks"] == 2 and isinstance(j["result"], list) and len(j["result"]) == 2 for j in found["jobs"])
    losses = [x["loss"] for r in jobs.values() for x in r]
    assert max(losses) - min(losses) < 1e-4                               # every layout trains the same GPT
    state = {job: [x["params"] + x["grads"] + x["optim"] for x in r] for job, r in jobs.items()}
    for mine in state["fsdp"]:
        assert mine == pytest.approx(max(state["ddp"]) / 2, rel=0.02)     # (rows padded to equal shards: ~1/n)
    assert all(x["params"] == pytest.approx(max(y["params"] for y in jobs["ddp"]) / 2, rel=0.02)
               for x in jobs["fsdp"])
    for r in jobs.values():
        for x in r:
            assert x["time"] > 0 and x["before"] >= x["params"] + x["optim"] and x["peak"] >= x["before"]
            assert x["state_peak"] >= x["params"] + x["optim"] and x["garbage"] is not None
    assert "minidl FSDP at 2 ranks: holds" in out and "of DDP's" in out


def test_a_quick_run_of_torchs_fsdp2(bench, tmp_path):
    """torch's side: FSDP2 on gloo, its memory read from the profiler's trace; it too holds 1/n of what DDP would
    (the prediction for DDP, which the test above checks against the GPT's parameters)."""
    pytest.importorskip("torch")
    out, found = _quick(tmp_path, "--jobs", "torch-fsdp2")
    [job] = found["jobs"]
    assert job["job"] == "torch-fsdp2" and isinstance(job["result"], list)
    ddp = bench.predicted("ddp", 2, bench.QUICK, found["vocab"])[0]
    for x in job["result"]:
        assert x["params"] + x["grads"] + x["optim"] == pytest.approx(ddp / 2, rel=0.02)
        assert x["peak"] >= x["before"] > 0 and x["garbage"] is None
    assert "| 2 | torch-fsdp2 |" in out
