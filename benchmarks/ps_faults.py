"""The parameter server losing a worker, measured (issue 49). One command runs the three parts and prints
a markdown report:

    python benchmarks/ps_faults.py [--trials 5] [--quick]

(a) detection: 1 server and 3 workers over gloo (ranks started here with RANK, WORLD_SIZE, MASTER_ADDR and
    MASTER_PORT) push and pull under ASP; this launcher SIGKILLs worker 2 and notes the time; a survivor polls
    ``ps.stats()`` until the server lists the worker as lost. The delay is the server's "lost" ``at`` minus the
    kill time (the same machine's clock).
(b) accuracy: examples/wide_deep_ps.py and examples/ncf_ps.py, 1 server and 3 workers over gloo, run through
    once and once with ``--kill-worker-at`` at the middle of an epoch (same seeds and flags). ASP and SSP runs
    are not deterministic (pushes interleave by timing), so each difference includes that noise.
(c) throughput: 1 server and 1 worker; ``ps.push(...).wait()`` then ``ps.pull`` of a dense float32
    parameter, as operations per second, over links (gloo) and under mpiexec (MPI p2p), the same script.

Ranks started here run this file again, with PS_FAULTS_ROLE saying which part.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _gloo_ranks import ROOT, finish, start_ranks

SIZES = {"4 KiB": 1024, "64 KiB": 16384, "1 MiB": 262144}   # float32 elements


# ------------------------------------------------------------------------------------- the ranks
def rank_detect(ready):
    """A worker of part (a): push and pull until the server lost worker 2 (killed by the launcher)."""
    import minidl
    import minidl.dist as dist
    from minidl.dist import ps
    dist.init_process_group("gloo")
    if ps.init(num_servers=1, consistency="asp") == "server":
        return
    ps.register("w", minidl.zeros(1024), optimizer=ps.SGD(lr=0.01))
    me, step = ps.worker_rank(), 0
    while True:
        ps.push("w", minidl.ones(1024)).wait()
        ps.pull("w")
        ps.clock()
        step += 1
        if step == 20:
            Path(f"{ready}.{me}").touch()
        if me == 2:
            time.sleep(0.01)   # (the victim waits for its SIGKILL)
        elif step % 5 == 0 and step > 20 and ps.stats()["lost"]:
            break
    if me == 0:
        print("LOST " + json.dumps(ps.stats()["lost"]), flush=True)
    ps.barrier()
    ps.shutdown()
    dist.destroy_process_group()


def rank_throughput(rounds):
    """Part (c): worker 0 times push-then-pull rounds of each size against one server."""
    import minidl
    import minidl.dist as dist
    from minidl.dist import ps
    dist.init_process_group("gloo" if "MASTER_ADDR" in os.environ else None)
    if ps.init(num_servers=1, consistency="asp") == "server":
        return
    result = {}
    for label, n in SIZES.items():
        ps.register(label, minidl.zeros(n), optimizer=ps.SGD(lr=0.0))
        grad = minidl.ones(n)
        for _ in range(3):   # (warm-up)
            ps.push(label, grad).wait()
            ps.pull(label)
        began = time.perf_counter()
        for _ in range(rounds):
            ps.push(label, grad).wait()
            ps.pull(label)
        result[label] = 2 * rounds / (time.perf_counter() - began)
    print("OPS " + json.dumps(result), flush=True)
    ps.shutdown()
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------- the launcher
def detection_trial(folder, trial):
    """Seconds from worker 2's SIGKILL to the server's "lost" time, or None when the run failed."""
    ready = Path(folder) / f"ready{trial}"
    ranks = start_ranks([sys.executable, __file__], 4, folder, f"detect{trial}",
                        {"PS_FAULTS_ROLE": "detect", "PS_FAULTS_READY": str(ready)})
    deadline = time.monotonic() + 120
    while not all(Path(f"{ready}.{w}").exists() for w in range(3)):
        if time.monotonic() > deadline or any(p.poll() is not None for p, _ in ranks):
            finish(ranks, 0)
            return None
        time.sleep(0.01)
    killed = time.time()
    os.kill(ranks[2][0].pid, signal.SIGKILL)
    outs = finish(ranks, 60, spare={2})
    found = outs and re.search(r"LOST (.*)", outs[0])
    if not found:
        return None
    return json.loads(found.group(1))[0]["at"] - killed


def example_run(folder, script, args, tag):
    """The example's final line's metrics and its lost workers, or None when it failed."""
    ranks = start_ranks([sys.executable, str(ROOT / "examples" / script), *args], 4, folder, tag, {})
    outs = finish(ranks, 1200, spare={2})
    if not outs or "final " not in outs[0]:
        return None
    final = re.search(r"final (.*) \(", outs[0]).group(1)
    metrics = {k: float(v) for k, v in re.findall(r"([\w@]+) ([\d.]+)", final)}
    return metrics, re.search(r"lost workers: (.*)", outs[0]).group(1)


def throughput(folder, rounds, mpi):
    command = [sys.executable, __file__]
    if mpi:
        from minidl.dist.launch import find_mpiexec
        done = subprocess.run([find_mpiexec(), "-n", "2", *command], capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PYTHONPATH": str(ROOT), "PS_FAULTS_ROLE": "throughput",
                                   "PS_FAULTS_ROUNDS": str(rounds)})
        out = done.stdout + done.stderr
    else:
        outs = finish(start_ranks(command, 2, folder, "ops", {"PS_FAULTS_ROLE": "throughput",
                                                              "PS_FAULTS_ROUNDS": str(rounds)}), 600)
        out = outs[0] if outs else ""
    found = re.search(r"OPS (.*)", out)
    return json.loads(found.group(1)) if found else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5, help="(a): kills to time")
    parser.add_argument("--quick", action="store_true", help="small runs, to check the script")
    args = parser.parse_args()
    model = next((line.split(":", 1)[1].strip() for line in subprocess.run(["lscpu"], capture_output=True,
              text=True).stdout.splitlines() if line.startswith("Model name")), "unknown")
    print(f"machine: {model}, {os.cpu_count()} cores; load before: {os.getloadavg()[0]:.2f}\n")
    with tempfile.TemporaryDirectory() as folder:
        delays, failed = [], 0
        for trial in range(args.trials):
            delay = detection_trial(folder, trial)
            if delay is None:
                failed += 1
            else:
                delays.append(delay)
        shown = ", ".join(f"{d * 1000:.1f}" for d in delays)
        print("(a) SIGKILL of a worker to the server's drop (1 server, 3 workers, ASP, gloo)\n")
        print("| kills | median | max | trials (ms) | runs that failed |\n|---|---|---|---|---|")
        if delays:
            print(f"| {len(delays)} | {statistics.median(delays) * 1000:.1f} ms | {max(delays) * 1000:.1f} ms | "
                  f"{shown} | {failed} |\n")
        else:
            print(f"| 0 | - | - | - | {failed} |\n")

        common = ["--servers", "1", "--consistency", "asp"]
        cases = [("wide_deep_ps.py", "AUC", ["--epochs", "4"] if args.quick else [], 75, 10 if not args.quick else 4),
                 ("ncf_ps.py", "HR@10", ["--epochs", "2", "--per-user", "20"] if args.quick else
                  ["--epochs", "4", "--per-user", "20"], 0, 0)]
        print("(b) the examples, 1 server and 3 workers over gloo, ASP: run through twice (their difference is ASP's "
              "run-to-run noise) and once with worker 2 killed mid-epoch\n")
        print("| example | flags | run 1 | run 2 | killed at step | killed run | killed - run 1 | lost (server) |\n"
              "|---|---|---|---|---|---|---|---|")
        for script, metric, flags, per_epoch, epochs in cases:
            if per_epoch == 0:   # (NCF: an epoch's steps, from its size: users * (per-user - 1) * 5 / 256)
                per_user = int(flags[flags.index("--per-user") + 1])
                per_epoch, epochs = 600 * (per_user - 1) * 5 // 256, int(flags[flags.index("--epochs") + 1])
            at = per_epoch * (epochs // 2) + per_epoch // 2
            runs = [example_run(folder, script, common + flags + extra, tag)
                    for tag, extra in (("whole", []), ("again", []), ("cut", ["--kill-worker-at", str(at)]))]
            if None in runs:
                print(f"| {script} | {' '.join(flags) or 'defaults'} | a run failed: {runs} | | | | | |")
                continue
            (a, _), (again, _), (b, lost) = [(r[0][metric], r[1]) for r in runs]
            lost = re.sub(r" at [\d:.]+,|;.*", "", lost)
            print(f"| {script} | {' '.join(flags) or 'defaults'} | {metric} {a:.4f} | {again:.4f} | {at} | {b:.4f} | "
                  f"{b - a:+.4f} ({'within' if abs(b - a) <= 0.01 else 'beyond'} 0.01) | {lost}) |")

        rounds = 20 if args.quick else 300
        print("\n(c) push+pull operations per second, 1 worker and 1 server (dense float32)\n")
        print("| transport | " + " | ".join(SIZES) + " |\n|---|" + "---|" * len(SIZES))
        for name, mpi in (("links (gloo)", False), ("MPI (mpiexec -n 2)", True)):
            ops = throughput(folder, rounds, mpi)
            cells = [f"{ops[s]:.0f}/s ({ops[s] / 2 * SIZES[s] * 4 / 2 ** 20:.1f} MiB/s each way)" if ops else "failed"
                     for s in SIZES]
            print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"\nload after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    role = os.environ.get("PS_FAULTS_ROLE")
    if role == "detect":
        rank_detect(os.environ["PS_FAULTS_READY"])
    elif role == "throughput":
        rank_throughput(int(os.environ["PS_FAULTS_ROUNDS"]))
    else:
        main()
