"""Tutorial 10: fusing elementwise ops into one kernel (``minidl.compile``'s fusion pass).

Run it:  python tutorials/10_fusion.py

Eager, ``gelu(x + b) * s - x`` is four kernels. Each reads its operands from memory and writes its
result back, and the next reads that result again. Per element, the math is a few dozen flops but
the traffic is 40 bytes, and a machine moves far fewer bytes than it does flops in the same time.
So such chains are **memory-bound**: what costs is the bytes, and the way to go faster is to move
fewer of them. (On a GPU the whole chain is; on one CPU core GELU's erf may cost more than its bytes,
and Part A measures which.)

**Fusion** does that: one kernel loads x, b and s once, keeps the intermediates in registers (or a
small tile in L1 cache) and stores only the result: 12 bytes per element instead of 40.
``minidl.compile`` does it for you: after capturing a step (tutorial 9), it finds runs of consecutive
elementwise launches and writes one kernel for each run, from the same formula table
(``minidl/formulas/table.py``) that the eager kernels are generated from. The fused kernel is Numba
on the CPU and CUDA C on a GPU.

- A. The bytes and flops of each op of the chain, counted, and each op's speed, measured.
- B. The chain fused by hand: one Numba loop that gives the eager result bit for bit.
- C. The compiler's version: the ``Program`` it builds, the source it generates, the launches it saves.
- D. A picture of a training step's graph before and after fusion.
- E. Where a group ends: values the backward reads, reductions, everything else.

The picture is written to ``$MINIDL_TUTORIAL_OUT`` if that is set, else to a fresh temporary
directory (never into the repository). Every claim is checked with ``assert``; speeds are printed only,
because they depend on the machine.
"""
import argparse
import ast
import os
import shutil
import tempfile
import time

import numpy as np

# --help says what this tutorial is and exits before anything runs; it takes no other arguments
argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()

import minidl  # noqa: E402
from minidl import nn  # noqa: E402
from minidl.formulas import expr, fused_cuda, fused_numba, table  # noqa: E402
from minidl.nn import functional as F  # noqa: E402

began = time.perf_counter()


def section(title):
    print()
    print("=" * 78)
    print(title)
    print("=" * 78)


def seconds(fn, repeat=5):
    """The median time of ``fn()`` over a few runs (after one to warm up)."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


# One thread: the CPU's fused kernel runs on one, so eager gets one too and the two compare per core.
minidl.set_num_threads(1)
MiB = 1 << 20

# =============================================================================================
# Part A: bytes, not flops
# =============================================================================================
section("Part A: an elementwise chain is bound by the bytes it moves")

ROWS, COLS = 1024, 4096     # 4M float32 elements: 16 MiB an array, larger than the caches
minidl.manual_seed(0)
x = minidl.randn(ROWS, COLS)
b = minidl.randn(COLS)      # a bias, broadcast over the rows
s = minidl.randn(ROWS, COLS)


def chain(x, b, s):
    return F.gelu(x + b) * s - x


# The chain op by op, each with what it reads. (b is read once per row, but at 16 KB it stays in the
# cache: from memory it is read once.)
h = x + b
g = F.gelu(h)
m = g * s
y = m - x
STEPS = [("add", "binary", (x, b), h), ("gelu", "unary", (h,), g), ("mul", "binary", (g, s), m),
         ("sub", "binary", (m, x), y)]
FORMULAS = table.callable_formulas()
PER_CALL = 20   # a library function (erf, exp, tanh): a polynomial, counted as this many flops


def flops_per_element(name):
    """The flops of one element of an op, counted on its formula's syntax tree."""
    tree = expr.parse(FORMULAS[name].text, FORMULAS[name].params, FORMULAS)
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Compare, ast.IfExp)):
            count += 1
        elif isinstance(node, ast.Call):
            assert node.func.id in expr.MATH, "this chain calls library functions only"
            count += PER_CALL
    return count


def nbytes(t):
    return t.numel() * t.element_size()


copy_from, copy_to = x.numpy(), np.empty_like(x.numpy())
copy_speed = 2 * copy_from.nbytes / seconds(lambda: np.copyto(copy_to, copy_from)) / 1e9
print(f"this machine copies memory at {copy_speed:.1f} GB/s (np.copyto, 16 MiB, counting reads and writes)")
print(f"\n{'op':5s} {'formula':44s} {'flops/el':>8s} {'bytes':>9s} {'flop/B':>6s} {'ms':>6s} {'GB/s':>6s}")
eager_bytes = eager_flops = 0
speeds = {}   # op -> bytes per second
for name, family, inputs, out in STEPS:
    moved = sum(nbytes(t) for t in inputs) + nbytes(out)
    flops = flops_per_element(name) * out.numel()
    took = seconds({"add": lambda: x + b, "gelu": lambda: F.gelu(h), "mul": lambda: g * s,
                    "sub": lambda: m - x}[name])
    eager_bytes += moved
    speeds[name] = moved / took / 1e9
    eager_flops += flops
    print(f"{name:5s} {FORMULAS[name].text:44s} {flops // out.numel():8d} {moved / MiB:6.1f}MiB"
          f"{flops / moved:6.2f} {took * 1e3:6.2f} {moved / took / 1e9:6.1f}")
    assert name in table.CODED[family], "each op of the chain is a row of the formula table"
assert flops_per_element("add") == flops_per_element("mul") == flops_per_element("sub") == 1
assert flops_per_element("gelu") == 4 + PER_CALL
assert round(eager_bytes / x.numel()) == 8 + 8 + 12 + 12, "40 bytes an element (b's 16 KiB is next to nothing)"
intensity = eager_flops / eager_bytes
print(f"\nthe chain: {eager_flops / 1e6:.0f} Mflop over {eager_bytes / MiB:.0f} MiB = {intensity:.2f} flop per byte")
assert intensity < 1

# A machine's balance: how many flops it does in the time it moves one byte. A matrix product reuses
# each byte many times, so its speed is the arithmetic's.
a = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
flop_speed = 2 * 512 ** 3 / seconds(lambda: a @ a) / 1e9
balance = flop_speed / copy_speed
print(f"this core multiplies matrices at {flop_speed:.0f} GFLOP/s: a balance of {balance:.1f} flop per byte")
print("(a GPU's is higher still: an H200 moves about 4.8 TB/s and does about 67 TFLOP/s in float32, 14 flop/byte)")
print("By these counts every op of the chain is far below the balance: it should wait for memory, not arithmetic.")
print("Measured, the share of the copy speed each op reaches (near 100%: memory-bound):")
for name, _, _, _ in STEPS:
    print(f"  {name:5s} {speeds[name] / copy_speed:5.0%}")
# On one CPU core GELU can be the exception: its erf costs more instructions than the 20 flops counted
# for it. On a GPU, with several times the balance, the whole chain is memory-bound.

# =============================================================================================
# Part B: fusing by hand
# =============================================================================================
section("Part B: the chain as one loop")

from numba import njit  # noqa: E402

from minidl.kernels.cpu.jit.vector_activations import gelu_run  # noqa: E402

TILE = 512   # values; two tiles of float32 take 4 KB, which stays in the L1 cache


@njit(nogil=True)
def chain_by_hand(x, b, s, out):
    """x, s, out: (rows, cols); b: (cols,). Loads x, b and s once; stores out once."""
    t = np.empty(TILE, np.float32)
    u = np.empty(TILE, np.float32)
    for r in range(x.shape[0]):
        for lo in range(0, x.shape[1], TILE):
            hi = min(lo + TILE, x.shape[1])
            xr, br, sr, o = x[r, lo:hi], b[lo:hi], s[r, lo:hi], out[r, lo:hi]
            for j in range(hi - lo):
                t[j] = xr[j] + br[j]
            gelu_run(t[:hi - lo], u[:hi - lo])   # the vectorised GELU eager calls on float32 runs
            for j in range(hi - lo):
                o[j] = u[j] * sr[j] - xr[j]


xn, bn, sn = x.numpy(), b.numpy(), s.numpy()
by_hand = np.empty_like(xn)
chain_by_hand(xn, bn, sn, by_hand)   # (the first call compiles it)
eager = chain(x, b, s).numpy()
assert np.array_equal(by_hand.view(np.int32), eager.view(np.int32)), "bit for bit what the four launches give"
fused_bytes = xn.nbytes + bn.nbytes + sn.nbytes + by_hand.nbytes
took_hand = seconds(lambda: chain_by_hand(xn, bn, sn, by_hand))
took_eager = seconds(lambda: chain(x, b, s))
print(f"bytes moved: eager {eager_bytes / MiB:.0f} MiB, fused {fused_bytes / MiB:.0f} MiB "
      f"({eager_bytes / fused_bytes:.1f}x fewer)")
print(f"eager chain {took_eager * 1e3:6.2f} ms; by hand {took_hand * 1e3:6.2f} ms "
      f"({fused_bytes / took_hand / 1e9:.1f} GB/s of the bytes it must move)")
assert round(fused_bytes / x.numel()) == 12 and eager_bytes / fused_bytes > 3.3
# The intermediates x + b and gelu(...) live in t and u: 4 KB, rewritten tile after tile, never in memory.
# Eager computed GELU on float32 with a vectorised function whose last bits differ from the formula's;
# calling the same function on each tile is what keeps the result identical.

# =============================================================================================
# Part C: what minidl.compile does
# =============================================================================================
section("Part C: minidl.compile writes the loop from the formula table")

minidl.compiler.config.fuse = False      # capture and replay only (tutorial 9)
unfused = minidl.compile(chain)
unfused(x, b, s)
minidl.compiler.config.fuse = True       # the default
fused = minidl.compile(chain)
result = fused(x, b, s)
assert fused._minidl_compiled.captures == 1 and not fused._minidl_compiled.eager, "a graph was captured"


def graph_of(compiled):
    return next(iter(compiled._minidl_compiled.graphs.values()))[0]


before, after = graph_of(unfused), graph_of(fused)
print("launches without fusion:", before.kinds)
print("launches with fusion:   ", after.kinds)
assert before.kinds == ["binary", "unary", "binary", "binary"] and after.kinds == ["fused"]
assert np.array_equal(result.numpy().view(np.int32), eager.view(np.int32)), "bit for bit, as by hand"

# The pass turns a run of launches into a Program: loads (operands read from memory), ops on numbered
# values (the loads first, then one value per op) and stores. It holds only what the generated text
# depends on (dtypes; whether an operand's innermost stride is 1, 0 or other), no size, so one compiled
# kernel serves the same chain at every size.
program = after.programs[0]
print(f"\n{program}: {len(program.loads)} loads, {len(program.ops)} ops, {len(program.stores)} store")
for i, load in enumerate(program.loads):
    print(f"  v{i} = load  ({load.dtype}, inner stride class {load.stride!r})")
for k, op in enumerate(program.ops):
    values = [f"v{a}" for a in op.args]
    print(f"  v{len(program.loads) + k} = {op.name}({', '.join(values)})   formula: {FORMULAS[op.name].text}")
for store in program.stores:
    print(f"  store v{store.value}")
assert program.names() == ["add", "gelu", "mul", "sub"]
assert len(program.loads) == 3, "x, b and s, each loaded once: x + b and the final - x share one load of x"
assert [st.value for st in program.stores] == [len(program.loads) + 3], "only the result is stored"
_, its_buffers = after.steps[0]
assert sum(buf.nbytes for buf in its_buffers) == fused_bytes, "the buffers of the one launch: Part B's bytes"

section("The generated Numba source (CPU)")
print(fused_numba.source(program, "fused_chain"))
# Element segments run the formulas on local variables, each rounded to float32 as eager stored it;
# the float32 GELU is a vector segment, calling eager's vectorised function on the tile.
numba_text = fused_numba.source(program, "fused_chain")
assert numba_text.count("S0[") == 1 and "gelu_run" in numba_text

section("The generated CUDA C (GPU): one thread per element, every value in a register")
cuda_text = fused_cuda.source(program, "fused_chain")
print(cuda_text)
assert cuda_text.count("S0[") == 1 and all(f"{op.family}_{op.name}(" in cuda_text for op in program.ops)
# unary_gelu and the others are device functions that generate.py wrote into formulas.cuh from the same table.

took_unfused = seconds(lambda: [fn(*args) for fn, args in before.steps])
took_fused = seconds(lambda: [fn(*args) for fn, args in after.steps])
print(f"the graph's launches alone: 4 unfused {took_unfused * 1e3:.2f} ms, 1 fused {took_fused * 1e3:.2f} ms "
      f"({fused_bytes / took_fused / 1e9:.1f} GB/s of its {fused_bytes / MiB:.0f} MiB; "
      f"copy runs at {copy_speed:.1f} GB/s)")


# Without GELU the chain is memory alone: (x + b) * s - x moves 32 bytes an element eagerly and 12 fused,
# so here fusing shows in the time as directly as the kernel's loop allows.
def lean(x, b, s):
    return (x + b) * s - x


@njit(nogil=True)
def lean_by_hand(x, b, s, out):
    for r in range(x.shape[0]):
        for c in range(x.shape[1]):
            out[r, c] = (x[r, c] + b[c]) * s[r, c] - x[r, c]


lean_graphs = {}
for fuse in (False, True):
    minidl.compiler.config.fuse = fuse
    lean_graphs[fuse] = minidl.compile(lean)
    assert lean_graphs[fuse](x, b, s).tolist() == lean(x, b, s).tolist()
minidl.compiler.config.fuse = True
lean_by_hand(xn, bn, sn, by_hand)
assert np.array_equal(by_hand.view(np.int32), lean(x, b, s).numpy().view(np.int32))
print(f"\n{'(x + b) * s - x':16s} {'MiB moved':>9s} {'ms':>7s} {'GB/s':>6s}")
for name, moved, fn in (
        ("eager", 32 * x.numel(), lambda: lean(x, b, s)),
        ("replay unfused", 32 * x.numel(), lambda: [f(*a) for f, a in graph_of(lean_graphs[False]).steps]),
        ("replay fused", fused_bytes, lambda: [f(*a) for f, a in graph_of(lean_graphs[True]).steps]),
        ("by hand", fused_bytes, lambda: lean_by_hand(xn, bn, sn, by_hand))):
    took = seconds(fn)
    print(f"{name:16s} {moved / MiB:9.0f} {took * 1e3:7.2f} {moved / took / 1e9:6.1f}")
assert graph_of(lean_graphs[True]).kinds == ["fused"] and len(graph_of(lean_graphs[False]).kinds) == 3
print(f"(copy runs at {copy_speed:.1f} GB/s: a loop that reaches it is bound by memory alone; the by-hand loop is "
      "the bar for the generated one)")

from minidl.kernels.cuda import runtime  # noqa: E402
import minidl.kernels.cuda.primitives  # noqa: E402,F401  (registers the CUDA primitives)

if runtime.gpu_available() or shutil.which("g++"):
    if not runtime.gpu_available():
        runtime.sim_enable()     # no GPU: the same CUDA C, compiled by g++ and run on the CPU (tutorial 4)
    small = [t[:64, :96].contiguous().to("cuda") if t.dim() == 2 else t[:96].contiguous().to("cuda")
             for t in (x, b, s)]
    on_device = minidl.compile(chain)
    got = on_device(*small)
    assert graph_of(on_device).kinds == ["fused"]
    assert np.array_equal(got.cpu().numpy().view(np.int32), chain(*small).cpu().numpy().view(np.int32))
    print(f"on 'cuda' ({runtime.get().name}): one fused launch, bit for bit the eager CUDA result")
    runtime.sim_enable(False)
else:
    print("(no GPU and no g++: the CUDA kernel is not run here)")

# =============================================================================================
# Part D: a training step, before and after
# =============================================================================================
section("Part D: the graph of a training step, before and after fusion")

minidl.manual_seed(0)
net = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 10))
start = {k: v.clone() for k, v in net.state_dict().items()}
opt = minidl.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)


def train_step(x, y):
    opt.zero_grad()
    loss = F.cross_entropy(net(x), y)
    loss.backward()
    opt.step()
    return loss


batches = [(minidl.randn(16, 32), minidl.randint(0, 10, (16,))) for _ in range(3)]
eager_losses = [train_step(x, y).item() for x, y in batches]
graphs = {}
for fuse in (False, True):
    net.load_state_dict(start)
    opt = minidl.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    minidl.compiler.config.fuse = fuse
    step = minidl.compile(train_step)
    losses = [step(x, y).item() for x, y in batches]
    assert losses == eager_losses, "fused or not, the compiled step gives the eager losses bit for bit"
    graphs[fuse] = graph_of(step)
minidl.compiler.config.fuse = True
kinds_before, kinds_after, programs = graphs[False].kinds, graphs[True].kinds, graphs[True].programs
print(f"{len(kinds_before)} launches before, {len(kinds_after)} after; fused groups:",
      ", ".join(str(p) for p in programs))



def families(p):
    """The kinds of the launches a program stands for, in order (a reduction: its prologue, itself, its epilogue)."""
    r = p.reduction
    return [op.family for op in p.ops] + ([] if r is None else ["reduce"] + [op.family for op in r.ops])


# Match the two lists: a fused step stands for as many consecutive steps as its program has ops, of the
# same families, in the same order; every other step is where it was.
spans, i = [], 0
program_of = iter(programs)
for j, kind in enumerate(kinds_after):
    if kind == "fused":
        p = next(program_of)
        assert kinds_before[i:i + len(families(p))] == families(p)
        spans.append((i, i + len(families(p)), j, p))
        i += len(families(p))
    else:
        assert kinds_before[i] == kind
        i += 1
assert i == len(kinds_before) and len(spans) == len(programs) >= 2
assert len(kinds_before) - len(kinds_after) == sum(len(families(p)) - 1 for p in programs)

import matplotlib  # noqa: E402

matplotlib.use("Agg")                             # draw to a file; no display needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Polygon, Rectangle  # noqa: E402

ELEMENTWISE = {"unary", "binary", "compare", "where", "copy"}


def color(kind):
    return ("tab:red" if kind == "fused" else "tab:orange" if kind in ELEMENTWISE else
            "tab:blue" if kind == "matmul" else "tab:green" if kind == "reduce" else
            "lightgray" if kind in ("grad", "host") else "tab:purple")


def label(kind, args):
    """A box's text: the kind, and for an elementwise launch its op (the first argument)."""
    if kind in ("unary", "binary", "compare"):
        return f"{kind}\n{args[0]}"
    return kind.replace("_backward", "\nbackward")


fig, ax = plt.subplots(figsize=(14, 4.2))
for row, graph in ((1, graphs[False]), (0, graphs[True])):
    for k, (kind, (_, args)) in enumerate(zip(graph.kinds, graph.steps)):
        ax.add_patch(Rectangle((k, row * 2), 0.9, 1, color=color(kind)))
        ax.text(k + 0.45, row * 2 + 0.5, label(kind, args), rotation=90, ha="center", va="center", fontsize=7)
for first, end, j, p in spans:      # each fused step and the launches it replaced
    ax.add_patch(Polygon([(first, 2), (end - 0.1, 2), (j + 0.9, 1), (j, 1)], color="tab:red", alpha=0.25))
    ax.add_patch(Rectangle((first - 0.05, 1.95), end - first, 1.1, fill=False, edgecolor="tab:red", lw=2))
    ax.text(j + 0.45, -0.15, str(p), ha="left", va="top", fontsize=7, rotation=-20, color="tab:red")
ax.set(xlim=(-0.5, len(kinds_before) + 0.5), ylim=(-1.1, 3.2), yticks=[0.5, 2.5],
       yticklabels=[f"fused\n({len(kinds_after)} launches)", f"captured\n({len(kinds_before)} launches)"],
       xticks=[], title="One SGD step of Linear-GELU-Linear, as minidl.compile replays it")
ax.set_frame_on(False)
fig.tight_layout()
out_dir = os.environ.get("MINIDL_TUTORIAL_OUT") or tempfile.mkdtemp(prefix="minidl-tutorial-10-")
os.makedirs(out_dir, exist_ok=True)
png = os.path.join(out_dir, "10_fusion_graph.png")
fig.savefig(png, dpi=100)
plt.close(fig)
with open(png, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
print(f"wrote {png}")

# =============================================================================================
# Part E: where a group ends
# =============================================================================================
section("Part E: where a group ends")

# 1. A value the backward reads is stored. Make b a parameter and take a gradient: GELU's backward
#    reads its input x + b, so the forward's group stores it as well as the result (Part C stored one value).
bias = nn.Parameter(b.detach().clone())


def forward_backward(x, s):
    bias.grad = None
    y = chain(x, bias, s)
    y.sum().backward()
    return y, bias.grad


rows, scales = x[:64], s[:64]
eager_y, eager_grad = (t.clone() for t in forward_backward(rows, scales))
trained = minidl.compile(forward_backward)
trained(rows, scales)
y_replayed, grad_replayed = trained(rows, scales)     # (the second call replays)
assert y_replayed.tolist() == eager_y.tolist() and grad_replayed.tolist() == eager_grad.tolist()
forward_group, *backward_groups = graph_of(trained).programs
print(f"with a gradient: {graph_of(trained).kinds}; programs {[str(p) for p in graph_of(trained).programs]}")
print(f"{forward_group} stores v{', v'.join(str(st.value) for st in forward_group.stores)} (v3 = x + b)")
assert forward_group.names()[:4] == program.names() and [st.value for st in forward_group.stores] == [3, 6]
assert any("gelu_backward" in p.names() for p in backward_groups), "the backward's chain is fused too"

# 2. A reduction joins a group when it reduces the last dims of a value the group wrote, packed: the ops
#    before it are its prologue (y.sum() above), and the elementwise ops on its results its epilogue. Each
#    row is reduced as eager's kernel reduced it, so the bits stay eager's. Over the first dims (the bias
#    gradient's sum over rows) the reduction stays a launch of its own, and so does every matrix product.


def over_rows(x, c):
    return (x * 2 + 1).sum(1) * c - 1


def over_columns(x, d):
    return (x * 2 + 1).sum(0) * d - 1


small_x = minidl.randn(8, 16)
for fn, other in ((over_rows, minidl.randn(8)), (over_columns, minidl.randn(16))):
    compiled_fn = minidl.compile(fn)
    assert compiled_fn(small_x, other).tolist() == fn(small_x, other).tolist()
    launches = [k for k in graph_of(compiled_fn).kinds if k != "copy"]   # (copies put the constants 2 and 1 in)
    print(f"{fn.__name__:12s} replays as {launches}: {[str(p) for p in graph_of(compiled_fn).programs]}")
    assert launches == (["fused"] if fn is over_rows else ["fused", "reduce", "fused"])
assert "matmul" in kinds_after and all(op.family in ELEMENTWISE for p in programs for op in p.ops)

# 3. Everything else ends a group and stays as it was: a matrix product, cross-entropy and its backward,
#    and the optimizer's update, a host step whose Python runs at each replay.
for kind in ("matmul", "cross_entropy", "cross_entropy_backward", "host"):
    assert kind in kinds_after
print("left as they were in the training step:", sorted({k for k in kinds_after if k not in ELEMENTWISE} - {"fused"}))
print(f"\n(ran in {time.perf_counter() - began:.1f} s)")
print()
print(f"All claims checked: fused, the chain moves {eager_bytes / fused_bytes:.2f}x fewer bytes, and the generated "
      "kernel gives eager's bits.")
