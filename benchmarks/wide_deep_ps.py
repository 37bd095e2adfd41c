"""Wide & Deep through the parameter server, measured (issue 25): the step time of Hetu's hybrid
mode against all-reduce DDP of the same model, and training throughput with 1-3 workers under
BSP, SSP and ASP.

    python benchmarks/wide_deep_ps.py              # every launch below; prints a markdown report
    python benchmarks/wide_deep_ps.py --quick      # a short smoke run

The model is minidl.models.WideDeep over 500,000 users and 500,000 items: a 1M x 16 deep
embedding table (and a 1.26M x 1 wide one, the user, the item and 2^18 crossed buckets). Each
worker's step takes 256 random (user, item, click) samples, so a step touches at most 512 of the
deep table's 1M rows (0.05%; 0.1% over two workers), all under 1%. Adagrad everywhere.

- hybrid: ``mpiexec -n 3``, 2 workers and 1 server; the embeddings on the server (sparse pushes
  and row pulls), the MLP replicated and all-reduced (ps.DistributedModel(hybrid=True)).
- DDP: ``mpiexec -n 2``, 2 ranks; the same model with dense embedding gradients, all of them
  all-reduced by DistributedDataParallel, and a dense Adagrad step over every parameter.
Target: hybrid >= 5x faster per step.

Throughput: ``--mode ps`` (every parameter on the server) with 1, 2 and 3 workers and 1 server
(2, 3 and 4 processes), under BSP, SSP(2) and ASP; samples/s = workers x 256 x steps / the
slowest worker's time. On a 2-core machine more than 2 processes measure how the OS shares two
cores out, not scaling. Each run is a fresh mpiexec launch with one compute thread per rank;
times are after warm-up steps, the median step of every worker's timed steps (step time) or
wall time over them (throughput).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USERS = ITEMS = 500_000
BATCH = 256   # per worker


def worker(args):
    import numpy as np

    import minidl
    import minidl.dist as dist
    import minidl.nn.functional as F
    from minidl.dist import ps
    from minidl.models import WideDeep
    from minidl.nn.parallel import DistributedDataParallel

    dist.init_process_group()
    if args.mode != "ddp" and ps.init(num_servers=1, consistency=args.consistency, staleness=2) == "server":
        dist.destroy_process_group()
        return
    rank = ps.worker_rank() if args.mode != "ddp" else dist.get_rank()
    group = ps.worker_group() if args.mode != "ddp" else None
    minidl.manual_seed(0)
    module = WideDeep(USERS, ITEMS, sparse=args.mode != "ddp")
    if args.mode == "ddp":
        model = DistributedDataParallel(module)
        optimizer = minidl.optim.Adagrad(model.parameters(), lr=0.05)
    else:
        model = ps.DistributedModel(module, optimizer=ps.Adagrad(lr=0.05), hybrid=args.mode == "hybrid",
                                    dense_optimizer=lambda params: minidl.optim.Adagrad(params, lr=0.05))
    rs = np.random.RandomState(1 + rank)

    def step():
        users, items = rs.randint(0, USERS, BATCH), rs.randint(0, ITEMS, BATCH)
        clicks = (rs.rand(BATCH) < 0.5).astype(np.float32)
        loss = F.binary_cross_entropy_with_logits(model(minidl.from_numpy(users), minidl.from_numpy(items)),
                                                  minidl.from_numpy(clicks))
        loss.backward()
        if args.mode == "ddp":
            optimizer.step()
            optimizer.zero_grad()
        else:
            model.step()

    for _ in range(args.warmup):
        step()
    dist.barrier(group=group)
    times, began = [], time.perf_counter()
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    wall = time.perf_counter() - began
    found = [None] * dist.get_world_size(group)
    dist.all_gather_object(found, (statistics.median(times), wall), group=group)
    if rank == 0:
        workers = len(found)
        print(json.dumps({"ms_per_step": 1e3 * statistics.median(t for t, _ in found),
                          "samples_per_s": workers * BATCH * args.steps / max(w for _, w in found)}))
    if args.mode != "ddp":
        ps.shutdown()
    dist.destroy_process_group()


def launch(n, mode, consistency, args):
    sys.path.insert(0, ROOT)
    from minidl.dist.launch import find_mpiexec
    cmd = [find_mpiexec() or "mpiexec", "-n", str(n), sys.executable, os.path.abspath(__file__), "--worker",
           "--mode", mode, "--consistency", consistency, "--steps", str(args.steps), "--warmup", str(args.warmup)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200,
                         env=dict(os.environ, PYTHONPATH=ROOT, MINIDL_NUM_THREADS="1"))
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def cpu_model():
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    names = [line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")]
    return f"{names[0] if names else 'unknown CPU'}, {os.cpu_count()} cores"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="3 timed steps, 1 warm-up")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=("hybrid", "ddp", "ps"), default="hybrid", help=argparse.SUPPRESS)
    parser.add_argument("--consistency", choices=("bsp", "ssp", "asp"), default="bsp", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.steps, args.warmup = 3, 1
    if args.worker:
        return worker(args)
    print(f"Wide & Deep, 1M x 16 deep table, {BATCH} samples per worker per step; {cpu_model()}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}\n")
    hybrid = launch(3, "hybrid", "bsp", args)
    ddp = launch(2, "ddp", "bsp", args)
    print("| 2 workers | ms per step | samples/s |\n|---|---|---|")
    for name, r in (("hybrid (1 server, BSP)", hybrid), ("all-reduce DDP", ddp)):
        print(f"| {name} | {r['ms_per_step']:.1f} | {r['samples_per_s']:,.0f} |")
    speedup = ddp["ms_per_step"] / hybrid["ms_per_step"]
    print(f"\nhybrid is {speedup:.1f}x faster per step; target >= 5x: {'met' if speedup >= 5 else 'MISSED'}\n")
    print("| workers (+1 server) | BSP samples/s | SSP(2) samples/s | ASP samples/s |\n|---|---|---|---|")
    for workers in (1, 2, 3):
        row = [launch(workers + 1, "ps", c, args)["samples_per_s"] for c in ("bsp", "ssp", "asp")]
        print(f"| {workers} | " + " | ".join(f"{v:,.0f}" for v in row) + " |")


if __name__ == "__main__":
    main()
