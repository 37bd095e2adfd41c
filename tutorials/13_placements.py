"""Tutorial 13: placements from scratch: split, broadcast and partial tensors, and a sharded matmul.

Run it:  python tutorials/13_placements.py

(The issue that asked for this tutorial named it 09; 09 to 12 were taken by then, so it is 13.)

A tensor too big for one device, or a layer whose work should be split, is held in **pieces** over a
mesh of ranks. How the pieces make the whole is its **placement**, one per mesh dimension:

- **Shard(d)** (split): each rank holds a slice of dimension d, cut as ``chunk`` cuts it.
- **Replicate()** (broadcast): each rank holds all of it.
- **Partial()** (pending sum): each rank holds a tensor of the full shape, and the whole is their *sum*;
  nothing is summed until someone needs the value.

1. **From scratch**, on simulated ranks (``minidl.dist.sim``): the four transitions that cost something
   — Shard -> Replicate is an all-gather, Partial -> Replicate an all-reduce, Partial -> Shard a
   reduce-scatter, Shard(0) -> Shard(1) an all-to-all — and one that costs nothing (Replicate -> Shard:
   keep your slice). We count the bytes every rank sends and check them against the ring's formulas.
2. **A matmul, by hand.** C = A @ B with A split by rows and B whole: every rank multiplies its rows,
   and holds C's rows: no message at all. With A split by columns and B by rows, rank r holds
   A[:, cols_r] and B[rows_r, :]; their product is *part of the sum over the inner dimension*, so C is
   a Partial sum: still no message, and **one all-reduce** when C is wanted whole.
3. **minidl.dist.tensor** does the same by each op's **sharding rule**: ``distribute_tensor``, ``@``,
   ``redistribute``; the placements and the bytes are those of part 2, and gradients come back placed
   as the parameters are.

The picture (written to ``$MINIDL_TUTORIAL_OUT`` if set, else to a fresh temporary directory) shows
which block of A, B and C each rank holds in the two matmuls, with the bytes each rank sent, measured.
Every claim is checked with ``assert``.
"""
import argparse
import os
import tempfile
import time

import matplotlib
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

import minidl
import minidl.dist as dist
from minidl.dist import debug
from minidl.dist.device_mesh import init_device_mesh
from minidl.dist.tensor import Partial, Replicate, Shard, distribute_tensor

# --help says what this tutorial is and exits before anything runs; it takes no other arguments
argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()

matplotlib.use("Agg")   # (draw to a file; no display needed)
began = time.perf_counter()
K = 4                   # ranks
rng = np.random.default_rng(13)
A, B = rng.standard_normal((8, 12)), rng.standard_normal((12, 6))
FLOAT = 8               # bytes per float64


def section(title):
    print()
    print("=" * 78)
    print(title)
    print("=" * 78)


def cut(a, dim, r, k=K):
    """Rank r's slice of ``a`` along ``dim``: chunk's rule (ceil(n / k) each, the last ones shorter)."""
    step = -(-a.shape[dim] // k)
    index = [slice(None)] * a.ndim
    index[dim] = slice(min(r * step, a.shape[dim]), min((r + 1) * step, a.shape[dim]))
    return a[tuple(index)]


def sent_during(fn, group=None):
    """(fn's result, the bytes this rank sent in collectives on ``group`` (the default group) while it ran)."""
    before = debug.sent_bytes(group)
    out = fn()
    return out, debug.sent_bytes(group) - before


# ------------------------------------------------------------------------------------------------------------
section("1. Transitions from scratch: what each one sends")


def transitions(rank):
    x = A                                        # every rank can make the whole from the seed, to check
    mine = minidl.tensor(cut(x, 0, rank))        # Shard(0)
    part = minidl.tensor(x / K)                  # Partial: K addends of the whole (here all alike)

    def all_gather_rows():                       # Shard(0) -> Replicate
        pieces = [minidl.empty(cut(x, 0, r).shape, dtype=minidl.float64) for r in range(K)]
        dist.all_gather(pieces, mine)
        return minidl.cat(pieces)

    def all_reduce():                            # Partial -> Replicate
        whole = part.clone()
        dist.all_reduce(whole)
        return whole

    def reduce_scatter_rows():                   # Partial -> Shard(0)
        out = minidl.empty(cut(x, 0, rank).shape, dtype=minidl.float64)
        dist.reduce_scatter(out, [minidl.tensor(cut(part.numpy(), 0, r)) for r in range(K)])
        return out

    def all_to_all_columns():                    # Shard(0) -> Shard(1): give rank r my rows of its columns
        outs = [minidl.empty((cut(x, 0, r).shape[0], cut(x, 1, rank).shape[1]), dtype=minidl.float64)
                for r in range(K)]
        dist.all_to_all(outs, [minidl.tensor(np.ascontiguousarray(cut(cut(x, 0, rank), 1, r)))
                               for r in range(K)])
        return minidl.cat(outs)

    found = {}
    for name, fn, want in (("S(0) -> R   all-gather", all_gather_rows, x),
                           ("P -> R      all-reduce", all_reduce, x),
                           ("P -> S(0)   reduce-scatter", reduce_scatter_rows, cut(x, 0, rank)),
                           ("S(0) -> S(1) all-to-all", all_to_all_columns, cut(x, 1, rank)),
                           ("R -> S(0)   keep a slice", lambda: minidl.tensor(cut(x, 0, rank)), cut(x, 0, rank))):
        got, sent = sent_during(fn)
        assert np.allclose(got.numpy(), want, rtol=0, atol=1e-12), name
        found[name] = sent
    return found


sent = dist.sim.run(K, transitions)
whole_bytes = A.size * FLOAT
ring = {"S(0) -> R   all-gather": (K - 1) / K * whole_bytes,           # pass K-1 pieces on, around the ring
        "P -> R      all-reduce": 2 * (K - 1) / K * whole_bytes,       # reduce-scatter, then all-gather
        "P -> S(0)   reduce-scatter": (K - 1) / K * whole_bytes,
        "S(0) -> S(1) all-to-all": (K - 1) / K * whole_bytes / K,      # my rows of the others' columns
        "R -> S(0)   keep a slice": 0}
print(f"A is {A.shape[0]} x {A.shape[1]} float64 ({whole_bytes} bytes), on {K} ranks. Bytes each rank sent:")
for name, formula in ring.items():
    per_rank = [s[name] for s in sent]
    print(f"  {name:28s} {per_rank}   formula {formula:g}")
    if name.startswith("P -> R"):   # (this small a buffer goes by recursive doubling: all of it, log2 K times)
        assert per_rank == [whole_bytes * int(np.log2(K))] * K
    elif name.startswith("S(0) -> S(1)"):   # (first, every rank all-gathers how much each sends to each)
        assert per_rank == [formula + (K - 1) / K * K * 2 * K * 8] * K
    else:
        assert all(s == formula for s in per_rank), name
print("(the all-reduce of so small a buffer takes recursive doubling instead of the ring: it sends the whole\n"
      " buffer log2(K) times, fewer messages for more bytes; past 64 KiB it is the ring's 2(K-1)/K. The\n"
      " all-to-all first all-gathers every rank's K send and K receive sizes, K x 2K int64, to check them:\n"
      f" {(K - 1) * 2 * K * 8} bytes of the {sent[0]['S(0) -> S(1) all-to-all']})")

# ------------------------------------------------------------------------------------------------------------
section("2. A sharded matmul by hand: rows need nothing, the inner dimension needs one all-reduce")


def by_hand(rank):
    rows = cut(A, 0, rank) @ B                              # A Shard(0) @ B Replicate -> C Shard(0)
    assert np.allclose(rows, cut(A @ B, 0, rank))
    partial = cut(A, 1, rank) @ cut(B, 0, rank)             # A Shard(1) @ B Shard(0) -> C Partial
    assert not np.allclose(partial, A @ B)                  # one addend of C, not C
    c = minidl.tensor(partial)
    _, sent = sent_during(lambda: dist.all_reduce(c))       # Partial -> Replicate: the one all-reduce
    assert np.allclose(c.numpy(), A @ B, rtol=0, atol=1e-12)
    return sent


reduce_sent = dist.sim.run(K, by_hand)
print(f"C = A @ B is {A.shape[0]} x {B.shape[1]}. Rows: each rank multiplies its {A.shape[0] // K} rows of A by B: "
      f"no message.\nInner dimension: rank r has A[:, cols_r] and B[rows_r, :], so A @ B = sum over r of "
      f"A[:, cols_r] @ B[rows_r, :]:\neach rank holds one addend (Partial), and the all-reduce that sums them sent "
      f"{reduce_sent[0]} bytes per rank.")

# ------------------------------------------------------------------------------------------------------------
section("3. The same with minidl.dist.tensor: each op's sharding rule")


def with_dtensors(rank):
    mesh = init_device_mesh("cpu", (K,))
    a0 = distribute_tensor(minidl.tensor(A), mesh, [Shard(0)]).requires_grad_()
    a1 = distribute_tensor(minidl.tensor(A), mesh, [Shard(1)]).requires_grad_()
    b0 = distribute_tensor(minidl.tensor(B), mesh, [Shard(0)]).requires_grad_()
    br = distribute_tensor(minidl.tensor(B), mesh, [Replicate()]).requires_grad_()
    group = mesh.get_group()                     # (the mesh's own group, made by a split of the world)
    rows, sent_rows = sent_during(lambda: a0 @ br, group)
    partial, sent_partial = sent_during(lambda: a1 @ b0, group)
    whole, sent_whole = sent_during(lambda: partial.redistribute(mesh, [Replicate()]), group)
    assert rows.placements == (Shard(0),) and partial.placements == (Partial(),)
    assert np.allclose(rows.full_tensor().detach().numpy(), A @ B)
    assert np.allclose(whole.to_local().detach().numpy(), A @ B)
    assert np.allclose(partial.to_local().detach().numpy(), cut(A, 1, rank) @ cut(B, 0, rank))   # part 2's addend
    (rows.sum() + whole.sum()).backward()   # (rows.sum() is a Partial scalar: no all-reduce for the loss)
    ones = np.ones((A.shape[0], B.shape[1]))
    assert a0.grad.placements == (Shard(0),) and b0.grad.placements == (Shard(0),)
    assert np.allclose(a0.grad.full_tensor().numpy(), ones @ B.T) and np.allclose(br.grad.full_tensor().numpy(),
                                                                                 A.T @ ones)
    assert np.allclose(b0.grad.full_tensor().numpy(), A.T @ ones)
    return sent_rows, sent_partial, sent_whole


measured = dist.sim.run(K, with_dtensors)
assert all(m == (0, 0, reduce_sent[0]) for m in measured)
print("a0 @ br: S(0) @ R -> S(0), 0 bytes; a1 @ b0: S(1) @ S(0) -> P(sum), 0 bytes; .redistribute(R): "
      f"{measured[0][2]} bytes per rank, part 2's all-reduce.\nGradients come back placed as the leaves: "
      "a0.grad S(0), b0.grad S(0), br.grad R (its partial sums all-reduced on the way back).")

# ------------------------------------------------------------------------------------------------------------
section("4. The picture")
COLORS = ["tab:blue", "tab:orange", "tab:green", "tab:red"]


def blocks(ax, x0, shape, placement, label):
    """Draw a matrix of ``shape`` at x0 with each rank's block colored (Partial: stacked full copies)."""
    rows, cols = shape
    if placement == "P":
        for r in range(K):
            ax.add_patch(Rectangle((x0 + 0.25 * r, -0.25 * r), cols, -rows, facecolor=COLORS[r], alpha=0.35,
                                   edgecolor="k"))
    for r in range(K):
        if placement == "S0":
            step = -(-rows // K)
            ax.add_patch(Rectangle((x0, -r * step), cols, -step, facecolor=COLORS[r], edgecolor="k"))
        elif placement == "S1":
            step = -(-cols // K)
            ax.add_patch(Rectangle((x0 + r * step, 0), step, -rows, facecolor=COLORS[r], edgecolor="k"))
    if placement == "R":
        ax.add_patch(Rectangle((x0, 0), cols, -rows, facecolor="lightgray", edgecolor="k"))
    ax.text(x0 + cols / 2, 1.2, label, ha="center", fontsize=9)


C_SHAPE = (A.shape[0], B.shape[1])
fig = Figure(figsize=(12, 6))
for i, (title, parts, note) in enumerate((
        ("A S(0) @ B R -> C S(0)", (("S0", "A: rows per rank"), ("R", "B: whole on every rank"),
                                    ("S0", "C: rows per rank")), f"sent per rank: {measured[0][0]} bytes"),
        ("A S(1) @ B S(0) -> C P(sum) -> all-reduce -> C R",
         (("S1", "A: columns per rank"), ("S0", "B: rows per rank"), ("P", "C: an addend per rank"),
          ("R", "C after the all-reduce")),
         f"the matmul sent {measured[0][1]} bytes; the all-reduce {measured[0][2]} bytes per rank"))):
    ax = fig.add_subplot(2, 1, i + 1)
    x = 0
    for (placement, label), shape in zip(parts, (A.shape, B.shape, C_SHAPE, C_SHAPE)):
        blocks(ax, x, shape, placement, label)
        x += shape[1] + 7
    ax.set_xlim(-1, 4 * 12 + 14)
    ax.set_ylim(-B.shape[0] - 1, 3)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"{title}   ({note}, measured)", fontsize=10)
fig.legend(handles=[Rectangle((0, 0), 1, 1, color=c) for c in COLORS], labels=[f"rank {r}" for r in range(K)],
           loc="lower center", ncol=K)
out_dir = os.environ.get("MINIDL_TUTORIAL_OUT") or tempfile.mkdtemp(prefix="minidl-tutorial-13-")
path = os.path.join(out_dir, "matmul_placements.png")
fig.savefig(path, dpi=100)
assert os.path.getsize(path) > 0
print(f"which rank holds what, and what it sent: {path}")

print(f"\nAll claims checked ({time.perf_counter() - began:.1f} s).")
