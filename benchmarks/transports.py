"""All-reduce over minidl's transports beside PyTorch's gloo: bus bandwidth and small-message latency.

    python benchmarks/transports.py                  # n = 2 and 4, every transport, ~2 min
    python benchmarks/transports.py --ranks 2 --quick

Transports, each launched as its users launch it:
- ``minidl mpi``: ``mpiexec -n N``, ``init_process_group()`` (minidl's algorithms on MPI messages);
- ``minidl gloo``: N processes with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set (torchrun's way),
  ``init_process_group("gloo")``: minidl's socket communicator;
- ``torch gloo``: the same launch, ``torch.distributed.init_process_group("gloo")``: PyTorch 2.13's gloo.

The same worker code runs all three (``dist`` is minidl.dist or torch.distributed): float32 all-reduces of
4 KiB to 16 MiB, each size warmed up and checked against the exact sum, then timed run by run (refilled, then a barrier),
each run's time the slowest rank's; the median is reported. busbw = bytes / time * 2(n-1)/n (nccl-tests'
convention). The 4 KiB time is the latency figure. Target (issue 47): the socket communicator's busbw >= torch
gloo's from 1 MiB up. The load average is printed before and after: other work on the machine moves these.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRANSPORTS = ("minidl mpi", "minidl gloo", "torch gloo")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4], help="rank counts (default 2 and 4)")
    p.add_argument("--quick", action="store_true", help="smoke run: up to 1 MiB, 5 timed runs")
    p.add_argument("--transports", nargs="+", default=list(TRANSPORTS), choices=TRANSPORTS, metavar="T",
                   help=f"which of {', '.join(repr(t) for t in TRANSPORTS)}")
    p.add_argument("--worker", help=argparse.SUPPRESS)   # (a rank of one transport's launch)
    return p.parse_args()


def sizes(quick):
    top = 1 << (20 if quick else 24)
    return [4 << 10 << 2 * k for k in range(12) if 4 << 10 << 2 * k <= top]


def worker(transport, quick):
    import numpy as np
    if transport == "torch gloo":
        import torch as lib
        import torch.distributed as dist
        dist.init_process_group("gloo")
        # (each rank its share of the cores, as minidl.dist gives its ranks: fit_threads_to_cores)
        lib.set_num_threads(max(1, len(os.sched_getaffinity(0)) // dist.get_world_size()))
    else:
        import minidl as lib
        import minidl.dist as dist
        dist.init_process_group("gloo" if transport == "minidl gloo" else None)
    n, rank = dist.get_world_size(), dist.get_rank()
    runs = 5 if quick else 20
    medians = {}
    for nbytes in sizes(quick):
        t = lib.full((nbytes // 4,), float(rank + 1))
        for _ in range(2):
            t.fill_(float(rank + 1))
            dist.all_reduce(t)
        expected = n * (n + 1) / 2
        assert np.allclose(t.numpy(), expected), (transport, nbytes)
        times = []
        for _ in range(max(runs, min(100, (4 << 20) // nbytes))):
            t.fill_(1.0)   # (the sums stay finite)
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(t)
            took = lib.tensor([time.perf_counter() - start], dtype=lib.float64)
            dist.all_reduce(took, op=dist.ReduceOp.MAX)
            times.append(float(took.item()))
        medians[nbytes] = statistics.median(times)
    if rank == 0:
        print("RESULT " + json.dumps({str(k): v for k, v in medians.items()}), flush=True)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(transport, n, quick):
    """rank 0's medians {nbytes: seconds} for one launch of ``transport`` on n ranks."""
    command = [sys.executable, os.path.abspath(__file__), "--worker", transport] + (["--quick"] if quick else [])
    env = dict(os.environ, PYTHONPATH=ROOT)
    if transport == "minidl mpi":
        from minidl.dist.launch import find_mpiexec
        procs = [subprocess.Popen([find_mpiexec(), "-n", str(n)] + command, env=env, stdout=subprocess.PIPE,
                                  text=True)]
    else:
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(n))
        procs = [subprocess.Popen(command, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.PIPE,
                                  text=True) for r in range(n)]
    outputs = [p.communicate(timeout=900)[0] for p in procs]
    if any(p.returncode for p in procs):
        raise SystemExit(f"{transport} -n {n} failed:\n" + "\n".join(outputs))
    line = next(line for out in outputs for line in out.splitlines() if line.startswith("RESULT "))
    return {int(k): v for k, v in json.loads(line[len("RESULT "):]).items()}


def human(nbytes):
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def main():
    args = parse_args()
    if args.worker:
        return worker(args.worker, args.quick)
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    for n in args.ranks:
        found = {t: launch(t, n, args.quick) for t in args.transports}
        print(f"\nn = {n}: busbw GB/s (and time) per float32 all-reduce, median")
        print("| size | " + " | ".join(args.transports) + " |")
        print("|---" * (len(args.transports) + 1) + "|")
        for nbytes in sizes(args.quick):
            cells = []
            for t in args.transports:
                seconds = found[t][nbytes]
                busbw = nbytes / seconds * 2 * (n - 1) / n / 1e9
                cells.append(f"{busbw:.2f} ({seconds * 1e6:.0f} us)")
            print(f"| {human(nbytes)} | " + " | ".join(cells) + " |")
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
