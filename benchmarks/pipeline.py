"""Pipeline parallelism, measured: a balanced MLP split into 2 stages on 2 ranks against the same
model in one process, one compute thread per rank.

    mpiexec -n 2 python benchmarks/pipeline.py            # prints a markdown report on rank 0
    mpiexec -n 2 python benchmarks/pipeline.py --quick    # a short smoke run

For GPipe, 1F1B and interleaved 1F1B (two stages of 2 layers per rank) and m in {2, 4, 8, 16}
micro-batches: the step time and the speedup over the
single process (rank 0 alone, same batch, same thread count, timed in the same run while rank 1
waits), the measured bubble against (p - 1) / (v m + p - 1) (v stages per rank), and each stage's
peak activation bytes.
With matplotlib, the measured timelines at m = 8 are drawn to
benchmarks/pipeline_<schedule>_m8.png. Targets: at m = 8, 1F1B at least 1.6x the single process;
the measured bubble within 5 points of theory.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np

import minidl
import minidl.dist as dist
from minidl import nn
from minidl.dist.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B, draw
from minidl.nn import functional as F

WIDTH, LAYERS, BATCH = 1024, 8, 2048
HERE = os.path.dirname(os.path.abspath(__file__))


def blocks(num_stages):
    """LAYERS Linear+ReLU layers, in num_stages equal blocks (the same weights on every rank)."""
    rs = np.random.RandomState(0)
    layers = []
    for _ in range(LAYERS):
        linear = nn.Linear(WIDTH, WIDTH)
        with minidl.no_grad():
            linear.weight.copy_(minidl.from_numpy(rs.uniform(-0.03, 0.03, (WIDTH, WIDTH)).astype(np.float32)))
            linear.bias.zero_()
        layers += [linear, nn.ReLU()]
    per = len(layers) // num_stages
    return [nn.Sequential(*layers[i * per:(i + 1) * per]) for i in range(num_stages)]


def batch():
    rs = np.random.RandomState(1)
    return (minidl.from_numpy(rs.standard_normal((BATCH, WIDTH)).astype(np.float32)),
            minidl.from_numpy(rs.standard_normal((BATCH, WIDTH)).astype(np.float32)))


def single_process(steps):
    """ms per step of the whole model on the whole batch in this process."""
    model = nn.Sequential(*blocks(1))
    opt = minidl.optim.SGD(model.parameters(), lr=1e-3)
    x, y = batch()
    times = []
    for i in range(steps + 1):
        start = time.perf_counter()
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
        if i:  # (the first step warms up)
            times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def pipelined(rank, size, cls, m, steps):
    """(ms per step, mean measured bubble, peak activation bytes per stage, last timeline). The
    interleaved schedule runs 2 stages per rank (stages rank and rank + size)."""
    if cls is ScheduleInterleaved1F1B:
        parts = blocks(2 * size)
        mine = [rank, rank + size]
        schedule = cls([PipelineStage(parts[s], s, 2 * size, "cpu") for s in mine], m, loss_fn=F.mse_loss)
        params = [p for s in mine for p in parts[s].parameters()]
    else:
        block = blocks(size)[rank]
        schedule = cls(PipelineStage(block, rank, size, "cpu"), m, loss_fn=F.mse_loss)
        params = list(block.parameters())
    opt = minidl.optim.SGD(params, lr=1e-3)
    x, y = batch()
    times, bubbles, timeline = [], [], None
    for i in range(steps + 1):
        dist.barrier()
        start = time.perf_counter()
        opt.zero_grad()
        holds_last = rank == size - 1
        if rank == 0 and not holds_last:
            schedule.step(x)
        elif holds_last:
            schedule.step(*((x,) if rank == 0 else ()), target=y)
        else:
            schedule.step()
        opt.step()
        dist.barrier()
        elapsed = time.perf_counter() - start
        timeline = schedule.timeline()
        if i:
            times.append(elapsed)
            bubbles.append(timeline["bubble"])
    return 1e3 * statistics.median(times), statistics.mean(bubbles), timeline["peak_activation_bytes"], timeline


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    dist.init_process_group()
    rank, size = dist.get_rank(), dist.get_world_size()
    minidl.set_num_threads(1)
    steps = 1 if args.quick else args.steps
    ms = (2, 8) if args.quick else (2, 4, 8, 16)
    single = single_process(steps) if rank == 0 else None
    dist.barrier()
    rows = []
    for cls in (ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B):
        per_rank = 2 if cls is ScheduleInterleaved1F1B else 1
        for m in ms:
            if cls is Schedule1F1B and m < size:
                continue
            step_ms, measured, peaks, timeline = pipelined(rank, size, cls, m, steps)
            rows.append((cls.__name__, m, step_ms, measured, (size - 1) / (per_rank * m + size - 1), peaks))
            if rank == 0 and m == 8 and not args.quick:
                try:
                    name = {ScheduleGPipe: "gpipe", Schedule1F1B: "1f1b", ScheduleInterleaved1F1B: "interleaved"}[cls]
                    draw(timeline, os.path.join(HERE, f"pipeline_{name}_m8.png"),
                         title=f"{cls.__name__}, {size} ranks, 8 micro-batches (measured)")
                except ImportError:
                    pass
    if rank == 0:
        report(size, single, rows, steps)
    dist.destroy_process_group()


def report(size, single, rows, steps):
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    print(f"## Pipeline parallelism (`mpiexec -n {size} python benchmarks/pipeline.py`)\n")
    print(f"- {time.strftime('%Y-%m-%d %H:%M')}; CPU: {cpu}, {os.cpu_count()} cores; one compute thread per rank; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"- model: {LAYERS} x (Linear {WIDTH}x{WIDTH} + ReLU), float32, batch {BATCH}, MSE loss, SGD; "
          f"{size} stages of {LAYERS // size} layers; median of {steps} steps after one warm-up")
    print(f"- single process (rank 0 alone, 1 thread): {single:.1f} ms/step\n")
    print("| schedule | m | ms/step | speedup | bubble measured | bubble theory | peak activation MB per stage |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, m, step_ms, measured, theory, peaks in rows:
        mb = ", ".join(f"{p / 2**20:.1f}" for p in peaks)
        print(f"| {name} | {m} | {step_ms:.1f} | {single / step_ms:.2f}x | {measured:.1%} | {theory:.1%} | {mb} |")
    target = [r for r in rows if r[0] == "Schedule1F1B" and r[1] == 8]
    if target:
        _, _, step_ms, measured, theory, _ = target[0]
        print(f"\n- 1F1B at m = 8: {single / step_ms:.2f}x the single process (target >= 1.6x): "
              f"{'MET' if single / step_ms >= 1.6 else 'MISSED'}")
    worst = max(abs(r[3] - r[4]) for r in rows)
    print(f"- measured bubble within {worst * 100:.1f} points of theory at worst (target <= 5): "
          f"{'MET' if worst <= 0.05 else 'MISSED'}")


if __name__ == "__main__":
    main()
