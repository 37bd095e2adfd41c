"""Tutorial 14: automatic parallelism: a cost model measures, predicts and ranks every layout of a model.

Run it:  python tutorials/14_automatic_parallelism.py

``minidl.dist.plan(model, x, world_size, loss_fn=..., target=y)`` chooses how to spread an ``nn.Sequential``
over the ranks — data parallel (dp), tensor parallel (tp), pipeline (pp, with its schedule and micro-batches),
and how the data-parallel state is sharded (ddp, zero, fsdp) — by a **cost model**, measured, not assumed:

1. **What it measures and predicts.** Each block's forward and backward seconds at every (tensor-parallel
   degree, micro-batch rows) a layout needs; every link (all-reduce, all-gather, ..., send) as a ladder of
   (bytes, seconds) per group size, summed up as latency + bandwidth. A step's time is the pipeline's makespan,
   played from the schedule's own programs, plus the data-parallel collectives (none assumed hidden behind
   compute on a CPU) plus the optimizer's step. Bytes come exactly from the algorithms (a ring all-reduce of N
   bytes on k ranks sends 2(k-1)/k * N per rank); memory is walked through the step.
2. **Plan a small MLP** on 2 simulated ranks, print the ranking, apply every plan: the bytes each rank sends in
   a step are the predicted bytes, exactly, and every layout computes the same loss.
3. **Semi-automatic**: fix ``pp=2`` and the planner chooses only the rest; a model it cannot cut is refused.

The picture (written to ``$MINIDL_TUTORIAL_OUT`` if set, else to a fresh temporary directory) is predicted vs
measured step time from ``benchmarks/plan.json`` (written by ``benchmarks/plan.py`` on real processes: times on
simulated threads mean nothing); without that file there is no picture. Every claim is checked with ``assert``.
"""
import argparse
import json
import os
import pathlib
import tempfile
import time

import matplotlib
from matplotlib.figure import Figure

import minidl
import minidl.dist as dist
from minidl import nn
from minidl.dist import collectives, debug

# --help says what this tutorial is and exits before anything runs; it takes no other arguments
argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()

matplotlib.use("Agg")   # (draw to a file; no display needed)
began = time.perf_counter()
K = 2                   # simulated ranks
ROOT = pathlib.Path(__file__).resolve().parent.parent


def section(title):
    print()
    print("=" * 78)
    print(title)
    print("=" * 78)


def mlp():
    minidl.manual_seed(0)   # the same weights every time
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4)).double()


def loss_fn(out, y):
    return nn.functional.cross_entropy(out, y)


minidl.manual_seed(14)
X, Y = minidl.randn(8, 8, dtype=minidl.float64), minidl.randint(0, 4, (8,))
WHOLE = loss_fn(mlp()(X), Y).item()   # the loss on one process, the whole batch


def on_rank(rank):
    say = print if rank == 0 else None
    best = dist.plan(mlp(), X, K, loss_fn=loss_fn, target=Y, log=say)
    N = 1 << 20   # a ring all-reduce of N bytes: what one rank sends, counted
    before = debug.sent_bytes()
    collectives.all_reduce(minidl.zeros(N // 4))
    ring = debug.sent_bytes() - before
    found = []
    for p in best.ranking:
        trainer = p.apply(mlp())
        first = trainer.step(X, target=Y)   # (same weights as WHOLE: the loss to compare)
        before = trainer.sent_bytes()
        trainer.step(X, target=Y)
        found.append((str(p.layout), first, trainer.sent_bytes() - before, p.prediction.sent[rank]))
    piped = dist.plan(mlp(), X, K, loss_fn=loss_fn, target=Y, pp=2, log=None)
    return best, ring, found, [(str(p.layout), p.layout.pp) for p in piped.ranking]


section("1-2. Plan a 5-layer MLP on 2 simulated ranks")
results = dist.sim.run(K, on_rank)
best, ring, _, piped = results[0]
profile = best.profile
latency, bandwidth = profile.latency_and_bandwidth("all_reduce", K)
print(f"\nthe all-reduce link on {K} ranks, measured: latency {latency * 1e6:.0f} us, "
      f"bandwidth {bandwidth / 1e9:.2f} GB/s; "
      f"1 MiB predicted in {profile.link_seconds('all_reduce', K, 1 << 20) * 1e3:.2f} ms")
assert latency > 0 and bandwidth > 0
assert profile.link_seconds("all_reduce", K, 1 << 20) >= profile.link_seconds("all_reduce", K, 1 << 10)
print(f"blocks measured at (tp, rows, fsdp): {sorted(profile.blocks)}")
costs = profile.blocks[(1, X.shape[0] // K, 1)]   # (ddp2: half the batch per rank, not split, not sharded)
print(f"at tp=1, {X.shape[0] // K} rows, forward ms per block (the loss last): "
      f"{[round(c.forward * 1e3, 3) for c in costs]}")
assert len(costs) == 5 + 1   # five children, then the loss
print(f"a ring all-reduce of {1 << 20} bytes on {K} ranks sent {ring} bytes per rank: 2(k-1)/k * N = "
      f"{2 * (K - 1) * (1 << 20) // K}")
assert all(r[1] == 2 * (K - 1) * (1 << 20) // K for r in results)

print(f"\nbest: {best}")
print(f"\n{'plan':<24}{'first loss':>12}{'sent (measured)':>17}{'sent (predicted)':>18}   (rank 0)")
for layout, loss, sent, predicted in results[0][2]:
    print(f"{layout:<24}{'-' if loss is None else f'{loss:.6f}':>12}{sent:>17}{predicted:>18}")
for rank, r in enumerate(results):
    for layout, _, sent, predicted in r[2]:
        assert sent == predicted, f"rank {rank}, {layout}: sent {sent} bytes, predicted {predicted}"
print("every plan, every rank: the bytes sent in a step are the predicted bytes, exactly")

for i, p in enumerate(best.ranking):
    losses = [r[2][i][1] for r in results if r[2][i][1] is not None]
    if p.layout.pp == 1:   # data parallel: each rank's loss on its rows; their mean is the whole batch's
        loss = sum(losses) / len(losses)
    else:                  # pipeline: the last stage's mean over the micro-batches
        assert len(losses) == 1
        loss = losses[0]
    assert abs(loss - WHOLE) < 1e-12, (p.layout, loss, WHOLE)
print(f"every plan's first loss (dp ranks averaged, or the pipeline's last stage) is the one-process loss {WHOLE:.6f}")

section("3. Semi-automatic: fix pp=2, the planner chooses the rest")
print(", ".join(name for name, _ in piped))
assert piped and all(pp == 2 for _, pp in piped), piped
assert {name for name, _ in piped} == {str(p.layout) for p in best.ranking if p.layout.pp == 2}
print("only pipeline plans remain: the same ones the free planner ranked with pp=2")


class NotAChain(nn.Module):
    def forward(self, x):
        return x


try:
    dist.plan(NotAChain(), X, K, loss_fn=loss_fn, target=Y, log=None)
    raise AssertionError("planned a model that is not an nn.Sequential")
except TypeError as e:
    print(f"\na module that is not an nn.Sequential: TypeError: {e}")
    assert "NotAChain" in str(e)

section("4. The picture: predicted vs measured step time (benchmarks/plan.json)")
recorded = ROOT / "benchmarks" / "plan.json"
if not recorded.exists():
    print(f"{recorded} is missing (run benchmarks/plan.py to record it): no picture")
else:
    bench = json.loads(recorded.read_text())
    rows = bench["rows"]
    fig = Figure(figsize=(6, 6))
    ax = fig.add_subplot(1, 1, 1)
    pred = [r["predicted"] * 1e3 for r in rows]
    meas = [r["measured"] * 1e3 for r in rows]
    ax.errorbar(pred, meas, yerr=[2 * r["noise"] * 1e3 for r in rows], fmt="o", capsize=3)
    for r, x, y in zip(rows, pred, meas):
        ax.annotate(str(r["plan"]), (x, y), fontsize=7, xytext=(4, 4), textcoords="offset points")
    top = max(pred + meas) * 1.1
    ax.plot([0, top], [0, top], "k--", linewidth=1, label="measured = predicted")
    ax.set_xlabel("predicted step (ms)")
    ax.set_ylabel("measured step (ms), bars: 2 x noise")
    ax.set_title(f"plan's cost model on {bench.get('cpu', 'a CPU')}", fontsize=9)
    ax.legend()
    out_dir = os.environ.get("MINIDL_TUTORIAL_OUT") or tempfile.mkdtemp(prefix="minidl-tutorial-14-")
    path = os.path.join(out_dir, "plan_predicted_vs_measured.png")
    fig.savefig(path, dpi=100)
    print(f"predicted vs measured: {path}; the benchmark's verdict: {bench.get('verdict')}")

print(f"\nAll claims checked ({time.perf_counter() - began:.1f} s).")
