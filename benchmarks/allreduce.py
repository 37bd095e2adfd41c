"""All-reduce bandwidth of minidl.dist beside MPI_Allreduce, nccl-tests style.

    python benchmarks/allreduce.py --ranks 2       # launches mpiexec -n 2 itself (default: 2 and 4)
    python benchmarks/allreduce.py --ranks 2 --quick
    mpiexec -n 2 python benchmarks/allreduce.py    # one rank count, run directly

For float32 messages of 4 KiB .. 64 MiB (powers of 4), in one run: ``dist.all_reduce(tensor)``
on the default group (what users get: the "auto" algorithm unless MINIDL_DIST_ALGO says
otherwise), the same call on groups that force our ring, our recursive doubling (up to 1 MiB)
and "native" (MPI_Iallreduce through minidl.dist's waits), ``dist.all_reduce(tensor,
async_op=True).wait()`` (run by the group's communication thread, whose waits sleep between polls:
what DistributedDataParallel's buckets get), and the baseline,
``comm.Allreduce(MPI.IN_PLACE, buf)`` called directly through mpi4py. Each size is warmed up and
checked against the exact sum, then timed: every timed run starts after a barrier, its time is
the slowest rank's, the variants take turns run by run (in a new random order every round: the
one right after MPI_Allreduce runs measurably slower, at 4 MiB by up to ~30%), and the median of
the runs is reported.
algbw = bytes / time; busbw = algbw * 2(n-1)/n (the bytes each rank must send and receive, so
numbers compare across n and with a link's peak). Target (issue 4): >= 1.0x MPI's busbw from
1 MiB up, >= 0.5x below; it only applies when the ranks have a core each. The load average is
printed before and after: other work on the machine moves these numbers.
"""
from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = "dist.all_reduce"  # the default group, default algorithm
FORCED = ("ring", "recursive_doubling", "native")  # groups made with new_group(algorithm=...)
ASYNC = "async_op=True"  # the default group's communication thread
BASELINE = "MPI_Allreduce"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[2, 4], help="rank counts to launch (driver mode)")
    p.add_argument("--quick", action="store_true", help="smoke run: up to 1 MiB, 5 timed runs")
    p.add_argument("--runs", type=int, default=5, help="timed runs per size and variant, at least (default 5)")
    p.add_argument("--rd-max", type=int, default=1 << 20, help="largest size (bytes) for recursive doubling")
    p.add_argument("--segment-bytes", type=int, help="the ring's pipelining segment (init_process_group's "
                   "segment_bytes; default: minidl's)")
    return p.parse_args()


def sizes(quick: bool):
    top = 1 << (20 if quick else 26)
    return [4 << 10 << 2 * k for k in range(20) if 4 << 10 << 2 * k <= top]


def human(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def timed_runs(nbytes: int, floor: int) -> int:
    """More runs for small messages (cheap, and noisier), at least ``floor``."""
    return max(floor, min(50, (16 << 20) // nbytes))


def worker(args) -> None:
    from mpi4py import MPI

    import minidl
    import minidl.dist as dist
    dist.init_process_group(segment_bytes=args.segment_bytes)
    comm, n, rank = MPI.COMM_WORLD, dist.get_world_size(), dist.get_rank()
    groups = {name: dist.new_group(algorithm=name) for name in FORCED}
    results = {}  # (nbytes, variant) -> median seconds
    for nbytes in sizes(args.quick):
        source = np.full(nbytes // 4, rank + 1, np.float32)
        buf = np.empty_like(source)
        t = minidl.from_numpy(buf)  # shares buf's memory
        calls = {BASELINE: lambda: comm.Allreduce(MPI.IN_PLACE, buf), DEFAULT: lambda: dist.all_reduce(t),
                 ASYNC: lambda: dist.all_reduce(t, async_op=True).wait()}
        calls.update({name: (lambda g=g: dist.all_reduce(t, group=g)) for name, g in groups.items()
                      if name != "recursive_doubling" or nbytes <= args.rd_max})
        for v, call in calls.items():  # warm-up, and the exact answer
            for _ in range(2):
                buf[...] = source
                call()
            if not np.all(buf == n * (n + 1) / 2):
                raise AssertionError(f"{v} at {human(nbytes)}: wrong sum on rank {rank}")
        times = {v: [] for v in calls}
        order, shuffle = list(calls), random.Random(nbytes).shuffle  # the same orders on every rank
        for _ in range(timed_runs(nbytes, args.runs if not args.quick else 5)):
            shuffle(order)
            for v in order:
                buf[...] = source
                comm.Barrier()
                start = time.perf_counter()
                calls[v]()
                times[v].append(comm.allreduce(time.perf_counter() - start, op=MPI.MAX))
        results.update({(nbytes, v): statistics.median(ts) for v, ts in times.items()})
    if rank == 0:
        from minidl.dist.state import resolve
        report(results, n, resolve(None, "allreduce.py").config.algorithm)
    dist.destroy_process_group()


def report(results, n: int, default_algorithm: str) -> None:
    cores = len(os.sched_getaffinity(0))
    factor = 2 * (n - 1) / n
    applies = n <= cores
    note = f"{n} ranks on {cores} cores" if applies else \
        f"oversubscribed: {n} ranks on {cores} cores, target not applicable"
    print(f"\n### n = {n} ({note}; {DEFAULT} runs \"{default_algorithm}\")\n")
    print(f"| size | MPI µs | {DEFAULT} µs | ring µs | MPI busbw GB/s | {DEFAULT} busbw GB/s | ring busbw GB/s "
          f"| target | {DEFAULT} / MPI | ring / MPI |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    sizes_seen = sorted({s for s, _ in results})
    for s in sizes_seen:
        need = 1.0 if s >= 1 << 20 else 0.5
        us = [results[s, v] for v in (BASELINE, DEFAULT, "ring")]
        verdicts = [f"{us[0] / t:.2f}x" + (" met" if us[0] / t >= need else " missed") * applies for t in us[1:]]
        print(f"| {human(s)} | " + " | ".join(f"{t * 1e6:,.0f}" for t in us) + " | "
              + " | ".join(f"{factor * s / t / 1e9:.2f}" for t in us) + f" | ≥ {need}x | "
              + " | ".join(verdicts) + " |")
    print(f"\nalgbw / busbw GB/s of every variant (x = busbw / MPI_Allreduce's), n = {n}:\n")
    names = (BASELINE, DEFAULT, ASYNC, *FORCED)
    print("| size | " + " | ".join(names) + " |")
    print("|---:|" + "---:|" * len(names))
    for s in sizes_seen:
        cells = []
        for v in names:
            t = results.get((s, v))
            cells.append("–" if t is None else
                         f"{s / t / 1e9:.2f} / {factor * s / t / 1e9:.2f} ({results[s, BASELINE] / t:.2f}x)")
        print(f"| {human(s)} | " + " | ".join(cells) + " |")
    sys.stdout.flush()


def driver(args) -> int:
    from minidl.dist.launch import find_mpiexec
    mpiexec = find_mpiexec()
    if mpiexec is None:
        sys.exit("allreduce.py: mpiexec not found (install an MPI and mpi4py: pip install -e '.[mpi]')")
    import numpy
    print(f"# all-reduce, float32; {os.cpu_count()} cores; python {sys.version.split()[0]}, numpy {numpy.__version__}")
    print("# load average before: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p))
    worst = 0
    for n in args.ranks:
        cmd = [mpiexec, "-n", str(n), sys.executable, os.path.abspath(__file__), *sys.argv[1:]]
        worst = max(worst, subprocess.run(cmd, env=env, check=False).returncode)
    print("\n# load average after: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    return worst


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    from minidl.dist.launch import launched_by_mpi
    sys.exit(worker(parse_args()) if launched_by_mpi() else driver(parse_args()))
