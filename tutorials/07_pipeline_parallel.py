"""Tutorial 7: pipeline parallelism — micro-batches, bubbles, and the memory a schedule holds.

Run it:  python tutorials/07_pipeline_parallel.py

Pipeline parallelism cuts a model into stages, one per rank (or several), and streams a batch
through them: rank 0 runs the first layers and hands its output to rank 1, and so on. Here the
ranks are threads of this process (``minidl.dist.sim``); under ``mpiexec -n N`` the same code runs
one process per rank.

1. **Micro-batches.** A stage would sit idle while the others work on the whole batch, so the
   batch is cut into m micro-batches that follow each other through the stages. Accumulating the
   micro-batches' gradients (each loss divided by m) gives the whole batch's gradient exactly.
2. **The bubble.** Even so, the first stage waits for the backward to come back, and the last for
   the first forward to arrive: with p stages of equal speed a rank is idle a fraction
   (p - 1) / (m + p - 1) of the step. We count it from a schedule's plan, by hand and by minidl.
3. **GPipe and 1F1B.** GPipe runs all forwards, then all backwards; 1F1B starts the backwards as
   soon as it can. Same bubble, same gradients as one process — but GPipe holds every
   micro-batch's activations at once, 1F1B at most p. We measure both.
4. **Interleaving.** With v stages per rank (stage s on rank s % p) the bubble shrinks v-fold.
5. **Zero bubble.** A backward is two jobs: the gradient of the stage's input, which the stage
   before is waiting for, and its weights' gradients, which nobody waits for. Splitting them
   (``minidl.autograd.split_backward``) lets a schedule send the first at once and run the second
   where the rank would otherwise idle: with the three passes equally long, a third of 1F1B's bubble.

The pictures are written to ``$MINIDL_TUTORIAL_OUT`` if set, else to a fresh temporary directory.
Their measured panels are not what the plans promise: the ranks here are threads of one Python
process and take turns in the interpreter (the GIL), so at most one computes at a time and every
schedule measures a bubble of about half the step or more. Zero bubble, with three actions per
micro-batch and stage (F, I, W) and twice the stages, spends more of its step in Python between
the small computations and can measure more idle time than GPipe. Each picture says so under its
panels; ``mpiexec -n 2 python benchmarks/pipeline.py`` (separate processes, big stages) measures
zero bubble's advantage. Every claim is checked with ``assert``.
"""
import argparse
import os
import tempfile
import time

import numpy as np

import minidl
import minidl.dist as dist
from minidl import nn
from minidl.autograd import split_backward
from minidl.dist.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B,
                                    ScheduleInterleavedZeroBubble, actions, draw)
from minidl.nn import functional as F

# --help says what this tutorial is and exits before anything runs; it takes no other arguments
argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()

began = time.perf_counter()
WIDTH, BATCH = 32, 64
MODEL = f"%d blocks of Linear({WIDTH}, {WIDTH}) + Tanh, batch {BATCH}"
IN_ONE_PROCESS = ("Measured with the ranks as threads of one Python process: they take turns in the interpreter (the "
                  "GIL), so at most one computes at a time and any schedule idles about half the step or more. "
                  "Zero bubble's three small actions per micro-batch and stage (F, I, W) add Python between the "
                  "computations, so here it can idle as much as GPipe or more; the plan below is what separate "
                  "processes with big stages approach (benchmarks/pipeline.py under mpiexec: zero bubble 9-10%, "
                  "GPipe 14% at m = 8).")


def section(title):
    print()
    print("=" * 78)
    print(title)
    print("=" * 78)


def blocks(n):
    """n blocks of Linear + Tanh, the same weights every time (from numpy: sim ranks are threads
    sharing minidl's generator), float64."""
    rs = np.random.RandomState(0)
    out = []
    for _ in range(n):
        block = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()).double()
        with minidl.no_grad():
            for p in block.parameters():
                p.copy_(minidl.from_numpy(rs.uniform(-0.3, 0.3, tuple(p.shape))))
        out.append(block)
    return out


rs = np.random.RandomState(1)
X = minidl.from_numpy(rs.randn(BATCH, WIDTH))
Y = minidl.from_numpy(rs.randn(BATCH, WIDTH))

# ---------------------------------------------------------------------------------------------
section("1. Micro-batches: the gradients of m pieces add up to the whole batch's")
model = nn.Sequential(*blocks(2))
F.mse_loss(model(X), Y).backward()
whole = [p.grad.clone() for p in model.parameters()]
model.zero_grad()
m = 4
for xs, ys in zip(X.chunk(m), Y.chunk(m)):
    (F.mse_loss(model(xs), ys) / m).backward()     # (equal pieces: the mean of means is the mean)
pieces = [p.grad for p in model.parameters()]
print(f"largest difference over {m} micro-batches: {max(float((a - b).abs().max()) for a, b in zip(whole, pieces)):.1e}")
assert all(np.allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-15) for a, b in zip(whole, pieces))

# ---------------------------------------------------------------------------------------------
section("2. The bubble, counted from the plan")
p, m = 2, 4
# by hand: GPipe on p stages, every forward and backward one time step. Stage s starts its
# forwards at step s and its backwards after the last stage has done its forwards.
steps = 2 * (m + p - 1)
busy = 2 * m
print(f"GPipe, p={p}, m={m}: {steps} time steps, each rank busy {busy} of them -> bubble {(steps - busy) / steps:.3f}")
programs = [actions.with_transfers(s, p, ScheduleGPipe.compute_order(s, p, m)) for s in range(p)]
print(actions.table(programs))
assert actions.ideal_bubble(programs, costs={"F": 1, "B": 1}) == (steps - busy) / steps == (p - 1) / (m + p - 1)
for m in (1, 2, 4, 8, 16):
    print(f"  m = {m:>2}: bubble {(p - 1) / (m + p - 1):.3f}")

# ---------------------------------------------------------------------------------------------
section("3. GPipe and 1F1B on two ranks: the same gradients, different memory")
M = 8


def run(rank, cls):
    block = blocks(2)[rank]
    schedule = cls(PipelineStage(block, rank, 2, "cpu"), M, loss_fn=F.mse_loss)
    losses = []
    schedule.step(X) if rank == 0 else schedule.step(target=Y, losses=losses)
    return [q.grad.clone() for q in block.parameters()], schedule.timeline()


out_dir = os.environ.get("MINIDL_TUTORIAL_OUT") or tempfile.mkdtemp(prefix="minidl_tutorial07_")
reference = nn.Sequential(*blocks(2))
for xs, ys in zip(X.chunk(M), Y.chunk(M)):
    (F.mse_loss(reference(xs), ys) / M).backward()
want = [q.grad for q in reference.parameters()]
peaks = {}
for cls in (ScheduleGPipe, Schedule1F1B):
    results = dist.sim.run(2, run, cls)
    grads = results[0][0] + results[1][0]
    timeline = results[0][1]
    assert all(np.allclose(g.numpy(), w.numpy(), rtol=1e-10) for g, w in zip(grads, want))
    peaks[cls.__name__] = timeline["peak_activation_bytes"]
    print(f"{cls.__name__}: gradients equal one process's; measured bubble {timeline['bubble']:.1%} "
          f"(theory {1 / (M + 1):.1%} for equal stages, before any overhead); "
          f"peak activations per stage {[f'{b / 1024:.0f} KiB' for b in timeline['peak_activation_bytes']]}")
    path = draw(timeline, os.path.join(out_dir, f"{cls.__name__}.png"), title=f"{cls.__name__}, {MODEL % 2}",
                note=IN_ONE_PROCESS)
    print(f"  the measured schedule above the plan: {path}")
# Each block keeps two tensors of a micro-batch for backward: Linear its input, Tanh its output, each
# (BATCH / M) x WIDTH float64 numbers. GPipe holds all M micro-batches on each stage; 1F1B at most
# p - s on stage s (2 on stage 0, 1 on stage 1).
per_microbatch = 2 * (BATCH // M) * WIDTH * 8
assert peaks["ScheduleGPipe"] == [M * per_microbatch] * 2
assert peaks["Schedule1F1B"] == [2 * per_microbatch, per_microbatch]
print(f"GPipe holds {M} micro-batches' activations per stage, 1F1B 2 and 1 ({per_microbatch} bytes each)")
print("(Stages this small are dominated by the transfers and the Python around each action, so the measured\n"
      " bubble is far above the theory; benchmarks/pipeline.py measures a model big enough to show it.)")

# ---------------------------------------------------------------------------------------------
section("4. Interleaving: v stages per rank, a v-fold smaller bubble")
for v in (1, 2, 4):
    def plan(rank, v=v):
        stages = [PipelineStage(block, rank + k * 2, 2 * v, "cpu") for k, block in enumerate(blocks(v))]
        schedule = ScheduleInterleaved1F1B(stages, 4, loss_fn=F.mse_loss) if v > 1 else \
            Schedule1F1B(stages[0], 4, loss_fn=F.mse_loss)
        return actions.ideal_bubble(schedule.programs)
    planned = dist.sim.run(2, plan)[0]
    print(f"  v = {v}: planned bubble {planned:.3f}, (p - 1) / (v m + p - 1) = {1 / (4 * v + 1):.3f}")
    assert abs(planned - 1 / (4 * v + 1)) < 1e-12

# ---------------------------------------------------------------------------------------------
section("5. Zero bubble: backward split into the input's gradient (I) and the weights' (W)")
block = blocks(1)[0]
x = X[:8].clone().requires_grad_()
y = block(x)
g = minidl.ones_like(y)
# I: only the path from y down to x runs, each node asked for the gradient towards x alone
(gx,), weight_pass = split_backward([y], [x], [g])
assert all(q.grad is None for q in block.parameters())   # no weight gradient yet
print(f"after I: the input's gradient {list(gx.shape)} is ready to send; the weights have none")
weight_pass()   # W, later: resumes from what I kept (Linear's saved input and its output gradient)
check = blocks(1)[0]
xc = X[:8].clone().requires_grad_()
check(xc).backward(g)
assert np.allclose(gx.numpy(), xc.grad.numpy(), rtol=1e-12)
assert all(np.allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12) for a, b in zip(block.parameters(), check.parameters()))
print("after W: input and weight gradients equal one full backward's; nothing ran twice and nothing was recomputed")

p, v, m = 2, 2, 4


def plans(rank):
    stages = [PipelineStage(b, rank + k * p, v * p, "cpu") for k, b in enumerate(blocks(v))]
    return [cls(stages, m, loss_fn=F.mse_loss).programs for cls in (ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble)]


interleaved, zero_bubble = dist.sim.run(p, plans)[0]
print("Interleaved 1F1B as planned (a backward B takes two steps, F one):")
print(actions.table(interleaved, actions.COSTS))
print("Zero bubble (ZB1P) as planned (I and W one step each):")
print(actions.table(zero_bubble, actions.COSTS))
# In 1F1B a rank idles (p - 1) forward-plus-backward times: 3 (p - 1) units. In ZB1P the W passes
# fill all of it but one unit per hop: the first input gradient still has to travel up the ranks.
assert actions.ideal_bubble(interleaved) == (p - 1) / (v * m + p - 1)
assert abs(actions.ideal_bubble(zero_bubble) - (p - 1) / (3 * v * m + p - 1)) < 1e-12
print(f"planned bubble: interleaved 1F1B {actions.ideal_bubble(interleaved):.3f}, "
      f"zero bubble {actions.ideal_bubble(zero_bubble):.3f} = (p - 1) / (3 v m + p - 1)")


def train(rank):
    parts = blocks(v * p)
    mine = [rank + k * p for k in range(v)]
    schedule = ScheduleInterleavedZeroBubble([PipelineStage(parts[s], s, v * p, "cpu") for s in mine], m,
                                             loss_fn=F.mse_loss)
    schedule.step(X) if rank == 0 else schedule.step(target=Y)
    return {s: [q.grad.clone() for q in parts[s].parameters()] for s in mine}, schedule.timeline()


results = dist.sim.run(p, train)
reference = nn.Sequential(*blocks(v * p))
for xs, ys in zip(X.chunk(m), Y.chunk(m)):
    (F.mse_loss(reference(xs), ys) / m).backward()
for s, part in enumerate(reference):
    got = results[s % p][0][s]
    assert all(np.allclose(a.numpy(), b.grad.numpy(), rtol=1e-10) for a, b in zip(got, part.parameters()))
timeline = results[0][1]
print(f"zero bubble on {p} ranks, {v * p} stages: gradients equal one process's; measured bubble {timeline['bubble']:.1%}")
path = draw(timeline, os.path.join(out_dir, "ScheduleInterleavedZeroBubble.png"),
            title=f"ScheduleInterleavedZeroBubble, {MODEL % (v * p)}", note=IN_ONE_PROCESS)
print(f"  the measured schedule above the plan: {path}")

print(f"\nAll claims checked ({time.perf_counter() - began:.1f} s).")
