"""benchmarks/plan.py stays runnable and honest: a quick run plans the tiny GPT on 2 processes, runs every plan it
ranks and finds the predicted bytes per rank equal to the measured ones, exactly (a property of the algorithms, not
of the machine: times and memory are reported, not asserted); its verdicts are computed as the README states."""
import importlib
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"


def test_a_quick_run_measures_every_ranked_plan(tmp_path):
    out = tmp_path / "plan.json"
    done = subprocess.run([sys.executable, str(BENCH / "plan.py"), "--quick", "--steps", "2", "--rounds", "1",
                           "--json", str(out)], capture_output=True, text=True, timeout=900, cwd=BENCH)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(out.read_text())
    names = [r["plan"] for r in found["rows"]]
    assert {"ddp2", "zero2", "fsdp2", "tp2", "pp2 gpipe m2", "pp2 1f1b m4"} <= set(names)
    assert found["verdict"]["bytes_exact"] and all(r["sent"] == r["sent_predicted"] for r in found["rows"])
    assert all(len(r["peak"]) == 2 and min(r["peak"]) > 0 for r in found["rows"])


def test_the_verdicts(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    bench = importlib.import_module("plan")

    def row(plan, predicted, measured, noise):
        return {"plan": plan, "predicted": predicted, "measured": measured, "noise": noise, "sent": [1],
                "sent_predicted": [1], "peak": [110], "peak_predicted": [100]}
    rows = [row("a", 1.0, 10.0, 0.5), row("b", 2.0, 12.0, 0.5), row("c", 3.0, 11.5, 0.5), row("d", 4.0, 30.0, 1)]
    verdict = bench.compare(rows)
    # resolved (differ by more than twice the larger noise): a-b, a-c, a-d, b-d, c-d; b-c (0.5 apart) is not
    assert verdict["resolved_pairs"] == 5 and verdict["in_order"] == 5 and verdict["out_of_order"] == []
    assert verdict["chosen"] == "a" and verdict["best_within"] == 0.0 and verdict["bytes_exact"]
    assert abs(verdict["memory_worst"] - 0.1) < 1e-12
    rows[0]["predicted"] = 5.0   # now predicted slower than b, c and d, though measured fastest
    verdict = bench.compare(rows)
    assert verdict["chosen"] == "b" and abs(verdict["best_within"] - 0.2) < 1e-12
    assert set(verdict["out_of_order"]) == {("a", "b"), ("a", "c"), ("a", "d")}
