"""The parameter server, measured: push and pull latency and throughput against message size,
beside mpi4py point-to-point for the same bytes (the floor). One worker (rank 0), the other
ranks servers:

    mpiexec -n 2 python benchmarks/ps.py            # 1 server; prints a markdown report
    mpiexec -n 3 python benchmarks/ps.py            # 2 servers
    mpiexec -n 2 python benchmarks/ps.py --quick    # a short smoke run

The floor: rank 0 sends the bytes to rank 1 with mpi4py, which answers with 8 bytes (a push's
shape: data out, an acknowledgement back); for pulls the other way. Then ``ps.push(...).wait()``
and ``ps.pull`` of a float32 parameter of each size, with a plain-SGD server optimizer (its
update is part of a push). Medians over repetitions. Target: large dense pushes at least 0.8x
MPI's bandwidth. A small push's microseconds are split by timing its parts alone. (On a machine
with fewer cores than ranks, minidl.dist's waits sleep instead of spinning: see the report.)
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np
from mpi4py import MPI

import minidl
import minidl.dist as dist
from minidl.dist import ps
from minidl.dist.ps import protocol as P

SIZES = [2 ** k for k in (6, 10, 14, 17, 20, 22)]   # float32 elements: 256 B .. 16 MB


def reps_for(n, quick):
    return 3 if quick else max(5, min(200, (1 << 22) // max(n, 1) // 8))


def median_time(fn, reps):
    fn()   # (warm-up)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def mpi_floor(comm, rank, quick):
    """{(kind, n): seconds} of mpi4py send-and-ack between ranks 0 and 1 (rank 0's view)."""
    out = {}
    ack = np.zeros(1, np.int64)
    for n in SIZES:
        data = np.ones(n, np.float32)
        reps = reps_for(n, quick)
        for kind, there, back in (("push", data, ack), ("pull", ack, data)):   # (what goes to rank 1, what returns)
            comm.Barrier()
            if rank == 0:
                def once():
                    comm.Send(there, dest=1)
                    comm.Recv(back, source=1)
                out[kind, n] = median_time(once, reps)
            elif rank == 1:
                for _ in range(reps + 1):
                    comm.Recv(there, source=0)
                    comm.Send(back, dest=0)
    return out


def ps_times(rank, servers, quick):
    """{(kind, n): seconds} of ps.push(...).wait() and ps.pull on rank 0 (the one worker)."""
    if ps.init(num_servers=servers, consistency="asp") == "server":
        return None
    out = {}
    for n in SIZES:
        ps.register(f"p{n}", minidl.zeros(n), optimizer=ps.SGD(lr=1e-3))
    for n in SIZES:
        grad = minidl.ones(n)
        out["push", n] = median_time(lambda: ps.push(f"p{n}", grad).wait(), reps_for(n, quick))
        out["pull", n] = median_time(lambda: ps.pull(f"p{n}"), reps_for(n, quick))
    ps.shutdown()
    return out


def small_parts(rank, quick):
    """A small push's parts, timed alone on rank 0: minidl.dist's point-to-point round trip of a
    16-element tensor (rank 1 echoes), building a request header, and the server's SGD step on a
    64-element shard."""
    reps = 20 if quick else 500
    out = {}
    t, ack = minidl.zeros(16), minidl.zeros(1)
    dist.barrier()
    if rank == 0:
        def once():
            dist.send(t, 1)
            dist.recv(ack, 1)
        out["p2p round trip (16 floats out, 1 back)"] = median_time(once, reps)
        out["a request header (13 int64 words)"] = median_time(lambda: P.header(P.PUSH, 1, 0, numel=64), reps)
        shard = minidl.nn.Parameter(minidl.zeros(64))
        opt = minidl.optim.SGD([shard], lr=1e-3)
        g = minidl.ones(64)

        def step():
            shard.grad = g
            opt.step()
        out["the server's SGD step (64 floats)"] = median_time(step, reps)
    elif rank == 1:
        for _ in range(reps + 1):
            dist.recv(t, 0)
            dist.send(ack, 0)
    dist.barrier()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    dist.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    if size < 2:
        raise SystemExit("benchmarks/ps.py: run it as mpiexec -n 2 (or -n 3) python benchmarks/ps.py")
    minidl.set_num_threads(1)
    floor = mpi_floor(MPI.COMM_WORLD, rank, args.quick)
    parts = small_parts(rank, args.quick)
    times = ps_times(rank, size - 1, args.quick)
    if rank == 0:
        report(size - 1, floor, times, parts)
    dist.destroy_process_group()


def report(servers, floor, times, parts):
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    ranks = servers + 1
    print(f"## Parameter server, {servers} server(s) (`mpiexec -n {ranks} python benchmarks/ps.py`)\n")
    print(f"- {time.strftime('%Y-%m-%d %H:%M')}; CPU: {cpu}, {os.cpu_count()} cores; {ranks} processes, one compute "
          f"thread each{' (more ranks than cores: waits sleep)' if ranks > os.cpu_count() else ''}; load average "
          f"{os.getloadavg()[0]:.2f}; {MPI.Get_library_version().splitlines()[0]}")
    print("- float32 parameters, SGD on the servers; medians on rank 0, the one worker; MPI: mpi4py Send of the "
          "bytes and an 8-byte answer\n")
    print("| bytes | MPI push µs | ps push µs | MPI pull µs | ps pull µs | push MB/s: MPI, ps | pull MB/s: MPI, ps |")
    print("|---:|---:|---:|---:|---:|---|---|")
    for n in SIZES:
        b = 4 * n
        row = [floor["push", n], times["push", n], floor["pull", n], times["pull", n]]
        rates = [b / t / 1e6 for t in row]
        print(f"| {b:,} | " + " | ".join(f"{1e6 * t:.0f}" for t in row) +
              f" | {rates[0]:.0f}, {rates[1]:.0f} | {rates[2]:.0f}, {rates[3]:.0f} |")
    big = SIZES[-1]
    ratio = floor["push", big] / times["push", big]
    print(f"\n- {4 * big / 2**20:.0f} MB dense push: {ratio:.2f}x MPI's bandwidth (target >= 0.8x): "
          f"{'MET' if ratio >= 0.8 else 'MISSED'}")
    print("\nA small push's parts, each timed alone (µs):\n")
    print("| part | µs |")
    print("|---|---:|")
    print(f"| mpi4py send + 8-byte answer, {4 * SIZES[0]} bytes | {1e6 * floor['push', SIZES[0]]:.0f} |")
    for name, t in parts.items():
        print(f"| {name} | {1e6 * t:.0f} |")
    print(f"| ps.push(...).wait(), {4 * SIZES[0]} bytes | {1e6 * times['push', SIZES[0]]:.0f} |")


if __name__ == "__main__":
    main()
