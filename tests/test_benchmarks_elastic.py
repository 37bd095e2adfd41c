"""benchmarks/elastic.py stays runnable and honest: its reading of a job's stamps counts the steps redone and the
times from the kill as the definitions say (on stamps made up here), and a quick run on real processes under
the launcher prints its table with every job finished, no committed step redone in the job, and the restart
redoing exactly the commits since its last checkpoint."""
import importlib
import json
import pathlib
import re
import subprocess
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))          # the script imports _gloo_ranks as a top-level module
    return importlib.import_module("elastic")


def write(folder, pid, attempt, rank, stamps):
    with open(folder / f"events-{pid}.jsonl", "w") as f:
        for ev, t, extra in stamps:
            f.write(json.dumps({"ev": ev, "t": t, "attempt": attempt, "rank": rank, **extra}) + "\n")


def steps(first, last, world, t0, dt=0.1):
    """start/commit stamps of steps first..last at ``dt`` seconds each from ``t0``."""
    out = []
    for i, s in enumerate(range(first, last + 1)):
        out += [("start", t0 + i * dt, {"step": s, "world": world}),
                ("commit", t0 + i * dt + dt / 2, {"step": s, "world": world})]
    return out


def test_an_in_job_recovery_is_read_as_defined(bench, tmp_path):
    """3 workers, 6 steps; rank 2 dies at 10.0 in step 3; the survivors raise at 10.02, regroup at 10.2, sync at
    10.3 and commit step 3 again at 10.35: nothing committed is redone, the step under way is."""
    size = {"steps": 6}
    write(tmp_path, 12, 0, 2, [("begin", 0.0, {}), *steps(0, 2, 3, 9.5), ("start", 9.9, {"step": 3, "world": 3}),
                               ("fault", 10.0, {"do": "kill", "at": "all_reduce"})])
    for pid, rank in ((10, 0), (11, 1)):
        write(tmp_path, pid, 0, rank, [("begin", 0.0, {}), ("synced", 9.0, {"step": 0, "world": 3}),
                                       *steps(0, 2, 3, 9.5), ("start", 9.9, {"step": 3, "world": 3}),
                                       ("raised", 10.02, {"step": 3}), ("group", 10.2, {"world": 2}),
                                       ("synced", 10.3, {"step": 3, "world": 2}), *steps(3, 5, 2, 10.3),
                                       ("done", 11.0, {"step": 6})])
    rows = bench.analyse(tmp_path, bench.CASES[0], size, 0)
    assert rows["detect"] == pytest.approx([0.02, 0.02])
    assert rows["group"] == pytest.approx([0.2, 0.2]) and rows["synced"] == pytest.approx([0.3, 0.3])
    assert rows["first step"] == pytest.approx([0.35, 0.35])
    assert rows["committed redone"] == [0, 0] and rows["uncommitted redone"] == [1, 1]
    assert bench.analyse(tmp_path, bench.CASES[0], size, 1) == {"failed": "launcher exit 1, 1 fault stamp(s)"}


def test_a_restart_counts_the_commits_since_the_checkpoint(bench, tmp_path):
    """Killed in step 5 with a checkpoint of 4 commits: the restarted job begins at step 4, so step 4 (committed)
    and step 5 (under way) are redone."""
    size = {"steps": 8}
    write(tmp_path, 12, 0, 2, [*steps(0, 4, 3, 1.0), ("fault", 10.0, {"do": "kill", "at": "all_reduce"})])
    for pid, rank in ((10, 0), (11, 1)):
        write(tmp_path, pid, 0, rank, [*steps(0, 4, 3, 1.0), ("start", 9.9, {"step": 5, "world": 3}),
                                       ("raised", 10.01, {"step": 5}), ("refused", 10.1, {"error": "..."})])
    for pid, rank in ((20, 0), (21, 1), (22, 2)):
        write(tmp_path, pid, 1, rank, [("begin", 10.5, {}), ("synced", 12.0, {"step": 4, "world": 3}),
                                       *steps(4, 7, 3, 12.0), ("done", 13.0, {"step": 8})])
    rows = bench.analyse(tmp_path, bench.CASES[2], size, 0)
    assert rows["refused"] == pytest.approx([0.1, 0.1]) and rows["begin"] == pytest.approx([0.5] * 3)
    assert rows["synced"] == pytest.approx([2.0] * 3) and rows["first step"] == pytest.approx([2.05] * 3)
    assert rows["committed redone"] == [1, 1] and rows["uncommitted redone"] == [1, 1]


def test_a_quick_run_prints_its_table(bench):
    out = subprocess.run([sys.executable, str(BENCH / "elastic.py"), "--quick"], capture_output=True, text=True,
                         timeout=300, check=True).stdout
    assert re.search(r"machine at the start: .+, \d+ cores, 1-minute load average", out) and "at the end:" in out
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in out.splitlines()
            if line.startswith("| ") and "---" not in line}
    assert [c.rstrip(" |") for c in rows["jobs that finished / failed"]] == ["1 / 0"] * 3, out
    size = bench.SIZES["quick"]
    redone = [c.rstrip(" |") for c in rows["committed steps redone"]]
    assert redone == ["0 (0-0)", "0 (0-0)", f"{size['kill_step'] % size['save_every']} "
                      f"({size['kill_step'] % size['save_every']}-{size['kill_step'] % size['save_every']})"], out
    assert [c.rstrip(" |") for c in rows["uncommitted steps redone"]] == ["1 (1-1)"] * 3, out
    assert "no committed step was redone in the job" in out
