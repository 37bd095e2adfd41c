"""examples/plan_gpt.py as a user runs it: the planner's table, then the best plan trained on 2 processes; the
table only; and a world size no plan can use (a tiny GPT, so that it stays quick)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--context", "8", "--width", "16", "--heads", "2", "--layers", "2", "--batch-size", "4"]


def _run(*args):
    return subprocess.run([sys.executable, str(ROOT / "examples" / "plan_gpt.py"), *args, *TINY],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)


def test_it_plans_then_trains_the_best_plan():
    done = _run("--world-size", "2", "--steps", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    table = done.stdout.split("best:")[0]
    for plan in ("ddp2", "zero2", "fsdp2", "tp2", "pp2 gpipe m2", "pp2 1f1b m4"):
        assert plan in table
    assert "step ms" in table and "peak MB" in table and "sent MB" in table
    assert "step   2  loss" in done.stdout


def test_no_run_prints_the_table_only_and_fixed_degrees_are_kept():
    done = _run("--world-size", "2", "--no-run", "--pp", "2", "--schedule", "1f1b")
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split()[0] for line in done.stdout.splitlines()[2:] if line.startswith("pp2")]
    assert rows and "ddp2" not in done.stdout.split("best:")[0] and "loss" not in done.stdout
    assert "best: Plan(pp2 1f1b" in done.stdout


def test_a_world_size_no_plan_can_use_is_a_clear_error():
    done = _run("--world-size", "3", "--pp", "1", "--no-run")
    assert done.returncode == 2
    assert "no plan uses 3 ranks" in done.stderr and "does not split over 3 data-parallel ranks" in done.stderr
    assert "tp3: child 1 (Layer)" in done.stderr and "Traceback" not in done.stderr
