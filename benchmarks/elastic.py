"""Elastic data-parallel training losing a worker, measured (issue 52): time to detect, to recover in the job
and by restart, and the steps redone. One command runs the cases and prints a markdown report:

    python benchmarks/elastic.py [--repeats 5] [--quick]

Each run is ``python -m minidl.dist.run --nproc-per-node 3`` on ``_elastic_worker.py``: an MLP (256-1024-1024-10,
float32, 5.3 MB; --quick: 256-32-32-10) trained by DDP under ``minidl.dist.elastic``, a global batch of 48, a
commit after every step. Rank 2 fails at the start of its first all-reduce of step K (``MINIDL_FAULT``):

- in the job: SIGKILLed; the two survivors' collectives raise, they meet in a new round on the launcher's store,
  roll back to the commit of step K-1, start a group of 2, sync the state and go on;
- frozen: SIGSTOPped, with ``MINIDL_DIST_HEARTBEAT=2`` and ``MINIDL_ELASTIC_DEAD_SECONDS=2``: the survivors find
  it silent after the heartbeat, and the round leaves it out once its membership beats are 2 s old;
- by restart: SIGKILLed with ``MINIDL_ELASTIC_MIN_WORKERS=3`` (no round of 2 may go on) and ``--max-restarts 1``;
  ``State(checkpoint_dir=..., save_every=M)`` saves a distributed checkpoint every M commits; the launcher
  restarts 3 workers, which resume from the newest checkpoint.

Every time is measured from the victim's own last stamp (taken as its fault fires, just before the SIGKILL
or SIGSTOP; all processes share this machine's clock) to each survivor's (or restarted worker's) stamps:
pooled over the workers and repeats, median and range. Steps redone: committed (steps this worker had
committed and trained again: 0 is the promise of the in-job recovery) and uncommitted (the step under way at
the failure, begun again).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _bench_common import cpu_model
from _gloo_ranks import ROOT, free_port

WORKER = Path(__file__).with_name("_elastic_worker.py")
WORKERS, VICTIM = 3, 2
HANG_SECONDS = 180   # a job still going after this long is a hang: ended, and counted as a failed run
SIZES = {"full": dict(hidden=1024, steps=60, kill_step=23, save_every=10),
         "quick": dict(hidden=32, steps=10, kill_step=5, save_every=4)}
CASES = ("in the job (SIGKILL)", "frozen (SIGSTOP, heartbeat 2 s)", "by restart (SIGKILL, min 3 workers)")


def machine_line(when: str) -> str:
    return f"{when}: {cpu_model()}, {os.cpu_count()} cores, 1-minute load average {os.getloadavg()[0]:.2f}"


def launch(folder: Path, case: str, size: dict, at: int) -> tuple:
    """Run one job of ``case`` (results into ``folder``): (the launcher's exit code or None on a hang, its output)."""
    folder.mkdir()
    restart = case.startswith("by restart")
    fault = f"rank={VICTIM} at=all_reduce:{at} do={'stop' if case.startswith('frozen') else 'kill'} restart=0"
    env = dict(os.environ, PYTHONPATH=str(ROOT), OUT=str(folder), STEPS=str(size["steps"]),
               HIDDEN=str(size["hidden"]), MINIDL_FAULT=fault)
    if case.startswith("frozen"):
        env["MINIDL_DIST_HEARTBEAT"] = env["MINIDL_ELASTIC_DEAD_SECONDS"] = "2"
    if restart:
        env.update(MINIDL_ELASTIC_MIN_WORKERS=str(WORKERS), CKPT=str(folder / "ckpt"),
                   SAVE_EVERY=str(size["save_every"]))
    command = [sys.executable, "-m", "minidl.dist.run", "--rdzv-backend", "static", "--master-port",
               str(free_port()), "--rdzv-id", f"elastic-bench-{folder.name}", "--nproc-per-node", str(WORKERS),
               *(["--max-restarts", "1"] if restart else []), str(WORKER)]
    with open(folder / "launcher.out", "w+") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            code = proc.wait(timeout=HANG_SECONDS)
        except subprocess.TimeoutExpired:
            code = None
            end_hung(proc, folder)
        out.seek(0)
        return code, out.read()


def end_hung(proc, folder: Path) -> None:
    """End a hung launcher (SIGTERM: it stops its workers) and then any worker of this job still alive."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for pid in events(folder):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                ours = WORKER.name.encode() in f.read()
        except OSError:
            continue
        if ours:
            os.kill(pid, signal.SIGKILL)


def events(folder: Path) -> dict:
    """pid -> that worker's stamps, in order."""
    return {int(p.stem.split("-")[1]): [json.loads(line) for line in p.read_text().splitlines() if line]
            for p in folder.glob("events-*.jsonl")}


def first(stamps, name, after=float("-inf")):
    return next((e for e in stamps if e["ev"] == name and e["t"] > after), None)


def step_time(stamps, world) -> list:
    """Seconds between consecutive commits at this world size."""
    t = [e["t"] for e in stamps if e["ev"] == "commit" and e["world"] == world]
    return [b - a for a, b in zip(t, t[1:])]


def analyse(folder: Path, case: str, size: dict, code) -> dict:
    """The figures of one job ({row: [values]}), or a reason it failed ({"failed": text})."""
    found = events(folder)
    victims = [e for stamps in found.values() for e in stamps if e["ev"] == "fault"]
    if code != 0 or len(victims) != 1:
        return {"failed": f"launcher exit {code}, {len(victims)} fault stamp(s)"}
    kill = victims[0]["t"]
    first_try = [s for s in found.values() if s[0]["attempt"] == 0 and first(s, "raised")]
    if len(first_try) != WORKERS - 1:
        return {"failed": f"{len(first_try)} survivor(s)' collective raised"}
    rows = {name: [] for name in ("detect", "group", "refused", "begin", "synced", "first step",
                                  "committed redone", "uncommitted redone", "step 3", "step after")}
    for stamps in found.values():
        rows["step 3"] += step_time([e for e in stamps if e["t"] < kill], 3)
    for stamps in first_try:
        raised = first(stamps, "raised")
        rows["detect"].append(raised["t"] - kill)
        before = [e for e in stamps if e["t"] <= raised["t"]]
        committed = {e["step"] for e in before if e["ev"] == "commit"}
        begun = {e["step"] for e in before if e["ev"] == "start"} - committed
        if case.startswith("by restart"):
            refused = first(stamps, "refused", raised["t"])
            if refused is None:
                return {"failed": "a survivor went on below the minimum"}
            rows["refused"].append(refused["t"] - kill)
            later = [s for s in found.values() if s[0]["attempt"] == 1]
        else:
            group, synced = first(stamps, "group", raised["t"]), first(stamps, "synced", raised["t"])
            if group is None or synced is None or first(stamps, "done") is None:
                return {"failed": "a survivor did not recover"}
            rows["group"].append(group["t"] - kill)
            later = [[e for e in stamps if e["t"] >= synced["t"]]]
        if len(later) != (WORKERS if case.startswith("by restart") else 1):
            return {"failed": f"{len(later)} restarted worker(s)"}
        again = {e["step"] for s in later for e in s if e["ev"] == "start"}
        rows["committed redone"].append(len(committed & again))
        rows["uncommitted redone"].append(len(begun & again))
    for stamps in later if case.startswith("by restart") else first_try:
        synced = first(stamps, "synced", kill)
        step = first(stamps, "commit", synced["t"])
        done = first(stamps, "done")
        if done is None or done["step"] != size["steps"] or step is None:
            return {"failed": "a worker did not finish every step"}
        if case.startswith("by restart"):
            rows["begin"].append(first(stamps, "begin")["t"] - kill)
        rows["synced"].append(synced["t"] - kill)
        rows["first step"].append(step["t"] - kill)
        rows["step after"] += step_time([e for e in stamps if e["t"] > step["t"]], 2 if not
                                        case.startswith("by restart") else 3)
    return rows


def cell(values, unit="s") -> str:
    if not values:
        return "-"
    med, low, high = statistics.median(values), min(values), max(values)
    if unit == "steps":
        return f"{med:g} ({low:g}-{high:g})"
    scale, unit = (1000, "ms") if high < 1 else (1, "s")
    digits = 0 if unit == "ms" else 2
    return f"{med * scale:.{digits}f} ({low * scale:.{digits}f}-{high * scale:.{digits}f}) {unit}"


ROWS = [("detect", "the survivors' collective raised (detect)", "s"),
        ("group", "the new group of 2 was up", "s"),
        ("refused", "the survivors gave up (round of 2 refused)", "s"),
        ("begin", "the restarted workers' processes began", "s"),
        ("synced", "the state was synced (recovered: in the job, the commit; restarted, the checkpoint)", "s"),
        ("first step", "the first step after it was committed", "s"),
        ("committed redone", "committed steps redone", "steps"),
        ("uncommitted redone", "uncommitted steps redone", "steps"),
        ("step 3", "step time before, 3 workers (for scale)", "s"),
        ("step after", "step time after (2 workers; restarted: 3)", "s")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="jobs per case")
    parser.add_argument("--quick", action="store_true", help="a tiny model, few steps, one job per case")
    args = parser.parse_args()
    size, repeats = (SIZES["quick"], 1) if args.quick else (SIZES["full"], args.repeats)
    sys.path.insert(0, str(WORKER.parent))
    from _elastic_worker import all_reduces_per_step
    per_step = all_reduces_per_step(size["hidden"])
    at = size["kill_step"] * per_step + 1   # (the all-reduce of step K's first bucket; steps count from 0)
    print(machine_line("machine at the start"))
    print(f"{WORKERS} workers under python -m minidl.dist.run (gloo: the socket transport), MLP 256-{size['hidden']}-"
          f"{size['hidden']}-10 float32 ({per_step} DDP bucket(s) a step), global batch 48, a commit every step; "
          f"rank {VICTIM} fails at the start of step {size['kill_step']}'s first all-reduce of {size['steps']} "
          f"steps; restart case: a checkpoint every {size['save_every']} commits; {repeats} job(s) per case\n")
    results = {case: [] for case in CASES}
    failures = {case: [] for case in CASES}
    with tempfile.TemporaryDirectory(prefix="elastic-bench-") as tmp:
        for r in range(repeats):
            for c, case in enumerate(CASES):   # (cases interleaved: a slow spell of the machine hits all alike)
                folder = Path(tmp) / f"r{r}c{c}"
                code, text = launch(folder, case, size, at)
                found = analyse(folder, case, size, code)
                if "failed" in found:
                    failures[case].append(found["failed"])
                    print(f"{case}, job {r}: failed: {found['failed']}\n{text[-3000:]}", file=sys.stderr)
                else:
                    results[case].append(found)
    print("From the victim's last stamp (its fault firing) to: median (min-max) over every survivor, or "
          "restarted worker, of every job\n")
    print("| from the kill to | " + " | ".join(CASES) + " |\n|---|" + "---|" * len(CASES))
    for key, label, unit in ROWS:
        cells = [cell([v for job in results[case] for v in job[key]], unit) for case in CASES]
        if any(c != "-" for c in cells):
            print(f"| {label} | " + " | ".join(cells) + " |")
    print("| jobs that finished / failed | " + " | ".join(
        f"{len(results[case])} / {len(failures[case])}" for case in CASES) + " |")
    for case in CASES:
        if failures[case]:
            print(f"\n{case}: failed jobs: {'; '.join(failures[case])}")
    lost = [case for case in CASES[:2] for job in results[case] if any(job["committed redone"])]
    print("\nno committed step was redone in the job" if not lost else
          f"\n**committed steps were redone in the job**: {lost}")
    print("\n" + machine_line("at the end"))


if __name__ == "__main__":
    main()
