"""Pipeline parallelism, measured: a balanced MLP split into stages on 2 ranks against the same
model in one process, one compute thread per rank.

    mpiexec -n 2 python benchmarks/pipeline.py            # prints a markdown report on rank 0
    mpiexec -n 2 python benchmarks/pipeline.py --quick    # a short smoke run

The four schedules at equal stages per rank: GPipe, 1F1B and zero bubble with one stage per rank,
interleaved 1F1B and zero bubble with two (rank 0 holds stages 0 and 2), for m in {2, 4, 8, 16}
micro-batches: the step time and the speedup over the single process (rank 0 alone, same batch,
same thread count, timed in the same run while rank 1 waits), the measured bubble against theory
((p - 1) / (v m + p - 1) for v stages per rank; for zero bubble (p - 1) / (3 v m + p - 1), its
plan with equally long forward, input and weight passes), and each stage's peak activation bytes.
The measured timelines at m = 8 are drawn to
benchmarks/pipeline_<schedule>_m8.png. Targets: at m = 8, 1F1B at least 1.6x the single process;
the measured bubble within 5 points of theory; zero bubble's measured bubble below 1F1B's.
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
from minidl.dist.pipelining import (PipelineScheduleMulti, PipelineStage, Schedule1F1B, ScheduleGPipe,
                                    ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble, actions, draw)
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


def pipelined(rank, size, cls, per_rank, m, steps):
    """(ms per step, mean measured bubble, peak activation bytes per stage, last timeline, planned
    bubble), with ``per_rank`` stages on each rank (stages rank, rank + size, ...)."""
    parts = blocks(per_rank * size)
    mine = [rank + k * size for k in range(per_rank)]
    stages = [PipelineStage(parts[s], s, per_rank * size, "cpu") for s in mine]
    schedule = cls(stages if issubclass(cls, PipelineScheduleMulti) else stages[0], m, loss_fn=F.mse_loss)
    params = [p for s in mine for p in parts[s].parameters()]
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
    return (1e3 * statistics.median(times), statistics.mean(bubbles), timeline["peak_activation_bytes"], timeline,
            actions.ideal_bubble(schedule.programs))


SCHEDULES = [(ScheduleGPipe, 1), (Schedule1F1B, 1), (ScheduleInterleavedZeroBubble, 1), (ScheduleInterleaved1F1B, 2),
             (ScheduleInterleavedZeroBubble, 2)]
PICTURES = {(ScheduleGPipe, 1): "gpipe", (Schedule1F1B, 1): "1f1b", (ScheduleInterleaved1F1B, 2): "interleaved",
            (ScheduleInterleavedZeroBubble, 2): "zero_bubble"}


def label(cls, per_rank):
    return f"{cls.__name__.replace('Schedule', '')} ({per_rank} stage{'s' if per_rank > 1 else ''}/rank)"


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
    rows, lengths = [], []
    for cls, per_rank in SCHEDULES:
        for m in ms:
            if cls is Schedule1F1B and m < size:
                continue
            step_ms, measured, peaks, timeline, theory = pipelined(rank, size, cls, per_rank, m, steps)
            rows.append((label(cls, per_rank), m, step_ms, measured, theory, peaks))
            if m == 8:
                lengths.append((label(cls, per_rank), action_lengths(timeline)))
            if rank == 0 and m == 8 and not args.quick and (cls, per_rank) in PICTURES:
                draw(timeline, os.path.join(HERE, f"pipeline_{PICTURES[cls, per_rank]}_m8.png"),
                     title=f"{label(cls, per_rank)}, MLP of {LAYERS} Linear({WIDTH}, {WIDTH}) + ReLU, batch {BATCH}")
    if rank == 0:
        report(size, single, rows, steps, lengths)
    dist.destroy_process_group()


def action_lengths(timeline):
    """Mean ms of each kind of compute action (F, B, I, W) in a timeline, over all ranks."""
    by_kind = {}
    for e in timeline["events"]:
        if e["kind"] in actions.COMPUTE:
            by_kind.setdefault(e["kind"], []).append(1e3 * (e["end"] - e["start"]))
    return {kind: statistics.mean(ms) for kind, ms in by_kind.items()}


def report(size, single, rows, steps, lengths):
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
    if lengths:
        print("\nMean ms per action at m = 8 (the last step; a micro-batch on one stage):\n")
        print("| schedule | F | B | I | W |")
        print("|---|---:|---:|---:|---:|")
        for name, ms in lengths:
            print(f"| {name} | " + " | ".join(f"{ms[k]:.1f}" if k in ms else "" for k in actions.COMPUTE) + " |")
    target = [r for r in rows if r[0] == "1F1B (1 stage/rank)" and r[1] == 8]
    if target:
        _, _, step_ms, measured, theory, _ = target[0]
        print(f"\n- 1F1B at m = 8: {single / step_ms:.2f}x the single process (target >= 1.6x): "
              f"{'MET' if single / step_ms >= 1.6 else 'MISSED'}")
    worst = max(abs(r[3] - r[4]) for r in rows)
    print(f"- measured bubble within {worst * 100:.1f} points of theory at worst (target <= 5): "
          f"{'MET' if worst <= 0.05 else 'MISSED'}")
    bubbles = {(r[0], r[1]): r[3] for r in rows}
    for zb, ofob in (("InterleavedZeroBubble (1 stage/rank)", "1F1B (1 stage/rank)"),
                     ("InterleavedZeroBubble (2 stages/rank)", "Interleaved1F1B (2 stages/rank)")):
        pairs = [(m, bubbles[zb, m], bubbles[ofob, m]) for (name, m) in bubbles if name == ofob and (zb, m) in bubbles]
        below = all(z < o for _, z, o in pairs)
        print(f"- {zb} bubble below {ofob}'s at every m ({', '.join(f'm={m}: {z:.1%} vs {o:.1%}' for m, z, o in pairs)})"
              f": {'MET' if below else 'MISSED'}")

if __name__ == "__main__":
    main()
