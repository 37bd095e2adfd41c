"""Tutorial 6: data parallelism with DistributedDataParallel.

Run it:  python tutorials/06_data_parallel.py

Data parallelism trains one model on N workers ("ranks"): every rank holds a full replica, takes
its own slice of each batch, and the ranks average their gradients before the optimizer step, so
the replicas stay identical. Here the ranks are threads of this process (``minidl.dist.sim``), so
nothing needs ``mpiexec``; the same code runs one process per rank under ``mpiexec -n N`` (see
examples/train_digits_ddp.py).

1. **Equivalence.** With a mean-reduced loss, no BatchNorm and no dropout, averaging the
   ranks' gradients gives exactly the gradient of the whole batch: N ranks take the same step
   one process takes on the concatenated batch. Checked to 1e-10 in float64.
2. **Bucketing.** Averaging each parameter separately costs one collective per parameter;
   DDP packs gradients into buckets (flat buffers, in *reverse* parameter order, since backward
   produces the last layer's gradients first) and reduces a bucket with one all-reduce.
3. **Overlap.** Each parameter's post-accumulate-grad hook tells DDP its gradient is in; when a
   bucket is full its all-reduce is launched at once on the group's communication thread, while
   backward goes on computing the earlier layers' gradients. A timeline shows it, as a PNG.
4. **no_sync** for gradient accumulation, and what the checkpoint looks like.

The plot is written to ``$MINIDL_TUTORIAL_OUT`` if set,
else to a fresh temporary directory. Every claim is checked with ``assert``.
"""
import argparse
import os
import tempfile
import time

import numpy as np

import minidl
import minidl.dist as dist
from minidl import nn
from minidl.nn import functional as F
from minidl.nn.parallel import DistributedDataParallel as DDP

# --help says what this tutorial is and exits before anything runs; it takes no other arguments
argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()

began = time.perf_counter()
WORLD, PER_RANK = 4, 8


def section(title):
    print()
    print("=" * 78)
    print(title)
    print("=" * 78)


def make_model():
    """A LeNet-like CNN for 1x16x16 inputs: no BatchNorm, no dropout (see claim 1)."""
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10)).double()


rs = np.random.RandomState(0)
X = minidl.from_numpy(rs.randn(WORLD * PER_RANK, 1, 16, 16))
Y = minidl.from_numpy(rs.randint(0, 10, WORLD * PER_RANK))


# ---------------------------------------------------------------------------------------------
section("1. N ranks stepping together == one process on the whole batch")
minidl.manual_seed(0)
single = make_model()
start_state = {k: v.clone() for k, v in single.state_dict().items()}
opt = minidl.optim.SGD(single.parameters(), lr=0.1)
F.cross_entropy(single(X), Y).backward()
opt.step()


def train_one_step(rank):
    model = make_model()
    if rank == 0:  # the other ranks start from other weights: DDP broadcasts rank 0's at construction
        model.load_state_dict(start_state)
    ddp = DDP(model, bucket_cap_mb=0.02, timeline=True)
    opt = minidl.optim.SGD(ddp.parameters(), lr=0.1)
    mine = slice(rank * PER_RANK, (rank + 1) * PER_RANK)  # this rank's slice of the global batch
    F.cross_entropy(ddp(X[mine]), Y[mine]).backward()     # gradients are averaged inside backward
    opt.step()
    return ddp.module.state_dict(), ddp.timeline, [len(b.params) for b in ddp.reducer.buckets]


results = dist.sim.run(WORLD, train_one_step)
for rank, (state, _, _) in enumerate(results):
    worst = max(float((state[k] - v).abs().max()) for k, v in single.state_dict().items())
    print(f"rank {rank}: largest difference from the single-process step {worst:.1e}")
    assert worst < 1e-10
print(f"{WORLD} ranks x {PER_RANK} samples == 1 process x {WORLD * PER_RANK} samples, to rounding.")


# ---------------------------------------------------------------------------------------------
section("2. Buckets: reverse parameter order, a small first bucket")
_, timeline, sizes = results[0]
names = [n for n, _ in single.named_parameters()]
print(f"{len(names)} parameters: {names}")
print(f"bucket_cap_mb=0.02 gives {len(sizes)} buckets of {sizes} parameters; bucket 0 holds the last ones.")
assert sum(sizes) == len(names) and 1 < len(sizes) < len(names)
# (The default bucket_cap_mb=25 puts this whole model in one bucket; torch also makes the first
# bucket small, 1 MB, so that communication starts as early as possible.)


# ---------------------------------------------------------------------------------------------
section("3. Overlap: every bucket's all-reduce runs while backward is still going")
backward, *buckets = timeline
for b in buckets:
    print(f"{b['name']:>9}: {b['numel']:6d} values, all-reduce from {1e3 * b['start']:6.2f} ms "
          f"to {1e3 * b['end']:6.2f} ms")
print(f" backward: from 0 to {1e3 * backward['end']:.2f} ms (time from the start of backward)")
# The claim: the first bucket was launched before backward finished, i.e. it overlapped the rest.
assert buckets[0]["start"] < backward["end"]
assert [b["start"] for b in buckets] == sorted(b["start"] for b in buckets)  # launched in order

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
out_dir = os.environ.get("MINIDL_TUTORIAL_OUT") or tempfile.mkdtemp(prefix="minidl-tutorial-06-")
os.makedirs(out_dir, exist_ok=True)
fig, ax = plt.subplots(figsize=(9, 1.2 + 0.4 * len(timeline)))
for row, entry in enumerate(timeline):
    ax.barh(row, 1e3 * (entry["end"] - entry["start"]), left=1e3 * entry["start"],
            color="tab:blue" if row == 0 else "tab:orange")
ax.set_yticks(range(len(timeline)), [e["name"] if e["name"] == "backward" else e["name"] + " all-reduce"
                                     for e in timeline])
ax.invert_yaxis()
ax.set(xlabel="ms since backward started (rank 0)", title="DDP: bucket all-reduces overlap the backward")
fig.tight_layout()
png = os.path.join(out_dir, "06_ddp_overlap.png")
fig.savefig(png, dpi=100)
plt.close(fig)
with open(png, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
print(f"wrote {png}")


# ---------------------------------------------------------------------------------------------
section("4. no_sync: accumulate two micro-batches, communicate once")


def accumulate(rank):
    model = make_model()
    model.load_state_dict(start_state)
    ddp = DDP(model)
    halves = [slice(rank * PER_RANK + h * PER_RANK // 2, rank * PER_RANK + (h + 1) * PER_RANK // 2) for h in (0, 1)]
    with ddp.no_sync():                                            # local only: grads accumulate
        (F.cross_entropy(ddp(X[halves[0]]), Y[halves[0]]) / 2).backward()
    (F.cross_entropy(ddp(X[halves[1]]), Y[halves[1]]) / 2).backward()  # reduces the accumulated sum
    return {n: p.grad for n, p in ddp.module.named_parameters()}, list(ddp.state_dict())


(grads, keys), *_ = dist.sim.run(WORLD, accumulate)
single.zero_grad()
single.load_state_dict(start_state)
F.cross_entropy(single(X), Y).backward()   # equal halves: the mean of the two means is the mean
worst = max(float((grads[n] - p.grad).abs().max()) for n, p in single.named_parameters())
print(f"accumulated over two micro-batches with no_sync: differs from the whole batch by {worst:.1e}")
assert worst < 1e-10
print(f"DDP's state_dict keys carry the wrapper's prefix: {keys[:2]} ... ; save ddp.module.state_dict()")
assert all(k.startswith("module.") for k in keys)

print(f"\n(ran in {time.perf_counter() - began:.1f} s)")
print("All claims checked: N data-parallel ranks take the single-process step, with communication "
      "overlapping backward.")
