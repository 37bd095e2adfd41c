"""A parameter server that survives its SIGKILL, measured (issue 50). Each part is one short command
printing a markdown report, all ranks over gloo (started here with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT):

    python benchmarks/ps_recovery.py --part durable|outage|examples|ncf-asp|replicate [--quick]

durable:  what ``durable=True`` costs a push: 1 server and 1 or 2 workers under ASP push a dense float32
          parameter of 1 K, 64 K and 1 M elements, ``push().wait()`` each (and all at once, then waited),
          with no checkpoints, and durable with the checkpoint dir on tmpfs (/dev/shm) and on the work disk;
          beside the raw cost of write + fdatasync on both.
outage:   1 server, 1 worker pushing and pulling under ASP (durable); this launcher SIGKILLs the server
          at a known time, waits 1 s and starts ``python -m minidl.dist.ps --resume``. Detection is the
          worker's "is gone" log time minus the kill; resuming, from the restart's start to the worker's
          first step done after it, is split into process start, the server's own restore time and reconnect.
examples: examples/ncf_ps.py and examples/wide_deep_ps.py (1 server, 2 workers, --durable, ASP and BSP)
          run through, and once with --kill-server-at at half the run and the server restarted 1 s later.
ncf-asp:  the same for NCF under ASP only, on the example's 600 generated users (1 epoch), where ASP's own
          run-to-run noise is small enough to judge a restart by.
replicate: what ``replicate=True`` costs a push (1 worker, 2 servers, the sizes of part durable), and a
          failover: server 1 SIGKILLed by this launcher, its backup serving its range; how long the
          worker's steps stopped, and when the backup said so.

Ranks started here run this file again, with PS_RECOVERY_ROLE saying which part.
"""
from __future__ import annotations

import argparse
import json
import logging
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

SIZES = {"1 K": 1 << 10, "64 K": 1 << 16, "1 M": 1 << 20}   # float32 elements
PLACES = {"tmpfs": "/dev/shm", "work disk": tempfile.gettempdir()}


# ------------------------------------------------------------------------------------- the ranks
def rank_push(setting):
    """Part durable: each worker times ``setting["n"][size]`` pushes of each size, one by one, then pipelined."""
    import minidl
    import minidl.dist as dist
    from minidl.dist import ps
    dist.init_process_group("gloo")
    keep = {} if setting["dir"] is None else {"checkpoint_dir": setting["dir"], "durable": True,
                                             "checkpoint_seconds": 3600.0}   # (no periodic checkpoint while timed)
    if ps.init(num_servers=setting.get("servers", 1), consistency="asp", replicate=setting.get("replicate", False),
               **keep) == "server":
        return
    result = {}
    for label, n in SIZES.items():
        ps.register(label, minidl.zeros(n), optimizer=ps.SGD(lr=0.0))
        grad, count = minidl.ones(n), setting["n"][label]
        for _ in range(3):   # (warm-up)
            ps.push(label, grad).wait()
        ps.barrier()
        began = time.perf_counter()
        for _ in range(count):
            ps.push(label, grad).wait()
        one = time.perf_counter() - began
        ps.barrier()
        began = time.perf_counter()
        for work in [ps.push(label, grad) for _ in range(count)]:
            work.wait()
        result[label] = [one / count, (time.perf_counter() - began) / count]
        ps.barrier()
    print("PUSH " + json.dumps(result), flush=True)
    ps.shutdown()
    dist.destroy_process_group()


def rank_outage(setting):
    """Part outage: the worker steps (push, pull) until a step spans the outage, then 10 more; it reports when
    each step ended around it. Its log lines carry their time."""
    import minidl
    import minidl.dist as dist
    from minidl.dist import ps
    logging.basicConfig(level=logging.WARNING, format="%(created).6f %(message)s")
    dist.init_process_group("gloo")
    if ps.init(num_servers=1, consistency="asp", checkpoint_dir=setting["dir"], durable=True,
               checkpoint_every=50) == "server":
        return
    rows = setting["rows"]
    if rows:   # (NCF's NeuMF tables at MovieLens-20M's size, row-sharded, Adam on the server)
        names = []
        for name, count, dim in (("gmf_user", rows[0], 8), ("gmf_item", rows[1], 8), ("mlp_user", rows[0], 32),
                                 ("mlp_item", rows[1], 32)):
            ps.register_embedding(name, count, dim, optimizer=ps.Adam(lr=1e-3))
            names.append((name, count, dim))
    else:
        ps.register("w", minidl.zeros(1024), optimizer=ps.Adam(lr=1e-3))
    gen = minidl.Generator().manual_seed(0)

    def step():
        if not rows:
            ps.pull("w")
            ps.push("w", minidl.ones(1024)).wait()
            return
        works = []
        for name, count, dim in names:
            ids = minidl.randint(0, count, (256,), generator=gen)
            ps.pull(name, rows=ids)
            works.append(ps.push(name, minidl.ones(256, dim), rows=ids))
        for w in works:
            w.wait()
    for i in range(20):
        step()
    Path(setting["ready"]).touch()
    ends, back = [time.time()], None
    while back is None or len(ends) < back + 10:
        step()
        ends.append(time.time())
        if back is None and ends[-1] - ends[-2] > 0.5:
            back = len(ends) - 1
    print("OUTAGE " + json.dumps({"back": ends[back], "before": ends[back - 1]}), flush=True)
    ps.shutdown()
    dist.destroy_process_group()


def rank_failover(setting):
    """Part replicate: the worker steps (pull, push) until the launcher's "done" file exists, then 5 more,
    and reports when each step ended; the servers' log lines carry their time."""
    import minidl
    import minidl.dist as dist
    from minidl.dist import ps
    logging.basicConfig(level=logging.WARNING, format="%(created).6f %(message)s")
    dist.init_process_group("gloo")
    if ps.init(num_servers=2, consistency="asp", replicate=True) == "server":
        return
    ps.register("w", minidl.zeros(1024), optimizer=ps.Adam(lr=1e-3))
    ends, last = [], None
    while last is None or len(ends) < last:
        if len(ends) == 20:
            Path(setting["ready"]).touch()
        ps.pull("w")
        ps.push("w", minidl.ones(1024)).wait()
        ends.append(time.time())
        if last is None and Path(setting["done"]).exists():
            last = len(ends) + 5
    print("FAILOVER " + json.dumps(ends), flush=True)
    ps.shutdown()
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------- the launcher
def restart(folder, checkpoint_dir, tag):
    """``python -m minidl.dist.ps --resume checkpoint_dir --server 0``: (process, output file, start time)."""
    out = open(Path(folder) / f"{tag}.out", "w+")
    began = time.time()
    p = subprocess.Popen([sys.executable, "-m", "minidl.dist.ps", "--resume", str(checkpoint_dir), "--server", "0"],
                         cwd=folder, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    return p, out, began


WAIT = {"MINIDL_PS_SERVER_TIMEOUT": "60"}   # (a worker whose server is not restarted fails in a minute, not 5)


def role(name, setting):
    return {"PS_RECOVERY_ROLE": name, "PS_RECOVERY_SETTING": json.dumps(setting), **WAIT}


def fdatasync_cost(folder, size, count):
    """Seconds per write of ``size`` bytes then fdatasync, in a file under ``folder``."""
    path = Path(folder) / f"ps-recovery-probe-{os.getpid()}"
    block = os.urandom(size)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        began = time.perf_counter()
        for _ in range(count):
            os.write(fd, block)
            os.fdatasync(fd)
        return (time.perf_counter() - began) / count
    finally:
        os.close(fd)
        path.unlink()


def part_durable(folder, quick):
    print("raw write + fdatasync, one file (appending)\n\n| where | 4 KiB | 4 MiB |\n|---|---|---|")
    for where, place in PLACES.items():
        small, large = fdatasync_cost(place, 4096, 20 if quick else 200), fdatasync_cost(place, 4 << 20, 3 if quick
                                                                                          else 20)
        print(f"| {where} ({place}) | {small * 1e6:.0f} µs | {large * 1e3:.1f} ms |")
    counts = {label: (10 if quick else n) for label, n in zip(SIZES, (400, 200, 30))}
    print("\npush().wait() one by one (pipelined: all pushed, then waited): µs per push, and pushes/s over the "
          "workers\n\n| workers | checkpoints | " + " | ".join(SIZES) + " |\n|---|---|" + "---|" * len(SIZES))
    for workers in (1, 2):
        for label, where in (("off", None), ("durable, tmpfs", "tmpfs"), ("durable, work disk", "work disk")):
            ck = None if where is None else tempfile.mkdtemp(prefix="ps-recovery-", dir=PLACES[where])
            setting = {"dir": ck, "n": counts}
            outs = finish(start_ranks([sys.executable, __file__], workers + 1, folder, f"push{workers}{where}",
                                      role("push", setting)), 170)
            if ck:
                subprocess.run(["rm", "-rf", ck])
            found = [json.loads(m.group(1)) for m in (re.search(r"PUSH (.*)", o) for o in outs or []) if m]
            if len(found) != workers:
                print(f"| {workers} | {label} | failed |")
                continue
            cells = []
            for size in SIZES:
                one, piped = (statistics.mean(f[size][i] for f in found) for i in (0, 1))
                cells.append(f"{one * 1e6:.0f} µs, {workers / one:.0f}/s (pipelined {piped * 1e6:.0f} µs, "
                             f"{workers / piped:.0f}/s)")
            print(f"| {workers} | {label} | " + " | ".join(cells) + " |")


def outage_trial(folder, rows, trial):
    """One kill and restart: the times of its events, or a string saying what failed."""
    ck, ready = Path(folder) / f"ck-outage{trial}", Path(folder) / f"ready-outage{trial}"
    setting = {"dir": str(ck), "rows": rows, "ready": str(ready)}
    ranks = start_ranks([sys.executable, __file__], 2, folder, f"outage{trial}", role("outage", setting))
    server = None
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            if time.monotonic() > deadline or any(p.poll() is not None for p, _ in ranks):
                finish(ranks, 0)
                return "the job failed before the kill"
            time.sleep(0.01)
        killed = time.time()
        os.kill(ranks[1][0].pid, signal.SIGKILL)
        time.sleep(1.0)
        server = restart(folder, ck, f"restarted{trial}")
        line = None
        while line is None and time.time() - server[2] < 120 and server[0].poll() is None:
            text = server[1].seek(0) or server[1].read()
            if "restarted from checkpoint" in text:
                line = time.time()
            time.sleep(0.005)
        outs = finish(ranks, 120, spare={1})
    finally:
        if server is not None:
            finish([server[:2]], 30)
    if outs is None or line is None or "OUTAGE " not in outs[0]:
        return "the restart failed"
    gone = float(re.search(r"(\d+\.\d+) ps worker \d: parameter server 0 .* is gone", outs[0]).group(1))
    restore = float(re.search(r"restarted from checkpoint \d+ and \d+ logged request\(s\) in ([\d.]+) s",
                              Path(server[1].name).read_text()).group(1))
    found = json.loads(re.search(r"OUTAGE (.*)", outs[0]).group(1))
    return {"detect": gone - killed, "start": line - server[2] - restore, "restore": restore,
            "reconnect": found["back"] - line, "resume": found["back"] - server[2],
            "size": sum(p.stat().st_size for p in ck.rglob("checkpoint-*.safetensors"))}


def part_outage(folder, quick):
    trials = 1 if quick else 3
    ml20m = [138493, 26744]   # (MovieLens-20M's users and items)
    print("server SIGKILLed by the launcher, restarted 1 s later; medians (and max) of "
          f"{trials} trials\n\n| model | checkpoint | detect | process start | restore | reconnect | resume "
          "(start to first step) |\n|---|---|---|---|---|---|---|")
    for name, rows in (("1 K dense, Adam", None), ("NeuMF tables of ML-20M (6.6 M floats), Adam", ml20m)):
        runs = [outage_trial(folder, rows, f"{bool(rows):d}{t}") for t in range(trials)]
        good = [r for r in runs if isinstance(r, dict)]
        if not good:
            print(f"| {name} | failed: {runs} | | | | | |")
            continue

        def cell(key, unit=1e3):
            values = [r[key] for r in good]
            return f"{statistics.median(values) * unit:.0f} ms (max {max(values) * unit:.0f})"
        size = max(r["size"] for r in good) / 2 ** 20
        print(f"| {name} | {size:.1f} MiB | {cell('detect')} | {cell('start')} | {cell('restore')} | "
              f"{cell('reconnect')} | {cell('resume')} |" + (f" ({len(runs) - len(good)} failed)" if
                                                             len(good) < len(runs) else ""))


def example_run(folder, script, flags, tag, kill_at=None):
    """The example's final metrics, its total time and the restart's line (or None), or a string saying what
    failed."""
    ck = Path(folder) / f"ck-{tag}"
    extra = ["--checkpoint-dir", str(ck)] + ([] if kill_at is None else ["--kill-server-at", str(kill_at)])
    began = time.time()
    ranks = start_ranks([sys.executable, str(ROOT / "examples" / script), *flags, *extra], 3, folder, tag, WAIT)
    served = None
    try:
        if kill_at is not None:
            while ranks[2][0].poll() is None and ranks[0][0].poll() is None:
                time.sleep(0.01)
            time.sleep(1.0)
            p, out, _ = restart(folder, ck, f"{tag}-restarted")
            served = (p, out)
        outs = finish(ranks, 170, spare={2} if kill_at is not None else ())
    finally:
        if served is not None:
            finish([served], 30)
    total = time.time() - began
    if not outs or "final " not in outs[0]:
        return f"failed: {(outs or ['hung'])[0][-300:]!r}"
    final = re.search(r"final (.*) \(", outs[0]).group(1)
    pushes = int(re.search(r"parameter server: (\d+) pushes applied", outs[0]).group(1))
    said = served and re.search(r"restarted from .*? in [\d.]+ s", Path(served[1].name).read_text())
    return {k: float(v) for k, v in re.findall(r"([\w@]+) ([\d.]+)", final)}, total, pushes, said and said.group(0)


def part_examples(folder, quick):
    small = ["--users", "120", "--items", "150", "--per-user", "20"]
    ncf = [*small, "--batch-size", "512", "--lr", "0.03", "--epochs", "1" if quick else "2"]
    examples(folder, [("wide_deep_ps.py", [*small, "--batch-size", "128", "--epochs", "2" if quick else "4"]),
                      ("ncf_ps.py", ncf)], ("asp", "bsp"))


def part_ncf_asp(folder, quick):
    """NCF under ASP on 5x the held-out users of part examples (600: one user is 0.0017 of HR@10)."""
    examples(folder, [("ncf_ps.py", ["--per-user", "10" if quick else "20", "--epochs", "1"])], ("asp",))


def examples(folder, cases, consistencies):
    print("1 server, 2 workers over gloo, --durable --checkpoint-every 10; the server killed at half the run's "
          "optimizer steps, restarted 1 s after; ASP also run through a second time\n\n| example | consistency | "
          "run through | killed and restarted | difference | total time (through / killed) | restart |\n"
          "|---|---|---|---|---|---|---|")
    for script, flags in cases:
        for consistency in consistencies:
            common = ["--servers", "1", "--consistency", consistency, "--durable", "--checkpoint-every", "10", *flags]
            tag = f"{Path(script).stem}-{consistency}"
            through = example_run(folder, script, common, tag)
            if isinstance(through, str):
                print(f"| {script} | {consistency} | {through} | | | | |")
                continue
            steps = through[2] // (1 if consistency == "asp" else 2)   # (BSP: one step per iteration's pushes)
            killed = example_run(folder, script, common, f"{tag}-killed", kill_at=steps // 2)
            if isinstance(killed, str):
                print(f"| {script} | {consistency} | {through[0]} | {killed} | | | |")
                continue
            again = example_run(folder, script, common, f"{tag}-again") if consistency == "asp" else None
            a, b = through[0], killed[0]
            diff = ", ".join(f"{k} {b[k] - a[k]:+.4f}" for k in a)
            if isinstance(again, tuple):   # (ASP's own run-to-run noise: pushes interleave by timing)
                diff += " (run through again: " + ", ".join(f"{k} {again[0][k] - a[k]:+.4f}" for k in a) + ")"
            shown = [", ".join(f"{k} {v[k]:.4f}" for k in v) for v in (a, b)]
            print(f"| {script} | {consistency.upper()} | {shown[0]} | {shown[1]} (killed at step {steps // 2} of "
                  f"{steps}) | {diff} | {through[1]:.1f} s / {killed[1]:.1f} s | {killed[3]} |")


def part_replicate(folder, quick):
    counts = {label: (10 if quick else n) for label, n in zip(SIZES, (400, 200, 30))}
    print("1 worker, 2 servers, ASP: push().wait() one by one (pipelined: all pushed, then waited): µs per push, "
          "pushes/s\n\n| replicate | " + " | ".join(SIZES) + " |\n|---|" + "---|" * len(SIZES))
    for replicate in (False, True):
        setting = {"dir": None, "n": counts, "servers": 2, "replicate": replicate}
        outs = finish(start_ranks([sys.executable, __file__], 3, folder, f"replicate{replicate:d}",
                                  role("push", setting)), 170)
        found = re.search(r"PUSH (.*)", (outs or [""])[0])
        if not found:
            print(f"| {replicate} | failed |")
            continue
        result = json.loads(found.group(1))
        print(f"| {'on' if replicate else 'off'} | " + " | ".join(
            f"{result[s][0] * 1e6:.0f} µs, {1 / result[s][0]:.0f}/s (pipelined {result[s][1] * 1e6:.0f} µs, "
            f"{1 / result[s][1]:.0f}/s)" for s in SIZES) + " |")
    trials = 1 if quick else 3
    print(f"\nfailover: server 1 SIGKILLed by the launcher, nobody restarts it; {trials} trial(s)\n\n"
          "| trial | backup says so (after the kill) | worker's first step done after the kill | longest pause "
          "between steps | steps before/after |\n|---|---|---|---|---|")
    for trial in range(trials):
        ready, done = Path(folder) / f"ready-failover{trial}", Path(folder) / f"done-failover{trial}"
        ranks = start_ranks([sys.executable, __file__], 3, folder, f"failover{trial}",
                            role("failover", {"ready": str(ready), "done": str(done)}))
        deadline = time.monotonic() + 120
        while not ready.exists() and time.monotonic() < deadline and all(p.poll() is None for p, _ in ranks):
            time.sleep(0.01)
        killed = time.time()
        os.kill(ranks[2][0].pid, signal.SIGKILL)
        time.sleep(1.0)
        done.touch()
        outs = finish(ranks, 120, spare={2})
        found = outs and re.search(r"FAILOVER (.*)", outs[0])
        said = outs and re.search(r"(\d+\.\d+) parameter server 1 is gone", outs[1])
        if not found or not said:
            print(f"| {trial} | failed | | | |")
            continue
        ends = json.loads(found.group(1))
        after = [t for t in ends if t > killed]
        print(f"| {trial} | {(float(said.group(1)) - killed) * 1e3:.0f} ms | {(after[0] - killed) * 1e3:.0f} ms | "
              f"{max(b - a for a, b in zip(ends, ends[1:])) * 1e3:.0f} ms | {len(ends) - len(after)}/{len(after)} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("durable", "outage", "examples", "ncf-asp", "replicate"), required=True)
    parser.add_argument("--quick", action="store_true", help="small runs, to check the script")
    args = parser.parse_args()
    model = next((line.split(":", 1)[1].strip() for line in subprocess.run(["lscpu"], capture_output=True,
              text=True).stdout.splitlines() if line.startswith("Model name")), "unknown")
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"machine: {model}, {os.cpu_count()} cores; before: {uptime}\n")
    with tempfile.TemporaryDirectory() as folder:
        {"durable": part_durable, "outage": part_outage, "examples": part_examples,
         "ncf-asp": part_ncf_asp, "replicate": part_replicate}[args.part](folder, args.quick)
    print(f"\nafter: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


if __name__ == "__main__":
    which = os.environ.get("PS_RECOVERY_ROLE")
    if which:
        {"push": rank_push, "outage": rank_outage, "failover": rank_failover}[which](json.loads(os.environ["PS_RECOVERY_SETTING"]))
    else:
        main()
